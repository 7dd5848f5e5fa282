"""Gradient-boosted trees on log time relative to the roofline estimate.

Trained with scikit-learn's ``HistGradientBoostingRegressor``; the fitted trees are then
exported to flat numpy arrays (:class:`layerwise.forest.Forest`) and evaluated in numpy, so a
saved model loads without scikit-learn pickles and predicts identically on any scikit-learn
version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from typing_extensions import override

from layerwise.estimators.base import OFFSET, Estimator, check_fitted
from layerwise.features import (
    HARDWARE_FEATURES,
    hardware_signatures,
    known_device,
)
from layerwise.forest import Forest

__all__ = ["Forest", "GbtEstimator"]


TRANSFER_OFFSET = "log_compute_ms"


@dataclass
class GbtEstimator(Estimator):
    """HistGradientBoosting on log time relative to a roofline estimate.

    Two forests: the *known-device* forest sees every feature (including the hardware ones)
    and predicts ``log(time) - log(roofline)``; it serves rows whose hardware matches a
    training device. The *transfer* forest sees only hardware-agnostic features plus FP32
    lanes per core and predicts ``log(time) - log(FLOPs / peak)``, so a device never seen
    in training is scaled by its catalog peak FLOPS; it serves all other rows.

    With fewer than ``early_stopping_below`` rows (e.g. a small CPU campaign) boosting stops
    early on an internal 10 % validation split instead of running all ``max_iter`` rounds.
    """

    name: ClassVar[str] = "gbt"

    max_iter: int = 1000
    learning_rate: float = 0.1
    max_leaf_nodes: int = 127
    min_samples_leaf: int = 10
    l2_regularization: float = 0.0
    transfer: bool = True
    transfer_max_iter: int = 300
    early_stopping_below: int = 20000
    random_state: int = 0


    def _fit_forest(self, X: pd.DataFrame, y: np.ndarray, max_iter: int) -> Forest:
        from sklearn.ensemble import HistGradientBoostingRegressor

        model = HistGradientBoostingRegressor(
            max_iter=max_iter,
            learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=min(self.min_samples_leaf, max(1, len(X) // 4)),
            l2_regularization=self.l2_regularization,
            early_stopping=len(X) < self.early_stopping_below,
            validation_fraction=0.1,
            n_iter_no_change=20,
            random_state=self.random_state,
        )
        model.fit(X.to_numpy(np.float64), y)
        return Forest.from_sklearn(model)

    @override
    def fit(self, X: pd.DataFrame, y_log: np.ndarray, gpu: np.ndarray) -> GbtEstimator:
        y_log = np.asarray(y_log, dtype=np.float64)
        self.feature_names_ = list(X.columns)
        self.forest_ = self._fit_forest(X, y_log - X[OFFSET].to_numpy(), self.max_iter)
        self.signatures_ = np.unique(hardware_signatures(X), axis=0)
        self.transfer_forest_ = None
        if self.transfer:
            self.transfer_features_ = [c for c in X.columns if c not in HARDWARE_FEATURES]
            self.transfer_forest_ = self._fit_forest(
                X[self.transfer_features_], y_log - X[TRANSFER_OFFSET].to_numpy(),
                self.transfer_max_iter,
            )
        return self

    @override
    def predict(self, X: pd.DataFrame, gpu: np.ndarray) -> np.ndarray:
        check_fitted(self, "forest_")
        transfer = self.transfer_forest_
        known = (known_device(X, self.signatures_) if transfer is not None
                 else np.ones(len(X), dtype=bool))
        out = np.empty(len(X))
        if known.any():
            part = X.loc[known]
            out[known] = (self.forest_.predict(part[self.feature_names_].to_numpy(np.float64))
                          + part[OFFSET].to_numpy())
        if transfer is not None and (~known).any():  # every device is known without it
            part = X.loc[~known]
            out[~known] = (
                transfer.predict(part[self.transfer_features_].to_numpy(np.float64))
                + part[TRANSFER_OFFSET].to_numpy()
            )
        return out

    @override
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        check_fitted(self, "forest_")
        meta: dict[str, Any] = {
            "baseline": self.forest_.baseline,
            "depth": self.forest_.depth,
            "feature_names": self.feature_names_,
        }
        arrays = {f"known_{k}": v for k, v in self.forest_.arrays().items()}
        arrays["signatures"] = self.signatures_
        if self.transfer_forest_ is not None:
            meta.update(transfer_baseline=self.transfer_forest_.baseline,
                        transfer_depth=self.transfer_forest_.depth,
                        transfer_features=self.transfer_features_)
            arrays.update({f"transfer_{k}": v for k, v in self.transfer_forest_.arrays().items()})
        return meta, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        def pick(prefix: str) -> dict[str, np.ndarray]:
            return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}

        self.forest_ = Forest.from_arrays(pick("known_"), meta["baseline"], meta["depth"])
        self.feature_names_ = list(meta["feature_names"])
        self.signatures_ = arrays["signatures"]
        self.transfer_forest_ = None
        if "transfer_features" in meta:
            self.transfer_forest_ = Forest.from_arrays(
                pick("transfer_"), meta["transfer_baseline"], meta["transfer_depth"])
            self.transfer_features_ = list(meta["transfer_features"])

    def interval_refit_params(self) -> dict[str, Any]:
        """Overrides for fits that only serve unseen devices: the known forest is unused."""
        return {"max_iter": 1}

    @property
    def n_nodes(self) -> int:
        """Nodes in the forests (a size measure)."""
        check_fitted(self, "forest_")
        forests = [f for f in (self.forest_, self.transfer_forest_) if f is not None]
        return sum(len(f.feature) + len(f.value) for f in forests)
