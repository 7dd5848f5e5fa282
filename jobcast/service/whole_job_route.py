"""The whole-job route: a recurring job's wall time from its own finished runs, as the
scheduler (Slurm) or the cluster (Kubernetes) recorded them, without per-step data.

Rules (:class:`WholeJobRoute.propose`):

* Only for a whole job (target ``job``) of a named system: the system is the job's key
  (``jobcast ingest --job-key``), the deployment as the store keys it.
* The answer is :func:`models.whole_job.whole_job_candidate` (level, trend over runs and the
  spread of past durations; ``docs/cluster-history.md``), one ``whole-job`` candidate with
  relation ``system`` ``own``; a job without finished runs there gives none.
* The store's whole-job runs are read once per forecaster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ingest.whole_job import normal_key, whole_job_runs
from jobcast.service.candidates import Ask, Candidate, own_scale
from jobcast.service.forecast import Forecast, Route
from models.relation import Relation, runs_bucket

if TYPE_CHECKING:
    from ingest.store import Store


def _newest(runs: list[Any], key: str) -> float | None:
    """The newest start (unix s) of the job's whole-job runs, None when undated."""
    want = normal_key(key)
    times = [r.when for r in runs if getattr(r, "when", None) and normal_key(r.key) == want]
    return max(times) if times else None


class WholeJobRoute:
    """A recurring job's next wall time from its finished runs (module rules)."""

    name = Route.END_TO_END
    kinds = ("whole-job",)
    costly = False

    def __init__(self, store: Store | None):
        self.store = store
        self._runs: list[Any] | None = None

    def runs(self) -> list[Any]:
        """The store's whole-job runs (read once; none without a store)."""
        if self._runs is None:
            self._runs = whole_job_runs(self.store) if self.store is not None else []
        return self._runs

    def propose(self, ask: Ask) -> list[Candidate]:
        """The whole-job candidate of a named system's recurring job on the asked deployment
        (module rules); none when the ask is not a whole job of a named system."""
        if ask.target != "job" or not ask.system or not ask.deployment or not self.runs():
            return []
        from models.whole_job import WholeJobMiss, whole_job_candidate
        try:
            found = whole_job_candidate(list(self.runs()), ask.system, ask.deployment)
        except WholeJobMiss:
            return []
        reason = f"whole-job: {found.reason}"
        f = Forecast(job=ask.req, seconds=found.seconds, low=found.low, high=found.high,
                     route=self.name, model=found.model,
                     details={"chosen": reason, "whole_job": found.to_dict(),
                              "evidence": {"runs": found.n_runs}}, why=reason)
        relation = Relation(kind="whole-job", target="job", system="own", batch="same",
                            variant="unstated", stack="none", runs=runs_bucket(found.n_runs),
                            gpu="exact", age=ask.age(_newest(self.runs(), ask.system)),
                            devices=ask.devices)
        return [Candidate(f, relation, own_scale(f.seconds, f.low, f.high), reason)]
