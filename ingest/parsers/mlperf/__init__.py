"""MLPerf Training result logs (``result_N.txt``), all three log generations.

The format is read in steps, one module each:

* :mod:`.records` reads the log records of the three generations (``:::MLPv0.5.0``,
  ``:::MLL``, ``:::MLLOG``), drops rank duplicates; :mod:`.displays` reads the MXNet
  display lines (progress points); :mod:`.clock` checks the records' clock;
* :mod:`.spans` splits the records into runs and cuts each run into train and test spans
  (epochs, blocks, v0.5 marks, evals), with truncation and progress points;
* :mod:`.repairs` collects what was mended (kinds, lines, warnings);
* :mod:`.benchmarks` holds the MLPerf CNN benchmarks (network names, data-set sizes) and
  reads the logged sample counts and epoch numbers against them;
* :mod:`.jobfacts` gives a run's whole-job facts (start-up, time to train, eval, gaps);
* :mod:`.system` finds and reads the system description beside the log (folder layout,
  ``systems/*.json``, v0.5 ``entry.json``, v0.6 non-JSON files) for deployment and
  framework; :func:`context` hands it to :func:`parse` in the ``ParseContext``.

This module turns spans into segments and a run's facts.

Rules
-----
* ``iterations`` of a train segment = iterations per epoch x epochs per span; of a test
  segment, iterations per eval. Both come from the logged count read against the
  benchmark's data set (:func:`.benchmarks.read_count`: samples, a batch count, samples per
  accelerator, else the data set's size, each but the first a repair), so an epoch never
  has fewer iterations than its data set allows. train_samples: ``train_samples`` (v0.7+),
  ``preproc_num_train_examples`` / ``input_size`` (v0.5), else the benchmark's data set
  (``train_samples_assumed``); a benchmark outside the table without it is a ParseError.
  eval_samples: ``eval_samples`` / ``preproc_num_eval_examples`` / ``eval_size``, else
  the data set's (ImageNet's 50,000 outside the table). The eval batch is
  ``eval_batch_size`` where logged (no real log here does), else the global batch
  (``eval_batch_size_assumed``). ``meta``: ``train_samples``/``eval_samples`` as read,
  ``*_logged`` where that differs from the log, ``steps_per_epoch``, ``dataset``.
* Epoch numbers and block counts logged in samples (UNet3D v3.1 on) are divided by the
  samples per epoch (:func:`.benchmarks.samples_per_epoch_unit`, ``epochs_in_samples``).
* Global batch: ``global_batch_size``; v0.5 logs the per-GPU ``input_batch_size``, so
  global = per-GPU x accelerators per node x nodes from the system description; else
  ``ctx.batch_size``; else ParseError.
* Parameters are the latest value logged before the run's training, else the first
  logged within it.
* Errors besides those of the records and spans: no records at all, no training record,
  no complete train segment, no global batch size, no train_samples for a benchmark
  whose data set the table does not know.
* Not errors: a run without ``run_stop`` (``meta["run_stop"]`` None,
  ``meta["truncated"]`` True), as for a run killed mid-training; the irregularities that
  :mod:`.records` and :mod:`.spans` repair, each noted in ``meta["repairs"]`` and
  ``meta["warnings"]`` (:mod:`.repairs`).
* Deployment: the system description's accelerators; a description without accelerators
  gives its host CPUs (``cpu_from_system`` repair, ``meta["device_kind"] = "cpu"``).
* ``meta``: submitter, system (``"<submitter>/<system>"``, :func:`.system.system_name`),
  variant (``{"precision": ...}`` where the log states it before training, in
  :func:`fleet.precision.parse_precision`'s names), clock_resolution_s, mlperf_version,
  log_generation, segment_mode,
  eval_every_epochs, train/eval samples, run_start/run_stop (unix s), status
  (``run_stop`` status: success/aborted; None where not logged, v0.5), warm-up
  (the first train segment: ``warmup_epoch``, ``first_segment_slowdown`` = its
  seconds per iteration over the median of the others), final_eval_accuracy,
  (a number; Mask R-CNN's ``{"bbox": ..., "segm": ...}``),
  ``train_includes_eval`` (blocks that hold an eval without ``eval_start``), the whole-job
  facts of :mod:`.jobfacts` (``init_start``, ``init_stop``, ``init_seconds``,
  ``run_seconds``, ``train_seconds``, ``eval_seconds``, ``eval_overlap_seconds``,
  ``gap_seconds``, ``epochs_trained``, ``evals``), ...
* ``network``: ``submission_benchmark`` / the v0.5 benchmark token / the benchmark
  folder, named for what was trained by :func:`.benchmarks.network_for` (``resnet`` ->
  ``resnet50``, ``ssd`` -> ``ssd-resnet34`` up to v1.1 and ``retinanet-resnext50`` from
  v2.0, ``maskrcnn`` -> ``maskrcnn-resnet50-fpn``, ``unet3d``; others lower-case).
  Deployment and framework come from ``ctx.system`` (see :func:`system_deployment`,
  :func:`system_framework`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fleet.deployment import Deployment
from fleet.precision import parse_precision
from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import ParseOverrides, with_overrides
from ingest.parsers.mlperf.benchmarks import (
    BENCHMARKS,
    Benchmark,
    Count,
    count_note,
    network_for,
    read_count,
    rescale_epochs,
    samples_per_epoch_unit,
)
from ingest.parsers.mlperf.clock import check_clock
from ingest.parsers.mlperf.displays import DisplayClock, PointSpan, span_points
from ingest.parsers.mlperf.jobfacts import job_facts
from ingest.parsers.mlperf.records import (
    SEGMENT_KEYS,
    Event,
    Scan,
    epoch_of,
    positive_int,
    scan_checked,
    sniff,
    to_number,
)
from ingest.parsers.mlperf.repairs import Repairs
from ingest.parsers.mlperf.spans import (
    Span,
    Truncation,
    block_spans,
    close_epoch_gaps,
    drop_stepped,
    epoch_spans,
    eval_spans,
    mark_spans,
    split_runs,
)
from ingest.parsers.mlperf.system import (
    MlperfContext,
    context_for,
    cpu_deployment,
    is_system_file,
    layout_parts,
    lists_several_stacks,
    normalised,
    system_deployment,
    system_framework,
    system_name,
)

__all__ = ["FORMAT", "LABEL", "context", "parse", "sniff", "system_deployment",
           "system_framework"]

FORMAT = "mlperf"
LABEL = "MLPerf"

IMAGENET_EVAL_SAMPLES = 50_000


def side_file(path: Path) -> bool:
    """A system description of the MLPerf layout (:func:`.system.is_system_file`)."""
    return is_system_file(path)


def context(path: Path, source: str, overrides: ParseOverrides) -> ParseContext:
    """The system description beside the log (see :mod:`.system`), plus the overrides."""
    return with_overrides(context_for(path), source, overrides)


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse one MLPerf result log into runs of epoch/block and eval segments."""
    lines = lines if isinstance(lines, list) else list(lines)
    system = normalised(ctx.system) if ctx.system else None
    scan = scan_checked(lines, evidence=lists_several_stacks(system))
    check_clock(scan)
    if scan.generation is None:
        raise ParseError("no MLPerf log records (':::MLLOG', ':::MLL' or ':::MLPv0.5') found"
                         + (f" in {scan.lines} lines" if scan.lines else " (empty file)"),
                         )
    runs = split_runs(scan.events, scan.repairs)
    if not runs:
        raise ParseError("no training progress: no epoch, block or train_epoch record",
                         line=scan.events[-1].line if scan.events else None)
    clock = DisplayClock.of(scan.displays, [e.time for e in scan.events])
    fixes = scan.repairs.for_lines([(r[0].line, r[-1].line) for r in runs])
    facts = _Facts.of(system, scan, ctx)
    out = []
    for run, fix in zip(runs, fixes, strict=True):
        parsed = _build_run(run, scan, ctx, clock, fix, facts)
        if parsed is not None:
            out.append(parsed)
    if not out:
        opener = next(e for e in runs[0] if e.key in SEGMENT_KEYS)
        last = runs[-1][-1]
        ends = (f"the log ends at line {scan.lines} with it open (cut off or killed)"
                if last is opener or last.line >= scan.lines - 5 else
                f"the last record is {last.key!r} at line {last.line}")
        raise ParseError(f"no complete training segment: {opener.key} at line {opener.line} "
                         f"never closed; {ends}", line=opener.line)
    return out


@dataclass(frozen=True)
class _Facts:
    """What one file's runs share: the system's facts, and the records by key."""

    system: dict | None  # normalised keys
    deployment: Deployment | None
    cpu: bool  # the deployment names host CPUs
    framework: str | None
    layout: dict[str, str] | None
    by_key: dict[str, list[Event]]

    @classmethod
    def of(cls, system: dict | None, scan: Scan, ctx: ParseContext) -> _Facts:
        deployment = system_deployment(system)
        cpus = cpu_deployment(system) if deployment is None else None
        by_key: dict[str, list[Event]] = {}
        for ev in scan.events:
            by_key.setdefault(ev.key, []).append(ev)
        return cls(system, deployment or cpus, cpus is not None,
                   system_framework(system, scan.evidence),
                   layout_parts(Path(ctx.source)) if ctx.source else None, by_key)


@dataclass(frozen=True)
class _Run:
    """One run's records and what the helpers building it share."""

    events: list[Event]
    scan: Scan
    ctx: ParseContext
    fix: Repairs
    facts: _Facts
    first_train_line: int

    def param(self, *key_order: str) -> Event | None:
        """The run's record of the first of ``key_order`` logged (:func:`_param`)."""
        return _param(key_order, self.facts.by_key, self.events, self.first_train_line)

    def path_fact(self, name: str) -> str | None:
        """``submitter`` or ``version`` as the layout gives them (:class:`MlperfContext`)."""
        return getattr(self.ctx, name, None) if isinstance(self.ctx, MlperfContext) else None


@dataclass(frozen=True)
class _Sizes:
    """A run's network, benchmark row and data-set sizes as read (rules in .benchmarks)."""

    network: str | None
    bench: Benchmark | None
    eval_batch: int
    train: Count
    eval: Count


def _build_run(run: list[Event], scan: Scan, ctx: ParseContext, clock: DisplayClock,
               fix: Repairs, facts: _Facts) -> ParsedRun | None:
    """One run's segments and facts; None when it has no complete train span."""
    cut = Truncation(clock_steps=tuple(scan.clock_steps))
    found = _run_spans(run, scan, cut, fix)
    if found is None:
        return None
    mode, spans, evals, includes_eval = found
    one = _Run(run, scan, ctx, fix, facts, next(e.line for e in run if e.key in SEGMENT_KEYS))
    meta: dict[str, object] = {"log_generation": scan.generation, "segment_mode": mode}
    _note_cpu(facts, fix, meta)
    batch = _batch_size(one, meta)
    sizes = _sizes(one, batch, meta)
    unit = samples_per_epoch_unit(
        sizes.bench, [sp.epochs for sp in spans], [sp.epoch_start for sp in spans],
        _optional_int(one.param("samples_per_epoch")), sizes.train.samples, batch)
    if unit is not None:
        spans, evals = rescale_epochs(spans, evals, unit, fix)
    accum_ev = one.param("gradient_accumulation_steps")
    if accum_ev is not None:
        meta["gradient_accumulation_steps"] = positive_int(accum_ev.value,
                                                            "gradient_accumulation_steps",
                                                            accum_ev.line)
    segments = _segments(spans + evals, sizes, batch, clock, meta)
    start_ev = _run_facts(one, segments, spans, cut, sizes, meta)
    if includes_eval:
        meta["train_includes_eval"] = True
    if scan.duplicates:
        meta["duplicate_records_dropped"] = scan.duplicates
    _identity_facts(one, meta)
    meta.update(_eval_facts(run, evals, spans, unit or 1))
    meta.update(_warmup_facts(segments))
    if facts.deployment is None and facts.system:
        meta["deployment_note"] = "system description lacks accelerator name or counts"
    fix.to_meta(meta)
    return ParsedRun(
        format=FORMAT,
        network=sizes.network,
        deployment=facts.deployment,
        stack=facts.framework,
        batch_size=batch,
        start_time=start_ev.time if start_ev and start_ev.time else segments[0].start_time,
        segments=segments,
        meta=meta,
        first_line=run[0].line,
        last_line=run[-1].line,
    )


def _run_spans(run: list[Event], scan: Scan, cut: Truncation, fix: Repairs
               ) -> tuple[str, list[Span], list[Span], bool] | None:
    """(segment mode, train spans, eval spans, whether train spans include the evals), the
    spans a clock step spoils dropped; None without a complete train span."""
    keys = {e.key for e in run}
    includes_eval = False
    if "epoch_start" in keys or "epoch_stop" in keys:
        mode, spans = "epoch", epoch_spans(run, cut, fix)
    elif "block_start" in keys or "block_stop" in keys:
        mode = "block"
        spans, includes_eval = block_spans(run, cut, fix)
    else:
        mode, spans = "train_epoch_mark", mark_spans(run, cut)
    spans = drop_stepped(spans, scan.clock_steps, fix)
    if not spans:
        return None
    evals = drop_stepped(eval_spans(run, cut, fix), scan.clock_steps, fix)
    if mode == "epoch":
        spans = close_epoch_gaps(spans, evals, run, fix)
    return mode, spans, evals, includes_eval


def _note_cpu(facts: _Facts, fix: Repairs, meta: dict[str, object]) -> None:
    """A system description that lists no accelerators: the run is stored on its CPUs."""
    cpus = facts.deployment
    if facts.cpu and cpus is not None:
        meta["device_kind"] = "cpu"
        fix.add("cpu_from_system", None,
                f"the system description lists no accelerators: stored as "
                f"{cpus.per_node} x {cpus.accelerator} CPU sockets per node x {cpus.nodes} "
                f"node(s) ({cpus.key})")


def _batch_size(one: _Run, meta: dict[str, object]) -> int:
    """The global batch size: logged, else the per-accelerator size times the system's
    accelerators, else ``--batch-size``; a ParseError when none is known."""
    deployment, ctx = one.facts.deployment, one.ctx
    gbs_ev = one.param("global_batch_size")
    if gbs_ev is not None:
        return positive_int(gbs_ev.value, "global_batch_size", gbs_ev.line)
    per_gpu_ev = one.param("input_batch_size")
    if per_gpu_ev is not None:
        per_gpu = positive_int(per_gpu_ev.value, "input_batch_size", per_gpu_ev.line)
        meta["per_accelerator_batch_size"] = per_gpu
        if deployment is not None:
            meta["batch_size_from"] = "input_batch_size x accelerators (system description)"
            return per_gpu * deployment.per_node * deployment.nodes
        if not ctx.batch_size:
            raise ParseError(f"only the per-accelerator input_batch_size ({per_gpu}) is logged "
                             "and no system description gives the accelerator count: "
                             "give the global batch size", line=per_gpu_ev.line)
    elif not ctx.batch_size:
        raise ParseError("no global_batch_size (or v0.5 input_batch_size) in the log: "
                         "give the global batch size", line=one.first_train_line)
    meta["batch_size_from"] = "override"
    return ctx.batch_size


def _logged_size(ev: Event | None) -> int | None:
    return positive_int(ev.value, ev.key, ev.line) if ev is not None else None


def _sizes(one: _Run, batch: int, meta: dict[str, object]) -> _Sizes:
    """The network and the train/eval sample counts as read against the benchmark's data
    set (rules in .benchmarks), their repairs noted."""
    train_ev = one.param("train_samples", "preproc_num_train_examples", "input_size")
    eval_ev = one.param("eval_samples", "preproc_num_eval_examples", "eval_size")
    train_logged, eval_logged = _logged_size(train_ev), _logged_size(eval_ev)
    network, bench = _network(one, train_logged, batch)
    eval_bs_ev = one.param("eval_batch_size")
    if eval_bs_ev is not None:
        eval_batch = positive_int(eval_bs_ev.value, "eval_batch_size", eval_bs_ev.line)
    else:
        eval_batch = batch
        meta["eval_batch_size_assumed"] = True
    dep = one.facts.deployment
    accelerators = dep.per_node * dep.nodes if dep is not None else None
    train_count = read_count(train_logged, bench.train_samples if bench else None, batch,
                             accelerators)
    eval_count = read_count(eval_logged, bench.eval_samples if bench else (
        IMAGENET_EVAL_SAMPLES if eval_logged is None else None), eval_batch, accelerators)
    for what, logged, count, ev, size_batch in (
            ("train_samples", train_logged, train_count, train_ev, batch),
            ("eval_samples", eval_logged, eval_count, eval_ev, eval_batch)):
        if count.how == "assumed":
            meta[f"{what}_assumed"] = True
        elif logged is not None and ev is not None:
            note = count_note(what, logged, count, size_batch, accelerators, bench)
            if note is not None:
                one.fix.add(note[0], ev.line, note[1])
                meta[f"{what}_logged"] = logged
    if bench is not None:
        meta["dataset"] = bench.dataset
    return _Sizes(network, bench, eval_batch, train_count, eval_count)


def _network(one: _Run, train_logged: int | None, batch: int
             ) -> tuple[str | None, Benchmark | None]:
    """The stored network and the benchmark row (:func:`.benchmarks.network_for`); a
    ParseError when neither the log nor the table gives the data-set size."""
    scan, ctx = one.scan, one.ctx
    bench_ev = one.param("submission_benchmark")
    version = one.path_fact("version") or (
        one.facts.layout.get("version") if one.facts.layout else None)
    network, bench = network_for(
        (bench_ev.value if bench_ev is not None and isinstance(bench_ev.value, str) else None)
        or scan.benchmark_token or ctx.folder_network, version, scan.generation, train_logged,
        batch)
    if train_logged is None and bench is None:
        raise ParseError(f"no train_samples in a {network or 'unknown'} log (a data-set size "
                         "is known for MLPerf's CNN benchmarks only: "
                         f"{', '.join(b.network for b in BENCHMARKS)})",
                         line=one.first_train_line)
    return network, bench


def _segments(spans: list[Span], sizes: _Sizes, batch: int, clock: DisplayClock,
              meta: dict[str, object]) -> list[Segment]:
    """The train and eval spans as segments in time order, with the progress points the
    MXNet display lines give single-epoch train spans."""
    ordered = sorted(spans, key=lambda s: (s.start, s.start_line))
    its_of = [float(sizes.train.steps * sp.epochs if sp.phase == "train" else sizes.eval.steps)
              for sp in ordered]
    shown = [k for k, sp in enumerate(ordered) if sp.phase == "train" and sp.epochs == 1]
    points: list[tuple[tuple[float, float], ...]] = [
        ((its, sp.end - sp.start),) for its, sp in zip(its_of, ordered, strict=True)]
    for k, pts in zip(shown, span_points([PointSpan(
            ordered[k].start_index, ordered[k].end_index, ordered[k].start, ordered[k].end,
            its_of[k]) for k in shown], clock), strict=True):
        points[k] = pts
    segments = [Segment(
        phase=span.phase,  # type: ignore[arg-type]
        iterations=its,
        seconds=span.end - span.start,
        batch_size=batch if span.phase == "train" else sizes.eval_batch,
        start_time=span.start,
        epoch_start=span.epoch_start,
        epoch_end=span.epoch_end,
        line=span.end_line,
        points=pts,
    ) for span, its, pts in zip(ordered, its_of, points, strict=True)]
    if clock.offset is not None and any(len(s.points) > 1 for s in segments):
        meta["points_from"] = "MXNet 'Epoch[e] Batch [a-b]' display lines"
        meta["display_clock_offset_s"] = clock.offset
    return segments


def _run_facts(one: _Run, segments: list[Segment], spans: list[Span], cut: Truncation,
               sizes: _Sizes, meta: dict[str, object]) -> Event | None:
    """The run's start, stop, job facts (:mod:`.jobfacts`), status and sizes into ``meta``;
    returns its ``run_start`` record."""
    run, scan = one.events, one.scan
    start_ev = next((e for e in run if e.key == "run_start"), None)
    stop_ev = next((e for e in run if e.key == "run_stop"), None)
    timed = [e.time for e in run if e.time is not None]
    meta["run_start"] = start_ev.time if start_ev else None
    meta["run_stop"] = stop_ev.time if stop_ev else None
    meta["last_event_time"] = max(timed) if timed else None
    for key, value in job_facts(run, segments, sum(sp.epochs for sp in spans),
                                scan.resolution_s or 0.001, scan.clock_steps, one.fix).items():
        if key not in ("run_start", "run_stop"):
            meta[key] = value
    meta["status"] = stop_ev.meta.get("status") if stop_ev else None
    if stop_ev is None:
        cut.truncated = True
    meta["truncated"] = cut.truncated
    meta["train_samples"] = sizes.train.samples
    meta["eval_samples"] = sizes.eval.samples
    meta["eval_batch_size"] = sizes.eval_batch
    meta["steps_per_epoch"] = sizes.train.steps
    return start_ev


def _identity_facts(one: _Run, meta: dict[str, object]) -> None:
    """Submitter, system name, precision, clock resolution and MLPerf round into ``meta``."""
    scan, system, parts = one.scan, one.facts.system, one.facts.layout
    org_ev = one.param("submission_org")
    sys_norm = system or {}
    logged_org = org_ev.value if org_ev is not None and isinstance(org_ev.value, str) else None
    meta["submitter"] = (one.path_fact("submitter") or logged_org
                         or sys_norm.get("submitter"))
    platform_ev = one.param("submission_platform")
    meta["system"] = system_name(
        system, parts["submitter"] if parts else one.path_fact("submitter"),
        one.ctx.folder_system,
        org_ev.value if org_ev is not None else None,
        platform_ev.value if platform_ev is not None else None)
    if scan.precision is not None:
        try:
            meta["variant"] = {"precision": parse_precision(scan.precision[0]).value}
            meta["precision_line"] = scan.precision[1]
        except ValueError:
            pass
    if scan.resolution_s is not None:
        meta["clock_resolution_s"] = scan.resolution_s
    meta["mlperf_version"] = one.path_fact("version")
    if scan.generation == "v0.5" and not meta["mlperf_version"]:
        meta["mlperf_version"] = "v0.5"


def _eval_facts(run: list[Event], evals: list[Span], spans: list[Span],
                unit: int) -> dict[str, object]:
    accuracies = [e for e in run if e.key == "eval_accuracy"]
    epochs = [s.epoch_start for s in evals if s.epoch_start is not None]
    if len(epochs) < len(accuracies):  # evals without eval_start (Google): accuracy epochs
        epochs = [n / unit for n in (epoch_of(e, required=False) for e in accuracies)
                  if n is not None]
    facts: dict[str, object] = {"evals": len(accuracies)}
    gaps = [b - a for a, b in zip(epochs, epochs[1:], strict=False) if b > a]
    if gaps:
        facts["eval_every_epochs"] = statistics.median(gaps)
    elif len(spans) > 1 and all(s.epochs > 1 for s in spans):
        facts["eval_every_epochs"] = statistics.median(s.epochs for s in spans)
    if accuracies:
        facts["final_eval_accuracy"] = _accuracy(accuracies[-1])
    return facts


def _accuracy(ev: Event) -> float | dict[str, float]:
    """An ``eval_accuracy`` value: a number, or (Mask R-CNN) a mapping of metric names to
    numbers, e.g. ``{"BBOX": 0.377, "SEGM": 0.339}`` -> ``{"bbox": ..., "segm": ...}``."""
    value = ev.value
    while isinstance(value, dict) and len(value) == 1 and isinstance(
            next(iter(value.values())), dict):  # v0.6: {"accuracy": {"BBOX": ..., ...}}
        value = next(iter(value.values()))
    if isinstance(value, dict) and "value" not in value and value:
        return {str(k).lower(): to_number(v, f"eval_accuracy {k}", ev.line)
                for k, v in value.items()}
    return to_number(value, "eval_accuracy", ev.line)


def _optional_int(ev: Event | None) -> int | None:
    return positive_int(ev.value, ev.key, ev.line) if ev is not None else None


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


def _param(key_order: tuple[str, ...], by_key: dict[str, list[Event]], run: list[Event],
           first_train_line: int) -> Event | None:
    """Latest record of the first key present logged before the run's training, else the
    first one logged within the run (a run is a stretch of the scan's records)."""
    lo, hi = run[0].index, run[-1].index
    for key in key_order:
        found = by_key.get(key, ())
        before = [e for e in found if e.line < first_train_line]
        if before:
            return before[-1]
        within = next((e for e in found if lo <= e.index <= hi), None)
        if within is not None:
            return within
    return None

