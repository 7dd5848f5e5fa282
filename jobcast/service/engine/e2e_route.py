"""The end-to-end route: the phase models fitted on the job's history, one candidate per
model that could answer.

Rules (:class:`EndToEndRoute.propose`):

* **Models**: of the network and the asked phase, on the deployment keys the request matches
  (exact, else the GPU family's), of a variant compatible with the asked one (a request for
  fp16 never gets an fp32 model), of the asked stack where the request names one.
* **own-model**: a model of the named system: its own model of a key (``system`` set), or the
  pooled model of a key whose runs are all that system's (``systems == {S: n}``: a key with
  one system has only the pooled model). **pooled-model**: the pooled model of any other key
  (relation ``system`` ``other`` when a system was named, ``any`` otherwise).
* Relations: ``batch`` ``same`` when the model's runs include the asked batch size; ``stack``
  ``newest`` for the newest-running stack among the route's own-model candidates (and among
  its pooled ones); ``variant`` ``asked``, ``assumed`` (the request left a key open that the
  model states) or ``unstated``; ``runs`` the model's runs.
* A GPU count without history: the models of the same GPU at another count, moved to the
  asked count by the data-parallel scaling model (``jobcast.service.engine.other_counts``): one
  ``scaled-count`` candidate.
* Whole job: :func:`jobcast.service.engine.candidates.to_job` with the model's runs (evaluations a
  request gives are priced once, for every route, by ``jobcast.service.engine.job_answer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from fleet.errors import JobcastError
from jobcast.service.engine.candidates import (
    Ask,
    Candidate,
    newest_first,
    own_scale,
    to_job,
)
from jobcast.service.engine.forecast import Forecast, ModelParts
from jobcast.service.engine.route_registry import (
    END_TO_END,
    OWN_MODEL,
    POOLED_MODEL,
    SCALED_COUNT,
    RegisteredRoute,
)
from models.relation import Relation, runs_bucket
from models.variant import compatible, describe_variant, variant_dict, variant_key

if TYPE_CHECKING:  # pandas and the fitting modules load with the first model (issue 23)
    import pandas as pd

    from models.fitted import FittedModel

_CORE = ("seconds", "low", "high", "unit", "route", "model", "extrapolated")


def _details(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in _CORE}


def owned_by(m: FittedModel, system: str) -> bool:
    """Whether ``m`` is the named system's own history (module rules)."""
    if not system:
        return False
    return m.system == system or (m.system == "" and set(m.systems) == {system})


class EndToEndRoute(RegisteredRoute):
    """One candidate per phase model that could answer (module rules)."""

    route = END_TO_END
    costly = False

    def __init__(self, models: Sequence[FittedModel], history: pd.DataFrame | None = None):
        """``history``: the run summaries behind the models (None: none; then this route
        holds no DataFrame until a model asks for its runs, so a forecaster without history
        never imports pandas)."""
        self.models = list(models)
        if history is None and self.models:
            import pandas as pd
            history = pd.DataFrame()
        self.history = history
        self._sources = ({s: g for s, g in history.groupby("source")}
                         if history is not None and len(history) else {})
        self._runs: dict[str, pd.DataFrame] = {}
        self._by_network: dict[tuple[str, str], list[FittedModel]] = {}
        for m in self.models:
            self._by_network.setdefault((m.network, m.phase), []).append(m)

    def matching(self, ask: Ask, phase: str | None = None) -> list[FittedModel]:
        """The models that may answer ``ask`` (module rules)."""
        from models.dataset import stack_key
        phase = phase or ask.phase
        keys = set(ask.key_names)
        want = stack_key(ask.req.stack) if ask.req.stack else None
        return [m for m in self._by_network.get((ask.req.network.lower(), phase), [])
                if m.deployment in keys and compatible(m.variant, ask.variant)
                and (want is None or stack_key(m.stack) == want)]

    def miss_reason(self, ask: Ask) -> str:
        """Why no model of this route answers ``ask`` (for the layerwise answer's reason)."""
        net = ask.req.network.lower()
        if not ask.keys:
            return (f"no end-to-end history of network {net!r} on "
                    f"{ask.deployment or 'the asked deployment'}")
        keyed = [m for m in self._by_network.get((net, ask.phase), [])
                 if m.deployment in set(ask.key_names)]
        if not keyed:
            return f"no end-to-end {ask.phase} model of network {net!r} on {ask.key_names[0]}"
        if ask.variant and not any(compatible(m.variant, ask.variant) for m in keyed):
            seen = ", ".join(sorted({describe_variant(m.variant) for m in keyed}))
            return (f"no end-to-end {ask.phase} model of "
                    f"{describe_variant(variant_key(ask.variant))} for network {net!r} on "
                    f"{ask.key_names[0]}; its history has: {seen}")
        return "history of this job exists"

    def runs_of(self, m: FittedModel) -> pd.DataFrame:
        """The run summaries behind a model (its sources, its system where it has one)."""
        if m.model_id not in self._runs:
            self._runs[m.model_id] = self._find_runs(m)
        return self._runs[m.model_id]

    def _find_runs(self, m: FittedModel) -> pd.DataFrame:
        import pandas as pd

        from models.dataset import stack_key
        parts = [self._sources[s] for s in m.sources if s in self._sources]
        if not parts:
            history = self.history
            return history.iloc[0:0] if history is not None and len(history) else pd.DataFrame()
        runs = pd.concat(parts)
        runs = runs[(runs["network"] == m.network) & (runs["deployment"] == m.deployment)
                    & (runs["stack_key"] == stack_key(m.stack)) & (runs["variant"] == m.variant)]
        return runs[runs["system"] == m.system] if m.system else runs

    def propose(self, ask: Ask) -> list[Candidate]:
        """The phase-model candidates of the ask (module rules); none without steps or a batch
        size."""
        if ask.iterations is None or ask.req.batch_size is None:
            return []
        models = self.matching(ask)
        if not models:
            return self._other_count(ask)
        own = [m for m in models if owned_by(m, ask.system)]
        pooled = [m for m in models if m.system == "" and not owned_by(m, ask.system)]
        out = []
        for group, kind, system in ((own, OWN_MODEL, "own"),
                                    (pooled, POOLED_MODEL, "other" if ask.system else "any")):
            ages = newest_first([(m.model_id, m.last_run_time) for m in group])
            for m in group:
                cand = self._candidate(ask, m, kind, system, ages[m.model_id])
                if cand is not None:
                    out.append(cand)
        return out

    def _candidate(self, ask: Ask, m: FittedModel, kind: str, system: str, stack: str
                   ) -> Candidate | None:
        from models.choice import describe_model
        from models.e2e import forecast
        if ask.iterations is None or ask.req.batch_size is None:
            return None
        try:
            result = forecast(m, float(ask.iterations), int(ask.req.batch_size))
        except JobcastError:
            return None
        runs = self.runs_of(m)
        batches = set(runs["batch_size"]) if len(runs) else set()
        batch = "same" if ask.req.batch_size in batches else "other"
        have = variant_dict(m.variant)
        if ask.variant:
            variant = "asked" if all(k in have for k in ask.variant) else "unstated"
        else:
            variant = "assumed" if have else "unstated"
        missing = f"no history of system {ask.system}: " if system == "other" else ""
        reason = f"{kind}: {missing}{describe_model(m, ask.system)}"
        if ask.variant:
            reason += f" for the asked {describe_variant(variant_key(ask.variant))}"
        relation = Relation(kind=kind, target=ask.phase, system=system, batch=batch,
                            variant=variant, stack=stack, runs=runs_bucket(m.estimator.n_runs_),
                            gpu=ask.gpu_relation(m.deployment, own=system == "own"),
                            age=ask.age(m.last_run_time), devices=ask.devices)
        f = Forecast(job=ask.req, seconds=result["seconds"], low=result["low"],
                     high=result["high"], route=self.name, model=result["model"],
                     extrapolated=bool(result["extrapolated"]),
                     details={**_details(result), "chosen": reason,
                              "deployment_match": ask.how(m.deployment)},
                     why=reason, parts=ModelParts(end_to_end=m.model_id))
        cand = Candidate(f, relation, own_scale(f.seconds, f.low, f.high), reason,
                         tuple(int(r) for r in runs["run_id"]) if len(runs) else ())
        if ask.target != "job":
            return cand
        return to_job(cand, ask, runs)

    def _other_count(self, ask: Ask) -> list[Candidate]:
        """The ``scaled-count`` candidate from the same GPU at another count, if any."""
        if not ask.deployment or ask.iterations is None:
            return []
        from jobcast.service.engine.other_counts import scale_to_count
        usable = [m for m in self.models if compatible(m.variant, ask.variant)
                  and (m.system == "" or owned_by(m, ask.system))]
        req = replace(ask.req, phase=ask.phase, iterations=ask.iterations)
        try:
            result = scale_to_count(usable, req, ask.deployment)
        except JobcastError:
            return []
        if result is None:
            return []
        source = result.pop("source_model")
        relation = Relation(devices=ask.devices, kind=SCALED_COUNT, target=ask.phase,
                            system="other" if ask.system else "any", batch="other",
                            variant="asked" if ask.variant else "assumed", stack="newest",
                            runs="0", gpu="exact", age="unknown")
        reason = (f"scaled-count: history of {result['scaled_from']} moved to this GPU count "
                  "by the data-parallel model")
        f = Forecast(job=ask.req, seconds=result["seconds"], low=result["low"],
                     high=result["high"], route=self.name, model=result["model"],
                     extrapolated=True, details={**_details(result), "chosen": reason},
                     why=reason, parts=ModelParts(end_to_end=source,
                                                  scaled_from=result["scaled_from"]))
        cand = Candidate(f, relation, own_scale(f.seconds, f.low, f.high), reason)
        return [to_job(cand, ask, None) if ask.target == "job" else cand]

    def forecast(self, req) -> Forecast:
        """This route alone, without the selector (benchmarks compare it): its own model of
        the named system, else the newest pooled model; :class:`LookupError` when none."""
        found = self.propose(Ask.of(req, {m.deployment for m in self.models}))
        order = {OWN_MODEL: 0, POOLED_MODEL: 1, SCALED_COUNT: 2}
        newest = {"newest": 0, "older": 1}
        if not found:
            raise LookupError(f"no end-to-end model of {req.network!r} on {req.deployment!r}")
        best = min(found, key=lambda c: (order.get(c.kind, 9), newest.get(c.relation.stack, 2)))
        return best.forecast

    def model_of(self, forecast_: Forecast) -> FittedModel | None:
        """The fitted model whose id the forecast names (None if none)."""
        return next((m for m in self.models if m.model_id == forecast_.model), None)
