"""Per-layer-type time estimators behind ``LayerPredictor``.

Every estimator takes the feature frame of ``layerwise.features.feature_frame`` and the GPU
name of each row, predicts log time in ms, and exports its fitted state as JSON metadata plus
numpy arrays, so a saved predictor loads and predicts without TensorFlow or pickles.
"""

from __future__ import annotations

from layerwise.estimators.base import Estimator
from layerwise.estimators.gbt import GbtEstimator
from layerwise.estimators.linear import PaleoLinearEstimator
from layerwise.estimators.mlp import MlpEstimator, ResMlpEstimator

ESTIMATORS: dict[str, type[Estimator]] = {
    "gbt": GbtEstimator,
    "mlp": MlpEstimator,
    "resmlp": ResMlpEstimator,
    "linear": PaleoLinearEstimator,
}


def make_estimator(name: str, params: dict | None = None) -> Estimator:
    """A fresh estimator by name (``gbt``, ``mlp``, ``resmlp``, ``linear``)."""
    try:
        cls = ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; choose from {', '.join(ESTIMATORS)}"
        ) from None
    return cls(**(params or {}))


__all__ = ["ESTIMATORS", "Estimator", "GbtEstimator", "MlpEstimator", "PaleoLinearEstimator",
           "ResMlpEstimator", "make_estimator"]
