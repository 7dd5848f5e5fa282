"""The hybrid's batch-shape fit (``jobcast.service.engine.hybrid`` rules): the layerwise step shape
scaled to a key's history. Its own module so that a forecast that never fits it imports
neither scikit-learn nor SciPy. :class:`BatchShapeFit` was ``BatchShapeCalibrator`` (still an
alias for one release; "calibration" in jobcast means the layerwise scale calibration)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import optimize, stats
from sklearn.base import BaseEstimator

from fleet.deprecation import renamed_attributes
from jobcast.service.errors import ServiceError

# The ``split`` mode needs batch sizes spanning at least this factor (closer ones cannot tell a
# per-step from a per-sample scale). It is not the default: from two batch sizes it fits both
# scales exactly and turns run-to-run noise into shape (on the CaffeNet logs the split from
# 128 + 512 doubled the error at batch 1 and 32: docs/lab/batch-hybrid.md).
MIN_SPLIT_SPAN = 2.0
# Prior 90 % shape uncertainty, in log time per e-fold of batch size: the 90 % quantile of
# |ln(t(b2)/t(b1)) - ln(L(b2)/L(b1))| / |ln(b2/b1)| of the shipped layerwise forecast L against
# 28 measured whole-network training steps (7 networks x 4 precisions, batch 32, 64, 128, H100,
# layerwise/data/measured/*_networks.csv); `python benchmarks/batch_hybrid.py --shape-prior`.
SHAPE_RATE_90 = 0.51
HISTORY_FLOOR = 0.02  # the history's relative half-width is never below 2 %


class BatchShapeError(ServiceError, ValueError):
    """History and layerwise steps the batch-shape fit cannot use (a miss of the hybrid)."""

    kind: ClassVar[str] = "batch_shape"


def _rms(resid: np.ndarray, n_params: int) -> float:
    """Root mean square of log residuals over their degrees of freedom (0 without any)."""
    dof = len(resid) - n_params
    return float(np.sqrt(np.sum(np.asarray(resid) ** 2) / dof)) if dof > 0 else 0.0


class BatchShapeFit(BaseEstimator):
    """The layerwise step shape calibrated on history (see the module rules).

    ``fit(X, y)``: X has ``batch_size``, ``overhead_s`` (O), ``variable_s`` (V), ``runs`` and
    ``log_sd`` per observed batch size; y the observed seconds per step. ``predict_interval(X)``
    (``batch_size``, ``overhead_s``, ``variable_s``) gives ``seconds``, ``low``, ``high`` per step,
    the log distance ``distance`` to the nearest observed batch size and ``log_half_width``.
    ``mode`` ``ratio`` (default) or ``split`` (falls back to ``ratio`` where the history has
    fewer than two batch sizes :data:`MIN_SPLIT_SPAN` apart, or the fit gives no layer scale).
    """

    def __init__(self, mode: str = "ratio", min_split_span: float = MIN_SPLIT_SPAN,
                 shape_rate: float = SHAPE_RATE_90, history_floor: float = HISTORY_FLOOR,
                 coverage: float = 0.9):
        self.mode = mode
        self.min_split_span = min_split_span
        self.shape_rate = shape_rate
        self.history_floor = history_floor
        self.coverage = coverage

    def fit(self, X: pd.DataFrame, y: Any) -> BatchShapeFit:
        """Fit the history's ratio to the layerwise step (and, in ``split`` mode, the per-step
        and per-sample scales); :class:`BatchShapeError` for unusable rows."""
        if self.mode not in ("ratio", "split"):
            raise ValueError(f"mode must be ratio or split, got {self.mode!r}")
        order = np.argsort(X["batch_size"].to_numpy(float), kind="stable")
        X = X.iloc[order]
        b = X["batch_size"].to_numpy(float)
        o, v = X["overhead_s"].to_numpy(float), X["variable_s"].to_numpy(float)
        y = np.asarray(y, float)[order]
        runs = X["runs"].to_numpy(float) if "runs" in X else np.ones(len(y))
        if len(y) == 0 or not np.all(np.isfinite([*b, *o, *v, *y])) or np.any(y <= 0) \
                or np.any(b <= 0) or np.any(v <= 0) or np.any(o < 0) \
                or len(np.unique(b)) != len(b):
            raise BatchShapeError("the hybrid needs one positive, finite history and "
                                  "layerwise step per distinct batch size")
        self.batch_sizes_ = tuple(int(x) for x in b)
        self.log_ratios_ = tuple(float(r) for r in np.log(y / (o + v)))
        self.mode_, self.alpha_, self.gamma_, self.fit_log_rms_ = "ratio", math.nan, math.nan, 0.0
        if self.mode == "split" and len(y) >= 2 and b[-1] / b[0] >= self.min_split_span:
            w = np.sqrt(runs)
            coef, _ = optimize.nnls(np.column_stack([o / y, v / y]) * w[:, None], w)
            if coef[1] > 0:
                self.mode_, self.alpha_, self.gamma_ = "split", float(coef[0]), float(coef[1])
                self.fit_log_rms_ = _rms(np.log(y) - np.log(coef[0] * o + coef[1] * v), 2)
        # how fast the history's ratio to the layerwise shape drifts between its batch sizes
        lr = np.asarray(self.log_ratios_)
        drift = list(np.abs(np.diff(lr)) / np.diff(np.log(b)))
        self.observed_shape_rate_ = float(max(drift, default=0.0))
        self.shape_rate_ = max(float(self.shape_rate), self.observed_shape_rate_)
        self.history_log_half_ = self._history_half(X, runs)
        return self

    def _history_half(self, X: pd.DataFrame, runs: np.ndarray) -> float:
        """Log half-width of the history: a t-interval on the pooled between-run spread."""
        sd = X["log_sd"].to_numpy(float) if "log_sd" in X else np.full(len(runs), math.nan)
        df = np.where(np.isfinite(sd), runs - 1, 0)
        half = math.log1p(self.history_floor)
        if df.sum() > 0:
            pooled = math.sqrt(float(np.sum(np.where(df > 0, sd**2 * df, 0.0)) / df.sum()))
            t = float(stats.t.ppf(0.5 + self.coverage / 2, df=df.sum()))
            half = max(half, t * pooled * math.sqrt(1 + 1 / max(runs.sum(), 1)))
        return half

    def log_ratio(self, batch: np.ndarray) -> np.ndarray:
        """ln(history / layerwise) at ``batch``: interpolated in ln batch between the observed
        batch sizes, the nearest one's beyond them."""
        return np.interp(np.log(np.asarray(batch, float)),
                         np.log(np.asarray(self.batch_sizes_, float)), self.log_ratios_)

    def predict_interval(self, X: pd.DataFrame) -> pd.DataFrame:
        """Seconds per step with its 90 % interval at each row's batch size (class doc)."""
        b = X["batch_size"].to_numpy(float)
        o, v = X["overhead_s"].to_numpy(float), X["variable_s"].to_numpy(float)
        if self.mode_ == "split":
            step = self.alpha_ * o + self.gamma_ * v
        else:
            step = np.exp(self.log_ratio(b)) * (o + v)
        seen = np.log(np.asarray(self.batch_sizes_, float))
        distance = np.min(np.abs(np.log(b)[:, None] - seen[None, :]), axis=1)
        half = np.sqrt(self.history_log_half_**2 + self.fit_log_rms_**2
                       + (self.shape_rate_ * distance) ** 2)
        return pd.DataFrame({"seconds": step, "low": step / np.exp(half),
                             "high": step * np.exp(half), "distance": distance,
                             "log_half_width": half}, index=X.index)

    def describe(self) -> dict[str, Any]:
        """The fitted scales and interval terms (JSON-ready; NaN scales as None)."""
        def num(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {"mode": self.mode_, "ratios": {b: math.exp(r) for b, r
                                               in zip(self.batch_sizes_, self.log_ratios_,
                                                      strict=True)},
                "overhead_scale": num(self.alpha_), "layer_scale": num(self.gamma_),
                "shape_rate": self.shape_rate_, "observed_shape_rate": self.observed_shape_rate_,
                "history_log_half_width": self.history_log_half_,
                "fit_log_rms": self.fit_log_rms_}


# the deprecated name, for one release (fleet/deprecation.py)
__getattr__ = renamed_attributes(__name__, {"BatchShapeCalibrator": "BatchShapeFit"})
