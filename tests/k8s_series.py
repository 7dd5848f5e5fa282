"""Series of Kubernetes CronJob runs as kube-state-metrics and dcgm-exporter write them.

The metric names and label names (and their order) are read from the recorded public
samples in ``tests/data/kubernetes/`` (kube-state-metrics' own expected outputs, a real
dcgm-exporter scrape from a GPU Operator node; provenance in tests/data/README.md), so the
generated series carry exactly the exporters' labels; only the values are this module's.
:func:`openmetrics` writes them for ``promtool tsdb create-blocks-from openmetrics``.

Per Job: kube-state-metrics series from its creation until its deletion (``ttl`` after it
ends, as ``ttlSecondsAfterFinished`` does; ``deleted_at`` deletes it earlier), one pod per
GPU node it uses (``kube_pod_completion_time`` once it ended, unless ``pod_done`` is off),
and dcgm-exporter series of the node's GPUs it holds (from ``first_gpu``) while the pod
runs, with the pod labels (``pod``/``namespace``, the old ``pod_name``/``pod_namespace``, or
``exported``: the ``exported_pod``/``exported_namespace``/``exported_container`` Prometheus
writes when the scrape's own target labels ``pod``, ``namespace``, ``container``, ``instance``
... name the exporter, ``honor_labels: false``) and the host label spelled ``Hostname``
(exporters before May 2026), ``hostname``, or ``both`` (``Hostname`` the exporter pod's own
name, ``hostname`` the node). A MIG Job (``mig="2g.20gb"``) asks for
``nvidia_com_mig_2g_20gb`` (or ``nvidia_com_gpu`` with ``mig_resource`` off: the single
strategy) and its series carry ``GPU_I_PROFILE``/``GPU_I_ID`` after ``modelName``.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "kubernetes"
_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)")


def label_names() -> dict[str, list[str]]:
    """Metric name (with a ``#condition``/``#resource`` variant) -> its label names in order,
    from the bundled samples."""
    out: dict[str, list[str]] = {}
    for path in sorted(DATA.glob("*.prom")):
        for line in path.read_text().splitlines():
            m = _LINE.fullmatch(line.strip())
            if not m:
                continue
            names = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(2))
            out.setdefault(m.group(1), names)
    return out


NAMES = label_names()
# gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION
DCGM_BASE = NAMES["DCGM_FI_DEV_SM_CLOCK"]


@dataclass
class Node:
    name: str
    model: str  # modelName as the driver reports it, e.g. "NVIDIA A100-SXM4-80GB"
    gpus: int = 8
    prof: bool = True  # DCGM profiling fields (GR_ENGINE_ACTIVE ...) exported
    host_label: str = "Hostname"  # or "hostname", or "both" (Hostname: the exporter pod)

    @property
    def exporter(self) -> str:
        """The name of the dcgm-exporter pod on this node."""
        return f"nvidia-dcgm-exporter-{zlib.crc32(self.name.encode()) % 99999:05d}"


@dataclass
class JobRun:
    """One Job of a CronJob. ``seconds`` None: still running at the end of the data."""

    cronjob: str
    start: float
    seconds: float | None
    node: Node
    gpus: int = 8
    namespace: str = "ml"
    state: str = "complete"  # complete | failed | running
    busy: float = 0.85
    pod_labels: str | None = "new"  # new | old | exported | None (no pod mapping)
    deleted_at: float | None = None  # the Job deleted (its series stop) at this time
    node_known: bool = True  # kube_pod_info names the node
    name: str = ""
    owner: bool = True  # owned by the CronJob
    first_gpu: int = 0  # the node's first GPU the pod holds
    mig: str | None = None  # MIG profile of the slices it holds, e.g. "2g.20gb"
    mig_resource: bool = True  # asks nvidia_com_mig_<profile> (else nvidia_com_gpu)
    pod_done: bool = True  # kube_pod_completion_time once it ended
    dcgm: bool = True  # a dcgm-exporter watches its node

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"{self.cronjob}-{int(self.start // 60)}"

    @property
    def end(self) -> float | None:
        return None if self.seconds is None else self.start + self.seconds

    @property
    def pod(self) -> str:
        return f"{self.name}-{zlib.crc32(self.name.encode()) % 99999:05d}"


@dataclass
class Series:
    samples: dict[tuple[str, tuple], list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, name: str, labels: list[tuple[str, str]], t: float, value: float) -> None:
        self.samples.setdefault((name, tuple(labels)), []).append((t, value))


def _labels(metric: str, values: dict[str, str]) -> list[tuple[str, str]]:
    return [(k, values.get(k, "")) for k in NAMES[metric]]


def _ticks(lo: float, hi: float, step: float) -> list[float]:
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(max(0, int((hi - first) // step) + 1))]


def _ksm(out: Series, run: JobRun, until: float, step: float, ttl: float) -> None:
    created = run.start - 5.0
    gone = min(until, (run.end + ttl) if run.end is not None else until)
    if run.deleted_at is not None:
        gone = min(gone, run.deleted_at)
    job = {"job_name": run.name, "namespace": run.namespace}
    uid = f"uid-{run.pod}"
    pod = {"namespace": run.namespace, "pod": run.pod, "uid": uid}
    for t in _ticks(created, gone, step):
        owner = {**job, "owner_is_controller": "true", "owner_kind": "CronJob",
                 "owner_name": run.cronjob} if run.owner else {
            **job, "owner_is_controller": "", "owner_kind": "", "owner_name": ""}
        out.add("kube_job_owner", _labels("kube_job_owner", owner), t, 1)
        out.add("kube_job_spec_parallelism", _labels("kube_job_spec_parallelism", job), t, 1)
        out.add("kube_job_status_start_time", _labels("kube_job_status_start_time", job), t,
                run.start)
        ended = run.end is not None and t >= run.end
        if ended and run.state == "complete":
            out.add("kube_job_status_completion_time",
                    _labels("kube_job_status_completion_time", job), t, run.end)
        for condition in ("false", "true", "unknown"):
            flag = {**job, "condition": condition}
            if ended and run.state == "complete":
                out.add("kube_job_complete", _labels("kube_job_complete", flag), t,
                        1 if condition == "true" else 0)
            if ended and run.state == "failed":
                out.add("kube_job_failed", _labels("kube_job_failed", flag), t,
                        1 if condition == "true" else 0)
        out.add("kube_pod_owner", _labels("kube_pod_owner", {
            **pod, "owner_is_controller": "true", "owner_kind": "Job",
            "owner_name": run.name}), t, 1)
        out.add("kube_pod_info", _labels("kube_pod_info", {
            **pod, "created_by_kind": "Job", "created_by_name": run.name,
            "host_ip": "10.0.0.1", "pod_ip": "10.1.0.1", "priority_class": "",
            "host_network": "false", "node": run.node.name if run.node_known else ""}), t, 1)
        resource = ("nvidia_com_mig_" + re.sub(r"[^a-z0-9]", "_", run.mig)
                    if run.mig and run.mig_resource else "nvidia_com_gpu")
        out.add("kube_pod_container_resource_requests",
                _labels("kube_pod_container_resource_requests", {
                    **pod, "container": "train", "node": run.node.name,
                    "resource": resource, "unit": "integer"}), t, run.gpus)
        if ended and run.pod_done and run.end is not None:
            out.add("kube_pod_completion_time", _labels("kube_pod_completion_time", pod), t,
                    run.end)


FIELD_VALUES = {  # DCGM field -> value from the busy ratio b and the GPU's jitter
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": lambda b: b,
    "DCGM_FI_DEV_GPU_UTIL": lambda b: round(100 * min(1.0, b * 1.05)),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": lambda b: 0.45 * b,
    "DCGM_FI_PROF_DRAM_ACTIVE": lambda b: 0.35 * b,
    "DCGM_FI_DEV_POWER_USAGE": lambda b: 60 + 300 * b,
    "DCGM_FI_DEV_SM_CLOCK": lambda b: 1410 if b > 0.05 else 210,
}


def _pod_values(run: JobRun) -> dict[str, str]:
    """The DCGM pod labels of ``run`` in its spelling (module doc)."""
    uid = f"uid-{run.pod}"
    if run.pod_labels == "new":
        return {"container": "train", "namespace": run.namespace, "pod": run.pod,
                "pod_uid": uid}
    if run.pod_labels == "old":
        return {"container_name": "train", "pod_name": run.pod,
                "pod_namespace": run.namespace, "pod_uid": uid}
    if run.pod_labels == "exported":
        return {"exported_container": "train", "exported_namespace": run.namespace,
                "exported_pod": run.pod, "pod_uid": uid, "container": "nvidia-dcgm-exporter",
                "endpoint": "gpu-metrics", "instance": "10.0.3.7:9400",
                "job": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
                "pod": run.node.exporter, "service": "nvidia-dcgm-exporter"}
    return {}


def _dcgm_labels(run: JobRun, i: int) -> list[tuple[str, str]]:
    """Labels of the ``i``-th GPU (or MIG slice) the run holds, in the exporter's order."""
    node = run.node
    gpu = run.first_gpu if run.mig else run.first_gpu + i
    base = {"gpu": str(gpu), "UUID": f"GPU-{node.name}-{gpu:04d}",
            "pci_bus_id": f"00000000:{gpu:02X}:00.0", "device": f"nvidia{gpu}",
            "modelName": node.model, "DCGM_FI_DRIVER_VERSION": "570.195.03"}
    names: list[str] = []
    for name in DCGM_BASE:
        if name == "Hostname":
            names += ["Hostname", "hostname"] if node.host_label == "both" else [
                node.host_label]
        else:
            names.append(name)
        if name == "modelName" and run.mig:
            names += ["GPU_I_PROFILE", "GPU_I_ID"]
            base.update(GPU_I_PROFILE=run.mig, GPU_I_ID=str(i + 1))
    if node.host_label == "both":
        base.update(Hostname=node.exporter, hostname=node.name)
    else:
        base[node.host_label] = node.name
    return [(k, base.get(k, "")) for k in names] + sorted(_pod_values(run).items())


def _dcgm(out: Series, run: JobRun, until: float, step: float, rng: random.Random) -> None:
    end = run.end if run.end is not None else (run.deleted_at or until)
    node = run.node
    fields = [f for f in FIELD_VALUES if node.prof or not f.startswith("DCGM_FI_PROF")]
    held = run.gpus if run.mig else min(run.gpus, node.gpus - run.first_gpu)
    for i in range(held):
        labels = _dcgm_labels(run, i)
        for t in _ticks(run.start, end, step):
            b = max(0.0, min(1.0, run.busy + rng.gauss(0, 0.04)))
            for f in fields:
                out.add(f, labels, t, FIELD_VALUES[f](b))


def openmetrics(runs: list[JobRun], until: float, *, step: float = 30.0, ttl: float = 600.0,
                seed: int = 0) -> str:
    """OpenMetrics text of ``runs`` (families together, samples in time order, ``# EOF``)."""
    rng = random.Random(seed)
    out = Series()
    for run in runs:
        _ksm(out, run, until, step, ttl)
        if run.dcgm:
            _dcgm(out, run, until, step, rng)
    by_family: dict[str, list] = {}
    for (name, labels), samples in out.samples.items():
        by_family.setdefault(name, []).append((labels, samples))
    lines = []
    for name in sorted(by_family):
        lines.append(f"# TYPE {name} gauge")
        for labels, samples in sorted(by_family[name]):
            text = ",".join(f'{k}="{v}"' for k, v in labels if v != "")
            head = f"{name}{{{text}}}" if text else name
            last = None
            for t, v in sorted(samples):
                if last is not None and t <= last:
                    continue
                lines.append(f"{head} {float(v)!r} {t:.3f}")
                last = t
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
