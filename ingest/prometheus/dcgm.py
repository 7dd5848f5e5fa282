"""NVIDIA DCGM exporter series: GPU model, pod and host labels, and per-job traces.

Rules
-----
* Names as ``dcgm-exporter`` writes them (NVIDIA/dcgm-exporter, ``etc/default-counters.csv``
  and ``etc/dcp-metrics-included.csv``): GPU busy is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a
  ratio) where the profiling counters are on, else ``DCGM_FI_DEV_GPU_UTIL`` (per cent);
  tensor-pipe ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` and DRAM ``DCGM_FI_PROF_DRAM_ACTIVE``
  (ratios), power ``DCGM_FI_DEV_POWER_USAGE`` (W), SM clock ``DCGM_FI_DEV_SM_CLOCK`` (MHz),
  clock events ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (older ``..._CLOCK_THROTTLE_REASONS``;
  a bit mask).
* Labels: the GPU model is ``modelName``; a MIG slice carries ``GPU_I_PROFILE`` (e.g.
  ``2g.20gb``) and ``GPU_I_ID``. The pod is named by ``pod``/``namespace``, ``pod_name``/
  ``pod_namespace`` (the exporter's old-namespace option) or ``exported_pod``/
  ``exported_namespace`` (Prometheus renames the exporter's labels so when the scrape sets
  its own ``pod``, e.g. kube-prometheus-stack with ``honorLabels: false``), preferred in that
  order; the host by ``Hostname`` (exporters before May 2026), ``hostname``, ``node``,
  ``kubernetes_node`` or ``instance`` (its port dropped), in that order. Where a series
  carries several, the one whose value is a known pod (node) of the job wins
  (:func:`pod_of`, :func:`host_of`): ``Hostname`` may hold the exporter pod's own name.
* A GPU is ``(host, gpu, UUID, GPU_I_ID)`` (:func:`gpus_in`): a MIG slice is its own GPU.
* A trace (:func:`trace_from_series`) is bounded: a summary of a few numbers (means and
  quantiles over every GPU and sample) and at most :data:`MAX_TRACE_POINTS` points per series
  (means over the job's GPUs per time bucket), seconds counted from the job's start.
* A trace file (:func:`read_trace_file`) is JSON lines ``{"time": unix s, "<DCGM field>":
  value, ...}`` with optional ``gpu``, ``UUID``, ``modelName``, ``GPU_I_PROFILE``,
  ``GPU_I_ID``, ``hostname`` fields: what a recorder beside a job writes (the same fields
  as the exporter's).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from ingest.events import ParseError
from ingest.prometheus.client import PrometheusClient
from ingest.prometheus.names import promql_string
from ingest.whole_job import MAX_TRACE_POINTS

GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FIELDS: dict[str, tuple[tuple[str, float], ...]] = {  # trace name -> (field, scale) choices
    "busy": ((GR_ENGINE, 1.0), (GPU_UTIL, 0.01)),
    "tensor": (("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1.0),),
    "dram": (("DCGM_FI_PROF_DRAM_ACTIVE", 1.0),),
    "power_w": (("DCGM_FI_DEV_POWER_USAGE", 1.0),),
    "sm_clock_mhz": (("DCGM_FI_DEV_SM_CLOCK", 1.0),),
}
CLOCK_EVENTS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
# power cap (0x4), hardware slowdown (0x8), software/hardware thermal (0x20, 0x40), power brake
SLOWDOWN_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
TRACE_NAMES = tuple(f for choices in FIELDS.values() for f, _ in choices) + CLOCK_EVENTS
HOST_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "instance")
POD_LABELS = (("pod", "namespace"), ("pod_name", "pod_namespace"),
              ("exported_pod", "exported_namespace"))
MIG_PROFILE, MIG_INSTANCE = "GPU_I_PROFILE", "GPU_I_ID"
IDLE_BELOW = 0.2  # a sample with less busy than this counts as idle
_PORT = re.compile(r":\d+$")


def hosts_named(labels: dict) -> list[str]:
    """Every host value a series carries, in :data:`HOST_LABELS` order (``instance``
    without its port)."""
    out: list[str] = []
    for label in HOST_LABELS:
        value = labels.get(label)
        if value and label == "instance":
            value = _PORT.sub("", value)
        if value and value not in out:
            out.append(value)
    return out


def pods_named(labels: dict) -> list[tuple[str, str]]:
    """Every (namespace, pod) a series carries, in :data:`POD_LABELS` order."""
    return [(labels.get(namespace) or "", labels[pod]) for pod, namespace in POD_LABELS
            if labels.get(pod)]


def host_of(labels: dict, known: Collection[str] = ()) -> str | None:
    """The host a DCGM series names: the first value that is one of ``known`` (node names),
    else the first label present (module doc)."""
    named = hosts_named(labels)
    return next((h for h in named if h in known), named[0] if named else None)


def pod_of(labels: dict, known: Collection[tuple[str, str]] = ()) -> tuple[str, str] | None:
    """(namespace, pod) a DCGM series names: the first that is one of ``known``, else the
    first label spelling present, else None."""
    named = pods_named(labels)
    return next((p for p in named if p in known), named[0] if named else None)


def mig_profile(labels: dict) -> str | None:
    """The MIG profile of a series' GPU (``2g.20gb``), or None for a whole GPU."""
    value = str(labels.get(MIG_PROFILE) or "").strip()
    value = value[4:].strip() if value.upper().startswith("MIG ") else value
    return value or None


def gpu_of(labels: dict, known: Collection[str] = ()) -> tuple:
    """A GPU (or MIG slice) as ``(host, gpu, UUID, GPU_I_ID)``."""
    return (host_of(labels, known), labels.get("gpu"), labels.get("UUID"),
            labels.get(MIG_INSTANCE))


def gpus_in(series: Sequence[dict], start: float | None, end: float | None,
            known: Collection[str] = ()) -> dict[str | None, set[tuple]]:
    """The GPUs (:func:`gpu_of`) of ``series`` with a sample in ``[start, end]``, by host."""
    out: dict[str | None, set[tuple]] = {}
    for item in series:
        metric = item.get("metric") or {}
        if _points([item], 1.0, start, end):
            gpu = gpu_of(metric, known)
            out.setdefault(gpu[0], set()).add(gpu)
    return out


def regex_of(values: Iterable[str]) -> str:
    """An RE2 alternation matching exactly ``values`` (regex characters escaped)."""
    return "|".join(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", v) for v in sorted(set(values)))


def _float(value: object) -> float | None:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _pick(series: Sequence[dict], name: str) -> tuple[str, float, list[dict]] | None:
    for field, scale in FIELDS[name]:
        chosen = [s for s in series if s.get("metric", {}).get("__name__") == field]
        if chosen:
            return field, scale, chosen
    return None


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def _points(chosen: list[dict], scale: float, start: float | None, end: float | None):
    out = []
    for item in chosen:
        for t, v in item.get("values") or []:
            tt, vv = _float(t), _float(v)
            if tt is None or vv is None or (start is not None and tt < start) or (
                    end is not None and tt > end):
                continue
            out.append((tt, vv * scale))
    return out


def _buckets(points: list[tuple[float, float]], t0: float, t1: float, n: int) -> list:
    width = max((t1 - t0) / n, 1e-9)
    sums, counts = [0.0] * n, [0] * n
    for t, v in points:
        i = min(n - 1, int((t - t0) / width))
        sums[i] += v
        counts[i] += 1
    return [_round(s / c) if c else None for s, c in zip(sums, counts, strict=True)]


def trace_from_series(series: Sequence[dict], start: float | None = None,
                      end: float | None = None, max_points: int = MAX_TRACE_POINTS
                      ) -> dict | None:
    """A bounded trace (module doc) from range-vector ``series`` of DCGM fields; None if
    they hold no busy, power or clock sample in ``[start, end]``."""
    summary: dict[str, float] = {}
    fields: dict[str, str] = {}
    per_name: dict[str, list[tuple[float, float]]] = {}
    for name in FIELDS:
        picked = _pick(series, name)
        if picked is None:
            continue
        field, scale, chosen = picked
        points = _points(chosen, scale, start, end)
        if not points:
            continue
        fields[name] = field
        per_name[name] = points
        values = [v for _, v in points]
        summary[f"{name}_mean"] = _round(sum(values) / len(values))
        if name in ("busy", "sm_clock_mhz"):
            for q in (0.1, 0.5, 0.9):
                summary[f"{name}_p{int(q * 100)}"] = _round(_quantile(values, q))
        if name == "power_w" or name == "sm_clock_mhz":
            summary[f"{name}_max"] = _round(max(values))
        if name == "busy":
            summary["idle_share"] = _round(sum(v < IDLE_BELOW for v in values) / len(values))
            gpus = {gpu_of(s["metric"]) for s in chosen}
            summary["gpus"] = float(len(gpus))
            summary["samples"] = float(len(values))
    events = [s for s in series if s.get("metric", {}).get("__name__") in CLOCK_EVENTS]
    masks = [int(v) for _, v in _points(events, 1.0, start, end)]
    if masks:
        summary["slowdown_share"] = _round(sum(bool(m & SLOWDOWN_BITS) for m in masks)
                                           / len(masks))
    if not per_name:
        return None
    times = [t for points in per_name.values() for t, _ in points]
    t0 = start if start is not None else min(times)
    t1 = end if end is not None else max(times)
    n = max(1, min(max_points, len({t for t in times})))
    width = max(t1 - t0, 0.0) / n
    buckets: dict[str, list] = {"t": [_round(width * (i + 0.5)) for i in range(n)]}
    out: dict[str, object] = {"source": "dcgm", "fields": fields, "summary": summary,
                              "series": buckets}
    models = sorted({s["metric"]["modelName"] for s in series
                     if s.get("metric", {}).get("modelName")})
    if models:
        out["models"] = models[:8]
    for name, points in per_name.items():
        buckets[name] = _buckets(points, t0, t1 if t1 > t0 else t0 + 1.0, n)
    return out


def read_trace_file(path: str | Path) -> list[dict]:
    """A JSON-lines trace file (module doc) as range-vector series; a :class:`ParseError`
    (a ValueError) with the file and line where a line is not such an object."""
    series: dict[tuple, dict] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                t = float(row["time"])
            except (ValueError, KeyError, TypeError):
                raise ParseError("not a trace line (a JSON object with a numeric 'time')",
                                 line=number, source=str(path)) from None
            labels = {k: str(row[k]) for k in ("gpu", "UUID", "modelName", MIG_PROFILE,
                                               MIG_INSTANCE, "Hostname", "hostname", "pod",
                                               "namespace") if k in row}
            for field in TRACE_NAMES:
                if field in row and _float(row[field]) is not None:
                    key = (field, tuple(sorted(labels.items())))
                    item = series.setdefault(key, {"metric": {"__name__": field, **labels},
                                                   "values": []})
                    item["values"].append([t, str(row[field])])
    return list(series.values())


def trace_selectors(pods: Sequence[tuple[str, str]] = (), hosts: Sequence[str] = (), *,
                    labels: Collection[str] | None = None) -> list[str]:
    """Selectors of the trace fields of ``pods`` ((namespace, pod)) or ``hosts``, one per
    label spelling (only those in ``labels`` when given: the spellings the server has)."""
    names = f'__name__=~{promql_string(regex_of(TRACE_NAMES))}'
    out = []
    if pods:
        spaces = regex_of(ns for ns, _ in pods)
        wanted = regex_of(p for _, p in pods)
        for pod, namespace in POD_LABELS:
            if labels is None or pod in labels:
                out.append(f'{{{names},{pod}=~{promql_string(wanted)},'
                           f'{namespace}=~{promql_string(spaces)}}}')
    elif hosts:
        wanted = regex_of(hosts)
        for label in HOST_LABELS:
            if labels is None or label in labels:
                value = f"({wanted})(:[0-9]+)?" if label == "instance" else wanted
                out.append(f"{{{names},{label}=~{promql_string(value)}}}")
    return out


def fetch_trace(client: PrometheusClient, start: float, end: float, *,
                pods: Sequence[tuple[str, str]] = (), hosts: Sequence[str] = (),
                labels: Collection[str] | None = None,
                max_points: int | None = None) -> list[dict]:
    """The DCGM trace fields of ``pods`` (else ``hosts``) in ``[start, end]``, raw samples;
    a series several label spellings select comes once."""
    found: dict[tuple, dict] = {}
    for sel in trace_selectors(pods, hosts, labels=labels):
        for item in client.raw_samples(sel, start, end, chunk=max(end - start, 1.0) + 1.0,
                                       max_points=max_points):
            found.setdefault(tuple(sorted((item.get("metric") or {}).items())), item)
    return list(found.values())
