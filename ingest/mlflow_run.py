"""One MLflow run, as fetched (:mod:`ingest.mlflow_source`), -> a :class:`ParsedRun`.

A pure function of a JSON-able snapshot (no MLflow import, no network), so the rules are
tested and fuzzed without a server. The snapshot: ``run_id``, ``run_name``, ``experiment``,
``status``, ``start_time``/``end_time`` (unix seconds), ``params`` and ``tags`` (text to
text), ``latest`` (each metric's latest value) and ``metrics`` (name -> ``[[step, unix
seconds, value], ...]`` in logging order, only for the metrics that may time the steps).

Rules
-----
* A run still ``RUNNING`` (or ``SCHEDULED``) is not stored: :class:`Unfinished` says so, and
  the next ingest picks it up once it has ended. ``FAILED``/``KILLED`` runs are stored with
  ``meta["status"]``: the steps they did are real.
* The progress metric (:func:`ingest.parsers.steps.progress_key`: the train loss, as a
  rule; ``system/`` metrics never) gives the marks (step, timestamp in ms as MLflow stores
  it); the run starts at its ``start_time`` (``mlflow.start_run``), so the first interval holds
  the start-up and is warm-up (:func:`ingest.parsers.steps.train_segments`).
* A metric logged per epoch (autologging's default: steps 0 .. E-1 where the params say E
  epochs) is not per-step progress: with ``steps_per_epoch`` in the params each epoch mark is
  that many steps, else the run is rejected saying so.
* Job facts from the params, then the tags (:mod:`ingest.parsers.hparams`; ``mlflow.*`` tags
  left out). MLflow's system metrics (``system/gpu_<i>_...``, per node ``system/<node>/gpu_<i>_
  ...``) give the GPU count (``meta["system_metrics"]`` keeps their latest values); the GPU
  model comes from a param or tag (``gpu``, ``gpu_name``, ...), else ``--deployment``.
* Problems are :class:`~ingest.events.ParseError` whose line is the metric value's index in
  its history (1-based) where one value is at fault.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import ClassVar

from fleet.deployment import Deployment
from ingest.errors import IngestError
from ingest.events import ParseContext, ParsedRun, ParseError
from ingest.parsers.hparams import facts_meta, flag_devices, gpu_name, job_facts
from ingest.parsers.steps import Mark, is_eval, progress_key, train_segments

FORMAT = "mlflow"
NOT_FINISHED = ("RUNNING", "SCHEDULED")
_SYSTEM_GPU = re.compile(r"^system/(?:([^/]+)/)?gpu_(\d+)_")
MAX_SYSTEM_KEYS = 40


class Unfinished(IngestError):
    """A run that has not ended yet: not stored, picked up by a later ingest."""

    kind: ClassVar[str] = "unfinished"


def _text_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in list(value.items())[:10_000]}


def _marks(name: str, history: object) -> list[Mark]:
    if not isinstance(history, list):
        raise ParseError(f"metric {name!r}: history is not a list")
    marks = []
    for index, entry in enumerate(history, start=1):
        if not isinstance(entry, list | tuple) or len(entry) < 2:
            raise ParseError(f"metric {name!r}: entry {index} is not [step, time, value]",
                             line=index)
        step, stamp = entry[0], entry[1]
        if isinstance(step, bool) or not isinstance(step, int) or abs(step) > 10**15:
            raise ParseError(f"metric {name!r}: step {str(step)[:30]} is not a step number",
                             line=index)
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or \
                not math.isfinite(stamp):
            raise ParseError(f"metric {name!r}: timestamp {str(stamp)[:30]} is not a number",
                             line=index)
        marks.append(Mark(step, float(stamp), index))
    return marks


def _system_gpus(latest: Mapping[str, object]) -> tuple[int | None, dict[str, float]]:
    """GPUs seen in the system metrics (over all nodes) and their latest GPU values."""
    seen: set[tuple[str, str]] = set()
    values: dict[str, float] = {}
    for key, value in latest.items():
        m = _SYSTEM_GPU.match(key)
        if not m:
            continue
        seen.add((m.group(1) or "", m.group(2)))
        if len(values) < MAX_SYSTEM_KEYS and isinstance(value, int | float) and \
                not isinstance(value, bool) and math.isfinite(value):
            values[key] = float(value)
    return (len(seen) or None), values


def _per_epoch(marks: list[Mark], epochs: float | None, per_epoch: int | None,
               name: str) -> list[Mark]:
    """Epoch-indexed marks as step marks (rules in the module doc)."""
    if epochs is None or len(marks) < 2 or marks[-1].step > epochs or len(marks) > epochs:
        return marks
    if per_epoch is None:
        raise ParseError(f"metric {name!r} is logged per epoch (steps {marks[0].step} .. "
                         f"{marks[-1].step} of {epochs:g} epochs): no per-step time; log per "
                         "step (autologging: log_every_n_steps) or log the param "
                         "steps_per_epoch")
    base = 1 if marks[0].step == 0 else 0
    return [Mark((m.step + base) * per_epoch, m.time, m.line) for m in marks]


def parse_run(snapshot: Mapping[str, object], ctx: ParseContext) -> ParsedRun:
    """The run of one snapshot (module doc); :class:`Unfinished` for a run still running."""
    status = str(snapshot.get("status") or "").upper()
    if status in NOT_FINISHED:
        raise Unfinished(f"status {status}: not stored until it has ended")
    params = _text_map(snapshot.get("params"))
    tags = {k: v for k, v in _text_map(snapshot.get("tags")).items()
            if not k.startswith("mlflow.")}
    merged: dict[str, object] = dict(params)
    for key, value in tags.items():
        merged.setdefault(key, value)
    latest = snapshot.get("latest") if isinstance(snapshot.get("latest"), Mapping) else {}
    gpus, system = _system_gpus(latest)  # type: ignore[arg-type]
    devices = gpus if gpus is not None else flag_devices(ctx.deployment)
    facts = job_facts(merged, devices)
    deployment = facts.deployment
    name = gpu_name(merged)
    if deployment is None and name and gpus:
        deployment = Deployment(name, gpus)
        facts.source["deployment"] = "GPU name param/tag x system-metric GPUs"
    metrics = snapshot.get("metrics")
    if not isinstance(metrics, Mapping) or not metrics:
        raise ParseError("the run logged no metric history (no steps to time)")
    series = {str(k): _marks(str(k), v) for k, v in metrics.items()
              if not str(k).startswith("system/")}
    series = {k: [Mark(m.step, m.time / 1000.0, m.line) for m in v] for k, v in series.items()}
    if series and all(len({m.step for m in v}) == 1 and len(v) > 1 for v in series.values()):
        raise ParseError("every metric is logged at one step (log_metric without step=): "
                         "no per-step time; pass step= when logging")
    epochs, per_epoch = facts.epochs, facts.steps_per_epoch
    for key in list(series):
        if series[key]:
            series[key] = _per_epoch(series[key], epochs, per_epoch, key)
    key = progress_key({k: v for k, v in series.items() if v}, "log the train loss per step")
    batch = ctx.batch_size or facts.batch_size
    start = snapshot.get("start_time")
    origin = float(start) if isinstance(start, int | float) and not isinstance(start, bool) \
        else None
    segments, meta = train_segments(series[key], origin, batch)
    meta.update({"progress_metric": key, "timing": "metric timestamps (ms)",
                 "clock_resolution_s": 1e-3, "status": status or None})
    for field in ("run_id", "run_name", "experiment"):
        if snapshot.get(field):
            meta[f"mlflow_{field}"] = str(snapshot[field])[:200]
    if system:
        meta["system_metrics"] = system
    if gpus:
        meta["system_metric_gpus"] = gpus
    meta.update(facts_meta(facts))
    if any(is_eval(k) for k in series):
        meta["validation_in_train_time"] = True
    autolog = _text_map(snapshot.get("tags")).get("mlflow.autologging")
    marks = series[key]
    return ParsedRun(
        format=FORMAT, network=facts.network, deployment=deployment,
        stack=autolog or None, batch_size=batch,
        start_time=origin if origin is not None else marks[0].time, segments=segments,
        meta=meta, first_line=marks[0].line, last_line=marks[-1].line,
    )
