"""Linear model of phase time versus iterations and batch size (Gianniti/Ardagna style).

``seconds = a + b * iterations + c * iterations * batch_size`` with a, b, c >= 0:
``a`` is the one-off cost of the phase in a run (start-up, warm-up), ``b`` the
batch-independent cost of a step (kernel launches, synchronisation, optimizer update),
``c`` the cost of one sample. Three forms use subsets of the terms; ``form="auto"`` picks
the one with the lowest cross-validated error, grouping by run so no run is in both the
training and the validation fold. Rows are a run's cumulative progress points; by default
(``weighting="run"``) the fit minimises squared error in seconds divided by the run's own
total: within a run the late points, the totals a job plan needs, dominate over the noisy
first steps, and across runs a run of 80 hours does not outweigh one of 30 seconds (with
seconds alone, ``"absolute"``, three CaffeNet batch-1 runs of 3 to 78 hours pinned the
one-off cost of a model also fitted on 1,000-step runs and put its forecasts 35 to 107 times
too high; runs of one length, as MLPerf's, fit the same either way: docs/lab/batch-hybrid.md).
``"relative"`` weights rows by 1/t instead (measured worse on the MLPerf logs: see
docs/results.md). Each
point also weighs the share of its run's iterations it covers, so every run counts the same
and a fit does not depend on how densely its source reports progress (per step in a log,
per scrape in Prometheus). Each run's total (its last point) also weighs ``total_weight``
times the whole curve of its run (default 1): the curve gives the shape (one-off cost versus
cost per step), the totals a forecast is about pin the level. Without it a curve that bends (a
slow first epoch, evaluation pauses) misses the totals by a few % (3.7 % cross-validated on
one MLPerf system whose runs all had the same length; the naive seconds-per-step rule: 0.2 %;
measured across weights in docs/lab/e2e-accuracy.md). ``total_weight=0`` is the plain curve fit.

Timestamp resolution: ``X`` may carry ``clock_resolution_s`` per row (a point's time is
uncertain by +- that much). A point's squared error then also weighs
``1 / (1 + (resolution / seconds)^2)``: a point within a few clock ticks of the run's start
says little. The interval adds ``resolution_rel_`` (the largest resolution over the median
run total, divided by the square root of the runs) in quadrature, and the in-sample floor of
the interval is the span- and resolution-weighted RMS error, so early points of a 1-second
clock do not blow it up.

Evidence: ``thin_`` is true for a model of fewer than :data:`MIN_RUNS` runs or
:data:`MIN_SOLID_POINTS` points: its own cross-validation cannot be trusted, and
:meth:`set_interval` gives it the interval of a pooled prior instead (``interval_source_``
says which: ``cv``, ``prior`` or ``default``).

Forecasting is the light half, :class:`models.phase_curve.PhaseCurve` (no scikit-learn or
SciPy): a stored model is read back as one; this class adds the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize, stats
from sklearn.base import BaseEstimator, RegressorMixin

from models.phase_curve import (
    FORMS,
    MIN_HALF_WIDTH,
    MIN_RUNS,
    MIN_SOLID_POINTS,
    PhaseCurve,
    _design,
)

_BOUNDING_FORMS = {"per_sample": "per_iteration", "per_iteration": "per_sample"}
# power of 1/y in a point's weight; "run" also divides by its run's total (see the module doc)
WEIGHTINGS = {"run": 0.0, "absolute": 0.0, "relative": 1.0}
NO_VALIDATION_HALF_WIDTH = 0.25  # +-25 % where nothing validates a model


def _nnls_fit(
    x: np.ndarray, y: np.ndarray, power: float = 1.0, span: np.ndarray | None = None,
    res: np.ndarray | None = None,
) -> np.ndarray:
    """Non-negative least squares; row i's squared error weighs
    span_i / y_i**(2 power) / (1 + (res_i / y_i)**2)."""
    w = 1.0 / np.maximum(y, 1e-9) ** power
    if span is not None:
        w = w * np.sqrt(span)
    if res is not None:
        w = w / np.sqrt(1.0 + (res / np.maximum(y, 1e-9)) ** 2)
    scale = np.maximum(np.abs(x * w[:, None]).max(axis=0), 1e-12)
    coef, _ = optimize.nnls((x * w[:, None]) / scale, y * w)
    return coef / scale


@dataclass
class CVResult:
    form: str
    mape: float | None
    errors: list[float]  # signed relative errors (actual - predicted) / predicted
    kind: str  # "leave-one-run-out", "tail-holdout" or "none"


class PhaseTimeModel(RegressorMixin, BaseEstimator, PhaseCurve):
    """Estimator of phase seconds from (iterations, batch_size); see the module doc.

    fit(X, y, groups): X has columns ``iterations`` and ``batch_size``, y seconds,
    ``groups`` the run of each row (rows of one run are its cumulative progress points,
    the run's total last). predict(X) returns seconds; predict_interval(X) adds bounds.
    """

    # __init__ (form, coverage, weighting, total_weight) is PhaseCurve's: one definition.

    def _coef(self, terms: tuple[str, ...], it: np.ndarray, bs: np.ndarray, y: np.ndarray,
              res: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Non-negative least squares on ``rows`` (all by default) with the fit's weights."""
        if rows is None:
            rows = np.ones(len(y), dtype=bool)
        return _nnls_fit(_design(it[rows], bs[rows], terms), y[rows], self._power,
                         self.fit_weights_[rows], res[rows])

    @property
    def _power(self) -> float:
        if self.weighting not in WEIGHTINGS:
            raise ValueError(
                f"weighting must be one of {sorted(WEIGHTINGS)}, got {self.weighting!r}"
            )
        return WEIGHTINGS[self.weighting]

    # -- fitting -----------------------------------------------------------------

    def _candidates(self, batch: np.ndarray) -> list[str]:
        if self.form != "auto":
            if self.form not in FORMS:
                raise ValueError(f"unknown form {self.form!r}; choose from {sorted(FORMS)}")
            return [self.form]
        forms = list(FORMS)
        if len(np.unique(batch)) < 2:
            forms.remove("iteration_and_sample")  # c and b cannot both be told apart
        return forms

    def fit(self, X: pd.DataFrame, y, groups) -> PhaseTimeModel:
        """Cross-validate the candidate forms by run, keep the best and refit it on all
        rows (``X``, ``y``, ``groups`` as in the class doc); returns ``self``."""
        it = np.asarray(X["iterations"], dtype=float)
        bs = np.asarray(X["batch_size"], dtype=float)
        y = np.asarray(y, dtype=float)
        groups = np.asarray(groups)
        res = (np.nan_to_num(np.asarray(X["clock_resolution_s"], dtype=float))
               if "clock_resolution_s" in getattr(X, "columns", ()) else np.zeros_like(y))
        if len(y) < 2:
            raise ValueError("need at least two progress points to fit a phase model")
        if not (np.all(np.isfinite(it)) and np.all(np.isfinite(bs)) and np.all(np.isfinite(y))):
            raise ValueError("iterations, batch sizes and seconds must be finite")
        if np.any(it <= 0) or np.any(bs <= 0) or np.any(y <= 0):
            raise ValueError("iterations, batch sizes and seconds must be positive")
        if np.any(res < 0):
            raise ValueError("clock resolutions must be >= 0")
        if not (math.isfinite(self.total_weight) and self.total_weight >= 0):
            raise ValueError(f"total_weight must be finite and >= 0, got {self.total_weight}")
        self.spans_ = _spans(it, groups)
        self.spans_[_final_rows(groups)] += self.total_weight
        self.fit_weights_ = self.spans_.copy()
        if self.weighting == "run":  # seconds relative to the run's own total
            self.fit_weights_ /= _run_totals(y, groups) ** 2
        results = [self._cross_validate(f, it, bs, y, groups, res)
                   for f in self._candidates(bs)]
        scored = [(r.mape, r) for r in results if r.mape is not None]
        # the first candidate within rounding of the lowest error (the order breaks ties)
        low = min((mape for mape, _ in scored), default=0.0)
        best = next((r for mape, r in scored if mape <= low * (1 + 1e-9) + 1e-12), results[0])
        self.cv_ = {r.form: r.mape for r in results}
        self.cv_kind_ = best.kind
        self.form_ = best.form
        self.terms_ = FORMS[best.form]
        self.coef_ = self._coef(self.terms_, it, bs, y, res)
        fitted = self._raw_predict(it, bs)
        in_sample = (y - fitted) / np.maximum(fitted, 1e-12)
        finals = _final_rows(groups)
        self.n_runs_ = int(len(np.unique(groups)))
        self.n_points_ = int(len(y))
        self.resolution_s_ = float(res.max()) if len(res) else 0.0
        self.resolution_rel_ = (
            self.resolution_s_ / max(float(np.median(y[finals])), 1e-9) / math.sqrt(self.n_runs_)
        )
        self.cv_mape_ = best.mape
        self.cv_errors_ = best.errors
        weights = self.spans_ / (1.0 + (res / np.maximum(y, 1e-9)) ** 2)
        self.own_half_width_ = self._half_width(best.errors, in_sample, weights)
        self.half_width_ = self.own_half_width_
        self.interval_source_ = "cv" if best.errors else "default"
        self.thin_ = self.n_runs_ < MIN_RUNS or self.n_points_ < MIN_SOLID_POINTS
        self.batch_range_ = (float(bs.min()), float(bs.max()))
        self.iteration_range_ = (float(it[finals].min()), float(it[finals].max()))
        # One batch size cannot tell per-step from per-sample cost. At another batch size the
        # truth lies between the two pure forms (time per step grows with the batch, at most in
        # proportion), so keep the other form to bound such forecasts.
        self.alt_terms_: tuple[str, ...] = ()
        self.alt_coef_ = np.zeros(0)
        if self.batch_range_[0] == self.batch_range_[1] and self.form_ in _BOUNDING_FORMS:
            self.alt_terms_ = FORMS[_BOUNDING_FORMS[self.form_]]
            self.alt_coef_ = self._coef(self.alt_terms_, it, bs, y, res)
        return self

    def _cross_validate(self, form, it, bs, y, groups, res) -> CVResult:
        terms = FORMS[form]
        runs = list(dict.fromkeys(groups))
        finals = _final_rows(groups)
        errors: list[float] = []
        if len(runs) >= 2:
            kind = "leave-one-run-out"
            for run in runs:
                train = groups != run
                coef = self._coef(terms, it, bs, y, res, train)
                i = finals[np.flatnonzero(groups[finals] == run)[0]]
                pred = float((_design(it[i : i + 1], bs[i : i + 1], terms) @ coef)[0])
                errors.append((y[i] - pred) / pred if pred > 0 else math.inf)
        else:
            kind = "tail-holdout"
            i = int(finals[0])
            train = it <= 0.5 * it[i]
            if train.sum() < 2:
                return CVResult(form, None, [], "none")
            coef = self._coef(terms, it, bs, y, res, train)
            pred = float((_design(it[i : i + 1], bs[i : i + 1], terms) @ coef)[0])
            errors.append((y[i] - pred) / pred if pred > 0 else math.inf)
        mape = float(np.mean(np.abs(errors))) * 100
        return CVResult(form, mape, [float(e) for e in errors], kind)

    def _half_width(self, cv_errors: list[float], in_sample: np.ndarray,
                    weights: np.ndarray) -> float:
        """Relative half-width of the prediction interval: a t-interval on CV errors, at least
        twice the weighted in-sample RMS error, the clock resolution added in quadrature."""
        rms = float(np.sqrt(np.sum(weights * in_sample**2) / max(np.sum(weights), 1e-12)))
        floor = max(MIN_HALF_WIDTH, 2 * rms)
        errs = np.asarray([e for e in cv_errors if np.isfinite(e)])
        if len(errs) == 0:
            half = max(floor, NO_VALIDATION_HALF_WIDTH)  # nothing validates: a wide interval
        else:
            n = len(errs)
            t = stats.t.ppf(0.5 + self.coverage / 2, df=max(n - 1, 1))
            half = max(floor, t * float(np.sqrt(np.mean(errs**2))) * math.sqrt(1 + 1 / n))
        return math.hypot(half, self.resolution_rel_)

def _spans(it: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each point's share of its run's iterations (steps since the run's previous point), so
    every run weighs the same and a fit does not depend on how densely a log reports."""
    span = np.empty_like(it, dtype=float)
    for g in dict.fromkeys(groups):
        idx = np.flatnonzero(groups == g)
        steps = np.diff(np.concatenate([[0.0], it[idx]]))
        steps = np.maximum(steps, 0.0)
        total = steps.sum()
        span[idx] = steps / total if total > 0 else 1.0 / len(idx)
    return span


def _run_totals(y: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each row's run total (the seconds of the run's last row, :func:`_final_rows`), at least
    1e-9."""
    total = {groups[i]: max(float(y[i]), 1e-9) for i in _final_rows(groups)}
    return np.asarray([total[g] for g in groups], dtype=float)


def _final_rows(groups: np.ndarray) -> np.ndarray:
    """Index of the last row of each run (its total), in order of first appearance."""
    last: dict = {}
    for i, g in enumerate(groups):
        last[g] = i
    return np.asarray(list(last.values()), dtype=int)
