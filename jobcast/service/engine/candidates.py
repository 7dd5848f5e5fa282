"""Candidate answers: what every route proposes for a request, and how it relates to it.

A route (``jobcast.service.engine.routes``, ``rates``, ``hybrid``) turns a request into zero or more
:class:`Candidate` answers; the forecaster (``jobcast.service.engine.forecaster``) asks every route
in the registry's order and keeps the candidate the backtest selector (``models.selector``)
expects to be nearest. A candidate is a :class:`~jobcast.service.engine.forecast.Forecast` of the
asked target plus its :class:`~models.relation.Relation` to the request, its own scale (90 %
log half-width) and a one-line reason.

Rules
-----
* **The ask** (:class:`Ask`, one per request): the target (``job``: the whole run, ``train`` or
  ``test``), the phase the phase models answer (``train`` for a job), the request's
  deployment as the store keys it and the stored keys that answer it (exact first, else the
  GPU family's: :func:`matching_keys`), the asked variant, the named system (whitespace
  collapsed; ``""`` for none) and the phase iterations.
* **Whole job** (target ``job``): a candidate's training forecast is scaled by the wall time
  per training second of the runs behind it (:func:`models.history.phase_shares`: evaluation
  and the gaps between phases), and its phases are set beside it (``details["phases"]``:
  ``train``, ``test``, ``gaps``, and ``init`` before the run where the logs state it).
  A candidate without runs behind it (layerwise) forecasts training only and says so. The
  evaluations a request gives (``eval_every`` and ``eval_size``) are priced once, after the
  choice, for every route alike (``jobcast.service.engine.job_answer``).
* Names: the candidate kinds and their fallback expected errors (the rank of a kind no
  backtest knows) come from the route registry (``jobcast.service.engine.route_registry``:
  ``kinds()``, ``fallback_errors()``, ``history_kinds()``; the old ``KINDS``,
  ``FALLBACK_ERROR`` and ``HISTORY_KINDS`` still read them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from fleet.deployment import Deployment, family_matches, member_of_family, normalise_deployment
from fleet.deprecation import renamed_attributes
from fleet.errors import JobcastError
from jobcast.service.engine.forecast import Forecast
from jobcast.service.engine.request import JobRequest, JobRequestError
from jobcast.service.engine.route_registry import fallback_errors, history_kinds, kinds
from models.job import JobPlan
from models.relation import Relation, age_bucket, devices_bucket
from models.variant import request_variant

if TYPE_CHECKING:
    import pandas as pd

OFF_BATCH_ERROR = 0.25  # history at another batch size than asked (its fallback rank)
def _live(read: Callable[[], Any]) -> Callable[[], Any]:
    """A registry view as the old constant held it (a set as a sorted tuple)."""
    return lambda: (tuple(sorted(found)) if isinstance(found := read(), frozenset) else found)


# ``KINDS``, ``FALLBACK_ERROR`` and ``HISTORY_KINDS``: deprecated names for the route registry's
# kinds(), fallback_errors() and history_kinds(), read live (a registered route is in them).
__getattr__ = renamed_attributes(__name__, {
    "KINDS": ("jobcast.service.engine.route_registry.kinds()", _live(kinds)),
    "FALLBACK_ERROR": ("jobcast.service.engine.route_registry.fallback_errors()",
                       _live(fallback_errors)),
    "HISTORY_KINDS": ("jobcast.service.engine.route_registry.history_kinds()",
                      _live(history_kinds)),
})


ONE_RUN_RATE_PENALTY = 0.02  # a rate read off a single run ranks below a model shrunk by evidence
UNKNOWN_KIND_ERROR = 1.0  # the fallback rank of a kind no registered route gives


def fallback_error(relation: Relation) -> float:
    """The fallback rank of a candidate: its kind's registered fallback error
    (:func:`jobcast.service.engine.route_registry.fallback_errors`), :data:`OFF_BATCH_ERROR` for a
    history kind at another batch size, a little more for a rate read off one run."""
    if relation.kind in history_kinds() and relation.batch == "other":
        return OFF_BATCH_ERROR
    extra = ONE_RUN_RATE_PENALTY if relation.kind.endswith("-rate") and relation.runs == "1" \
        else 0.0
    return fallback_errors().get(relation.kind, UNKNOWN_KIND_ERROR) + extra


@dataclass(frozen=True)
class Ask:
    """A request resolved once against the history (see the module rules)."""

    req: JobRequest
    target: str  # job | train | test
    phase: str  # the phase models answer: train (also for a job) or test
    deployment: str | None  # the request's deployment as a store key
    keys: tuple[tuple[str, str], ...]  # (stored key, how it matched), exact first
    variant: dict[str, str]
    system: str  # "" when none is named
    iterations: int | None  # steps of ``phase``
    now: float = 0.0  # when the forecast is made (unix s): ages the history

    @classmethod
    def of(cls, req: JobRequest, stored_keys: Iterable[str], now: float | None = None) -> Ask:
        """The request resolved against the stored deployment keys, asked at ``now`` (unix s,
        default the clock)."""
        target = req.phase
        phase = "test" if target == "test" else "train"
        deployment = normalise_deployment(req.deployment) if req.deployment else None
        keys = tuple(matching_keys(deployment, stored_keys)) if deployment else ()
        variant = request_variant(req.precision if req.states_precision() else None, req.tags)
        system = " ".join(req.system.split()) if req.system else ""
        return cls(req, target, phase, deployment, keys, variant, system, phase_steps(req),
                   time.time() if now is None else float(now))

    @property
    def devices(self) -> str:
        """The ``devices`` relation of the job (its deployment's GPUs; a device request: 1)."""
        if self.req.device or not self.req.deployment:
            return devices_bucket(1)
        try:
            return devices_bucket(Deployment.parse(self.req.deployment).count)
        except JobcastError:
            return devices_bucket(1)

    def age(self, newest: float | None) -> str:
        """The ``age`` relation of history whose newest run started at ``newest``."""
        return age_bucket(newest, self.now)

    @property
    def key_names(self) -> tuple[str, ...]:
        """The stored keys that answer the request, exact first."""
        return tuple(k for k, _ in self.keys)

    def how(self, key: str) -> str:
        """How ``key`` matched: ``exact`` or a family note."""
        return dict(self.keys).get(key, "exact")

    def gpu_relation(self, key: str, own: bool = False) -> str:
        """The ``gpu`` relation of history at ``key``: ``exact`` or ``family``. The named
        system's ``own`` history filed under the family of the GPU asked (a description that
        says "Tesla V100", asked as "Tesla V100-SXM2-16GB") is ``exact``: it ran on the GPU
        the user names, so every spelling gets one answer (issue 35)."""
        if self.how(key) == "exact":
            return "exact"
        if own and self.deployment:
            try:
                if member_of_family(Deployment.parse(self.deployment), Deployment.parse(key)):
                    return "exact"
            except JobcastError:  # a stored key that names no deployment
                pass
        return "family"


def matching_keys(asked: str, stored: Iterable[str]) -> list[tuple[str, str]]:
    """Stored deployment keys that answer ``asked``: exact, else its GPU family's members of
    the same count (:func:`fleet.deployment.family_matches`), with how each matched."""
    try:
        return [(m.key, m.how) for m in family_matches(asked, stored)]
    except JobcastError:
        return []


def job_plan(req: JobRequest) -> JobPlan:
    """The request as a plan (the one definition of the steps a job implies: ``JobPlan``)."""
    if req.batch_size is None:
        raise JobRequestError("batch_size is missing", field="batch_size")
    return JobPlan(network=req.network, deployment=req.deployment or "",
                   batch_size=req.batch_size, epochs=req.epochs, dataset_size=req.dataset_size,
                   eval_every=req.eval_every, eval_size=req.eval_size)


def phase_steps(req: JobRequest) -> int | None:
    """Steps of the asked phase: iterations, else the plan's training steps (also for a whole
    job), else its evaluation steps for ``test``; None when the request does not say."""
    if req.iterations is not None:
        return int(req.iterations)
    if not (req.epochs and req.dataset_size and req.batch_size):
        return None
    if req.phase == "test":
        return job_plan(req).test_iterations() if req.eval_every and req.eval_size else None
    return job_plan(req).train_iterations()


@dataclass(frozen=True)
class Candidate:
    """One proposed answer: the forecast, how it relates to the request, its own scale (90 %
    log half-width) and why it is what it is."""

    forecast: Forecast
    relation: Relation
    scale: float
    reason: str
    runs: tuple[int, ...] = field(default=(), repr=False)  # run ids behind it, for shares
    # signed log errors of the candidate's own rolling backtest (a recurring job forecast
    # from its earlier runs) and the name of that cell; judged with the selector's
    own_errors: tuple[float, ...] = field(default=(), repr=False)
    own_cell: str = ""

    @property
    def kind(self) -> str:
        """The candidate's kind (its relation's)."""
        return self.relation.kind


class Proposer(Protocol):
    """A route of the registry: ``propose`` answers zero or more candidates; ``kinds`` are
    the candidate kinds it can give; a ``costly`` route (one that prices layers) is skipped
    when none of its kinds can beat what the forecaster already has."""

    @property
    def name(self) -> str:
        """The value its forecasts carry as ``route``."""

    @property
    def kinds(self) -> tuple[str, ...]:
        """The candidate kinds it can give."""

    @property
    def costly(self) -> bool:
        """Whether it prices layers (skipped when it cannot win)."""

    def propose(self, ask: Ask) -> list[Candidate]:
        """Zero or more candidate answers to ``ask``; a :class:`fleet.errors.JobcastError`
        says why there is none (any other exception is a bug)."""


def target_columns(target: str) -> tuple[str, str]:
    """The run summaries' (seconds, iterations) columns of a target's rate: ``test`` its
    test phase; ``job`` the run's wall time per training iteration; else the training's."""
    if target == "test":
        return "test_seconds", "test_iterations"
    return ("wall_seconds" if target == "job" else "train_seconds"), "train_iterations"


def own_scale(seconds: float, low: float, high: float) -> float:
    """A forecast's own 90 % log half-width (the larger side)."""
    if not (seconds > 0 and low > 0 and high > 0):
        return math.nan
    return max(math.log(high / seconds), math.log(seconds / low))


def to_job(cand: Candidate, ask: Ask, runs: pd.DataFrame | None) -> Candidate:
    """A training candidate made a whole-job candidate (module rules); ``runs`` are the run
    summaries behind it (None or empty: none, as for a layerwise answer)."""
    f = cand.forecast
    train = f.seconds
    if runs is None or runs.empty:
        shares = {"init": math.nan}  # models.history.phase_shares of no runs: none stated
        evals, gaps = 0.0, 0.0
        note = "no runs behind this answer: training only, no evaluation or gaps"
    else:
        from models.history import phase_shares
        shares = phase_shares(runs)
        evals, gaps = train * shares["test"], train * shares["gaps"]
        note = f"evaluation and gaps as in its {len(runs)} runs"
    total = train + evals + gaps
    factor = total / train if train > 0 else 1.0
    details = {**f.details, **job_details(train, evals, gaps, shares["init"], total, note)}
    scaled = replace(f, seconds=total, low=f.low * factor, high=f.high * factor,
                     details=details)
    return replace(cand, forecast=scaled, relation=replace(cand.relation, target="job"))


def job_details(train: float, test: float, gaps: float, init: float, total: float,
                note: str) -> dict[str, Any]:
    """The whole-job details of a forecast of ``total`` seconds: its phases (``init``, the
    start-up before the run, where known), how they were found, and the wall with init."""
    phases: dict[str, Any] = {"train": train, "test": test, "gaps": gaps}
    if math.isfinite(init):
        phases["init"] = init
    return {"phases": phases, "whole_job": note,
            "wall_with_init": total + phases.get("init", 0.0)}


def newest_first(groups: Sequence[tuple[str, float]]) -> dict[str, str]:
    """``{group: "newest" | "older"}`` for (group, last run time) pairs."""
    if not groups:
        return {}
    newest = max(t for _, t in groups)
    return {g: ("newest" if t >= newest else "older") for g, t in groups}
