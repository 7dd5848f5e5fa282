"""Whole-job model of a recurring job: its next wall time from its own past durations.

A job that recurs (a nightly CronJob, a Slurm job name, a system's runs) has a history of
wall times and nothing else: no steps, no network (``ingest.whole_job``). The model forecasts
the next run of a (job key, deployment) from them.

Rules
-----
* Only finished runs (state ``completed``) with a positive wall time are fitted; the others
  are counted in ``skipped_``.
* Per (key, deployment) only the newest ``max_runs`` (:data:`MAX_RUNS`, 200) finished runs
  in time order are fitted; the older ones are counted (``GroupFit.runs``) but not used. A
  recurring job's next run follows its recent runs (a new stack, other nodes), and this
  keeps a year of a cluster's history (tens of thousands of runs of one job) bounded in
  time and memory: Theil-Sen's pairwise slopes are ``max_runs**2 / 2``, never ``n**2``.
  Runs read as :class:`~ingest.whole_job.RecentRuns` (only the newest per deployment, as
  the forecaster and :func:`whole_job_candidate` read a store) are counted by the counts
  read with them (``runs``, ``skipped_``), so the fit and its reason are those of all the
  job's runs.
* Per (key, deployment), on log seconds ``y_i`` at times ``t_i`` (the run's start, in days):
  the **trend** is Theil-Sen's slope, used when ``trend="auto"`` and at least
  ``min_trend_runs`` timed runs give a slope whose ``coverage`` confidence interval excludes 0
  (``trend="on"``: always with enough runs; ``"off"``: never); the **level** is the median of
  ``y_i - b (t_i - t_last)``; the **spread** ``s`` is 1.4826 x the median absolute deviation
  of those residuals, and at least the standard deviation's ``robust_floor`` share and
  ``min_spread`` (log units).
* Forecast at time ``t`` (default: one median gap after the last run): ``exp(level + b (t -
  t_last))``; its ``coverage`` interval ``exp(centre +- q s sqrt(1 + 1/n))`` with ``q`` the
  Student t quantile on ``n - 1`` (``n - 2`` with a trend) degrees of freedom, widened by the
  slope's own interval times the extrapolation; one run: ``prior_spread`` with the normal
  quantile.
* :func:`combine` blends it with a per-step forecast of the same job (both as seconds with an
  interval): inverse-variance in log space, the gap between the two added to the variance.
* :func:`whole_job_candidate` turns a request (job key, deployment) into a candidate answer
  (seconds, low, high, reason, runs); :class:`WholeJobMiss` says why there is none.
"""

from __future__ import annotations

import bisect
import importlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import ClassVar, Self

import numpy as np

from fleet.deprecation import renamed_attributes
from ingest.whole_job import (
    RecentRuns,
    WholeJobRun,
    deployment_identity,
    finished_counts,
    normal_key,
    whole_job_runs,
)
from models.errors import ModelError

MAX_RUNS = 200  # the newest finished runs of a (key, deployment) that are fitted (module doc)


class WholeJobMiss(ModelError, LookupError):
    """No whole-job forecast for this request; the message says why."""

    kind: ClassVar[str] = "no_model"


@dataclass(frozen=True)
class GroupFit:
    """What the model learnt of one (key, deployment)."""

    n: int
    level: float  # log seconds as of the last run (trend removed)
    spread: float  # log units
    slope: float  # log seconds per run (0 without a trend)
    slope_half: float  # half width of the slope's interval (log seconds per run)
    dof: int
    last_seconds: float
    mean_seconds: float
    alpha: float | None = None  # level smoothing chosen by one-step errors (None: median)
    runs: int = 0  # finished runs of the group in all (``n``: the newest of them, fitted)


def _key(key: str, deployment: str) -> tuple[str, str]:
    return normal_key(key), deployment_identity(deployment)


def _rows(runs) -> list[tuple[str, str, float, float | None, str]]:
    """(key, deployment, seconds, start, state) from WholeJobRun objects, dicts or a frame."""
    records = runs.to_dict("records") if hasattr(runs, "to_dict") else list(runs)
    out = []
    for r in records:
        get = r.get if isinstance(r, dict) else (lambda name, d=None, r=r: getattr(r, name, d))
        start = get("when") if get("when") is not None else get("start")
        out.append((str(get("key")), str(get("deployment")), float(get("seconds")),  # type: ignore[arg-type]
                    None if start is None or (isinstance(start, float) and math.isnan(start))
                    else float(start), str(get("state", "completed"))))
    return out


class WholeJobFit:
    """Per (job key, deployment) wall-time model with a trend and an interval (module doc).
    The forecaster fits it per request, so it needs neither scikit-learn nor SciPy's
    ``stats`` (seconds of imports); ``models.whole_job_estimator.WholeJobModel`` is the same
    model as a scikit-learn estimator."""

    def __init__(self, coverage: float = 0.9, trend: str = "auto", min_trend_runs: int = 5,
                 min_spread: float = 0.01, robust_floor: float = 0.5,
                 prior_spread: float = 0.15, min_smoothing_runs: int = 4,
                 max_runs: int = MAX_RUNS):
        self.coverage = coverage
        self.trend = trend
        self.min_trend_runs = min_trend_runs
        self.min_spread = min_spread
        self.robust_floor = robust_floor
        self.prior_spread = prior_spread
        self.min_smoothing_runs = min_smoothing_runs
        self.max_runs = max_runs

    def fit(self, runs, y=None) -> Self:
        """Fit on ``runs`` (:class:`~ingest.whole_job.WholeJobRun` objects, or dicts or a
        frame with ``key``, ``deployment``, ``seconds``, ``start`` and ``state``); ``y`` is
        unused."""
        if not 0 < self.coverage < 1:
            raise ValueError(f"coverage must be in (0, 1), got {self.coverage}")
        if self.trend not in ("auto", "on", "off"):
            raise ValueError(f"trend must be auto, on or off, got {self.trend!r}")
        if not (isinstance(self.max_runs, int) and self.max_runs >= 2):
            raise ValueError(f"max_runs must be a whole number >= 2, got {self.max_runs!r}")
        groups: dict[tuple[str, str], list[tuple[float | None, float]]] = {}
        keys: dict[tuple[str, str], tuple[str, str]] = {}  # as written -> identity
        skipped = 0
        for key, dep, seconds, start, state in _rows(runs):
            if state != "completed" or not (math.isfinite(seconds) and seconds > 0):
                skipped += 1
                continue
            if (key, dep) not in keys:
                keys[key, dep] = _key(key, dep)
            groups.setdefault(keys[key, dep], []).append((start, seconds))
        counted: dict[tuple[str, str], int] = {}
        if isinstance(runs, RecentRuns):  # the newest read, counted as all (module rules)
            for (key, dep), n in finished_counts(runs).items():
                counted[_key(key, dep)] = counted.get(_key(key, dep), 0) + n
            skipped = sum(runs.records.values()) - sum(counted.values())
        self.groups_: dict[tuple[str, str], GroupFit] = {
            k: self._fit_group(v, counted.get(k, len(v))) for k, v in groups.items()}
        self.skipped_ = skipped
        self.n_runs_ = sum(g.runs for g in self.groups_.values())  # fitted or counted
        return self

    def _fit_group(self, points: list[tuple[float | None, float]], runs: int) -> GroupFit:
        """The fit of one group's ``points`` (``runs``: its finished runs in all)."""
        # runs in time order (untimed ones after, in the order given)
        ordered = sorted(range(len(points)), key=lambda i: (points[i][0] is None,
                                                             points[i][0] or 0.0, i))
        ys = np.array([math.log(points[i][1]) for i in ordered[-self.max_runs:]])
        n = len(ys)
        index = np.arange(n, dtype=float)
        slope = slope_half = 0.0
        if self.trend != "off" and n >= max(3, self.min_trend_runs):
            mid, low, high = theil_sen(ys, self.coverage)
            if self.trend == "on" or low > 0 or high < 0:
                slope = mid
                slope_half = (high - low) / 2
        resid = ys - slope * (index - (n - 1))  # trend removed, as of the last run
        alpha = None
        if n >= max(3, self.min_smoothing_runs):
            alpha, level, errors = _smooth(list(resid))
        else:
            level = float(np.median(resid))
            errors = resid - level
        mad = 1.4826 * float(np.median(np.abs(errors))) if len(errors) > 1 else 0.0
        sd = float(np.std(errors, ddof=1)) if len(errors) > 1 else 0.0
        spread = max(mad, self.robust_floor * sd, self.min_spread) if n > 1 else \
            self.prior_spread
        seconds = np.exp(ys)
        return GroupFit(n=n, level=level, spread=spread, slope=slope, slope_half=slope_half,
                        dof=max(1, len(errors) - (2 if slope else 1)), alpha=alpha,
                        last_seconds=float(seconds[-1]), mean_seconds=float(seconds.mean()),
                        runs=runs)

    def group(self, key: str, deployment: str) -> GroupFit | None:
        """The fit of (key, deployment), or None."""
        return self.groups_.get(_key(key, deployment))

    def _predict_one(self, key: str, deployment: str, ahead: int = 1
                     ) -> tuple[float, float, float]:
        g = self.group(key, deployment)
        if g is None:
            return math.nan, math.nan, math.nan
        centre = g.level + g.slope * ahead
        from scipy.special import ndtri, stdtrit  # what stats.t / stats.norm.ppf call

        if g.n > 1:
            q = float(stdtrit(g.dof, 0.5 + self.coverage / 2))
            # one-step errors hold the level's own uncertainty; residuals around a median
            # do not
            half = q * g.spread * (1.0 if g.alpha is not None else math.sqrt(1 + 1 / g.n))
        else:
            half = float(ndtri(0.5 + self.coverage / 2)) * g.spread
        half = math.hypot(half, g.slope_half * ahead)
        return math.exp(centre), math.exp(centre - half), math.exp(centre + half)

    def predict(self, X) -> np.ndarray:
        """Seconds of the next run for each (key, deployment[, runs ahead]) row of ``X``
        (NaN where unknown)."""
        return np.array([self._predict_one(*_request(r))[0] for r in _requests(X)])

    def predict_interval(self, X) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the ``coverage`` interval for each row of ``X``."""
        out = [self._predict_one(*_request(r)) for r in _requests(X)]
        return np.array([o[1] for o in out]), np.array([o[2] for o in out])


def theil_sen(ys: np.ndarray, coverage: float) -> tuple[float, float, float]:
    """Theil-Sen's slope of ``ys`` over their index, and its ``coverage`` confidence interval
    (Sen 1968, eq. 2.6, ties in ``ys`` counted): the slope, low, high, as
    ``scipy.stats.theilslopes(ys, alpha=coverage)`` gives them (its normal quantile from
    ``statistics.NormalDist``: SciPy's to the last bit or two, no SciPy import)."""
    n = len(ys)
    x = np.arange(n, dtype=float)
    dx, dy = x[:, np.newaxis] - x, ys[:, np.newaxis] - ys
    slopes = np.sort(dy[dx > 0] / dx[dx > 0])
    alpha = 1.0 - coverage if coverage > 0.5 else coverage
    z = NormalDist().inv_cdf(alpha / 2.0)  # scipy's ndtri to the last bit or two
    _, counts = np.unique(ys, return_counts=True)
    ties = [int(k) for k in counts if k > 1]
    sigma = np.sqrt(1 / 18. * (n * (n - 1) * (2 * n + 5)
                               - sum(k * (k - 1) * (2 * k + 5) for k in ties)))
    nt = len(slopes)
    upper = min(int(np.round((nt - z * sigma) / 2.)), nt - 1)
    lower = max(int(np.round((nt + z * sigma) / 2.)) - 1, 0)
    return float(np.median(slopes)), float(slopes[lower]), float(slopes[upper])


def _estimator() -> type:
    """``models.whole_job_estimator.WholeJobModel``, imported when the old name is read."""
    return importlib.import_module("models.whole_job_estimator").WholeJobModel


# ``WholeJobModel`` here: the estimator before it moved apart (so the forecast path never
# imports scikit-learn), deprecated for one release
__getattr__ = renamed_attributes(__name__, {
    "WholeJobModel": ("models.whole_job_estimator.WholeJobModel", _estimator)})

SMOOTHING = (0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0)
JUMP = 4.0  # a one-step error this many robust spreads out starts a new level
MIN_JUMP = 0.03  # ... and at least this far (log units)


def _smooth(values: list[float]) -> tuple[float, float, np.ndarray]:
    """(alpha, final level, one-step errors) of the exponential smoothing of ``values``
    whose one-step-ahead errors have the least mean absolute value (ties: smaller alpha).
    A step that lands :data:`JUMP` robust spreads (and :data:`MIN_JUMP`) away from the level
    after at least three errors is an outlier and leaves the level alone: one slow (or
    failed-fast) run never sets it (issue 35). Two such steps in a row, on the same side and
    within that distance of each other, are a level shift (a new software stack, other
    nodes): the level restarts at the second instead of creeping towards it."""
    best: tuple[float, float, float, np.ndarray] | None = None
    for alpha in SMOOTHING:
        level: float = values[0]
        errors: list[float] = []
        sizes: list[float] = []  # |errors|, sorted: their median without a sort per step
        pending: float | None = None  # an outlier waiting for a second run to confirm it
        for v in values[1:]:
            err = v - level
            scale = 1.4826 * _sorted_median(sizes) if len(errors) >= 3 else None
            errors.append(err)
            bisect.insort(sizes, abs(err))
            far = max(JUMP * (scale or 0.0), MIN_JUMP)
            if scale is not None and abs(err) > far:
                if pending is not None and (pending - level) * err > 0 and \
                        abs(v - pending) <= far:
                    level, pending = v, None
                else:
                    pending = v
                continue
            pending = None
            level += alpha * err
        score = float(np.mean(np.abs(errors)))
        if best is None or score < best[0] - 1e-12:
            best = (score, alpha, level, np.array(errors))
    assert best is not None
    return best[1], best[2], best[3]


def _sorted_median(values: list[float]) -> float:
    """The median of an ascending list (the mean of the middle two for an even count)."""
    half = len(values) // 2
    return values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2


def _requests(X) -> list:
    if hasattr(X, "to_dict"):
        return X.to_dict("records")
    return list(X)


def _request(row) -> tuple[str, str, int]:
    if isinstance(row, dict):
        return row["key"], row["deployment"], int(row.get("ahead") or 1)
    key, deployment, *rest = row
    return key, deployment, int(rest[0]) if rest else 1


@dataclass(frozen=True)
class WholeJobCandidate:
    """A whole-job forecast of one request, for the forecaster's routes."""

    seconds: float
    low: float
    high: float
    reason: str
    n_runs: int
    key: str
    deployment: str
    model: str
    coverage: float
    trend_per_run: float = 0.0
    source: str = "whole-job"

    def to_dict(self) -> dict:
        """The candidate's fields as a dict."""
        return asdict(self)


def candidate_from(model: WholeJobFit, key: str, deployment: str,
                   ahead: int = 1) -> WholeJobCandidate:
    """The fitted ``model``'s candidate for (key, deployment); WholeJobMiss without history."""
    k, dep = _key(key, deployment)
    g = model.groups_.get((k, dep))
    if g is None:
        others = sorted(d for kk, d in model.groups_ if kk == k)
        if others:
            raise WholeJobMiss(f"job {k!r} has finished runs on {', '.join(others)}, none on "
                               f"{dep}")
        raise WholeJobMiss(f"no finished run of job {k!r} in the store")
    seconds, low, high = model._predict_one(key, deployment, ahead)
    trend = (f", trend {math.expm1(g.slope) * 100:+.1f} % a run" if g.slope else "")
    smooth = (f", level smoothed (alpha {g.alpha:g})" if g.alpha is not None else "")
    runs = max(g.runs, g.n)
    fitted = f" (the newest {g.n} fitted)" if runs > g.n else ""
    reason = (f"whole-job history of {k} on {dep}: {runs} finished run"
              f"{'s' if runs != 1 else ''}{fitted}, spread {math.expm1(g.spread) * 100:.1f} %"
              f"{trend}{smooth}")
    return WholeJobCandidate(seconds=seconds, low=low, high=high, reason=reason, n_runs=runs,
                             key=k, deployment=dep, model=f"whole-job/{k}/{dep}",
                             coverage=model.coverage, trend_per_run=math.expm1(g.slope))


def combine(whole: WholeJobCandidate, per_step: tuple[float, float, float],
            per_step_reason: str = "per-step model") -> WholeJobCandidate:
    """Blend a whole-job candidate with a per-step forecast ``(seconds, low, high)`` of the
    same job (same coverage): inverse-variance in log space, plus the gap between them."""
    z = NormalDist().inv_cdf(0.5 + whole.coverage / 2)
    parts = []
    for seconds, low, high in ((whole.seconds, whole.low, whole.high), per_step):
        if not (seconds > 0 and low > 0 and high >= low):
            raise ValueError(f"not a forecast: {seconds}, {low}, {high}")
        sigma = max((math.log(high) - math.log(low)) / (2 * z), 1e-3)
        parts.append((math.log(seconds), 1 / sigma**2))
    total = sum(w for _, w in parts)
    mu = sum(m * w for m, w in parts) / total
    between = sum(w * (m - mu) ** 2 for m, w in parts) / total
    sigma = math.sqrt(1 / total + between)
    return WholeJobCandidate(
        seconds=math.exp(mu), low=math.exp(mu - z * sigma), high=math.exp(mu + z * sigma),
        reason=f"{whole.reason}, blended with the {per_step_reason} "
               f"({per_step[0]:.0f} s) by their spreads",
        n_runs=whole.n_runs, key=whole.key, deployment=whole.deployment,
        model=whole.model, coverage=whole.coverage, trend_per_run=whole.trend_per_run,
        source="whole-job+per-step")


def whole_job_candidate(store_or_runs, job_key: str, deployment: str, *,
                        ahead: int = 1,
                        per_step: tuple[float, float, float] | None = None,
                        model: WholeJobFit | None = None) -> WholeJobCandidate:
    """The candidate answer of a recurring job (``job_key`` on ``deployment``) from a store
    (its newest runs and their counts: the model's ``max_runs`` a deployment, module rules)
    or a list of :class:`~ingest.whole_job.WholeJobRun`; with ``per_step``, blended
    (:func:`combine`). Raises :class:`WholeJobMiss` saying why there is none."""
    model = model or WholeJobFit()
    runs: Sequence[WholeJobRun]
    if isinstance(store_or_runs, list | tuple):
        runs = [r for r in store_or_runs if normal_key(r.key) == normal_key(job_key)]
    else:
        runs = whole_job_runs(store_or_runs, job_key, traces=False, newest=model.max_runs)
    fitted = model.fit(runs)
    found = candidate_from(fitted, job_key, deployment, ahead)
    return combine(found, per_step) if per_step is not None else found


def backtest(runs: Iterable[WholeJobRun], min_history: int = 2,
             model: WholeJobFit | None = None) -> list[dict]:
    """Rolling origin: each finished run forecast from the finished runs of its (key,
    deployment) before it (the newest ``max_runs`` of them: all the model fits); rows with
    the actual, the forecast, its interval and two naive rules (the mean and the last of
    the history, as fitted)."""
    groups: dict[tuple[str, str], list[WholeJobRun]] = {}
    for r in runs:
        if r.finished and r.seconds > 0:
            groups.setdefault(_key(r.key, r.deployment), []).append(r)
    out = []
    estimator = model or WholeJobFit()
    for (key, dep), members in groups.items():
        members.sort(key=lambda r: (r.when is None, r.when or 0.0))
        for i in range(min_history, len(members)):
            history, actual = members[max(0, i - estimator.max_runs):i], members[i]
            c = candidate_from(estimator.fit(history), key, dep)
            out.append({"key": key, "deployment": dep, "history": i, "actual": actual.seconds,
                        "forecast": c.seconds, "low": c.low, "high": c.high,
                        "naive_mean": float(np.mean([h.seconds for h in history])),
                        "naive_last": history[-1].seconds})
    return out
