"""The light half of the phase model (``models.phase_model``): a fitted curve that forecasts.

A stored phase model (``jobcast fit``'s records, :meth:`models.fitted.FittedModel.from_record`)
is read back as a :class:`PhaseCurve`: its coefficients, ranges and interval, with
``predict``, ``predict_interval``, ``extrapolates``, ``scaled``, ``set_interval`` and the
JSON record (``to_dict``/``from_dict``). Forecasting needs nothing else, so this module
imports neither scikit-learn nor SciPy (a store-backed forecast loads no estimator library:
about a second of a fresh process). Fitting is :class:`models.phase_model.PhaseTimeModel`
(the scikit-learn estimator on this class); its module doc states the model's rules, which
hold here unchanged.
"""

from __future__ import annotations

import copy
import math
from typing import Self

import numpy as np
import pandas as pd

# The order breaks ties: with one batch size in the data per_sample and per_iteration fit the
# same, and per_sample (time grows with samples) is the better guess for another batch size.
FORMS: dict[str, tuple[str, ...]] = {
    "per_sample": ("const", "samples"),
    "per_iteration": ("const", "iterations"),
    "iteration_and_sample": ("const", "iterations", "samples"),
}
MIN_HALF_WIDTH = 0.01  # intervals are never narrower than +-1 %
COVERAGE = 0.90
MIN_RUNS = 2  # fewer runs: no leave-one-run-out validation, the model is thin
MIN_SOLID_POINTS = 4  # fewer points: each fold fits on one or two points, the model is thin


def _design(iterations: np.ndarray, batch: np.ndarray, terms: tuple[str, ...]) -> np.ndarray:
    cols = {
        "const": np.ones_like(iterations, dtype=float),
        "iterations": iterations.astype(float),
        "samples": iterations.astype(float) * batch.astype(float),
    }
    return np.column_stack([cols[t] for t in terms])


class PhaseCurve:
    """A fitted phase curve ``seconds = a + b * iterations + c * iterations * batch_size``
    (the terms of its form) with its interval; see the module doc. Constructor parameters
    are :class:`models.phase_model.PhaseTimeModel`'s; the fitted attributes end in ``_``."""

    form_: str
    terms_: tuple[str, ...]
    coef_: np.ndarray
    half_width_: float
    own_half_width_: float
    interval_source_: str
    cv_mape_: float | None
    cv_: dict
    cv_kind_: str
    cv_errors_: list[float]
    n_runs_: int
    n_points_: int
    batch_range_: tuple[float, float]
    iteration_range_: tuple[float, float]
    alt_terms_: tuple[str, ...]
    alt_coef_: np.ndarray
    thin_: bool
    resolution_s_: float
    resolution_rel_: float

    def __init__(self, form: str = "auto", coverage: float = COVERAGE, weighting: str = "run",
                 total_weight: float = 1.0):
        self.form = form
        self.coverage = coverage
        self.weighting = weighting
        self.total_weight = total_weight

    # -- evidence ----------------------------------------------------------------

    def evidence(self) -> dict:
        """``{"runs", "points", "cv_error"}`` (cv_error: the CV MAPE in %, None when none)."""
        return {"runs": self.n_runs_, "points": self.n_points_, "cv_error": self.cv_mape_}

    def set_interval(self, half_width: float, source: str) -> Self:
        """Replace the interval's relative half-width (e.g. by a pooled prior's); the clock
        resolution term stays. ``source`` names where it came from."""
        if not (math.isfinite(half_width) and half_width > 0):
            raise ValueError(f"half width must be finite and positive, got {half_width}")
        self.half_width_ = max(MIN_HALF_WIDTH, math.hypot(half_width, self.resolution_rel_))
        self.interval_source_ = source
        return self

    def scaled(self, factor: float, runs: int, points: int, half_width: float,
               source: str = "prior") -> Self:
        """A copy whose times are ``factor`` x this model's (the same shape at another level),
        standing for ``runs`` runs and ``points`` points, with interval ``half_width``."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"scale factor must be finite and positive, got {factor}")
        other = copy.deepcopy(self)
        other.coef_ = self.coef_ * factor
        other.alt_coef_ = self.alt_coef_ * factor
        other.n_runs_, other.n_points_ = int(runs), int(points)
        other.cv_mape_, other.cv_errors_, other.cv_kind_ = None, [], "prior"
        other.cv_ = {}
        other.thin_ = runs < MIN_RUNS or points < MIN_SOLID_POINTS
        other.own_half_width_ = half_width
        other.half_width_ = max(MIN_HALF_WIDTH, half_width)
        other.interval_source_ = source
        return other

    # -- prediction --------------------------------------------------------------

    def _raw_predict(self, it: np.ndarray, bs: np.ndarray) -> np.ndarray:
        return _design(it, bs, self.terms_) @ self.coef_

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted seconds of each row of ``X`` (``iterations``, ``batch_size``)."""
        it = np.asarray(X["iterations"], dtype=float)
        bs = np.asarray(X["batch_size"], dtype=float)
        return self._raw_predict(it, bs)

    def _stretch(self, it: np.ndarray, bs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """How far (log units) batch sizes and iterations lie outside the fitted ranges."""
        b_stretch = _log_distance(bs, self.batch_range_)
        i_stretch = _log_distance(np.maximum(it, 1.0), self.iteration_range_)
        return b_stretch, i_stretch

    def extrapolates(self, iterations: float, batch_size: float) -> bool:
        """Whether one job lies outside the fitted ranges (``extrapolated`` of predict_interval)."""
        b_stretch, i_stretch = self._stretch(
            np.asarray([iterations], dtype=float), np.asarray([batch_size], dtype=float)
        )
        return bool(b_stretch[0] > 0 or i_stretch[0] > math.log(1.5))

    def predict_interval(self, X: pd.DataFrame) -> pd.DataFrame:
        """seconds, low, high and whether the point lies outside the fitted ranges.

        The interval is symmetric in log time, [t / (1 + h), t (1 + h)], so it never reaches
        zero; h grows with the distance (in log units) outside the fitted batch and
        iteration ranges.
        """
        it = np.asarray(X["iterations"], dtype=float)
        bs = np.asarray(X["batch_size"], dtype=float)
        if np.any(it < 0) or np.any(bs <= 0):
            raise ValueError("iterations must be >= 0 and batch sizes > 0")
        pred = self._raw_predict(it, bs)
        b_stretch, i_stretch = self._stretch(it, bs)
        extrapolated = (b_stretch > 0) | (i_stretch > math.log(1.5))
        i_widen = 0.5 * np.maximum(i_stretch - math.log(1.5), 0)
        half = self.half_width_ * (1 + b_stretch + i_widen)
        low, high = pred / (1 + half), pred * (1 + half)
        if len(self.alt_terms_):
            alt = _design(it, bs, self.alt_terms_) @ self.alt_coef_
            edge = self.half_width_ * (1 + i_widen)
            other = b_stretch > 0
            low = np.where(other, np.minimum(pred, alt) / (1 + edge), low)
            high = np.where(other, np.maximum(pred, alt) * (1 + edge), high)
        return pd.DataFrame(
            {"seconds": pred, "low": low, "high": high, "extrapolated": extrapolated},
            index=X.index,
        )

    # -- persistence -------------------------------------------------------------

    def to_dict(self) -> dict:
        """The fitted model as a JSON-able dict (:meth:`from_dict` reads it back)."""
        return {
            "form": self.form_,
            "terms": list(self.terms_),
            "coef": [float(c) for c in self.coef_],
            "half_width": self.half_width_,
            "coverage": self.coverage,
            "weighting": self.weighting,
            "total_weight": self.total_weight,
            "cv_mape": self.cv_mape_,
            "cv": self.cv_,
            "cv_kind": self.cv_kind_,
            "cv_errors": self.cv_errors_,
            "n_runs": self.n_runs_,
            "n_points": self.n_points_,
            "batch_range": list(self.batch_range_),
            "iteration_range": list(self.iteration_range_),
            "alt_terms": list(self.alt_terms_),
            "alt_coef": [float(c) for c in self.alt_coef_],
            "thin": bool(self.thin_),
            "own_half_width": self.own_half_width_,
            "interval_source": self.interval_source_,
            "resolution_s": self.resolution_s_,
            "resolution_rel": self.resolution_rel_,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Self:
        """The model saved by :meth:`to_dict`."""
        m = cls(form=d["form"], coverage=d["coverage"], weighting=d.get("weighting", "absolute"),
                total_weight=float(d.get("total_weight", 0.0)))
        m.form_, m.terms_ = d["form"], tuple(d["terms"])
        m.coef_ = np.asarray(d["coef"], dtype=float)
        m.half_width_ = d["half_width"]
        m.cv_mape_, m.cv_, m.cv_kind_ = d["cv_mape"], d["cv"], d["cv_kind"]
        m.cv_errors_ = d["cv_errors"]
        m.n_runs_, m.n_points_ = d["n_runs"], d["n_points"]
        m.batch_range_ = tuple(d["batch_range"])
        m.iteration_range_ = tuple(d["iteration_range"])
        m.alt_terms_ = tuple(d.get("alt_terms", ()))
        m.alt_coef_ = np.asarray(d.get("alt_coef", []), dtype=float)
        m.thin_ = bool(d.get("thin", m.n_runs_ < MIN_RUNS or m.n_points_ < MIN_SOLID_POINTS))
        m.own_half_width_ = d.get("own_half_width", m.half_width_)
        m.interval_source_ = d.get("interval_source", "cv")
        m.resolution_s_ = float(d.get("resolution_s", 0.0))
        m.resolution_rel_ = float(d.get("resolution_rel", 0.0))
        return m


def _log_distance(x: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    lo, hi = bounds
    below = np.log(np.maximum(lo, 1e-12) / np.maximum(x, 1e-12))
    above = np.log(np.maximum(x, 1e-12) / max(hi, 1e-12))
    return np.maximum(np.maximum(below, above), 0.0)
