"""A recurring job by its name: ``jobcast predict --job NAME`` with nothing else.

Ops teams ask "how long will the next run of job X take?", X being what their tools call
it: a Slurm job name, a CronJob, a benchmark system (``--system`` is the same flag). This
module finds the job's history and fills the request from it.

Rules (:func:`complete_from_history`):

* A job is matched as ``jobcast runs`` shows it: per-step runs by their system
  (``meta["system"]``), whole-job runs of a scheduler by their key (``ingest.whole_job``:
  the key is the system), whitespace folded, case-insensitively.
* What the request leaves open is taken from the job's **newest** run, and each value taken
  is said: the network, the deployment (the newest run's; where the job ran on several, the
  others are named, and ``--deployment`` or ``--gpus`` picks), the batch size and the
  training iterations (per-step runs only: a scheduler does not know them). What the request
  states wins (an override): the answer then says which part of the history still applies
  (the routes say it per candidate).
* ``gpus`` (``--gpus N``): the job's own GPU model at N GPUs per node (its node count kept):
  the deployment of the newest run with its count replaced.
* A whole-job history without a batch size asks for none: the whole-job route answers from
  wall times alone, and the request's batch size stays unknown (memory is then not checked).
* A name with no history is an error that lists the jobs the store knows (at most ten).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from fleet.deployment import Deployment, deployment_key
from ingest.whole_job import left_out, normal_key
from jobcast.service.engine.request import JobRequest
from jobcast.service.errors import ServiceError


class JobHistoryError(ServiceError, LookupError):
    """No history of the named job, or none that says what the request needs."""

    kind: ClassVar[str] = "system"

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class NewestRun:
    """What the job's newest run says of itself."""

    spelled: str  # the job as its history spells it
    network: str
    deployment: str
    batch_size: int | None
    iterations: float | None
    start: float | None
    deployments: tuple[str, ...]  # every deployment the job ran on, newest first
    runs: int


def known_systems(history: Any) -> list[str]:
    """The systems the run summaries name (``models.history``; None: none), sorted."""
    if history is None or not len(history):
        return []
    return sorted({str(s) for s in history["system"] if s})


def _per_step(history: Any, name: str) -> list[dict]:
    if history is None or not len(history):
        return []
    own = history[history["system"].map(normal_key) == name]
    return own.to_dict("records")


def _whole(runs: list[Any], name: str) -> list[dict]:
    out = []
    for r in runs:
        if normal_key(r.key) != name:
            continue
        out.append({"system": r.key, "network": r.network or r.key,
                    "deployment": r.deployment, "batch_size": r.batch_size,
                    "train_iterations": math.nan, "start_time": r.when,
                    "finished": r.finished})
    return out


def newest_run(name: str, history: Any, whole_runs: list[Any]) -> NewestRun:
    """The job's newest run (module rules); :class:`JobHistoryError` when it has none."""
    want = normal_key(name)
    rows = _per_step(history, want) + _whole(whole_runs, want)
    if not rows:
        known = sorted(set(known_systems(history)) | {r.key for r in whole_runs})
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10
                                         else "")
        raise JobHistoryError(
            f"no run of job {name!r} in the store" + (
                f"; jobs in the store: {shown}" if known else "")
            + " (`jobcast runs` lists every job, a scheduler's too)", field="system")
    finished = [r for r in rows if r.get("finished", True)] or rows
    finished.sort(key=lambda r: _time(r.get("start_time")))
    last = finished[-1]
    deployments = tuple(dict.fromkeys(r["deployment"] for r in reversed(finished)))
    batch = int(last.get("batch_size") or 0)
    its = last.get("train_iterations")
    return NewestRun(str(last["system"]), str(last["network"]), str(last["deployment"]),
                     batch if batch > 0 else None,
                     float(its) if its is not None and math.isfinite(float(its)) and its > 0
                     else None, _time(last.get("start_time")) or None, deployments,
                     len(rows) + left_out(whole_runs))


def _time(value: Any) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        return 0.0
    return t if math.isfinite(t) else 0.0


def with_gpus(deployment: str, gpus: int) -> str:
    """``deployment`` at ``gpus`` GPUs per node (its GPU and node count kept)."""
    dep = Deployment.parse(deployment)
    return deployment_key(dep.accelerator, gpus, dep.nodes)


def complete_from_history(req: JobRequest, history: Any, whole_runs: list[Any],
                          gpus: int | None = None) -> tuple[JobRequest, list[str]]:
    """The request with what it left open taken from the job's newest run, and the notes
    that say so (module rules)."""
    if not req.system:
        return req, []
    if req.network and (req.deployment or req.device) and req.batch_size is not None and (
            req.iterations is not None or req.epochs is not None) and gpus is None:
        return req, []
    found = newest_run(req.system, history, whole_runs)
    notes: list[str] = []
    taken: dict[str, Any] = {"system": found.spelled}
    if not req.network:
        taken["network"] = found.network
        notes.append(f"network {found.network}")
    if not (req.deployment or req.device):
        base = found.deployment
        if gpus is not None:
            taken["deployment"] = with_gpus(base, gpus)
            notes.append(f"deployment {taken['deployment']}: the job's GPU ({base}) at {gpus} "
                         "GPUs per node as asked")
        else:
            taken["deployment"] = base
            others = [d for d in found.deployments if d != base]
            notes.append(f"deployment {base}" + (
                f" (it also ran on {', '.join(others)}: --deployment picks)" if others else ""))
    elif gpus is not None:
        raise JobHistoryError("give --gpus or --deployment, not both", field="gpus")
    if req.batch_size is None and found.batch_size is not None:
        taken["batch_size"] = found.batch_size
        notes.append(f"batch size {found.batch_size}")
    if req.iterations is None and req.epochs is None and found.iterations is not None:
        taken["iterations"] = int(round(found.iterations))
        notes.append(f"{taken['iterations']:,} training iterations")
    if len(notes) == 0:
        return replace(req, **taken), []
    when = f" ({found.runs} run{'s' * (found.runs != 1)} in its history)"
    return replace(req, **taken), [f"from job {found.spelled}'s newest run{when}: "
                                   + ", ".join(notes)]


__all__ = ["JobHistoryError", "NewestRun", "complete_from_history", "newest_run", "with_gpus"]
