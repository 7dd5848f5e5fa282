"""Kubernetes Jobs from a real Prometheus: kube-state-metrics + DCGM -> whole-job runs.

Rules
-----
* Series as kube-state-metrics v2 writes them: ``kube_job_status_start_time`` and
  ``kube_job_status_completion_time`` (unix s), ``kube_job_complete``/``kube_job_failed``
  (``condition="true"``), ``kube_job_spec_parallelism``, ``kube_job_owner`` (``owner_kind=
  "CronJob"``: the CronJob is the recurring job), all keyed by ``job_name``/``namespace``;
  ``kube_pod_owner`` (``owner_kind="Job"``, ``owner_name``), ``kube_pod_info`` (``node``) and
  ``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}`` keyed by
  ``pod``/``namespace``; DCGM's ``modelName`` by pod or host (:mod:`.dcgm`).
* Every series is read with ``last_over_time(...[window])`` at ``--until``: a Job deleted
  during the window (e.g. by ``ttlSecondsAfterFinished``) is still seen with its last values.
* Before asking, one counting query checks that the selected series number at most
  ``max_series`` (``--max-series``); past it the error names the count and the flags.
* Per Job: the key is its CronJob's name, else its name (or a ``--job-key`` rule); GPUs are
  the largest per-pod request times the Jobs's parallelism (retried pods are not more GPUs);
  nodes the distinct nodes of its pods (at most the parallelism); the GPU model is the
  ``modelName`` of DCGM series naming one of its pods, else its pods' nodes, by the fleet
  catalog's name; duration is completion - start.
* Complete Jobs become finished runs; failed ones are kept with state ``failed`` (end
  unknown unless a completion time was recorded); running ones (still present at
  ``--until``) are skipped; a Job gone before it ended (deleted mid-window) is skipped as
  ``lost``. Partial joins are rejections that say what is missing: no pod of the Job, a pod
  without a node and no DCGM series naming it, a GPU model nowhere to be found.
* With traces on, each finished or failed GPU Job gets its DCGM trace over its life, by pod
  labels, else by host (:func:`.dcgm.trace_from_series`), bounded.
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
from typing import TYPE_CHECKING, Any, cast

from ingest.events import ParsedRun, ParseError
from ingest.prometheus.client import PrometheusClient, PrometheusError
from ingest.prometheus.dcgm import (
    GPU_UTIL,
    GR_ENGINE,
    fetch_trace,
    host_of,
    pod_of,
    trace_from_series,
)
from ingest.prometheus.names import iso_time, selector
from ingest.whole_job import gpu_deployment, job_key, whole_job_run

if TYPE_CHECKING:
    from fleet.deployment import Deployment

FORMAT = "kubernetes"
MAX_SERIES = 200_000
JOB_SERIES = ("kube_job_status_start_time", "kube_job_status_completion_time",
              "kube_job_complete", "kube_job_failed", "kube_job_spec_parallelism",
              "kube_job_owner")
POD_SERIES = ("kube_pod_owner", "kube_pod_info", "kube_pod_container_resource_requests")
GPU_RESOURCE = "nvidia_com_gpu"


@dataclass
class K8sJob:
    """One Kubernetes Job as joined from the series."""

    namespace: str
    name: str
    start: float | None = None
    completion: float | None = None
    complete: bool = False
    failed: bool = False
    parallelism: int = 1
    owner_kind: str = ""
    owner_name: str = ""
    present: bool = False  # its start-time series is still there at --until
    pods: dict[str, dict] = field(default_factory=dict)  # pod -> {node, gpus}


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
    """Each Job's pods, their nodes and GPU requests."""
    owner: dict[tuple[str, str], K8sJob] = {}
    only = [("owner_name", "=", job_name)] if job_name else []
    for labels, _ in _last(client, "kube_pod_owner", width, until,
                           [*ns, ("owner_kind", "=", "Job"), *only]):
        job = jobs.get((labels.get("namespace", ""), labels.get("owner_name", "")))
        if job is not None and labels.get("pod"):
            job.pods.setdefault(labels["pod"], {"node": None, "gpus": 0.0})
            owner[(job.namespace, labels["pod"])] = job
    for labels, _ in _last(client, "kube_pod_info", width, until, ns):
        job = owner.get((labels.get("namespace", ""), labels.get("pod", "")))
        if job is not None and labels.get("node"):
            job.pods[labels["pod"]]["node"] = labels["node"]
    for labels, value in _last(client, "kube_pod_container_resource_requests", width, until,
                               [*ns, ("resource", "=", GPU_RESOURCE)]):
        job = owner.get((labels.get("namespace", ""), labels.get("pod", "")))
        if job is not None:
            job.pods[labels["pod"]]["gpus"] += value


def _models(client: PrometheusClient, width: int, until: float) -> tuple[dict, dict]:
    """GPU model by (namespace, pod) and by host, from DCGM series of either busy field."""
    by_pod: dict[tuple[str, str], str] = {}
    by_host: dict[str, str] = {}
    labels = "modelName, Hostname, hostname, pod, namespace, pod_name, pod_namespace"
    for name in (GR_ENGINE, GPU_UTIL):
        found = client.query(f"count by ({labels}) (last_over_time({name}[{width}s]))",
                             at=until)
        for item in found:
            metric = item.get("metric") or {}
            model = metric.get("modelName")
            if not model:
                continue
            if (pod := pod_of(metric)) is not None:
                by_pod.setdefault(pod, model)
            if (host := host_of(metric)) is not None:
                by_host.setdefault(host, model)
    return by_pod, by_host


def _join(job: K8sJob, by_pod: dict, by_host: dict, rule: str | None,
          ) -> tuple[dict, Deployment | None, str | None, list[str]]:
    """(record, deployment, deployment key, notes) of a Job; ParseError on a partial join."""
    if not job.pods:
        raise ParseError(f"no pod of Job {job.namespace}/{job.name} in kube_pod_owner (its "
                         "pods were deleted before the window, or kube-state-metrics does "
                         "not export pods)")
    per_pod = max(p["gpus"] for p in job.pods.values())
    if per_pod != int(per_pod):
        raise ParseError(f"Job {job.namespace}/{job.name}: {per_pod:g} GPUs per pod")
    gpus = int(per_pod) * min(job.parallelism, len(job.pods))
    nodes = {p["node"] for p in job.pods.values() if p["node"]}
    model = next((by_pod[(job.namespace, pod)] for pod in sorted(job.pods)
                  if (job.namespace, pod) in by_pod), None)
    if model is None:
        model = next((by_host[n] for n in sorted(nodes) if n in by_host), None)
    if gpus and model is None:
        nodeless = sorted(p for p, info in job.pods.items() if not info["node"])
        why = (f"pod {nodeless[0]} has no node in kube_pod_info and no DCGM series names it"
               if nodeless else f"no DCGM series names its pods or nodes "
               f"({', '.join(sorted(nodes))})")
        raise ParseError(f"Job {job.namespace}/{job.name}: GPU model unknown: {why}")
    node_count = max(1, min(len(nodes), job.parallelism))
    deployment, deployment_key, notes = gpu_deployment(gpus, node_count, model)
    key = (job_key(job.owner_name) if job.owner_kind == "CronJob" and job.owner_name
           else job_key(job.name, None, rule))
    end = job.completion
    seconds = max(0.0, end - job.start) if end is not None and job.start is not None else 0.0
    state = "completed" if job.complete and not job.failed else "failed"
    if state == "failed" and end is None:
        notes.append("failed Job: no completion time, wall time unknown")
    record = {"scheduler": "kubernetes", "job_id": f"{job.namespace}/{job.name}",
              "name": job.name, "key": key, "state": state, "seconds": seconds,
              "submit": None, "start": job.start, "end": end, "gpus": gpus,
              "gpu_type": model, "nodes": node_count, "namespace": job.namespace,
              "pods": sorted(job.pods)[:16], "node_list": ",".join(sorted(nodes))[:500]}
    if job.owner_kind:
        record["owner"] = f"{job.owner_kind}/{job.owner_name}"
    return record, deployment, deployment_key, notes


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
    by_pod, by_host = _models(client, width, until)
    todo = sorted(jobs.values(), key=lambda j: (j.start or 0.0, j.namespace, j.name))
    points = 0
    for i, job in enumerate(todo, start=1):
        source = job_source(client.url, job.namespace, job.name)
        label = f"{job.namespace}/{job.name}"
        if job.start is None:
            out.skipped.append({"job": label, "reason": "never started"})
        elif not (job.complete or job.failed) and not (job_name and job.present):
            reason = ("still running; ingest it after it ends" if job.present else
                      "lost: deleted before it completed or failed (no end recorded)")
            out.skipped.append({"job": label, "reason": reason})
        else:
            try:
                record, deployment, dep_key, notes = _join(job, by_pod, by_host, job_key_rule)
            except ParseError as exc:
                out.rejected.append(ParseError(exc.reason, source=source))
                continue
            if not (job.complete or job.failed):  # a running Job, asked for by name
                record.update(state="running", seconds=max(0.0, until - job.start))
            trace = None
            last = record["end"] if record["end"] is not None else (
                until if record["state"] == "running" else None)
            if traces and record["gpus"] and last is not None:
                pods = [(job.namespace, p) for p in sorted(job.pods)]
                hosts = [] if any(pod in by_pod for pod in pods) else \
                    sorted({p["node"] for p in job.pods.values() if p["node"]})
                found = fetch_trace(client, record["start"], last,
                                    pods=pods if not hosts else (), hosts=hosts,
                                    max_points=None if max_points is None
                                    else max(1, max_points - points))
                points += sum(len(s["values"]) for s in found)
                trace = trace_from_series(found, record["start"], last)
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
