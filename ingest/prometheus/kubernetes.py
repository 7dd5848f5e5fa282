"""Kubernetes Jobs from a real Prometheus: kube-state-metrics + DCGM -> whole-job runs.

Rules
-----
* Series as kube-state-metrics v2 writes them: ``kube_job_status_start_time`` and
  ``kube_job_status_completion_time`` (unix s), ``kube_job_complete``/``kube_job_failed``
  (``condition="true"``), ``kube_job_spec_parallelism``, ``kube_job_owner`` (``owner_kind=
  "CronJob"``: the CronJob is the recurring job), all keyed by ``job_name``/``namespace``;
  ``kube_pod_owner`` (``owner_kind="Job"``, ``owner_name``), ``kube_pod_info`` (``node``),
  ``kube_pod_completion_time`` and ``kube_pod_container_resource_requests`` (``resource=
  "nvidia_com_gpu"`` or a MIG slice ``"nvidia_com_mig_<profile>"``) keyed by
  ``pod``/``namespace``; DCGM's ``modelName`` and ``GPU_I_PROFILE`` by pod or host
  (:mod:`.dcgm`, every label spelling).
* Every series is read with ``last_over_time(...[window])`` at ``--until``: a Job deleted
  during the window (e.g. by ``ttlSecondsAfterFinished``) is still seen with its last values.
* Before asking, one counting query checks that the selected series number at most
  ``max_series`` (``--max-series``); past it the error names the count and the flags.
* Per Job (:mod:`.k8s_join`, its rules): the key (its CronJob's name), GPUs or MIG slices,
  nodes (the distinct nodes of its pods, at most the parallelism), the GPU model (DCGM series
  naming its pods, else its nodes, by the fleet catalog's name) and its end.
* Complete Jobs become finished runs; failed ones are kept with state ``failed`` and their
  real wall time (start to failure); running ones (still present at ``--until``) are
  skipped; a Job gone before it ended (deleted mid-window) is skipped as ``lost``. Partial
  joins are rejections that say what is missing: no pod of the Job, a pod without a node and
  no DCGM series naming it, a GPU model nowhere to be found, a failed Job's end.
* With traces on, each finished or failed GPU Job gets its DCGM trace over its life, by pod
  labels, else by its nodes when they held no other GPUs (:func:`.k8s_join.
  node_trace_problem`), bounded (:func:`.dcgm.trace_from_series`).
* Writing (:func:`store_k8s_jobs`): one store entry per Job, source
  ``kubernetes:URL#NAMESPACE/JOB``, content hash of a canonical JSON of its record:
  ingesting again adds nothing. Everything is fetched before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ingest.events import ParsedRun, ParseError
from ingest.prometheus.client import PrometheusClient, PrometheusError
from ingest.prometheus.dcgm import (
    GPU_UTIL,
    GR_ENGINE,
    HOST_LABELS,
    MIG_PROFILE,
    POD_LABELS,
    fetch_trace,
    regex_of,
    trace_from_series,
)
from ingest.prometheus.k8s_join import (
    FAILED_STEP,
    GPU_RESOURCE,
    MIG_RESOURCES,
    DcgmIndex,
    K8sJob,
    K8sPod,
    join,
    mig_resource,
    node_trace_problem,
)
from ingest.prometheus.names import iso_time, selector
from ingest.whole_job import whole_job_run

FORMAT = "kubernetes"
MAX_SERIES = 200_000
JOB_SERIES = ("kube_job_status_start_time", "kube_job_status_completion_time",
              "kube_job_complete", "kube_job_failed", "kube_job_spec_parallelism",
              "kube_job_owner")
POD_SERIES = ("kube_pod_owner", "kube_pod_info", "kube_pod_container_resource_requests",
              "kube_pod_completion_time")
NAMES_PER_QUERY = 100  # Job names in one regex
DCGM_LABELS = ("modelName", MIG_PROFILE, *HOST_LABELS,
               *(label for pair in POD_LABELS for label in pair))


@dataclass
class FetchedK8s:
    """What :func:`fetch_k8s_jobs` read and joined: runs to store, and what was not."""

    url: str
    runs: list[tuple[str, ParsedRun]] = field(default_factory=list)  # (source, run)
    skipped: list[dict] = field(default_factory=list)  # job, reason
    rejected: list[ParseError] = field(default_factory=list)
    series: int = 0
    requests: int = 0


def _matchers(namespace: str | None) -> list[tuple[str, str, str]]:
    return [("namespace", "=", namespace)] if namespace else []


def count_series(client: PrometheusClient, window: float, until: float,
                 namespace: str | None = None) -> int:
    """How many series of the names this ingest reads exist in the window (one query)."""
    width = max(1, math.ceil(window))
    terms = [f"(count(last_over_time({name}{selector(_matchers(namespace))}[{width}s])) "
             "or vector(0))" for name in (*JOB_SERIES, *POD_SERIES, GPU_UTIL, GR_ENGINE)]
    result = client.query(" + ".join(terms), at=until)
    try:
        return int(float(result[0]["value"][1])) if result else 0
    except (IndexError, KeyError, TypeError, ValueError):
        raise PrometheusError(f"Prometheus at {client.url}: unreadable series count") from None


def _last(client: PrometheusClient, name: str, width: int, until: float,
          matchers: Sequence[tuple[str, str, str]] = ()) -> list[tuple[dict, float]]:
    found = client.query(f"last_over_time({name}{selector(matchers)}[{width}s])", at=until)
    out = []
    for item in found:
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isfinite(value):
            out.append((item.get("metric") or {}, value))
    return out


def _jobs(client: PrometheusClient, width: int, until: float, ns: list) -> dict:
    """Jobs by (namespace, name) with their start, completion, conditions and owner."""
    jobs: dict[tuple[str, str], K8sJob] = {}

    def job_of(labels: dict) -> K8sJob | None:
        name = labels.get("job_name")
        if not name:
            return None
        key = (labels.get("namespace", ""), name)
        return jobs.setdefault(key, K8sJob(namespace=key[0], name=name))

    for labels, value in _last(client, "kube_job_status_start_time", width, until, ns):
        if (job := job_of(labels)) is not None:
            job.start = value
    for labels, value in _last(client, "kube_job_status_completion_time", width, until, ns):
        if (job := job_of(labels)) is not None:
            job.completion = value
    for name, attr in (("kube_job_complete", "complete"), ("kube_job_failed", "failed")):
        for labels, value in _last(client, name, width, until,
                                   [*ns, ("condition", "=", "true")]):
            if (job := job_of(labels)) is not None and value >= 1:
                setattr(job, attr, True)
    for labels, value in _last(client, "kube_job_spec_parallelism", width, until, ns):
        if (job := job_of(labels)) is not None and value >= 1:
            job.parallelism = int(value)
    for labels, _ in _last(client, "kube_job_owner", width, until, ns):
        if (job := job_of(labels)) is not None and labels.get("owner_kind"):
            job.owner_kind, job.owner_name = labels["owner_kind"], labels.get("owner_name", "")
    live = client.query(f"kube_job_status_start_time{selector(ns)}", at=until)
    for item in live:
        if (job := job_of(item.get("metric") or {})) is not None:
            job.present = True
    return jobs


def _pods(client: PrometheusClient, width: int, until: float, ns: list, jobs: dict,
          job_name: str | None = None) -> None:
    """Each Job's pods: their nodes, GPU and MIG slice requests, last container exit."""
    owner: dict[tuple[str, str], K8sJob] = {}
    only = [("owner_name", "=", job_name)] if job_name else []
    for labels, _ in _last(client, "kube_pod_owner", width, until,
                           [*ns, ("owner_kind", "=", "Job"), *only]):
        job = jobs.get((labels.get("namespace", ""), labels.get("owner_name", "")))
        if job is not None and labels.get("pod"):
            job.pods.setdefault(labels["pod"], K8sPod())
            owner[(job.namespace, labels["pod"])] = job

    def pod_of(labels: dict) -> K8sPod | None:
        job = owner.get((labels.get("namespace", ""), labels.get("pod", "")))
        return job.pods[labels["pod"]] if job is not None else None

    for labels, _ in _last(client, "kube_pod_info", width, until, ns):
        if (pod := pod_of(labels)) is not None and labels.get("node"):
            pod.node = labels["node"]
    for labels, value in _last(client, "kube_pod_container_resource_requests", width, until,
                               [*ns, ("resource", "=~", f"{GPU_RESOURCE}|{MIG_RESOURCES}")]):
        if (pod := pod_of(labels)) is None:
            continue
        resource = labels.get("resource", "")
        if (profile := mig_resource(resource)) is not None:
            pod.slices[profile] = pod.slices.get(profile, 0.0) + value
        elif resource == GPU_RESOURCE:
            pod.gpus += value
    for labels, value in _last(client, "kube_pod_completion_time", width, until, ns):
        if (pod := pod_of(labels)) is not None:
            pod.done = max(value, pod.done or value)


def _failed_at(client: PrometheusClient, width: int, until: float, ns: list,
               jobs: list[K8sJob]) -> None:
    """The first ``kube_job_failed{condition="true"}`` sample (to within
    :data:`FAILED_STEP` s) of ``jobs``: failed Jobs with no completion time and no pod exit
    recorded (one query per :data:`NAMES_PER_QUERY` Jobs)."""
    by_key = {(j.namespace, j.name): j for j in jobs}
    names = sorted({j.name for j in jobs})
    for i in range(0, len(names), NAMES_PER_QUERY):
        wanted = [("job_name", "=~", regex_of(names[i:i + NAMES_PER_QUERY])),
                  ("condition", "=", "true")]
        promql = (f"min_over_time(timestamp(kube_job_failed{selector([*ns, *wanted])})"
                  f"[{width}s:{FAILED_STEP}s])")
        for item in client.query(promql, at=until):
            labels = item.get("metric") or {}
            job = by_key.get((labels.get("namespace", ""), labels.get("job_name", "")))
            try:
                value = float(item["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                continue
            if job is not None and math.isfinite(value):
                job.failed_at = value


def _dcgm_index(client: PrometheusClient, width: int, until: float) -> DcgmIndex:
    """Every pod and host DCGM series of either busy field name, with GPU model and MIG
    profile (label sets only: one query per field)."""
    index = DcgmIndex()
    for name in (GR_ENGINE, GPU_UTIL):
        found = client.query(f"count by ({', '.join(DCGM_LABELS)}) "
                             f"(last_over_time({name}[{width}s]))", at=until)
        for item in found:
            index.add(item.get("metric") or {})
    return index


def _state(job: K8sJob) -> str:
    if job.complete and not job.failed:
        return "completed"
    return "failed" if job.failed else "running"


def _trace(client: PrometheusClient, job: K8sJob, record: dict, index: DcgmIndex,
           last: float, max_points: int | None) -> tuple[dict | None, int, str | None]:
    """(trace, samples read, a note) of a GPU Job: by its pods, else by its nodes."""
    _, how = index.match(job)
    pods = [(job.namespace, p) for p in sorted(job.pods)] if how == "pods" else []
    found = fetch_trace(client, record["start"], last, pods=pods,
                        hosts=[] if pods else job.nodes(), labels=index.labels,
                        max_points=max_points)
    points = sum(len(s["values"]) for s in found)
    problem = None if pods else node_trace_problem(job, found, record["start"], last,
                                                   record["gpus"])
    if problem:
        return None, points, problem
    return trace_from_series(found, record["start"], last), points, None


def job_source(url: str, namespace: str, name: str) -> str:
    """The store source of a Job: ``kubernetes:URL#NAMESPACE/JOB``."""
    return f"kubernetes:{url}#{namespace}/{name}"


def fetch_k8s_jobs(client: PrometheusClient, since: float, until: float, *,
                   namespace: str | None = None, job_key_rule: str | None = None,
                   traces: bool = True, max_series: int | None = MAX_SERIES,
                   job_name: str | None = None,
                   max_points: int | None = 5_000_000,
                   progress: Callable[[int, int], None] | None = None) -> FetchedK8s:
    """Read and join the Jobs seen in ``[since, until]`` (module doc); writes nothing.

    With ``job_name`` only that Job is read, and a running one is returned too (state
    ``running``, its time so far, its trace until ``until``): what ``jobcast check`` asks.
    """
    if not until > since:
        raise PrometheusError(f"the time range is empty (--since {iso_time(since)} is not "
                              f"before --until {iso_time(until)})")
    width = max(1, math.ceil(until - since))
    out = FetchedK8s(url=client.url)
    out.series = count_series(client, until - since, until, namespace)
    if max_series is not None and out.series > max_series:
        raise PrometheusError(
            f"{iso_time(since)} to {iso_time(until)} holds {out.series:,} series of "
            f"kube-state-metrics and DCGM, over the limit of {max_series:,} (--max-series); "
            "narrow --since/--until, add --namespace, or raise --max-series")
    ns = _matchers(namespace)
    jobs = _jobs(client, width, until, [*ns, *([("job_name", "=", job_name)] if job_name
                                              else [])])
    _pods(client, width, until, ns, jobs, job_name)
    _failed_at(client, width, until, ns, [
        j for j in jobs.values() if j.failed and j.completion is None
        and not any(p.done is not None and p.done >= (j.start or 0.0) for p in j.pods.values())])
    index = _dcgm_index(client, width, until)
    todo = sorted(jobs.values(), key=lambda j: (j.start or 0.0, j.namespace, j.name))
    points = 0
    for i, job in enumerate(todo, start=1):
        source = job_source(client.url, job.namespace, job.name)
        state = _state(job)
        if job.start is None:
            out.skipped.append({"job": job.label, "reason": "never started"})
        elif state == "running" and not (job_name and job.present):
            reason = ("still running; ingest it after it ends" if job.present else
                      "lost: deleted before it completed or failed (no end recorded)")
            out.skipped.append({"job": job.label, "reason": reason})
        else:
            try:
                record, deployment, dep_key, notes = join(job, index, job_key_rule, state,
                                                          until)
            except ParseError as exc:
                out.rejected.append(ParseError(exc.reason, source=source))
                continue
            trace = None
            last = until if state == "running" else record["end"]
            if traces and record["gpus"] and last is not None and last > record["start"]:
                trace, read, note = _trace(client, job, record, index, last, None
                                           if max_points is None
                                           else max(1, max_points - points))
                points += read
                notes += [note] if note else []
            run = whole_job_run(FORMAT, record, deployment=deployment,
                                deployment_key=dep_key, notes=notes, trace=trace)
            out.runs.append((source, run))
        if progress:
            progress(i, len(todo))
    out.requests = client.requests_made
    return out


def canonical_hash(run: ParsedRun) -> tuple[str, int]:
    """SHA-256 (and size) of a canonical JSON of a Job's record and deployment."""
    dep = run.stored_key()  # a job's deployment or its ``gpu-x<n>`` key: never both
    text = json.dumps({"record": run.meta["whole_job"], "deployment": dep},
                      sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest(), len(text)


def store_k8s_jobs(store, fetched: FetchedK8s) -> dict:
    """Write each joined Job into ``store`` (one transaction each); a report dict."""
    from ingest.pipeline import check_run

    report: dict[str, list] = {"added": [], "duplicates": [], "skipped": fetched.skipped,
                               "rejected": list(fetched.rejected)}
    known = {r.source for r in store.runs() if r.format == FORMAT}
    for source, run in fetched.runs:
        record = cast("dict[str, Any]", run.meta["whole_job"])  # set by whole_job_run
        if source in known:
            report["duplicates"].append({"source": source, "job": record["job_id"]})
            continue
        try:
            check_run(run, 0)
        except ParseError as exc:
            report["rejected"].append(ParseError(exc.reason, source=source))
            continue
        content_hash, size = canonical_hash(run)
        if store.add_file(content_hash=content_hash, source=source, fmt=FORMAT, size=size,
                          parsed=[run]) is None:
            report["duplicates"].append({"source": source, "job": record["job_id"]})
            continue
        known.add(source)
        report["added"].append({
            "source": source, "job": record["job_id"], "key": record["key"],
            "state": record["state"], "seconds": record["seconds"],
            "deployment": run.stored_key(), "gpus": record["gpus"], "gpu_model": record["gpu_type"],
            "trace": bool(run.meta.get("trace"))})
    return report
