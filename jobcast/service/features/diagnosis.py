"""``jobcast check``: is this job slower than it should be, by how much, and why?

A job (a Slurm job from a sacct file, a Kubernetes Job via Prometheus, or a training log) is
compared with what was expected of it and with its own history; the answer says plainly
whether it is slow, by how much, and the likely cause where its traces show one.

Rules
-----
* **Expected time.** A whole job (Slurm, Kubernetes): the whole-job forecast of its key on
  its deployment (:func:`models.whole_job.whole_job_candidate`); without history on that
  deployment, the one of its most frequent deployment (and the change is a cause). A log:
  the train phase's forecast for the steps done (the forecaster's route), else the job's
  history: runs of the same network, deployment and batch size in the store, their median
  seconds per step times the steps (interval: their 5th-95th percentile rates).
* **Ratio** = observed / expected seconds. A finished job (or a log's steps so far) is slow
  when the ratio exceeds ``1 + threshold``; the message says whether the time also lies
  outside the expected 90 % interval (beyond the history's own spread). A running whole job
  is slow once its time so far passes ``1 + threshold`` times the expectation; before that
  it is on track *so far*. A job that ended otherwise than completed (failed, cancelled, ...)
  is never ``fast``: a short failed run is not a quick one.
* **Causes**, from the traces and the history (each with its evidence): GPU busy below
  :data:`BUSY_LOW` on average (or below 0.7x its history's) -> input pipeline or host bound;
  fewer GPUs or another GPU model than its history's usual (when it has no history on its
  own deployment, so its expectation came from another one); SM clock below
  :data:`CLOCK_LOW` x its history's (or the catalog's boost clock), or clock events (power
  cap, thermal) in more than :data:`EVENTS_HIGH` of the samples -> throttled clocks or power.
* The result is one dict (``--json``): ``status`` (``slow``, ``normal``, ``fast``,
  ``unknown``), ``ratio``, ``threshold``, ``expected`` (seconds, low, high, source,
  reason), ``observed``, ``history``, ``causes`` and ``message``, a plain sentence.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from fleet.catalog import UnknownGpuError, resolve_gpu
from fleet.errors import JobcastError, bug_info
from ingest.whole_job import WholeJobRun, deployment_identity, whole_job_runs
from jobcast.service.errors import ServiceError
from models.whole_job import WholeJobMiss, whole_job_candidate

BUSY_LOW = 0.5
CLOCK_LOW = 0.85
EVENTS_HIGH = 0.2
DEFAULT_THRESHOLD = 0.2


class CheckError(ServiceError, ValueError):
    """The job cannot be checked as asked; the message says what is missing, and ``file``
    and ``line`` where a file is at fault."""

    kind: ClassVar[str] = "check"

    def __init__(self, message: str, *, file: object = None, line: int | None = None):
        super().__init__(message)
        self.file = None if file is None else str(file)
        self.line = line


@dataclass
class Observed:
    """What is known of the job being checked."""

    source: str  # slurm | kubernetes | log
    job_id: str
    state: str  # running, completed, failed, ...
    seconds: float  # wall time (so far, if running); for a log: train seconds so far
    key: str | None = None
    deployment: str | None = None
    gpus: int | None = None
    accelerator: str | None = None
    trace: dict | None = None
    steps: float | None = None  # a log: train steps done
    planned_steps: float | None = None
    network: str | None = None
    batch_size: int | None = None
    stack: str | None = None  # the software stack the run used
    notes: list[str] = field(default_factory=list)


def span(seconds: float, tenths_below: float = 10.0) -> str:
    """``4.2s`` (below ``tenths_below`` seconds), ``45s``, ``12m05s``, ``3h07m``."""
    seconds = max(0.0, float(seconds))
    if seconds < tenths_below:
        return f"{seconds:.1f}s"
    if seconds < 90:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 90:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _boost_clock(accelerator: str | None) -> float | None:
    try:
        return float(resolve_gpu(accelerator).boost_clock_mhz) if accelerator else None
    except (UnknownGpuError, AttributeError, TypeError, ValueError):
        return None


def _summaries(runs: list[WholeJobRun], name: str) -> list[float]:
    return [float(r.trace["summary"][name]) for r in runs
            if isinstance(r.trace, dict) and name in (r.trace.get("summary") or {})]


def history_summary(runs: list[WholeJobRun]) -> dict:
    """Counts, durations, usual deployment/GPUs and trace means of finished history runs."""
    if not runs:
        return {"runs": 0}
    seconds = sorted(r.seconds for r in runs)
    deployments = statistics.multimode(r.deployment for r in runs)
    out = {"runs": len(runs), "median_seconds": statistics.median(seconds),
           "min_seconds": seconds[0], "max_seconds": seconds[-1],
           "usual_deployment": sorted(deployments)[0],
           "usual_gpus": statistics.median_low(r.gpus for r in runs),
           "deployments": sorted({r.deployment for r in runs})}
    for name in ("busy_mean", "sm_clock_mhz_mean", "power_w_mean"):
        values = _summaries(runs, name)
        if values:
            out[name] = statistics.median(values)
    return out


def find_causes(obs: Observed, history: dict) -> list[dict]:
    """Likely causes of slowness shown by the traces and the history (module doc)."""
    causes: list[dict] = []
    summary = (obs.trace or {}).get("summary") or {}
    busy = summary.get("busy_mean")
    usual_busy = history.get("busy_mean")
    if busy is not None and (busy < BUSY_LOW or (usual_busy and busy < 0.7 * usual_busy)):
        versus = f" (its history: {usual_busy:.0%})" if usual_busy else ""
        device = "busy" if (obs.trace or {}).get("models") == ["cpu"] else "GPU busy"
        idle = summary.get("idle_share")
        idle_text = f", idle {idle:.0%} of the samples" if idle is not None else ""
        causes.append({"cause": "input pipeline or host bound",
                       "evidence": f"{device} {busy:.0%} on average{idle_text}{versus}: the "
                                   "accelerators wait for data (loading, decoding, "
                                   "augmentation) or for the host CPU"})
    usual_gpus = history.get("usual_gpus")
    own = history.get("runs_here", 0)  # history on the job's own deployment: no change
    if obs.gpus is not None and usual_gpus and obs.gpus < usual_gpus and not own:
        causes.append({"cause": "fewer GPUs than its history",
                       "evidence": f"runs on {obs.gpus} GPUs, its history usually on "
                                   f"{usual_gpus}"})
    usual_dep = history.get("usual_deployment")
    if obs.deployment and usual_dep and _model_of(obs.deployment) != _model_of(usual_dep) \
            and not own:
        causes.append({"cause": "another GPU model than its history",
                       "evidence": f"runs on {obs.deployment}, its history usually on "
                                   f"{usual_dep}"})
    clock = summary.get("sm_clock_mhz_mean")
    usual_clock = history.get("sm_clock_mhz_mean") or _boost_clock(obs.accelerator)
    against = "its history" if history.get("sm_clock_mhz_mean") else "the boost clock"
    if clock is not None and usual_clock and clock < CLOCK_LOW * usual_clock and (
            busy is None or busy >= BUSY_LOW):
        causes.append({"cause": "throttled clocks",
                       "evidence": f"SM clock {clock:.0f} MHz on average against "
                                   f"{usual_clock:.0f} MHz ({against})"})
    events = summary.get("slowdown_share")
    if events is not None and events > EVENTS_HIGH:
        causes.append({"cause": "power or thermal limits",
                       "evidence": f"clock slow-down events (power cap, thermal) in "
                                   f"{events:.0%} of the samples"})
    return causes


def _model_of(deployment: str) -> str:
    """The GPU part of a deployment key (``nvidia-a100-sxm4-80gb-x8`` -> ``nvidia-a100-...``)."""
    head = deployment.rsplit("-x", 1)[0]
    return head


def _status(ratio: float | None, threshold: float, running: bool) -> str:
    if ratio is None or not math.isfinite(ratio):
        return "unknown"
    if ratio > 1 + threshold:
        return "slow"
    if not running and ratio < 1 / (1 + threshold):
        return "fast"
    return "normal"


def check_whole_job(obs: Observed, store, *, threshold: float = DEFAULT_THRESHOLD,
                    now: float | None = None) -> dict:
    """Verdict for a Slurm or Kubernetes job against its key's whole-job history."""
    if not obs.key:
        raise CheckError(f"job {obs.job_id}: no job key (name) to find its history by")
    runs = [r for r in whole_job_runs(store, obs.key)
            if r.finished and r.job_id != obs.job_id]
    history = history_summary(runs)
    expected, notes = None, list(obs.notes)
    deployment = deployment_identity(obs.deployment) if obs.deployment else None
    if runs:
        history["runs_here"] = sum(deployment_identity(r.deployment) == deployment
                                   for r in runs)
    try:
        expected = whole_job_candidate(runs, obs.key, deployment or "")
    except WholeJobMiss as exc:
        if history["runs"]:
            notes.append(f"{exc}; expected time from its usual deployment "
                         f"{history['usual_deployment']}")
            expected = whole_job_candidate(runs, obs.key, history["usual_deployment"])
    ratio = obs.seconds / expected.seconds if expected else None
    status = _status(ratio, threshold, obs.state != "completed")  # failed: never fast
    if obs.state not in ("running", "completed"):
        notes.append(f"the job ended {obs.state}: its time is not a finished run's")
    exp = None if expected is None else {
        "seconds": expected.seconds, "low": expected.low, "high": expected.high,
        "source": expected.source, "model": expected.model, "reason": expected.reason,
        "runs": expected.n_runs}
    return _result(obs, status, ratio, threshold, exp, history, notes)


def check_log(obs: Observed, store, forecaster=None, *,
              threshold: float = DEFAULT_THRESHOLD) -> dict:
    """Verdict for a log's train steps so far against their forecast and the history."""
    if not obs.steps or obs.steps <= 0:
        raise CheckError(f"{obs.job_id}: no complete train phase in the log yet")
    history = _step_history(store, obs)
    notes = list(obs.notes)
    expected = _forecast(forecaster, obs, notes) if forecaster is not None else None
    if expected is None and history.get("runs"):
        rate, lo, hi = (history["median_seconds_per_step"], history["p05_seconds_per_step"],
                        history["p95_seconds_per_step"])
        expected = {"seconds": rate * obs.steps, "low": lo * obs.steps,
                    "high": hi * obs.steps, "source": "history",
                    "reason": f"median pace of {history['runs']} earlier runs of "
                              f"{obs.network} on {obs.deployment} at batch {obs.batch_size}"}
    ratio = obs.seconds / expected["seconds"] if expected else None
    status = _status(ratio, threshold, False)
    return _result(obs, status, ratio, threshold, expected, history, notes)


def _forecast(forecaster, obs: Observed, notes: list[str]) -> dict | None:
    from jobcast.service.engine.request import JobRequest

    try:
        req = JobRequest(network=obs.network or "", deployment=obs.deployment,
                         batch_size=obs.batch_size, iterations=int(obs.steps or 0),
                         phase="train",
                         stack=obs.stack)
        result = forecaster.forecast(req, refuse_unfit=False)  # the job ran: it fits
    except JobcastError as exc:  # a miss: fall back to the history
        notes.append(f"no forecast ({exc}); compared with history")
        return None
    except Exception as exc:  # noqa: BLE001 - a bug: said so, then the history
        notes.append(f"no forecast: {bug_info(exc).message}; compared with history")
        return None
    if not getattr(result, "ok", False):
        why = getattr(result, "error", None) or "no route answered"
        notes.append(f"no forecast ({why}); compared with history")
        return None
    return {"seconds": result.seconds, "low": result.low, "high": result.high,
            "source": str(result.route), "model": result.model,
            "reason": f"{result.route} forecast of {int(obs.steps or 0)} train steps"}


def _step_history(store, obs: Observed) -> dict:
    """Seconds per train step of the store's runs of the same network, deployment, batch."""
    rates = []
    stored = [r for r in store.runs(obs.network, obs.deployment)
              if r.batch_size == obs.batch_size and "whole_job" not in r.meta]
    by_run: dict[int, list[float]] = {}
    for seg in store.segments([r.id for r in stored]):
        if seg["phase"] == "train" and seg["iterations"] > 0:
            totals = by_run.setdefault(seg["run_id"], [0.0, 0.0])
            totals[0] += seg["iterations"]
            totals[1] += seg["seconds"]
    rates = sorted(s / i for i, s in by_run.values() if i > 0)
    if not rates:
        return {"runs": 0}

    def pct(q: float) -> float:
        return rates[min(len(rates) - 1, max(0, round(q * (len(rates) - 1))))]

    return {"runs": len(rates), "median_seconds_per_step": statistics.median(rates),
            "p05_seconds_per_step": pct(0.05), "p95_seconds_per_step": pct(0.95)}


def _result(obs: Observed, status: str, ratio: float | None, threshold: float,
            expected: dict | None, history: dict, notes: list[str]) -> dict:
    result = {"job": obs.job_id, "source": obs.source, "key": obs.key, "state": obs.state,
              "status": status, "ratio": ratio, "threshold": threshold,
              "slower_by": (ratio - 1) if ratio is not None else None,
              "expected": expected, "observed": _observed(obs), "history": history,
              "causes": find_causes(obs, history), "notes": notes}
    result["message"] = message(result)
    return result


def _observed(obs: Observed) -> dict:
    """The JSON of what was observed: every field but the trace and notes; the stack also
    under its old key ``framework`` (kept one release, docs/deprecations.md)."""
    out = {k: v for k, v in asdict(obs).items() if k not in ("trace", "notes")}
    out["framework"] = obs.stack
    if obs.trace:
        out["trace_summary"] = obs.trace.get("summary")
    return out


def message(result: dict) -> str:
    """The plain sentence of a verdict."""
    obs, exp, ratio = result["observed"], result["expected"], result["ratio"]
    what = f"{obs['source']} job {result['job']}"
    if result.get("key") and result["key"] != result["job"]:
        what += f" ({result['key']})"
    if obs.get("steps"):
        done = f"{obs['steps']:.0f} train steps took {span(obs['seconds'])}"
    elif result["state"] == "running":
        done = f"has run {span(obs['seconds'])} so far"
    else:
        done = f"took {span(obs['seconds'])} ({result['state']})"
    if exp is None:
        return f"{what} {done}; no forecast and no history to compare it with"
    versus = (f"expected {span(exp['seconds'])} (90% interval {span(exp['low'])} - "
              f"{span(exp['high'])}, {exp['source']})")
    outside = obs["seconds"] > exp["high"]
    if result["status"] == "slow":
        verdict = (f"SLOW: {ratio:.2f}x the expected time, {ratio - 1:.0%} slower"
                   + (" and still running" if result["state"] == "running" else "")
                   + ("" if outside else ", though inside the interval"))
    elif result["status"] == "fast":
        verdict = f"faster than expected ({ratio:.2f}x)"
    elif result["state"] not in ("running", "completed"):
        verdict = f"ended {result['state']} after {ratio:.0%} of the expected time"
    elif result["state"] == "running":
        verdict = f"on track so far ({ratio:.0%} of the expected time used)"
    else:
        verdict = f"normal ({ratio:.2f}x the expected time)"
    text = f"{what} {done}; {versus}: {verdict}"
    if result["causes"] and result["status"] == "slow":
        text += ". Likely cause: " + "; ".join(
            f"{c['cause']} ({c['evidence']})" for c in result["causes"])
    elif result["causes"]:
        text += ". Seen: " + "; ".join(f"{c['evidence']}" for c in result["causes"])
    elif result["status"] == "slow":
        text += ". No cause shows in the traces" + ("" if obs.get("trace_summary") else
                                                    " (none were given)")
    return text
