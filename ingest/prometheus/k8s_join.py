"""One Kubernetes Job's series joined into a whole-job record (pure: no requests).

Rules
-----
* A Job (:class:`K8sJob`) holds what kube-state-metrics says of it and of its pods
  (:class:`K8sPod`): the node, whole-GPU requests (``nvidia_com_gpu``), MIG slice requests
  (``nvidia_com_mig_<profile>``, e.g. ``nvidia_com_mig_2g_20gb`` is profile ``2g.20gb``) and
  when the pod's containers last ended (``kube_pod_completion_time``).
* **Time.** A complete Job ends at ``kube_job_status_completion_time``. A failed Job ends at
  the first known of: a completion time where one was recorded, its pods' last container
  exit (``kube_pod_completion_time``), the first sample of ``kube_job_failed{condition=
  "true"}`` (to within :data:`FAILED_STEP` s); with none of them it is rejected, never stored
  as a 0 s run. A running Job (asked for by name) is ``running``, ``until - start`` so far.
* **GPUs.** The largest per-pod request times the Job's parallelism (at most its pod count):
  retried pods are not more GPUs. A pod asking for MIG slices holds a share of one GPU:
  ``gpus`` counts slices, ``mig_profile`` names the profile and the deployment is the GPU
  model followed by ``MIG <profile>`` (key e.g. ``nvidia-a100-sxm4-40gb-mig-2g20gb-x1``),
  never ``cpu``. With the single MIG strategy (the pod asks for ``nvidia_com_gpu``) the
  profile is the ``GPU_I_PROFILE`` of the DCGM series naming its pods (else its nodes), where
  they show that one profile and no whole GPU. Whole GPUs and slices, or slices of two
  profiles, in one Job are rejected.
* **GPU model and trace.** DCGM series are matched to the Job's own pods first (any pod label
  spelling, :mod:`.dcgm`), then to its pods' nodes (any host label spelling, the value that is
  one of those nodes winning). A trace by node is kept only where the node's series hold no
  more GPUs than the Job's pods asked for on it: else (a 1-GPU pod on an 8-GPU node) it would
  mix in other pods' GPUs, so it is dropped with a note that says so, and the GPU count stays
  kube-state-metrics' request. No series naming its pods or nodes is a rejection that names
  the labels looked for.
* **Key.** The owning CronJob's name (``kube_job_owner``); else the ``--job-key`` rule's;
  else, for a Job named ``<name>-<minute since 1970>`` that started within
  :data:`CRON_LAG` s after that minute (how the CronJob controller names its Jobs),
  ``<name>``, with a note; else the Job's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleet.deployment import Deployment
from ingest.events import ParseError
from ingest.prometheus.dcgm import (
    HOST_LABELS,
    POD_LABELS,
    gpus_in,
    hosts_named,
    mig_profile,
    pods_named,
)
from ingest.whole_job import gpu_deployment, job_key

FAILED_STEP = 60  # s: the step of the query for a failed condition's first sample
CRON_LAG = 3600.0
GPU_RESOURCE = "nvidia_com_gpu"
MIG_RESOURCES = "nvidia_com_mig_.+"
_MIG_RESOURCE = re.compile(r"nvidia_com_mig_(\d+)g_(\d+)gb(?:_([a-z0-9_]+))?")
_CRON_NAME = re.compile(r"(.+)-(\d{7,})")
POD_NAMES = tuple(pod for pod, _ in POD_LABELS)
LOOKED_PODS = f"looked for {', '.join(POD_NAMES)}"
LOOKED_HOSTS = f"looked for {', '.join(HOST_LABELS)}"


def mig_resource(resource: str) -> str | None:
    """The MIG profile of a kube-state-metrics resource name (``nvidia_com_mig_2g_20gb`` ->
    ``2g.20gb``, ``nvidia_com_mig_1g_10gb_me`` -> ``1g.10gb+me``), or None."""
    m = _MIG_RESOURCE.fullmatch(resource)
    if not m:
        return None
    extra = f"+{m.group(3).replace('_', '+')}" if m.group(3) else ""
    return f"{m.group(1)}g.{m.group(2)}gb{extra}"


@dataclass
class K8sPod:
    """One pod of a Job as kube-state-metrics has it."""

    node: str | None = None
    gpus: float = 0.0
    slices: dict[str, float] = field(default_factory=dict)  # MIG profile -> slices
    done: float | None = None  # kube_pod_completion_time


@dataclass
class K8sJob:
    """One Kubernetes Job as joined from the series."""

    namespace: str
    name: str
    start: float | None = None
    completion: float | None = None
    complete: bool = False
    failed: bool = False
    failed_at: float | None = None  # first sample of kube_job_failed{condition="true"}
    parallelism: int = 1
    owner_kind: str = ""
    owner_name: str = ""
    present: bool = False  # its start-time series is still there at --until
    pods: dict[str, K8sPod] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def nodes(self) -> list[str]:
        """Its pods' nodes, sorted."""
        return sorted({p.node for p in self.pods.values() if p.node})


@dataclass
class Seen:
    """What the DCGM series naming one pod or host say: GPU model, MIG profiles."""

    model: str | None = None
    profiles: set[str] = field(default_factory=set)
    whole: bool = False  # a series of a whole GPU (no MIG profile) was seen

    def add(self, model: str | None, profile: str | None) -> None:
        """Note one series' model and profile."""
        self.model = self.model or model
        if profile:
            self.profiles.add(profile)
        else:
            self.whole = True

    def profile(self) -> str | None:
        """The one MIG profile of these series, None if they show none, several or whole
        GPUs too."""
        return next(iter(self.profiles)) if len(self.profiles) == 1 and not self.whole \
            else None


@dataclass
class DcgmIndex:
    """DCGM series by every pod and host they name, and the label names they carry."""

    by_pod: dict[tuple[str, str], Seen] = field(default_factory=dict)
    by_host: dict[str, Seen] = field(default_factory=dict)
    labels: set[str] = field(default_factory=set)

    def add(self, metric: dict) -> None:
        """Index one series' labels."""
        model, profile = metric.get("modelName") or None, mig_profile(metric)
        self.labels.update(k for k in (*POD_NAMES, *HOST_LABELS) if metric.get(k))
        for pod in pods_named(metric):
            self.by_pod.setdefault(pod, Seen()).add(model, profile)
        for host in hosts_named(metric):
            self.by_host.setdefault(host, Seen()).add(model, profile)

    def match(self, job: K8sJob) -> tuple[Seen | None, str]:
        """What the series naming the Job's pods say (``"pods"``), else its nodes'
        (``"nodes"``), else ``(None, "")``."""
        for how, hits in (
                ("pods", [self.by_pod[(job.namespace, p)] for p in sorted(job.pods)
                          if (job.namespace, p) in self.by_pod]),
                ("nodes", [self.by_host[n] for n in job.nodes() if n in self.by_host])):
            if hits:
                seen = Seen()
                for hit in hits:
                    seen.model = seen.model or hit.model
                    seen.profiles |= hit.profiles
                    seen.whole |= hit.whole
                return seen, how
        return None, ""


def requested(job: K8sJob) -> tuple[int, str | None]:
    """(GPUs or MIG slices in all, MIG profile or None) from the pods' requests."""
    profiles = {p for pod in job.pods.values() for p, n in pod.slices.items() if n > 0}
    whole = max((pod.gpus for pod in job.pods.values()), default=0.0)
    if len(profiles) > 1:
        raise ParseError(f"Job {job.label}: asks for MIG slices of several profiles "
                         f"({', '.join(sorted(profiles))}); one deployment cannot hold them")
    if profiles and whole:
        raise ParseError(f"Job {job.label}: asks for whole GPUs and MIG slices "
                         f"({next(iter(profiles))}) at once; one deployment cannot hold them")
    per_pod = (max(sum(pod.slices.values()) for pod in job.pods.values()) if profiles
               else whole)
    if per_pod != int(per_pod):
        raise ParseError(f"Job {job.label}: {per_pod:g} GPUs per pod")
    return int(per_pod) * min(job.parallelism, len(job.pods)), next(iter(profiles), None)


def end_of(job: K8sJob, state: str) -> tuple[float | None, str | None]:
    """(end time, a note on where it came from) of a Job in ``state`` (module rules)."""
    end, note = None, None
    if state == "completed":
        end = job.completion
        if end is None:
            raise ParseError(f"Job {job.label}: complete, but kube_job_status_completion_time "
                             "has no value")
    elif state == "failed":
        done = [p.done for p in job.pods.values()
                if p.done is not None and job.start is not None and p.done >= job.start]
        if job.completion is not None:
            end = job.completion
        elif done:
            end, note = max(done), ("failure time: its pods' last container exit "
                                    "(kube_pod_completion_time)")
        elif job.failed_at is not None:
            end, note = job.failed_at, ("failure time: the first kube_job_failed sample "
                                        f"(within {FAILED_STEP} s)")
        else:
            raise ParseError(f"Job {job.label}: failed, but no failure time (no "
                             "kube_job_status_completion_time, kube_pod_completion_time or "
                             "kube_job_failed sample): its wall time is unknown")
    if end is not None and job.start is not None and end < job.start:
        raise ParseError(f"Job {job.label}: ends ({end:.0f}) before it starts "
                         f"({job.start:.0f})")
    return end, note


def key_of(job: K8sJob, rule: str | None) -> tuple[str, str | None]:
    """(history key, a note when it was read from the name's CronJob suffix)."""
    if job.owner_kind == "CronJob" and job.owner_name:
        return job_key(job.owner_name), None
    m = _CRON_NAME.fullmatch(job.name)
    if not rule and m and job.start is not None and (
            -120.0 <= job.start - int(m.group(2)) * 60.0 <= CRON_LAG):
        return job_key(m.group(1)), (
            f"key {job_key(m.group(1))!r}: no kube_job_owner names a CronJob, but the Job is "
            "named as a CronJob's runs are (<cronjob>-<scheduled minute>)")
    return job_key(job.name, None, rule), None


def _model(job: K8sJob, seen: Seen | None, gpus: int) -> str | None:
    if not gpus or (seen is not None and seen.model):
        return seen.model if seen is not None else None
    nodeless = sorted(p for p, info in job.pods.items() if not info.node)
    why = (f"pod {nodeless[0]} has no node in kube_pod_info and no DCGM series names it "
           f"({LOOKED_PODS})" if nodeless else
           f"no DCGM series names its pods ({LOOKED_PODS}) or its nodes "
           f"{', '.join(job.nodes())} ({LOOKED_HOSTS})")
    raise ParseError(f"Job {job.label}: GPU model unknown: {why}")


def _deployment(gpus: int, nodes: int, model: str | None, profile: str | None
                ) -> tuple[Deployment | None, str | None, list[str]]:
    deployment, key, notes = gpu_deployment(gpus, nodes, model)
    if profile and deployment is not None:
        deployment = Deployment(f"{deployment.accelerator} MIG {profile}",
                                deployment.per_node, deployment.nodes)
        notes.append(f"MIG slices {profile} of {model}: a share of a GPU, stored under "
                     f"{deployment.key}")
    return deployment, key, notes


def join(job: K8sJob, index: DcgmIndex, rule: str | None, state: str,
         until: float) -> tuple[dict, Deployment | None, str | None, list[str]]:
    """(record, deployment, deployment key, notes) of a Job in ``state`` (``completed``,
    ``failed`` or ``running``); :class:`ParseError` on a partial join (module rules)."""
    if not job.pods:
        raise ParseError(f"no pod of Job {job.label} in kube_pod_owner (its pods were "
                         "deleted before the window, or kube-state-metrics does not export "
                         "pods)")
    gpus, profile = requested(job)
    seen, how = index.match(job)
    model = _model(job, seen, gpus)
    if gpus and profile is None and seen is not None:
        profile = seen.profile()  # the single MIG strategy: it asks for nvidia_com_gpu
    nodes = job.nodes()
    node_count = max(1, min(len(nodes), job.parallelism))
    deployment, deployment_key, notes = _deployment(gpus, node_count, model, profile)
    key, key_note = key_of(job, rule)
    end, end_note = end_of(job, state)
    notes += [n for n in (key_note, end_note) if n]
    start = job.start if job.start is not None else until
    seconds = max(0.0, (until if state == "running" else end or start) - start)
    record = {"scheduler": "kubernetes", "job_id": job.label, "name": job.name, "key": key,
              "state": state, "seconds": seconds, "submit": None, "start": job.start,
              "end": end, "gpus": gpus, "gpu_type": model, "nodes": node_count,
              "namespace": job.namespace, "pods": sorted(job.pods)[:16],
              "node_list": ",".join(nodes)[:500]}
    if profile:
        record["mig_profile"] = profile
    if job.owner_kind:
        record["owner"] = f"{job.owner_kind}/{job.owner_name}"
    return record, deployment, deployment_key, notes


def node_trace_problem(job: K8sJob, series: list[dict], start: float, end: float,
                       gpus: int) -> str | None:
    """Why DCGM series fetched by the Job's nodes are not its own trace (a node shows more
    GPUs than its pods asked for there), or None."""
    held: dict[str, float] = {}
    for pod in job.pods.values():
        if pod.node:
            held[pod.node] = held.get(pod.node, 0.0) + (sum(pod.slices.values()) or pod.gpus)
    for node, found in sorted(gpus_in(series, start, end, job.nodes()).items(),
                              key=lambda kv: str(kv[0])):
        if node in held and len(found) > held[node]:
            return (f"DCGM trace ambiguous: node {node} shows {len(found)} GPUs during the "
                    f"Job, its pods asked for {held[node]:g} there, and no DCGM series names "
                    f"its pods ({LOOKED_PODS}): trace not kept, {gpus} GPUs as "
                    "kube-state-metrics' resource requests say")
    return None
