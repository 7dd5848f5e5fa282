"""MLPerf Training result logs (``result_N.txt``), all three log generations.

The format is read in three steps, one module each:

* :mod:`.records` reads the log records of the three generations (``:::MLPv0.5.0``,
  ``:::MLL``, ``:::MLLOG``) and the MXNet display lines, drops rank duplicates;
* :mod:`.spans` splits the records into runs and cuts each run into train and test spans
  (epochs, blocks, v0.5 marks, evals), with truncation and progress points;
* :mod:`.system` finds and reads the system description beside the log (folder layout,
  ``systems/*.json``, v0.5 ``entry.json``, v0.6 non-JSON files) for deployment and
  framework; :func:`context` hands it to :func:`parse` in the ``ParseContext``.

This module turns spans into segments and a run's facts.

Rules
-----
* ``iterations`` of a train segment = ceil(train_samples / global batch) per epoch, x
  epochs per block. train_samples: ``train_samples`` (v0.7+),
  ``preproc_num_train_examples`` / ``input_size`` (v0.5), else ImageNet's 1,281,167 for
  ResNet (``train_samples_assumed``); another network without it is a ParseError.
* ``iterations`` of a test segment = ceil(eval_samples / eval batch), the eval batch being
  ``eval_batch_size`` where logged (no real log here does), else the global batch
  (``eval_batch_size_assumed``); eval_samples: ``eval_samples`` /
  ``preproc_num_eval_examples`` / ``eval_size``, else ImageNet's 50,000.
* Global batch: ``global_batch_size``; v0.5 logs the per-GPU ``input_batch_size``, so
  global = per-GPU x accelerators per node x nodes from the system description; else
  ``ctx.batch_size``; else ParseError.
* Parameters are the latest value logged before the run's training, else the first
  logged within it.
* Errors besides those of the records and spans: no records at all, no training record,
  no complete train segment, no global batch size, no train_samples outside ResNet.
* Not errors: a run without ``run_stop`` (``meta["run_stop"]`` None,
  ``meta["truncated"]`` True), as for a run killed mid-training.
* ``meta``: submitter, system, mlperf_version, log_generation, segment_mode,
  eval_every_epochs, train/eval samples, run_start/run_stop (unix s), status
  (``run_stop`` status: success/aborted; None where not logged, v0.5), warm-up
  (the first train segment: ``warmup_epoch``, ``first_segment_slowdown`` = its
  seconds per iteration over the median of the others), final_eval_accuracy,
  ``train_includes_eval`` (blocks that hold an eval without ``eval_start``), ...
* ``network``: ``submission_benchmark`` / the v0.5 benchmark token / the benchmark
  folder, lower-case, ``resnet`` -> ``resnet50`` (MLPerf's image classification is
  ResNet-50 v1.5). Deployment and framework come from ``ctx.system`` (see
  :func:`system_deployment`, :func:`system_framework`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from pathlib import Path

from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import Overrides, with_overrides
from ingest.parsers.mlperf.records import (
    Event,
    Scan,
    epoch_of,
    positive_int,
    scan_checked,
    sniff,
    to_number,
)
from ingest.parsers.mlperf.spans import (
    SEGMENT_KEYS,
    DisplayClock,
    Span,
    Truncation,
    block_spans,
    epoch_spans,
    eval_spans,
    mark_spans,
    span_points,
    split_runs,
)
from ingest.parsers.mlperf.system import (
    context_for,
    norm_keys,
    system_deployment,
    system_framework,
)

__all__ = ["FORMAT", "LABEL", "context", "parse", "sniff", "system_deployment",
           "system_framework"]

FORMAT = "mlperf"
LABEL = "MLPerf"

IMAGENET_TRAIN_SAMPLES = 1_281_167
IMAGENET_EVAL_SAMPLES = 50_000


def context(path: Path, source: str, overrides: Overrides) -> ParseContext:
    """The system description beside the log (see :mod:`.system`), plus the overrides."""
    return with_overrides(context_for(path), source, overrides)


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse one MLPerf result log into runs of epoch/block and eval segments."""
    scan = scan_checked(lines)
    if scan.generation is None:
        raise ParseError("no MLPerf log records (':::MLLOG', ':::MLL' or ':::MLPv0.5') found")
    runs = split_runs(scan.events)
    if not runs:
        last = scan.events[-1].line if scan.events else None
        raise ParseError("no training progress: no epoch, block or train_epoch record",
                         line=last)
    clock = DisplayClock.of(scan.displays, scan.events)
    out = []
    for run in runs:
        parsed = _build_run(run, scan, ctx, clock)
        if parsed is not None:
            out.append(parsed)
    if not out:
        opener = next(e for e in runs[0] if e.key in SEGMENT_KEYS)
        raise ParseError(f"no complete training segment: {opener.key} never closed",
                         line=opener.line)
    return out


def _build_run(run: list[Event], scan: Scan, ctx: ParseContext, clock: DisplayClock
               ) -> ParsedRun | None:
    """One run's segments and facts; None when it has no complete train span."""
    cut = Truncation()
    keys = {e.key for e in run}
    includes_eval = False
    if "epoch_start" in keys or "epoch_stop" in keys:
        mode, spans = "epoch", epoch_spans(run, cut)
    elif "block_start" in keys or "block_stop" in keys:
        mode = "block"
        spans, includes_eval = block_spans(run, cut)
    else:
        mode, spans = "train_epoch_mark", mark_spans(run, cut)
    if not spans:
        return None
    evals = eval_spans(run, cut)
    first_train_line = next(e.line for e in run if e.key in SEGMENT_KEYS)

    def param(*key_order: str) -> Event | None:
        return _param(key_order, scan.events, run, first_train_line)

    system = ctx.system or None
    deployment = system_deployment(system)
    meta: dict[str, object] = {"log_generation": scan.generation, "segment_mode": mode}

    # batch size
    gbs_ev = param("global_batch_size")
    per_gpu_ev = param("input_batch_size") if gbs_ev is None else None
    if gbs_ev is not None:
        batch = positive_int(gbs_ev.value, "global_batch_size", gbs_ev.line)
    elif per_gpu_ev is not None:
        per_gpu = positive_int(per_gpu_ev.value, "input_batch_size", per_gpu_ev.line)
        meta["per_accelerator_batch_size"] = per_gpu
        if deployment is not None:
            batch = per_gpu * deployment.per_node * deployment.nodes
            meta["batch_size_from"] = "input_batch_size x accelerators (system description)"
        elif ctx.batch_size:
            batch = ctx.batch_size
            meta["batch_size_from"] = "override"
        else:
            raise ParseError(f"only the per-accelerator input_batch_size ({per_gpu}) is logged "
                             "and no system description gives the accelerator count: "
                             "give the global batch size", line=per_gpu_ev.line)
    elif ctx.batch_size:
        batch = ctx.batch_size
        meta["batch_size_from"] = "override"
    else:
        raise ParseError("no global_batch_size (or v0.5 input_batch_size) in the log: "
                         "give the global batch size", line=first_train_line)

    # network
    bench_ev = param("submission_benchmark")
    network = _normalise_network(
        (bench_ev.value if bench_ev is not None and isinstance(bench_ev.value, str) else None)
        or scan.benchmark_token or ctx.folder_network)

    # dataset sizes
    train_ev = param("train_samples", "preproc_num_train_examples", "input_size")
    eval_ev = param("eval_samples", "preproc_num_eval_examples", "eval_size")
    if train_ev is not None:
        train_samples = positive_int(train_ev.value, train_ev.key, train_ev.line)
    elif network == "resnet50":
        train_samples = IMAGENET_TRAIN_SAMPLES
        meta["train_samples_assumed"] = True
    else:
        raise ParseError(f"no train_samples in a {network or 'unknown'} log (the ImageNet "
                         "default applies to ResNet only)", line=first_train_line)
    if eval_ev is not None:
        eval_samples = positive_int(eval_ev.value, eval_ev.key, eval_ev.line)
    else:
        eval_samples = IMAGENET_EVAL_SAMPLES
        meta["eval_samples_assumed"] = True
    eval_bs_ev = param("eval_batch_size")
    if eval_bs_ev is not None:
        eval_batch = positive_int(eval_bs_ev.value, "eval_batch_size", eval_bs_ev.line)
    else:
        eval_batch = batch
        meta["eval_batch_size_assumed"] = True
    steps_per_epoch = math.ceil(train_samples / batch)
    eval_steps = math.ceil(eval_samples / eval_batch)
    accum_ev = param("gradient_accumulation_steps")
    if accum_ev is not None:
        meta["gradient_accumulation_steps"] = positive_int(accum_ev.value,
                                                            "gradient_accumulation_steps",
                                                            accum_ev.line)

    # segments
    segments: list[Segment] = []
    for span in sorted(spans + evals, key=lambda s: (s.start, s.start_line)):
        its = float(steps_per_epoch * span.epochs if span.phase == "train" else eval_steps)
        segments.append(Segment(
            phase=span.phase,  # type: ignore[arg-type]
            iterations=its,
            seconds=span.end - span.start,
            batch_size=batch if span.phase == "train" else eval_batch,
            start_time=span.start,
            epoch_start=span.epoch_start,
            epoch_end=span.epoch_end,
            line=span.end_line,
            points=span_points(span, its, clock),
        ))
    if clock.offset is not None and any(len(s.points) > 1 for s in segments):
        meta["points_from"] = "MXNet 'Epoch[e] Batch [a-b]' display lines"
        meta["display_clock_offset_s"] = clock.offset

    # run facts
    start_ev = next((e for e in run if e.key == "run_start"), None)
    stop_ev = next((e for e in run if e.key == "run_stop"), None)
    timed = [e.time for e in run if e.time is not None]
    meta["run_start"] = start_ev.time if start_ev else None
    meta["run_stop"] = stop_ev.time if stop_ev else None
    meta["last_event_time"] = max(timed) if timed else None
    meta["status"] = stop_ev.meta.get("status") if stop_ev else None
    if stop_ev is None:
        cut.truncated = True
    meta["truncated"] = cut.truncated
    meta["train_samples"] = train_samples
    meta["eval_samples"] = eval_samples
    meta["eval_batch_size"] = eval_batch
    meta["steps_per_epoch"] = steps_per_epoch
    if includes_eval:
        meta["train_includes_eval"] = True
    if scan.duplicates:
        meta["duplicate_records_dropped"] = scan.duplicates
    org_ev = param("submission_org")
    sys_norm = norm_keys(system) if system else {}
    meta["submitter"] = (sys_norm.get("_mlperf_submitter")
                         or (org_ev.value if org_ev is not None else None)
                         or sys_norm.get("submitter"))
    platform_ev = param("submission_platform")
    meta["system"] = (ctx.folder_system or sys_norm.get("system_name")
                      or (platform_ev.value if platform_ev is not None else None))
    meta["mlperf_version"] = sys_norm.get("_mlperf_version")
    if scan.generation == "v0.5" and not meta["mlperf_version"]:
        meta["mlperf_version"] = "v0.5"
    meta.update(_eval_facts(run, evals, spans))
    meta.update(_warmup_facts(segments))
    if deployment is None and system:
        meta["deployment_note"] = "system description lacks accelerator name or counts"

    return ParsedRun(
        format=FORMAT,
        network=network,
        deployment=deployment,
        framework=system_framework(system, scan.evidence),
        batch_size=batch,
        start_time=start_ev.time if start_ev and start_ev.time else segments[0].start_time,
        segments=segments,
        meta=meta,
        first_line=run[0].line,
        last_line=run[-1].line,
    )


def _eval_facts(run: list[Event], evals: list[Span], spans: list[Span]) -> dict[str, object]:
    accuracies = [e for e in run if e.key == "eval_accuracy"]
    epochs = [s.epoch_start for s in evals if s.epoch_start is not None]
    if len(epochs) < len(accuracies):  # evals without eval_start (Google): accuracy epochs
        epochs = [n for n in (epoch_of(e, required=False) for e in accuracies) if n is not None]
    facts: dict[str, object] = {"evals": len(accuracies)}
    gaps = [b - a for a, b in zip(epochs, epochs[1:], strict=False) if b > a]
    if gaps:
        facts["eval_every_epochs"] = statistics.median(gaps)
    elif len(spans) > 1 and all(s.epochs > 1 for s in spans):
        facts["eval_every_epochs"] = statistics.median(s.epochs for s in spans)
    if accuracies:
        facts["final_eval_accuracy"] = to_number(accuracies[-1].value, "eval_accuracy",
                                               accuracies[-1].line)
    return facts


def _warmup_facts(segments: list[Segment]) -> dict[str, object]:
    train = [s for s in segments if s.phase == "train" and s.iterations > 0]
    if not train:
        return {}
    facts: dict[str, object] = {"warmup_epoch": train[0].epoch_start}
    rest = [s.seconds / s.iterations for s in train[1:]]
    if rest and statistics.median(rest) > 0:
        facts["first_segment_slowdown"] = (train[0].seconds / train[0].iterations) / (
            statistics.median(rest))
    return facts


def _param(key_order: tuple[str, ...], events: list[Event], run: list[Event],
           first_train_line: int) -> Event | None:
    """Latest record of the first key present logged before the run's training, else the
    first one logged within the run."""
    for key in key_order:
        before = [e for e in events if e.key == key and e.line < first_train_line]
        if before:
            return before[-1]
        within = [e for e in run if e.key == key]
        if within:
            return within[0]
    return None


def _normalise_network(name: str | None) -> str | None:
    if not name:
        return None
    low = name.strip().lower()
    if re.fullmatch(r"resnet(?:[-_ ]?50)?(?:[-_ ]?v1\.?5)?", low):
        return "resnet50"
    return low
