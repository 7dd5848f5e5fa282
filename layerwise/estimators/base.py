"""Common interface of the layer-time estimators."""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

OFFSET = "log_roofline_ms"


@dataclass
class Estimator(BaseEstimator):
    """Base class: hyper-parameters are dataclass fields; fitted state lives in ``_state``.

    ``fit(X, y_log, gpu)`` learns log time (ms) from a feature frame; ``predict(X, gpu)``
    returns log time. ``state()`` / ``from_state()`` move the fitted model to and from
    ``(json-able dict, dict of numpy arrays)``.
    """

    name: ClassVar[str] = "base"
    needs_tensorflow: ClassVar[bool] = False

    def params(self) -> dict[str, Any]:
        """Hyper-parameters as a plain dict."""
        return asdict(self)

    def fit(self, X: pd.DataFrame, y_log: np.ndarray, gpu: np.ndarray) -> Estimator:
        """Learn log time (ms) ``y_log`` from the feature frame ``X`` of rows run on ``gpu``
        (one name per row); returns ``self``."""
        raise NotImplementedError

    def predict(self, X: pd.DataFrame, gpu: np.ndarray) -> np.ndarray:
        """Log time (ms) of each row of ``X`` on its ``gpu``; raises when not fitted."""
        raise NotImplementedError

    def interval_refit_params(self) -> dict[str, Any]:
        """Hyper-parameter overrides for the leave-one-device-out refits that give the interval
        of unseen devices (none by default). A subclass that still overrides the deprecated
        :meth:`calibration_params` is honoured, with a :class:`FutureWarning`."""
        if type(self).calibration_params is not Estimator.calibration_params:
            warnings.warn(f"{type(self).__name__}.calibration_params is deprecated; override "
                          "interval_refit_params", FutureWarning, stacklevel=2)
            return self.calibration_params()
        return {}

    def calibration_params(self) -> dict[str, Any]:
        """Deprecated name of :meth:`interval_refit_params`."""
        warnings.warn("Estimator.calibration_params is deprecated; use interval_refit_params",
                      FutureWarning, stacklevel=2)
        return self.interval_refit_params()

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The fitted model as ``(json-able dict, dict of numpy arrays)``, no pickles."""
        raise NotImplementedError

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    @classmethod
    def from_state(
        cls, params: dict[str, Any], meta: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> Estimator:
        """Rebuild a fitted estimator from ``params()`` and ``state()``."""
        known = {f.name for f in fields(cls)}
        est = cls(**{k: (tuple(v) if isinstance(v, list) else v)
                     for k, v in params.items() if k in known})
        est._load_state(meta, arrays)
        return est


def check_fitted(est: Estimator, attr: str) -> None:
    """Raise ``RuntimeError`` naming the estimator when its fitted ``attr`` is unset."""
    if getattr(est, attr, None) is None:
        raise RuntimeError(f"{type(est).__name__} is not fitted; call fit() first")
