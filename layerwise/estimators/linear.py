"""PALEO-like analytical baseline: time linear in compute time and memory time, per GPU.

``t_ms = c0 + c1 * F/peak (forward) + c2 * F/peak (training) + c3 * B/bandwidth + c4 * training``
with non-negative coefficients fitted per GPU by least squares on relative error (rows weighted
by 1/t). A GPU absent from training uses coefficients fitted on all GPUs pooled, so its catalog
peak FLOPS and bandwidth carry the prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy.optimize import nnls
from typing_extensions import override

from fleet.names import lookup_key
from layerwise.estimators.base import Estimator, check_fitted

POOLED = "__pooled__"
TERMS = ("overhead", "compute_forward", "compute_training", "memory", "training")


def design_matrix(X: pd.DataFrame) -> np.ndarray:
    """Columns of :data:`TERMS` in ms (compute and memory from the feature frame)."""
    compute = np.expm1(X["log_work_flops"]) / np.exp(X["log_peak_tflops"]) * 1e-9
    memory = np.expm1(X["log_work_bytes"]) / np.exp(X["log_bandwidth_gbs"]) * 1e-6
    training = X["training"].to_numpy()
    return np.column_stack([
        np.ones(len(X)),
        compute * (1.0 - training),
        compute * training,
        memory,
        training,
    ])


def _fit_nnls(A: np.ndarray, t: np.ndarray) -> np.ndarray:
    scale = A.max(axis=0)
    scale[scale <= 0] = 1.0
    weighted = (A / scale) / t[:, None]
    coef, _ = nnls(weighted, np.ones(len(t)), maxiter=50 * A.shape[1])
    return coef / scale


@dataclass
class PaleoLinearEstimator(Estimator):
    """Per-GPU non-negative linear model in roofline terms (see module docstring)."""

    name: ClassVar[str] = "linear"

    min_rows_per_gpu: int = 20
    floor_ms: float = 1e-4


    @override
    def fit(self, X: pd.DataFrame, y_log: np.ndarray, gpu: np.ndarray) -> PaleoLinearEstimator:
        A = design_matrix(X)
        t = np.exp(np.asarray(y_log, dtype=float))
        keys = np.array([lookup_key(g) for g in gpu])
        coef = {POOLED: _fit_nnls(A, t)}
        for key in np.unique(keys):
            sel = keys == key
            if sel.sum() >= self.min_rows_per_gpu:
                coef[str(key)] = _fit_nnls(A[sel], t[sel])
        self.coef_ = coef
        return self

    @override
    def predict(self, X: pd.DataFrame, gpu: np.ndarray) -> np.ndarray:
        check_fitted(self, "coef_")
        A = design_matrix(X)
        keys = np.array([lookup_key(g) for g in gpu])
        out = np.empty(len(X))
        for key in np.unique(keys):
            sel = keys == key
            out[sel] = A[sel] @ self.coef_.get(str(key), self.coef_[POOLED])
        return np.log(np.maximum(out, self.floor_ms))

    def coefficients(self) -> pd.DataFrame:
        """Fitted coefficients, one row per GPU key (plus the pooled fallback)."""
        check_fitted(self, "coef_")
        return pd.DataFrame(self.coef_, index=list(TERMS)).T

    @override
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        check_fitted(self, "coef_")
        keys = list(self.coef_)
        return {"gpus": keys}, {"coef": np.vstack([self.coef_[k] for k in keys])}

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.coef_ = {k: arrays["coef"][i] for i, k in enumerate(meta["gpus"])}
