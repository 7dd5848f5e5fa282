"""One forecaster: every route proposes candidate answers; backtested evidence picks one.

Rules (the CLI, the served model and the report decide the same way, here):

0. **A job by its name**: a request that names a job (``--job``/``--system``) takes what it
   leaves open from the job's newest run, and says so (``jobcast.service.engine.job_history``).
   Its framework, where not asked, is resolved once (``jobcast.service.engine.framework_choice``:
   the stack, the job's history, the network's source, else PyTorch); the assumptions say
   which and why.
1. **Ask**: the request is resolved once (:class:`jobcast.service.engine.candidates.Ask`): target
   (the whole job by default), deployment key and the stored keys that match it (exact, else
   the GPU family's), asked variant, named system.
2. **Propose**: the registered routes (``jobcast.service.engine.route_registry``), in order
   (rates, whole-job history of a recurring job, end-to-end models, hybrid, layerwise),
   each give zero or more candidates with their relation to the request. A costly route
   (one that prices layers) is skipped when none of its kinds can be expected to beat the
   best candidate so far (``choice.Chooser.worth_asking``), so a job
   with a system's own history never waits for the layerwise forecast; ``exhaustive`` (the
   backtest) asks every route. A forecaster without any history (no store, models, run
   summaries or progress points) builds only the routes that need none
   (``route_registry.history_routes()``): the others would propose and miss nothing, and
   this way its forecast loads neither pandas nor SQLAlchemy (``jobcast predict`` gives it
   no store where ``ingest.store_probe`` finds the store holds no history).
3. **Judge** and 4. **Choose**, in one module (``jobcast.service.engine.choice``, whose rules
   these are): each candidate is judged by the backtest selector (``models.selector``; a
   recurring job's own backtest where it carries one), and the candidate of lowest expected
   error answers with the selector's interval (never narrower than its own runs' spread),
   saying why (``chosen``) and what else there was (``candidates``).
5. **Compose**: a whole job is one answer phase by phase (``jobcast.service.engine.job_answer``):
   the evaluations a request gives are chosen among the test-phase candidates (rules 1-4),
   whatever answered the training; every answer carries a ``summary`` (step, epoch, job).
6. **Will it fit?** A training job whose per-GPU memory estimate
   (``jobcast.service.engine.feasibility``, for every network source) exceeds the GPU's memory by
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
from jobcast.service.engine.candidates import Ask, Candidate, Proposer
from jobcast.service.engine.choice import Chooser, no_candidate
from jobcast.service.engine.e2e_route import EndToEndRoute
from jobcast.service.engine.feasibility import band_warning, may_not_fit, request_verdict
from jobcast.service.engine.forecast import Forecast, ForecastFailure, Outcome
from jobcast.service.engine.framework_choice import resolve_framework
from jobcast.service.engine.job_answer import (
    as_trained,
    compose_job,
    evaluations_asked,
    ran_this_batch,
    summary,
    unused_flags,
)
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import history_routes, prices_network, route_specs
from jobcast.service.engine.routes import LayerwiseRoute, ScaleCalibratedRoute
from models.relation import Judgement, SelectorCells, lengths_bucket, load_prior

if TYPE_CHECKING:  # pandas and the store's SQL layer load with the first history read
    import pandas as pd

    from ingest.store import Store
    from models.fitted import FittedModel
    from models.scale_calibration import ScaleCalibrator
    from models.selector import BacktestSelector

WILL_NOT_FIT = "will_not_fit"  # the ErrorInfo kind of a job refused by its memory estimate
SELECTOR_ARTIFACT = "selector"
HISTORY_ARTIFACT = "history"


# ``ROUTES`` and ``HISTORY_ROUTES``: deprecated views of the route registry, read live:
# ``ROUTES`` as ``(name, build, needs_history)`` in proposing order, ``HISTORY_ROUTES`` the
# names of the routes that need history.
__getattr__ = renamed_attributes(__name__, {
    "ROUTES": ("jobcast.service.engine.route_registry.route_specs()",
               lambda: [(s.name, s.build, s.needs_history) for s in route_specs()]),
    "HISTORY_ROUTES": ("jobcast.service.engine.route_registry.history_routes()", history_routes),
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
        self._chooser: Chooser | None = None
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
    def chooser(self) -> Chooser:
        """The choice over this forecaster's selector (``jobcast.service.engine.choice``; built
        once)."""
        if self._chooser is None:
            self._chooser = Chooser(self.selector)
        return self._chooser

    @property
    def end_to_end(self) -> EndToEndRoute:
        """The end-to-end route over the models and run summaries (built once)."""
        if self._end_to_end is None:
            self._end_to_end = EndToEndRoute(self.models,
                                             self.history if self.has_history else None)
        return self._end_to_end

    def rate_route(self) -> Proposer:
        """The rate route over the run summaries (its module loads on first use)."""
        from jobcast.service.engine.rates import RateRoute
        return RateRoute(self.history)

    def whole_job_route(self) -> Proposer:
        """The whole-job route over the store's runs of a recurring job."""
        from jobcast.service.engine.whole_job_route import WholeJobRoute
        return WholeJobRoute(self.job_runs)

    def hybrid_route(self) -> Proposer:
        """The hybrid route: the layerwise shape scaled by the end-to-end history."""
        from jobcast.service.engine.hybrid import HybridRoute
        return HybridRoute(self.layerwise.layerwise, self.end_to_end, self.store,
                           points=self.points)

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

    def candidates(self, req: JobRequest, exhaustive: bool = False, now: float | None = None
                   ) -> tuple[Ask, list[tuple[Candidate, Judgement]], list[JobcastError]]:
        """The ask, every candidate proposed with its judgement, and the errors of the routes
        that missed; ``now`` (unix s, default the clock) ages the history (a backtest's
        target start)."""
        ask = Ask.of(req, self.stored_keys(), now)
        judged: list[tuple[Candidate, Judgement]] = []
        misses: list[JobcastError] = []
        for route in self.routes:
            if not exhaustive and route.costly and not self.chooser.worth_asking(
                    route.kinds, judged):
                continue
            try:
                found = route.propose(ask)
            except JobcastError as exc:  # a miss; anything else is a bug and propagates
                misses.append(exc)
                continue
            found = [self._with_lengths(c, ask) for c in found if _finite(c.forecast)]
            judged += [(c, self.chooser.judge(c)) for c in found]
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
        from jobcast.service.engine.whole_job_route import OWN_HISTORY, OWN_ORIGINS
        from models.whole_job import MAX_RUNS
        name = normal_key(key)
        if name not in self._job_runs:
            self._job_runs[name] = whole_job_runs(
                self.store, key, traces=False, newest=max(MAX_RUNS, OWN_ORIGINS + OWN_HISTORY))
        return self._job_runs[name]

    def from_job_history(self, req: JobRequest) -> tuple[JobRequest, list[str]]:
        """A request that names a job, completed from the job's history
        (:func:`jobcast.service.engine.job_history.complete_from_history`), with notes saying so;
        a request that names none is returned as it is (that module and the whole-job index
        it reads load only for a named job)."""
        if not req.system:
            if req.gpus is not None:
                from jobcast.service.engine.job_history import JobHistoryError
                raise JobHistoryError("--gpus needs --job (the job whose GPU it counts)",
                                      field="gpus")
            return req, []
        from jobcast.service.engine.job_history import complete_from_history
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
            known = [f"{m.network} @ {m.deployment}" for m in self.models]
            return no_candidate(ask.req, misses, known)
        return self.chooser.answer(judged, self._runs_behind)




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
