"""One forecaster: every route proposes candidate answers; backtested evidence picks one.

Rules (the CLI, the served model and the report decide the same way, here):

0. **A job by its name**: a request that names a job (``--job``/``--system``) takes what it
   leaves open from the job's newest run, and says so (``jobcast.service.job_history``).
   Its framework, where not asked, is resolved once (``jobcast.service.framework_choice``:
   the stack, the job's history, the network's source, else PyTorch); the assumptions say
   which and why.
1. **Ask**: the request is resolved once (:class:`jobcast.service.candidates.Ask`): target
   (the whole job by default), deployment key and the stored keys that match it (exact, else
   the GPU family's), asked variant, named system.
2. **Propose**: the registered routes (``jobcast.service.route_registry``), in order
   (rates, whole-job history of a recurring job, end-to-end models, hybrid, layerwise),
   each give zero or more candidates with their relation to the request. A costly route
   (one that prices layers) is skipped when none of its kinds can be expected to beat the
   best candidate so far (the selector's lowest expected error for those kinds), so a job
   with a system's own history never waits for the layerwise forecast; ``exhaustive`` (the
   backtest) asks every route. A forecaster without any history (no store, models, run
   summaries or progress points) builds only the routes that need none
   (``route_registry.history_routes()``): the others would propose and miss nothing, and
   this way its forecast loads neither pandas nor SQLAlchemy (``jobcast predict`` gives it
   no store where ``ingest.store_probe`` finds the store holds no history).
3. **Judge**: the backtest selector (``models.selector``: fitted by ``jobcast fit`` on this
   store's own backtest, the shipped prior filling what the store cannot tell) gives each
   candidate its expected error and 90 % interval. A candidate that carries
   :data:`MIN_OWN_ERRORS` or more errors of its own backtest (a recurring job forecast from
   its earlier runs, ``models.whole_job.backtest``) is judged by them: its interval from
   their quantiles, its expected error theirs shrunk toward the selector's
   (``SelectorCells.with_own``), and the answer quotes them. A candidate no cell judges (no
   selector at all) ranks by its kind's fallback error
   (:func:`jobcast.service.route_registry.fallback_errors`) with its own interval; the
   shipped prior's catch-all cell judges a kind it has never seen by the mean error over
   every kind, so a new route's fallback rank counts only until a backtest has seen it.
4. **Choose**: the candidate of lowest expected error (ties: the kinds' fallback rank, then
   the route's). The answer is that candidate's forecast with the selector's interval, and
   says why (``chosen``: the candidate's reason and its backtest figure) and what else there
   was (``candidates``). Where the candidate sits at an end of its kind's backtest interval
   (that kind's backtest forecasts nearly all ran high, or all low: within
   :data:`EDGE_SHARE` of the interval's log width of an end), that end is the candidate's
   own, so the point is never an end of its interval (a warning says so); the point is not
   moved: such a cell is often another question's bias (the shipped prior's multi-GPU
   layerwise cell is MLPerf's fp16 runs asked without a precision). An answer from history
   from the named system's own runs of the asked length is never narrower than the spread
   of those runs (``spread_floor``: the normal 90 % band of their seconds per iteration and
   sample), so a cell learnt on steadier jobs cannot make a noisier job's interval too
   narrow (pooled runs, or runs of other lengths, spread for reasons their kind's backtest
   cell has measured: a floor there stacked on the cell and over-covered). A candidate
   judged by its own backtest and scaled to another length (relation ``lengths``
   ``varied``) keeps its own interval's ends where they are wider: its backtest speaks to
   the job at the length it ran.
5. **Compose**: a whole job is one answer phase by phase (``jobcast.service.job_answer``):
   the evaluations a request gives are chosen among the test-phase candidates (rules 1-4),
   whatever answered the training; every answer carries a ``summary`` (step, epoch, job).
6. **Will it fit?** A training job whose per-GPU memory estimate
   (``jobcast.service.feasibility``, for every network source) exceeds the GPU's memory by
   more than the estimate's own measured error (``feasibility.may_not_fit``: within it, the
   answer stands with a "may not fit" warning) is refused with the estimate,
   the GPU's memory and the largest batch that fits, unless the history behind the answer
   ran that batch size on that hardware (then the answer stands, with a warning: history
   outranks the estimate). The estimate is in ``memory`` (``fits``) where one exists. Callers
   that forecast jobs known to run (ETA, ``check``) or rank deployments (``compare``) ask
   with ``refuse_unfit=False``: answered, marked ``fits: false``.

Every request gets an :class:`Outcome`: a :class:`Forecast`, or a :class:`ForecastFailure`
that says why no route could answer.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from fleet.deprecation import renamed_attributes
from fleet.errors import ErrorInfo, JobcastError
from fleet.framework import parse_framework_choice
from jobcast.service.candidates import (
    Ask,
    Candidate,
    Proposer,
    fallback_error,
    target_columns,
)
from jobcast.service.e2e_route import EndToEndRoute
from jobcast.service.feasibility import band_warning, may_not_fit, request_verdict
from jobcast.service.forecast import NO_FORECAST, Forecast, ForecastFailure, Outcome, percent_text
from jobcast.service.framework_choice import resolve_framework
from jobcast.service.job_answer import (
    as_trained,
    compose_job,
    evaluations_asked,
    ran_this_batch,
    summary,
    unused_flags,
)
from jobcast.service.request import JobRequest
from jobcast.service.route_registry import (
    RouteSpec,
    fallback_errors,
    history_routes,
    kinds,
    prices_network,
    register_route,
    route_names,
    route_specs,
)
from jobcast.service.routes import LayerwiseRoute, ScaleCalibratedRoute
from models.relation import (
    Judgement,
    Relation,
    SelectorCells,
    cell_words,
    lengths_bucket,
    load_prior,
)

if TYPE_CHECKING:  # pandas and the store's SQL layer load with the first history read
    import pandas as pd

    from ingest.store import Store
    from models.fitted import FittedModel
    from models.scale_calibration import ScaleCalibrator
    from models.selector import BacktestSelector

# The normal quantile of the 90 % band an answer's own runs' spread sets as its floor (rule 4)
SPREAD_Z = 1.645
# A candidate within this share of its interval's log width of one end is moved (rule 4)
EDGE_SHARE = 0.05
# A candidate with at least this many errors of its own backtest is judged by them (rule 3)
MIN_OWN_ERRORS = 3
WILL_NOT_FIT = "will_not_fit"  # the ErrorInfo kind of a job refused by its memory estimate
SELECTOR_ARTIFACT = "selector"
HISTORY_ARTIFACT = "history"


def _rates(fc: Forecaster) -> Proposer:
    from jobcast.service.rates import RateRoute
    return RateRoute(fc.history)


def _whole_job(fc: Forecaster) -> Proposer:
    from jobcast.service.whole_job_route import WholeJobRoute
    return WholeJobRoute(fc.job_runs)


def _end_to_end(fc: Forecaster) -> Proposer:
    return fc.end_to_end


def _hybrid(fc: Forecaster) -> Proposer:
    from jobcast.service.hybrid import HybridRoute
    return HybridRoute(fc.layerwise.layerwise, fc.end_to_end, fc.store, points=fc.points)


def _layerwise(fc: Forecaster) -> Proposer:
    return fc.layerwise


# The built-in routes, in proposing order (jobcast.service.route_registry: kinds with their
# fallback ranks, and flags). Each builder imports its route module when the forecaster first
# builds its routes, so a forecaster without history loads neither pandas nor SQLAlchemy.
# Fallback ranks: history at another batch size than asked ranks below the hybrid and the
# calibrated layerwise answers that know how time scales with the batch
# (docs/batch-hybrid.md; candidates.OFF_BATCH_ERROR).
BUILT_IN_ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("rate", _rates, {"own-rate": 0.01, "own-median": 0.0105, "own-recent": 0.0105,
                               "own-line": 0.0105, "own-trend": 0.011, "fleet-rate": 0.04},
              needs_history=True, answers_from_history=True,
              history_kinds=("own-rate", "own-median", "own-recent", "own-line", "own-trend",
                             "fleet-rate")),
    RouteSpec("whole-job", _whole_job, {"whole-job": 0.03}, needs_history=True,
              answers_from_history=True, history_kinds=("whole-job",)),
    RouteSpec("end-to-end", _end_to_end,
              {"own-model": 0.012, "pooled-model": 0.05, "scaled-count": 0.15},
              needs_history=True, answers_from_history=True,
              history_kinds=("own-model", "pooled-model")),
    RouteSpec("hybrid", _hybrid, {"hybrid": 0.12}, needs_history=True),
    RouteSpec("layerwise", _layerwise, {"layerwise-calibrated": 0.2, "layerwise": 0.3},
              prices_network=True),
)
for _spec in BUILT_IN_ROUTES:
    if _spec.name not in route_names():  # a module reload registers nothing twice
        register_route(_spec)


# ``ROUTES`` and ``HISTORY_ROUTES``: deprecated views of the route registry, read live:
# ``ROUTES`` as ``(name, build, needs_history)`` in proposing order, ``HISTORY_ROUTES`` the
# names of the routes that need history.
__getattr__ = renamed_attributes(__name__, {
    "ROUTES": ("jobcast.service.route_registry.route_specs()",
               lambda: [(s.name, s.build, s.needs_history) for s in route_specs()]),
    "HISTORY_ROUTES": ("jobcast.service.route_registry.history_routes()", history_routes),
})


class Forecaster:
    """Routes each request (see the module rules).

    The end-to-end models, run summaries and selector come from ``store`` (read on first use)
    or are given (``models``, ``history``, ``selector``: e.g. a snapshot packaged with an
    MLflow model, or a backtest fold). ``layer_predictor`` defaults to the shipped layerwise
    predictor; ``calibration`` is a fitted :class:`ScaleCalibrator` (or None). ``points``: the
    progress points the hybrid reads history from when there is no store (a backtest fold).
    ``prior``: combine the own selector with the shipped prior (False: the own selector
    alone, as a backtest asking every route needs none; a :class:`BacktestSelector`: that
    one as the prior, as a benchmark that keeps its held-out data out of the prior needs).
    """

    def __init__(
        self,
        store: Store | None = None,
        layer_predictor: Any = None,
        models: list[FittedModel] | None = None,
        calibration: ScaleCalibrator | None = None,
        history: pd.DataFrame | None = None,
        selector: BacktestSelector | None = None,
        points: pd.DataFrame | None = None,
        prior: bool | BacktestSelector = True,
    ):
        self.store = store
        self.prior = prior
        self.layer_predictor = layer_predictor
        self.calibration = calibration
        self.points = points
        self._models = models
        self._history = history
        self._own_selector = selector
        self._selector: SelectorCells | None = None
        self._keys: set[str] | None = None
        self._routes: list[Proposer] | None = None
        self._end_to_end: EndToEndRoute | None = None
        self._floors: dict[str, float] = {}
        self._job_runs: dict[str, list[Any]] = {}
        self.layerwise = ScaleCalibratedRoute(LayerwiseRoute(layer_predictor), calibration,
                                              explain=lambda ask: self.end_to_end.miss_reason(ask))

    # -- parts, read on first use ---------------------------------------------------

    @property
    def has_history(self) -> bool:
        """Whether any history may be at hand: a store, or models, run summaries or progress
        points given (see ``route_registry.history_routes()``)."""
        return (self.store is not None or bool(self._models) or self.points is not None
                or (self._history is not None and len(self._history) > 0))

    @property
    def models(self) -> list[FittedModel]:
        """The end-to-end models: given, else the store's (read once), else none."""
        if self._models is None:
            if self.store is not None:
                from models.e2e import load_models
                self._models = load_models(self.store)
            else:
                self._models = []
        return self._models

    @property
    def history(self) -> pd.DataFrame:
        """The run summaries: the fit's artifact, else summarised from the store now."""
        if self._history is None:
            from models.history import from_records, run_table
            records = self.store.load_artifact(HISTORY_ARTIFACT) if self.store else None
            if records is not None:
                self._history = from_records(cast("list[dict[str, Any]]", records))
            elif self.store is not None:
                self._history = run_table(self.store)
            else:
                self._history = from_records(None)
        return self._history

    @property
    def selector(self) -> SelectorCells | None:
        """The own selector (given, else the store's fit) combined with the prior (either
        alone where the other is missing)."""
        if self._selector is None:
            prior = (self.prior if isinstance(self.prior, SelectorCells)
                     else load_prior() if self.prior else None)
            own: SelectorCells | None = self._own_selector
            if own is None and self.store is not None:
                saved = self.store.load_artifact(SELECTOR_ARTIFACT)
                if saved:  # judged by the light half: no scikit-learn (models.relation)
                    own = SelectorCells.from_dict(cast("dict[str, Any]", saved))
            self._selector = own.combine(prior) if own is not None else prior
        return self._selector

    @property
    def end_to_end(self) -> EndToEndRoute:
        """The end-to-end route over the models and run summaries (built once)."""
        if self._end_to_end is None:
            self._end_to_end = EndToEndRoute(self.models,
                                             self.history if self.has_history else None)
        return self._end_to_end

    @property
    def routes(self) -> list[Proposer]:
        """The registry's routes (``route_registry.route_specs()``), less those that need
        history where there is none."""
        if self._routes is None:
            self._routes = [spec.build(self) for spec in route_specs()
                            if self.has_history or not spec.needs_history]
        return self._routes

    def stored_keys(self) -> set[str]:
        """The deployment keys history holds (models and run summaries; read once)."""
        if self._keys is None:
            self._keys = {m.deployment for m in self.models}
            if self.has_history and len(self.history):
                self._keys |= set(self.history["deployment"])
        return self._keys

    # -- forecasting ------------------------------------------------------------------

    def judge(self, cand: Candidate) -> Judgement:
        """The selector's judgement of a candidate, else the fallback rank with the
        candidate's own interval."""
        found = self.selector.judge(cand.relation) if self.selector else None
        if len(cand.own_errors) >= MIN_OWN_ERRORS:
            cells = self.selector if self.selector is not None else SelectorCells()
            return cells.with_own(found, cand.own_errors, cand.own_cell)
        if found is not None:
            return found
        f = cand.forecast
        return Judgement(fallback_error(cand.relation), f.low / f.seconds,
                         f.high / f.seconds, "fallback", 0)

    def _floor(self, kind: str) -> float:
        """The lowest expected error any candidate of ``kind`` could get."""
        if kind not in self._floors:
            best = fallback_errors().get(kind, 1.0)
            if self.selector is not None:
                for name, cells in self.selector.cells_.items():
                    if name.startswith("kind"):
                        best = min([best] + [c[1] for k, c in cells.items()
                                             if k.startswith(f"kind={kind}|")
                                             or k == f"kind={kind}"])
            self._floors[kind] = best
        return self._floors[kind]

    def candidates(self, req: JobRequest, exhaustive: bool = False, now: float | None = None
                   ) -> tuple[Ask, list[tuple[Candidate, Judgement]], list[JobcastError]]:
        """The ask, every candidate proposed with its judgement, and the errors of the routes
        that missed; ``now`` (unix s, default the clock) ages the history (a backtest's
        target start)."""
        ask = Ask.of(req, self.stored_keys(), now)
        judged: list[tuple[Candidate, Judgement]] = []
        misses: list[JobcastError] = []
        for route in self.routes:
            if not exhaustive and judged and route.costly:
                best = min(j.expected for _, j in judged)
                if all(self._floor(k) > best for k in route.kinds):
                    continue
            try:
                found = route.propose(ask)
            except JobcastError as exc:  # a miss; anything else is a bug and propagates
                misses.append(exc)
                continue
            found = [self._with_lengths(c, ask) for c in found if _finite(c.forecast)]
            judged += [(c, self.judge(c)) for c in found]
        return ask, judged, misses

    def _runs_behind(self, cand: Candidate) -> pd.DataFrame | None:
        """The run summaries of the runs behind ``cand`` (None: it names none, or there is
        no history)."""
        if not cand.runs or not self.has_history or not len(self.history):
            return None
        return self.history[self.history["run_id"].isin(cand.runs)]

    def _with_lengths(self, cand: Candidate, ask: Ask) -> Candidate:
        """The candidate with its ``lengths`` relation: whether the runs behind it and the
        asked job differ in training iterations (``models.relation.lengths_bucket``, from the
        run summaries; the asked steps count for a job or its training)."""
        rows = self._runs_behind(cand)
        if rows is None:
            return cand
        asked = [ask.iterations] if ask.target != "test" and ask.iterations else []
        found = lengths_bucket([*rows["train_iterations"].tolist(), *asked])
        return cand if found == cand.relation.lengths else replace(
            cand, relation=replace(cand.relation, lengths=found))

    def forecast(self, req: JobRequest, now: float | None = None,
                 refuse_unfit: bool = True) -> Outcome:
        """A :class:`Forecast`, or a :class:`ForecastFailure` with the reason; ``now`` (unix
        s, default the clock) is when it is asked (a benchmark replaying history sets it);
        ``refuse_unfit=False`` answers a job that will not fit too, marked ``fits: false``
        (a table that ranks several deployments shows it rather than drop it; rule 6)."""
        try:
            asked = req
            req, taken = self.from_job_history(req)
            whole_only = self._whole_job_only(req)
            req, framework = resolve_framework(req, self.history_stacks(req),
                                               read_network=not whole_only)
            req, assumed = req.with_defaults(length_needed=not whole_only)
            assumed = taken + assumed
            req.validate(batch_needed=not whole_only)
            chosen = replace(self._choose(req, now), job=req)  # a route may answer a phase
            if isinstance(chosen, ForecastFailure):
                return chosen
            found = chosen
            if req.phase == "job":
                evals = (self._choose(replace(req, phase="test"), now)
                         if evaluations_asked(req) else None)
                found = compose_job(found, evals)
            memory = (request_verdict(as_trained(req, found)) if req.phase in ("job", "train")
                      else None)
            if memory is not None and not memory.fits:
                ran = ran_this_batch(found)
                if refuse_unfit and not ran and not may_not_fit(memory):
                    text = f"will not fit: {memory.summary()}"
                    return ForecastFailure(req, text, ErrorInfo(WILL_NOT_FIT, text))
                note = (f"{memory.summary()}; but the history behind this answer ran this "
                        "batch size" if ran else band_warning(memory) if may_not_fit(memory)
                        else f"{memory.summary()}; answered anyway, marked fits: false")
                found = found.with_details(warnings=[*found.details.get("warnings", []),
                                                     note])
            if prices_network(found.details, str(found.route)) or parse_framework_choice(
                    asked.framework) is not None:  # it matters to an answer that prices it
                assumed = [*assumed, framework]
            notes = assumed + unused_flags(found, asked)
            return found.with_details(summary=summary(found, memory), assumptions=notes,
                                      memory=memory.as_dict() if memory else None)
        except (JobcastError, OSError) as exc:
            return _failure(req, exc)

    def job_runs(self, key: str) -> list[Any]:
        """The store's whole-job runs of one recurring job (none without a store): the newest
        that its answer reads a deployment (the model's fit, its own backtest), with the
        counts of all (``ingest.whole_job.RecentRuns``)."""
        if self.store is None:
            return []
        from ingest.whole_job import normal_key, whole_job_runs
        from jobcast.service.whole_job_route import OWN_HISTORY, OWN_ORIGINS
        from models.whole_job import MAX_RUNS
        name = normal_key(key)
        if name not in self._job_runs:
            self._job_runs[name] = whole_job_runs(
                self.store, key, traces=False, newest=max(MAX_RUNS, OWN_ORIGINS + OWN_HISTORY))
        return self._job_runs[name]

    def from_job_history(self, req: JobRequest) -> tuple[JobRequest, list[str]]:
        """A request that names a job, completed from the job's history
        (:func:`jobcast.service.job_history.complete_from_history`), with notes saying so;
        a request that names none is returned as it is (that module and the whole-job index
        it reads load only for a named job)."""
        if not req.system:
            if req.gpus is not None:
                from jobcast.service.job_history import JobHistoryError
                raise JobHistoryError("--gpus needs --job (the job whose GPU it counts)",
                                      field="gpus")
            return req, []
        from jobcast.service.job_history import complete_from_history
        history = self.history if self.has_history else None
        return complete_from_history(req, history, self.job_runs(req.system), req.gpus)

    def history_stacks(self, req: JobRequest) -> list[str]:
        """The stacks of the named job's runs (``system``), else of the network's, newest
        first (none without history): what ``framework_choice`` reads a framework from."""
        if not self.has_history or not len(self.history):
            return []
        from ingest.whole_job import normal_key

        runs = self.history
        if req.system:  # the job as job_history matches it
            mine = runs[runs["system"].map(normal_key) == normal_key(req.system)]
        else:
            mine = runs[runs["network"].astype(str) == str(req.network)]
        mine = mine.sort_values("start_time", ascending=False, na_position="last")
        return [str(s) for s in mine["stack"].tolist() if isinstance(s, str) and s]

    def _whole_job_only(self, req: JobRequest) -> bool:
        """Whether ``req`` is a whole job of a named job whose history has no batch size
        (a scheduler's): the whole-job route answers it without one."""
        if req.phase != "job" or not req.system or not self.job_runs(req.system):
            return False
        return req.batch_size is None or (req.iterations is None and req.epochs is None)

    def _choose(self, req: JobRequest, now: float | None) -> Outcome:
        """The chosen candidate's answer to ``req`` (rules 1-4), or why there is none."""
        try:
            ask, judged, misses = self.candidates(req, now=now)
        except (JobcastError, OSError) as exc:
            return _failure(req, exc)
        if not judged:
            text = self._no_answer(ask, misses)
            return ForecastFailure(req, text, _miss_info(text, misses))
        order = {k: i for i, k in enumerate(kinds())}
        cand, judgement = min(
            enumerate(judged),
            key=lambda t: (t[1][1].expected, order.get(t[1][0].kind, 99), t[0]))[1]
        return self._answer(cand, judgement, judged)

    def _answer(self, cand: Candidate, j: Judgement,
                judged: list[tuple[Candidate, Judgement]]) -> Forecast:
        """The chosen candidate's forecast with the selector's interval, why it was chosen
        (``chosen``: its reason and its backtest figure, as clauses) and the others."""
        f = cand.forecast
        backtest = (f"backtest: {percent_text(j.expected_percent())} % mean error over {j.n} "
                    f"forecasts of its kind ({cell_words(j.cell)})" if j.n else
                    "no backtest of its kind yet: ranked by kind, own interval")
        chosen = (cand.reason, backtest)
        others = [{"kind": c.kind, "model": c.forecast.model, "seconds": c.forecast.seconds,
                   "expected_error_percent": jj.expected_percent(), "reason": c.reason,
                   "relation": c.relation.as_dict()} for c, jj in judged]
        details = {**f.details, "chosen": "; ".join(chosen), "why": cand.reason,
                   "candidate": cand.kind,
                   "backtest": {"expected_error_percent": j.expected_percent(),
                                "forecasts": j.n, "cell": j.cell},
                   "relation": cand.relation.as_dict(), "candidates": others}
        floor = math.exp(self._spread_floor(cand))
        low = min(f.seconds * j.low_factor, f.seconds / floor)
        high = max(f.seconds * j.high_factor, f.seconds * floor)
        if cand.own_errors and cand.relation.lengths == "varied":
            low, high = min(low, f.low), max(high, f.high)  # own backtest: at its own length
        if _lopsided(j):  # the side the backtest cannot speak to: the candidate's own
            ran_low = j.low_factor * j.high_factor > 1  # the point near the low end
            low, high = (min(low, f.low), high) if ran_low else (low, max(high, f.high))
            details["warnings"] = [*details.get("warnings", []), (
                f"the backtest forecasts of its kind ({j.n}) nearly all ran "
                f"{'low' if ran_low else 'high'}: the interval's "
                f"{'lower' if ran_low else 'upper'} end is the candidate's own")]
        return replace(f, low=low, high=high, details=details, why=cand.reason, chosen=chosen)

    def _spread_floor(self, cand: Candidate) -> float:
        """The log half-width an answer from history is never narrower than (rule 4):
        :func:`spread_floor` of the runs behind it (read only where it can set one)."""
        rel = cand.relation
        return spread_floor(self._runs_behind(cand) if floors(rel) else None, rel)

    def _no_answer(self, ask: Ask, misses: list[JobcastError]) -> str:
        """Why nothing answered: the routes' own reasons, else what the history holds."""
        if reasons := [str(m) for m in misses if str(m)]:
            return "; ".join(dict.fromkeys(reasons))
        req = ask.req
        where = req.deployment or req.device or "no deployment or device"
        known = sorted({f"{m.network} @ {m.deployment}" for m in self.models})[:8]
        return (f"no history of network {req.network!r} on {where}"
                + (f" (history has: {', '.join(known)})" if known else "")
                + "; and no layerwise forecast of it")


def floors(rel: Relation) -> bool:
    """Whether the runs behind an answer of relation ``rel`` set a spread floor: the asked
    system's own runs of the asked length (:func:`spread_floor`)."""
    return rel.system == "own" and rel.lengths == "same"


def spread_floor(rows: pd.DataFrame | None, rel: Relation) -> float:
    """The normal 90 % band of the spread between the runs behind an answer, ``1.645 sd
    sqrt(1 + 1/n)`` of their log seconds per iteration and sample for the target (wall for a
    job), n >= 2, for the asked system's own runs of the asked length (relation ``system``
    ``own``, ``lengths`` ``same``); 0 otherwise. Runs of other lengths spread by their length,
    not by chance (a line through them answers), and runs pooled over systems spread by
    system, which their kind's backtest cell has measured."""
    if rows is None or len(rows) < 2 or not floors(rel):
        return 0.0
    import numpy as np
    secs, its = target_columns(rel.target)
    per = rows[secs].to_numpy(float) / (rows[its].to_numpy(float)
                                        * rows["batch_size"].clip(lower=1).to_numpy(float))
    per = per[np.isfinite(per) & (per > 0)]
    if len(per) < 2:
        return 0.0
    return SPREAD_Z * float(np.std(np.log(per), ddof=1)) * math.sqrt(1 + 1 / len(per))

def _lopsided(j: Judgement) -> bool:
    """Whether the candidate sits at an end of its kind's backtest interval: within
    :data:`EDGE_SHARE` of its log width of one end (or outside it)."""
    lo, hi = math.log(j.low_factor), math.log(j.high_factor)
    width = hi - lo
    return width > 0 and min(-lo, hi) < EDGE_SHARE * width


def _miss_info(text: str, misses: list[JobcastError]) -> ErrorInfo | None:
    """The error object of a request no route answered: the kind of the first miss that
    says more than "no forecast" (an unknown GPU or network, a bad spec), with the whole
    reason ``text``; None (kind ``no_forecast``) when no miss says more."""
    for miss in misses:
        info = miss.info()
        if info.kind != NO_FORECAST:
            return replace(info, message=text)
    return None


def _failure(req: JobRequest, exc: JobcastError | OSError) -> ForecastFailure:
    """A request that cannot be answered, with its reason as text and as an error object (a
    file that cannot be read, e.g. a network spec: kind ``file``)."""
    if isinstance(exc, JobcastError):
        return ForecastFailure(req, str(exc), exc.info())
    where = getattr(exc, "filename", None)
    return ForecastFailure(req, str(exc), ErrorInfo(
        "file", str(exc), file=None if where is None else str(where)))


def _finite(f: Forecast) -> bool:
    return all(math.isfinite(x) for x in (f.seconds, f.low, f.high)) and f.seconds > 0
