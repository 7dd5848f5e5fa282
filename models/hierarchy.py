"""Systems within a key: a system's own history first, the pooled model of its key as prior.

A *group* is network x deployment x phase x stack x variant. Its **pooled** model is fitted on
the runs of every system of the group (system ``""``: what answers a request that names no
system). Where a group holds runs of two or more systems (runs without a system count as one
more), each system also gets a model:

* **own**: a system with at least ``MIN_SOLID_POINTS`` progress points (one run of an MLPerf
  log has dozens) is fitted on its own runs only: history of the same system wins. Measured on
  the held-out MLPerf corpus with one run of history per system (docs/lab/e2e-accuracy.md), its
  own one-run fit was off 0.23 % on systems sharing their key, its level on the pooled shape
  shrunk toward the pooled model 1.79 %: the shape of time within a system's own run tells
  more than other systems' shape;
* **pooled-scaled**: a system with fewer points (one total, a run cut short) gets the pooled
  model's shape at its own level: ``t = P(x) exp(d)``, where ``d`` is its mean log ratio of
  observed run totals to the pooled forecast, shrunk toward 0 by evidence (a normal prior
  ``N(0, tau^2)`` on a system's offset, runs scattering around it with ``sigma^2``):
  ``d = (sum r_j / sigma^2) / (n / sigma^2 + 1 / tau^2)``. Its interval is the posterior
  predictive: relative half-width ``exp(z sqrt(1 / (n / sigma^2 + 1 / tau^2) + sigma^2 + q^2)) - 1``
  (``z`` the normal quantile of the coverage, ``q`` the clock-resolution term), never wider
  than the prior's own ``exp(z sqrt(tau^2 + sigma^2 + q^2)) - 1``.

The spreads are measured per phase over the whole fit ("comparable models"):

* ``tau`` (between systems): the offsets of the systems of every multi-system group from
  their pooled model, ``tau^2 = sum r_s^2 / sum (k_g - 1)`` (``k_g`` systems in group ``g``);
* ``sigma`` (within a system): the RMS log leave-one-run-out error of the models fitted on one
  system's runs (system models, and pooled models of a single system); where no such model
  has two runs, the RMS log tail-holdout error of the one-run models (their total forecast
  from their first half: ``within: tail``).

Fewer than :data:`MIN_SPREAD_SAMPLES` samples: the defaults :data:`DEFAULT_TAU` and
:data:`DEFAULT_SIGMA` (``prior["source"]`` says which spread came from where).
A **thin** model fitted on its own
runs (one run, or fewer than ``MIN_SOLID_POINTS`` points) keeps its fit but takes the interval
``exp(z sqrt(sigma^2 (1 + 1/n) + q^2)) - 1`` instead of its own cross-validation's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from fleet.errors import JobcastError, bug_info
from models.phase_curve import COVERAGE, MIN_SOLID_POINTS
from models.phase_model import PhaseTimeModel

MIN_SPREAD_SAMPLES = 3
DEFAULT_TAU = 0.25  # log spread of systems around a pooled model when nothing measures it
DEFAULT_SIGMA = 0.10  # log spread of one system's runs when nothing measures it
GROUP = ["network", "deployment", "phase", "_stack_key", "variant"]
Z = float(stats.norm.ppf(0.5 + COVERAGE / 2))


@dataclass
class Planned:
    """One key of a fit: its estimator, or the error that kept it from one (``bug``: that
    error is a bug in jobcast, not the key's data: :func:`_plan`)."""

    key: tuple[str, str, str, str, str, str]  # network .. phase, stack key, variant, system
    stack: str  # spelling
    runs: int
    points: int
    sources: list[str]
    last_run_time: float
    estimator: PhaseTimeModel | None = None
    error: str | None = None
    basis: str = "own"
    systems: dict[str, int] = field(default_factory=dict)
    prior: dict = field(default_factory=dict)
    rows: pd.DataFrame | None = field(default=None, repr=False)
    bug: bool = False


@dataclass(frozen=True)
class Spread:
    """The prior spreads of one phase (log units)."""

    tau: float
    sigma: float
    tau_source: str
    sigma_source: str

    def as_dict(self, resolution_rel: float = 0.0) -> dict:
        """The spreads as JSON, with the prior's relative half-width at
        ``resolution_rel`` (the clock's resolution relative to the run)."""
        return {
            "between_systems": self.tau,
            "within_system": self.sigma,
            "source": f"between: {self.tau_source}, within: {self.sigma_source}",
            "prior_half_width": _half(self.tau**2 + self.sigma**2 + resolution_rel**2),
        }


def _half(variance: float) -> float:
    """Relative half-width of a log-normal interval of this log variance."""
    return math.expm1(Z * math.sqrt(max(variance, 0.0)))


def _plan(key, rows: pd.DataFrame, form: str, fit_key: Callable) -> Planned:
    """The key's plan with ``fit_key(rows, form)`` fitted, or the reason it failed; a failure
    never stops the other keys. An expected failure (a :class:`JobcastError`, or the
    ``ValueError`` with which a scikit-learn-style estimator refuses data it cannot fit) is
    the key's reason as it says it; any other exception is a bug in jobcast and said so
    (``bug`` set, the message of :func:`fleet.errors.bug_info`)."""
    starts = rows["start_time"].dropna()
    plan = Planned(
        key=key, stack=str(rows["stack"].iloc[0]), runs=int(rows["run_id"].nunique()),
        points=len(rows), sources=sorted(rows["source"].unique().tolist()),
        last_run_time=float(starts.max()) if len(starts) else 0.0, rows=rows,
        systems={str(s): int(n) for s, n in
                 rows[rows["system"] != ""].groupby("system")["run_id"].nunique().items()},
    )
    try:
        plan.estimator = fit_key(rows, form)
    except (JobcastError, ValueError) as exc:  # the key's data cannot be fitted
        plan.error = str(exc) or "no message"
    except Exception as exc:  # noqa: BLE001 - a bug: report it as one, fit the other keys
        plan.error, plan.bug = bug_info(exc).message, True
    return plan


def _solid(rows: pd.DataFrame) -> bool:
    """Enough of its own for a system model of its own (any number of runs)."""
    return len(rows) >= MIN_SOLID_POINTS


def fit_groups(keyed: pd.DataFrame, form: str, fit_key: Callable) -> list[Planned]:
    """Every key of ``keyed`` (``e2e.keyed_points``) planned and fitted (see module doc)."""
    plans: list[Planned] = []
    scaled: list[tuple[Planned, Planned]] = []
    for gkey, rows in keyed.groupby(GROUP, sort=True):
        gkey = tuple(str(k) for k in gkey)
        pooled = _plan(gkey + ("",), rows, form, fit_key)
        plans.append(pooled)
        systems = sorted(pooled.systems)
        if len(systems) + int((rows["system"] == "").any()) < 2:
            continue
        for system in systems:
            own_rows = rows[rows["system"] == system]
            key = gkey + (system,)
            if _solid(own_rows) or pooled.estimator is None:
                plan = _plan(key, own_rows, form, fit_key)
                if plan.error is None or pooled.estimator is None:
                    if plan.error is not None:
                        plan.error += "; and no pooled model of its key to serve as prior"
                    plans.append(plan)
                    continue
            plan = _plan(key, own_rows, form, lambda *_: None)
            plan.error, plan.basis = None, "pooled-scaled"
            plans.append(plan)
            scaled.append((plan, pooled))
    spreads = phase_spreads(plans)
    for plan in plans:
        spread = spreads[plan.key[2]]
        if plan.estimator is not None:
            plan.prior = spread.as_dict(plan.estimator.resolution_rel_)
            if plan.estimator.thin_:
                variance = spread.sigma**2 * (1 + 1 / max(plan.runs, 1))
                plan.estimator.set_interval(_half(variance), "prior" if
                                            spread.sigma_source != "default" else "default")
    for plan, pooled in scaled:
        _scale(plan, pooled, spreads[plan.key[2]])
    for plan in plans:
        plan.rows = None
    return plans


def _finals(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.groupby("run_id", sort=False).tail(1)


def _log_ratios(rows: pd.DataFrame, est: PhaseTimeModel) -> np.ndarray:
    """log(observed / forecast) of each run's total."""
    finals = _finals(rows)
    pred = est.predict(finals[["iterations", "batch_size"]])
    ok = pred > 0
    return np.log(finals["seconds"].to_numpy(float)[ok] / pred[ok])


def phase_spreads(plans: list[Planned]) -> dict[str, Spread]:
    """Per phase: tau from the offsets of systems in multi-system groups, sigma from the
    leave-one-run-out errors of single-system models (see module doc)."""
    offsets: dict[str, list[float]] = {}
    dof: dict[str, int] = {}
    within: dict[str, list[float]] = {}
    tails: dict[str, list[float]] = {}
    for plan in plans:
        phase = plan.key[2]
        offsets.setdefault(phase, [])
        within.setdefault(phase, [])
        tails.setdefault(phase, [])
        est = plan.estimator
        if est is None or plan.rows is None:
            continue
        if plan.key[5] == "" and len(plan.systems) >= 2:
            rows = plan.rows[plan.rows["system"] != ""]
            k = 0
            for _, sys_rows in rows.groupby("system"):
                r = _log_ratios(sys_rows, est)
                if len(r):
                    offsets[phase].append(float(np.mean(r)))
                    k += 1
            dof[phase] = dof.get(phase, 0) + max(k - 1, 0)
        elif plan.basis == "own" and len(plan.systems) <= 1:
            errors = [math.log1p(e) for e in est.cv_errors_ if math.isfinite(e) and e > -1]
            if not est.thin_ and est.cv_kind_ == "leave-one-run-out":
                within[phase] += errors
            elif est.cv_kind_ == "tail-holdout":
                tails[phase] += errors
    out = {}
    for phase in offsets:
        n_dof, r = dof.get(phase, 0), np.asarray(offsets[phase])
        tau_fit = n_dof >= MIN_SPREAD_SAMPLES - 1 and len(r) >= MIN_SPREAD_SAMPLES
        sigma, sigma_source = DEFAULT_SIGMA, "default"
        for source, errors in (("fit", within[phase]), ("tail", tails[phase])):
            if len(errors) >= MIN_SPREAD_SAMPLES:
                w = np.asarray(errors)
                sigma, sigma_source = max(float(np.sqrt(np.mean(w**2))), 1e-4), source
                break
        out[phase] = Spread(
            tau=float(np.sqrt(np.sum(r**2) / n_dof)) if tau_fit else DEFAULT_TAU,
            sigma=sigma, tau_source="fit" if tau_fit else "default", sigma_source=sigma_source,
        )
    return out


def _scale(plan: Planned, pooled: Planned, spread: Spread) -> None:
    """Make ``plan`` the pooled model's shape at the system's shrunk level (module doc)."""
    assert pooled.estimator is not None and plan.rows is not None
    r = _log_ratios(plan.rows, pooled.estimator)
    if not len(r):
        plan.error = "the pooled model forecasts no positive time for this system's runs"
        return
    n = len(r)
    tau2, sigma2 = spread.tau**2, spread.sigma**2
    precision = n / sigma2 + 1 / tau2
    offset = float(np.sum(r) / sigma2 / precision)
    finals = _finals(plan.rows)
    res = float(plan.rows["clock_resolution_s"].max())
    q = res / max(float(finals["seconds"].median()), 1e-9) / math.sqrt(n)
    half = _half(1 / precision + sigma2 + q**2)
    plan.estimator = pooled.estimator.scaled(
        math.exp(offset), runs=plan.runs, points=plan.points, half_width=half,
        source="prior" if spread.tau_source == "fit" else "default")
    plan.estimator.resolution_s_, plan.estimator.resolution_rel_ = res, q
    plan.prior = {
        **spread.as_dict(q),
        "offset": float(np.mean(r)),
        "shrunk_offset": offset,
        "weight": float(n / sigma2 / precision),
        "pooled_systems": len(pooled.systems),
        "pooled_model_runs": pooled.runs,
    }
