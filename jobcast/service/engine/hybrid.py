"""The hybrid route: time versus batch size from the layerwise forecast, level from history.

One or two batch sizes of history cannot tell per-step from per-sample cost; the layerwise
forecast of the same network on the same hardware knows how a step grows with the batch. The
hybrid takes that shape and calibrates it on the key's runs (docs/lab/batch-hybrid.md). Rules:

* **History** of the end-to-end model that answered (same network, deployment, phase, stack,
  variant, system): each run's seconds per step is the slope of its cumulative progress
  curve after its first point (warm-up left out), its one-off cost the curve's intercept
  (at least 0); per batch size the median over runs. Without a store, the fitted model's
  per-step time at the ends of its batch range stands in (and its constant).
* **Shape**: the layerwise step at batch B is O + V(B): O does not depend on the batch (the
  composition's per-step and per-kernel overhead, plus the gradient all-reduce of a
  data-parallel step), V(B) is the priced layers' sum. A training step prices the request's
  optimizer (``sgd`` when none), the test phase a forward pass. The shape is that of the
  framework the history ran (:func:`fleet.framework.stack_framework`: its stack's words;
  Caffe runs like the eager ``pytorch`` composition), the request's framework where the
  stack names none.
* **Scale** (:class:`~jobcast.service.engine.batch_shape.BatchShapeFit`): the history's ratio to
  the layerwise step,
  ln(history / (O + V(b))) at each observed batch size b, interpolated in ln batch between
  them and held at the nearest beyond them: step(B) = ratio(B) x (O + V(B)). One batch size
  gives one ratio; two or more let the history correct the shape between them and keep the
  nearest correction outside. Mode ``split`` (measured, not the default) fits a per-step and
  a per-sample scale instead, step = a O + c V(B), non-negative, on relative errors.
* **Interval** (90 %), symmetric in log time, half-width the root sum of squares of: the
  history's residual (between-run spread at one batch size, a t-quantile; at least
  :data:`HISTORY_FLOOR`), the split fit's residual, and the shape uncertainty, which grows
  with the distance to the nearest observed batch size: ``shape_rate x |ln(B / b)|``.
  ``shape_rate`` is the prior :data:`SHAPE_RATE_90`, or the fastest rate at which the
  history's own ratios drift between neighbouring batch sizes where that is larger.
* **When** (:meth:`HybridRoute.propose`): for each phase model the end-to-end route would
  propose whose runs lack the request's batch size (however many other batch sizes it has:
  between them the ratio interpolates the nearest two, where the end-to-end line fits all at
  once; leaving each CaffeNet batch size out, the hybrid was nearer at every one,
  docs/lab/batch-hybrid.md), where the network has a shipped spec (:func:`priced`: no
  TensorFlow at forecast time): one ``hybrid`` candidate with the model's relation (its
  system, stack, variant; batch ``other``). At most :data:`MAX_MODELS` models per request
  (own models first, then the newest pooled ones). Whether it answers is the selector's
  call (``models.selector``), like every candidate's. Evaluations a request gives are
  priced after the choice, as for every route (``jobcast.service.engine.job_answer``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from fleet.errors import JobcastError
from fleet.framework import stack_framework
from jobcast.service.engine.candidates import Ask, Candidate, own_scale, phase_steps, to_job
from jobcast.service.engine.e2e_route import EndToEndRoute, owned_by
from jobcast.service.engine.forecast import Forecast, ModelParts
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import END_TO_END, HYBRID, HYBRID_KIND, RegisteredRoute
from jobcast.service.engine.routes import LAYERWISE_MODEL, LayerwiseRoute, RouteMiss
from models.dataset import progress_points, stack_key
from models.e2e import FittedModel, forecast
from models.relation import Relation, runs_bucket

if TYPE_CHECKING:
    from ingest.store import Store
    from jobcast.service.engine.batch_shape import BatchShapeFit

MAX_MODELS = 4  # hybrid candidates per request


@dataclass(frozen=True)
class BatchObservation:
    """The history at one batch size: median seconds per step over ``runs`` runs."""

    batch_size: int
    step_seconds: float
    runs: int
    log_sd: float  # between-run standard deviation of ln(step seconds); nan for one run


@dataclass(frozen=True)
class History:
    """A key's history by batch size, its one-off seconds per run, and where it came from."""

    observations: tuple[BatchObservation, ...]
    const_seconds: float
    source: str  # "runs" (the store's progress points) or "model" (the fitted model)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes the history ran, in its order."""
        return tuple(o.batch_size for o in self.observations)


def priced(req: JobRequest) -> bool:
    """Whether the layerwise route prices the request's network without TensorFlow: a shipped
    zoo spec at its own image size (anything else would build a Keras model per process)."""
    from layerwise import zoo  # loaded with the first network to price

    name = zoo.lookup(req.network)
    return name is not None and req.image_size in (None, zoo.load(name).image_size)


def _run_rate(run: pd.DataFrame) -> tuple[float, float] | None:
    """(seconds per step, one-off seconds) of one run's cumulative curve (see module rules)."""
    run = run.sort_values("iterations")
    it, sec = run["iterations"].to_numpy(float), run["seconds"].to_numpy(float)
    if len(it) >= 2 and it[-1] > it[0] and sec[-1] > sec[0]:
        rate = (sec[-1] - sec[0]) / (it[-1] - it[0])
    else:
        rate = sec[-1] / it[-1] if it[-1] > 0 else math.nan
    if not (math.isfinite(rate) and rate > 0):
        return None
    return rate, max(0.0, float(sec[-1] - rate * it[-1]))


def history_from_points(points: pd.DataFrame) -> History | None:
    """The history of one key's progress points (rows of one network, deployment, phase,
    stack, ...); None when no run gives a positive rate."""
    per_batch: dict[int, list[float]] = {}
    consts: list[float] = []
    for _, run in points.groupby("run_id", sort=True):
        found = _run_rate(run)
        if found is None:
            continue
        per_batch.setdefault(int(run["batch_size"].iloc[0]), []).append(found[0])
        consts.append(found[1])
    if not per_batch:
        return None
    obs = tuple(
        BatchObservation(b, float(np.median(r)), len(r),
                         float(np.std(np.log(r), ddof=1)) if len(r) > 1 else math.nan)
        for b, r in sorted(per_batch.items()))
    return History(obs, float(np.median(consts)), "runs")


def history_from_model(model: FittedModel) -> History:
    """The fitted model's per-step seconds at the ends of its batch range (no store)."""
    est = model.estimator
    coef = dict(zip(est.terms_, (float(c) for c in est.coef_), strict=True))
    obs = []
    for b in sorted({int(round(v)) for v in est.batch_range_}):
        step = coef.get("iterations", 0.0) + coef.get("samples", 0.0) * b
        if step > 0 and math.isfinite(step):
            obs.append(BatchObservation(b, step, int(est.n_runs_), math.nan))
    return History(tuple(obs), max(0.0, coef.get("const", 0.0)), "model")


def __getattr__(name: str) -> Any:
    """``BatchShapeFit`` (old name ``BatchShapeCalibrator``) and its defaults
    (``jobcast.service.engine.batch_shape``), imported on first use: a forecast that never reaches
    the hybrid's fit loads no scikit-learn or SciPy."""
    if name in ("BatchShapeFit", "BatchShapeCalibrator", "MIN_SPLIT_SPAN", "SHAPE_RATE_90",
                "HISTORY_FLOOR"):
        from jobcast.service.engine import batch_shape
        return getattr(batch_shape, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _KeyStore:
    """The store's runs of one network and deployment, for ``progress_points``."""

    def __init__(self, store: Store, network: str, deployment: str):
        self.store, self.network, self.deployment = store, network, deployment

    def runs(self, network: str | None = None, deployment: str | None = None) -> list:
        return self.store.runs(network or self.network, deployment or self.deployment)

    def segments(self, run_ids: list[int] | None = None) -> list[dict]:
        return self.store.segments(run_ids)


def key_points(points: pd.DataFrame, model: FittedModel) -> pd.DataFrame:
    """The progress points of the model's key (its sources, phase, stack, variant, system)."""
    keys = points["_stack_key"] if "_stack_key" in points else points["stack"].map(stack_key)
    keep = (points["network"].eq(model.network) & points["deployment"].eq(model.deployment)
            & points["phase"].eq(model.phase) & keys.eq(stack_key(model.stack))
            & points["source"].isin(set(model.sources)))
    variant = getattr(model, "variant", None)
    if variant is not None and "variant" in points:
        keep &= points["variant"].eq(variant)
    system = getattr(model, "system", "")
    if system and "system" in points:
        keep &= points["system"].eq(system)
    return points[keep]


class HybridRoute(RegisteredRoute):
    """Layerwise shape x history scale, where history lacks the batch size (module rules)."""

    route = HYBRID

    def __init__(self, layerwise: LayerwiseRoute, end_to_end: EndToEndRoute,
                 store: Store | None = None, framework: str | None = None,
                 calibrator: BatchShapeFit | None = None,
                 points: pd.DataFrame | None = None):
        """``framework`` fixes the shape's framework (None: its stack's, `stack_framework`);
        ``calibrator`` is the unfitted estimator to clone per forecast (default settings);
        ``points``: progress points to read history from instead of ``store``."""
        self.layerwise = layerwise
        self.end_to_end = end_to_end
        self.store = store
        self.points = points
        self.framework = framework
        self.calibrator = calibrator
        self._points: dict[tuple[str, str], pd.DataFrame] = {}
        self._histories: dict[str, History] = {}

    def history(self, model: FittedModel) -> History:
        """The model key's history: from the given points or the store's runs, else from the
        model itself (read once per model)."""
        if model.model_id not in self._histories:
            self._histories[model.model_id] = self._history(model)
        return self._histories[model.model_id]

    def _history(self, model: FittedModel) -> History:
        if self.points is not None:
            where = (model.network, model.deployment)
            if where not in self._points:
                sub = self.points[(self.points["network"] == model.network)
                                  & (self.points["deployment"] == model.deployment)]
                self._points[where] = sub.assign(_stack_key=sub["stack"].map(stack_key))
            found = history_from_points(key_points(self._points[where], model))
            if found is not None:
                return found
        elif self.store is not None:
            where = (model.network, model.deployment)
            if where not in self._points:
                # a store that reads one key's runs (the duck type progress_points reads)
                self._points[where] = progress_points(cast("Store", _KeyStore(self.store,
                                                                               *where)))
            found = history_from_points(key_points(self._points[where], model))
            if found is not None:
                return found
        return history_from_model(model)

    costly = True

    def propose(self, ask: Ask) -> list[Candidate]:
        """Hybrid candidates of the models whose runs lack the asked batch size (``When``)."""
        req = ask.req
        if ask.iterations is None or req.batch_size is None:
            return []
        models = self.end_to_end.matching(ask)  # cheap: before the spec is read
        if not models or not priced(req):
            return []
        own = [m for m in models if owned_by(m, ask.system)]
        pooled = sorted((m for m in models if m.system == "" and not owned_by(m, ask.system)),
                        key=lambda m: -m.last_run_time)
        out = []
        for m in (own + pooled)[:MAX_MODELS]:
            try:
                history = self.history(m)
                if not history.batch_sizes or req.batch_size in history.batch_sizes:
                    continue
                out.append(self._candidate(ask, m, history))
            except JobcastError:  # this model's history cannot be shaped: the next one
                continue
        return out

    def _candidate(self, ask: Ask, m: FittedModel, history: History) -> Candidate:
        req = replace(ask.req, phase=ask.phase, iterations=ask.iterations)
        f = self._forecast(req, m, history, _plain(req, m, _steps(req)))
        f = replace(f, job=ask.req)
        own = owned_by(m, ask.system)
        system = "own" if own else ("other" if ask.system else "any")
        reason = (f"hybrid: the layerwise shape versus batch size scaled by the runs of "
                  f"{m.model_id} ({f.details['why_hybrid']})")
        f = f.with_details(chosen=reason)
        relation = Relation(kind=HYBRID_KIND, target=ask.phase, system=system, batch="other",
                            variant="asked" if ask.variant else "assumed",
                            stack="newest", runs=runs_bucket(m.estimator.n_runs_),
                            gpu=ask.gpu_relation(m.deployment), age=ask.age(m.last_run_time),
                            devices=ask.devices)
        runs = self.end_to_end.runs_of(m)
        cand = Candidate(f, relation, own_scale(f.seconds, f.low, f.high), reason,
                         tuple(int(r) for r in runs["run_id"]) if len(runs) else ())
        return to_job(cand, ask, runs) if ask.target == "job" else cand

    def forecast(self, req: JobRequest) -> Forecast:
        """The hybrid forecast of a request whose key the end-to-end route knows (RouteMiss
        otherwise), also at batch sizes history has: of the newest own (else pooled) model."""
        ask = Ask.of(replace(req, phase=req.phase if req.phase != "job" else "train"),
                     {m.deployment for m in self.end_to_end.models})
        models = self.end_to_end.matching(ask)
        if not models or ask.iterations is None:
            raise RouteMiss("no end-to-end model of this key")
        model = max(models, key=lambda m: (owned_by(m, ask.system), m.system == "",
                                           m.last_run_time))
        result = _plain(req, model, ask.iterations)
        try:
            return self._forecast(ask.req, model, self.history(model), result)
        except JobcastError as exc:
            raise RouteMiss(f"no hybrid forecast: {exc}") from None

    def shape(self, req: JobRequest, batches: list[int], framework: str) -> pd.DataFrame:
        """Layerwise O and V (seconds) of one step at each batch size."""
        if req.phase == "test":
            optimizer = "none"
        else:
            optimizer = req.optimizer if req.optimizer not in (None, "", "none") else "sgd"
        rows = []
        for b in batches:
            one = replace(req, batch_size=int(b), iterations=1, epochs=None, dataset_size=None,
                          eval_every=None, eval_size=None, optimizer=optimizer,
                          framework=framework)
            d = self.layerwise.forecast(one, "hybrid shape").details
            step = float(d["batch_seconds"])
            single = float(d.get("single_device_batch_seconds", step))
            variable = single - float(d.get("step_overhead_ms", 0.0)) / 1000.0
            rows.append({"batch_size": int(b), "overhead_s": max(step - variable, 0.0),
                         "variable_s": variable, "layerwise_s": step})
        return pd.DataFrame(rows)

    def _forecast(self, req: JobRequest, model: FittedModel, history: History,
                  result: Forecast) -> Forecast:
        steps = _steps(req)
        obs = pd.DataFrame([o.__dict__ for o in history.observations])
        framework = self.framework or stack_framework(model.stack, req.framework)
        batch = _batch(req)
        batches = sorted({*history.batch_sizes, batch})
        shapes = self.shape(req, batches, framework)
        fit_x = obs.merge(shapes, on="batch_size")
        from sklearn.base import clone

        from jobcast.service.engine.batch_shape import BatchShapeFit
        cal = clone(self.calibrator) if self.calibrator is not None else BatchShapeFit()
        cal.fit(fit_x, fit_x["step_seconds"])
        target = shapes[shapes["batch_size"] == batch]
        out = cal.predict_interval(target).iloc[0]
        const = history.const_seconds
        seconds = const + steps * float(out["seconds"])
        factor = math.exp(float(out["log_half_width"]))
        low, high = seconds / factor, seconds * factor
        if not all(math.isfinite(x) and x > 0 for x in (seconds, low, high)):
            raise RouteMiss("the hybrid gave a non-finite or non-positive forecast")
        details = {
            "models": {"end_to_end": model.model_id, "layerwise": LAYERWISE_MODEL},
            "phase": req.phase,
            "iterations": steps,
            "step_seconds": float(out["seconds"]),
            "const_seconds": const,
            "hybrid": {
                **cal.describe(),
                "shape_framework": framework,
                "history_source": history.source,
                "history": [{"batch_size": o.batch_size, "step_seconds": o.step_seconds,
                             "runs": o.runs} for o in history.observations],
                "layerwise_step_seconds": {int(r.batch_size): float(r.layerwise_s)
                                           for r in shapes.itertuples()},
                "layerwise_overhead_s": float(target["overhead_s"].iloc[0]),
                "batch_log_distance": float(out["distance"]),
            },
            "end_to_end": {"seconds": result.seconds, "low": result.low, "high": result.high},
            **({"chosen": result.details["chosen"]} if result.details.get("chosen") else {}),
            "why_hybrid": (f"batch size {req.batch_size} is not among the history's "
                           f"{', '.join(str(b) for b in history.batch_sizes)}"),
        }
        return Forecast(job=req, seconds=seconds, low=low, high=high, route=self.name,
                        model=f"{model.model_id}+{LAYERWISE_MODEL}", extrapolated=True,
                        details=details, why=details["why_hybrid"],
                        parts=ModelParts(end_to_end=model.model_id, layerwise=LAYERWISE_MODEL))


def _plain(req: JobRequest, model: FittedModel, iterations: int) -> Forecast:
    """The end-to-end model's own forecast of ``iterations`` steps (what the hybrid scales)."""
    plain = forecast(model, float(iterations), _batch(req))
    return Forecast(job=req, seconds=plain["seconds"], low=plain["low"], high=plain["high"],
                    route=END_TO_END, model=model.model_id,
                    parts=ModelParts(end_to_end=model.model_id))


def _batch(req: JobRequest) -> int:
    """The request's batch size (:class:`RouteMiss` when it gives none)."""
    if req.batch_size is None:
        raise RouteMiss("no batch size to shape the history at")
    return int(req.batch_size)


def _steps(req: JobRequest) -> int:
    """Steps of the request (:func:`jobcast.service.engine.candidates.phase_steps`)."""
    steps = phase_steps(req)
    if steps is None:
        raise RouteMiss("give iterations, or epochs with dataset_size")
    return steps
