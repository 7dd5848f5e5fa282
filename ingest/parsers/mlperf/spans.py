"""Train and test spans of one MLPerf run, truncation, and progress points inside them.

Rules
-----
* Several runs in one file (in time order): a ``run_stop`` ends a run, and so does a
  header record (``submission_*``, ``cache_clear``, ``init_*``, ``run_start``) that
  follows training; stretches without any training are dropped (:func:`split_runs`), and
  so are records after a ``run_stop`` that hold training but no header (the loop finishing
  its block or epoch after the run converged: ``after_run_stop``).
* Train spans, by what the log has:

  - ``epoch_start``/``epoch_stop`` (v0.6 on, most submitters): one span per epoch;
    ``block_*`` records are then ignored (:func:`epoch_spans`).
  - only ``block_start``/``block_stop`` (Google v1.0, Habana): one span per block,
    ``epoch_start`` = ``first_epoch_num``, ``epoch_end`` = ``first_epoch_num +
    epoch_count - 1`` (as logged: Google's numbering overlaps between blocks). A block
    ends at its first ``eval_start`` if the eval runs inside it (its ``eval_stop``, the one
    of the same epoch number, comes before the block ends); an eval still running when the
    block ends runs beside training (pipelined TPU runners queue the eval of the block's
    result at its start) and the block ends at its own end. When the eval has no
    ``eval_start`` (Google), the block includes the eval (:func:`block_spans` says so).
  - v0.5 ``train_epoch: N`` marks (start of epoch N, no stop): the epoch ends at the
    next ``train_epoch``/``eval_*``/``run_stop``/``run_final`` record. Marks sharing one
    timestamp (Google v0.5) are one span covering those epochs (:func:`mark_spans`).
  - Epochs tile the training time: an epoch ends where the next segment (epoch or eval)
    starts, or at ``run_stop`` when nothing follows it (:func:`close_epoch_gaps`). The time
    between an ``epoch_stop`` and the next mark is normally a millisecond; where it adds up
    to more than 1 s and 5 % of the epochs' own time the marks were asynchronous (MXNet on
    NVIDIA's 64-node H100 v3.0 ``result_0`` logs 50 epochs of 0.16 s and waits 1.8 s before
    each eval, while its other runs log 0.57 s epochs) and the run notes ``epoch_gap``.
* Test spans: one per ``eval_start``..``eval_stop``. In a log with no ``eval_stop``
  at all, an eval ends at the next record that is not an ``eval_*`` record (training
  resuming or ``run_stop``); evals without ``eval_start`` (Google) give no test span.
* Repairs (kinds in :mod:`.repairs`), each noted with its line:

  - ``missing_epoch_stop``: an ``epoch_start`` while an epoch is open closes the open one
    at its first ``eval_start``/``block_stop`` if one came, else at this ``epoch_start``;
    at ``run_stop`` or the end of the run the open epoch is closed the same way when such a
    mark came, else dropped as a killed epoch (truncation, no repair).
  - ``mismatched_epoch_stop``: an ``epoch_stop`` numbered open + 1 (Composer counts
    completed epochs) closes the open epoch. Any other number is an error.
  - ``unclosed_block``: a ``block_start`` while a block is open closes the open block there;
    when it repeats the open block's ``first_epoch_num`` (MindSpore logs one per epoch), its
    epochs are numbered on from the closed block.
  - ``mismatched_block_stop``: a ``block_stop`` numbered first + count (the next block's
    first epoch, SIAT) or first + count - 1 (the block's last epoch, NVIDIA's UNet3D)
    closes the open block. Any other number is an error, except:
  - ``late_block_stop``: a ``block_stop`` numbered as a block that a ``block_start``
    already closed (``unclosed_block`` above) is that block's late stop (pipelined runners
    log it when the block's eval ends; threads logging in one millisecond): ignored, and
    the block's ``unclosed_block`` note is taken back.
  - ``unclosed_eval``: an ``eval_start`` while an eval is open drops the open eval.
  - ``instant_eval``: an eval whose start and stop share one timestamp (logged when an
    asynchronous eval's result arrived, NVIDIA's v0.7 SSD) times nothing: no test span.
  - ``duplicate_mark``: a stop with nothing open is ignored.
  - ``clock_step``: a span whose lines hold a clock step (``records.check_clock``) is
    dropped (:func:`drop_stepped`).
* Errors: a stop numbered unlike the rules above, a span end without a time or more than
  5 s before its start.
* Not errors: a run killed mid-training (a start still open at end of file or at
  ``run_stop``): the complete spans are kept, the open one dropped and
  :class:`Truncation` set.
* Points inside spans come from MXNet display lines (:mod:`.displays`); a span keeps the
  scan places of its start and end records for them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from ingest.events import ParseError
from ingest.parsers.mlperf.records import (
    BACKWARDS_TOLERANCE_S,
    HEADER_KEYS,
    SEGMENT_KEYS,
    Event,
    epoch_of,
    positive_int,
    to_number,
)
from ingest.parsers.mlperf.repairs import Repair, Repairs

SAME_MARK_S = 0.001  # v0.5 train_epoch marks this close share one timestamp

_V05_CLOSERS = {"train_epoch", "eval_start", "eval_accuracy", "eval_stop", "run_stop",
                "run_final", "block_start", "block_stop"}
_EPOCH_CLOSERS = {"eval_start", "block_stop"}  # where an epoch without its stop ended


@dataclass
class Span:
    """A train or test stretch between two records (times in unix s, lines 1-based)."""

    phase: str
    start: float
    end: float
    start_line: int
    end_line: int
    epochs: float  # epochs covered (train) / 1 (test)
    epoch_start: float | None
    epoch_end: float | None
    start_index: int = 0  # places of the start and end records in the scan (Event.index)
    end_index: int = 0


def split_runs(events: list[Event], fix: Repairs | None = None) -> list[list[Event]]:
    """A ``run_stop`` ends a run; a header record after training starts a new one. Records
    after a ``run_stop`` that hold training but no header are no run (``after_run_stop``,
    noted at the ``run_stop`` in ``fix``)."""
    runs: list[list[Event]] = [[]]
    stops: list[Event | None] = [None]  # the run_stop each stretch follows
    trained = False
    for ev in events:
        if trained and ev.key in HEADER_KEYS:
            runs.append([])
            stops.append(None)
            trained = False
        runs[-1].append(ev)
        trained = trained or ev.key in SEGMENT_KEYS
        if ev.key == "run_stop":
            runs.append([])
            stops.append(ev)
            trained = False
    kept = []
    for run, stop in zip(runs, stops, strict=True):
        if not any(e.key in SEGMENT_KEYS for e in run):
            continue
        if stop is not None and not any(e.key in HEADER_KEYS for e in run):
            if fix is not None:
                keys = sorted({e.key for e in run})
                fix.add("after_run_stop", stop.line,
                        f"{len(run)} records after run_stop (lines {run[0].line}-"
                        f"{run[-1].line}: {', '.join(keys)}) with no new run header: ignored")
            continue
        kept.append(run)
    return kept


@dataclass
class Truncation:
    """Set when a segment was left open (killed run) or the run has no ``run_stop``; holds
    the lines where the clock stepped back (spans across them are dropped, not checked)."""

    truncated: bool = False
    clock_steps: tuple[int, ...] = ()


def epoch_spans(run: list[Event], cut: Truncation, fix: Repairs) -> list[Span]:
    """The train spans of a run logged by ``epoch_start``/``epoch_stop`` records (rules above)."""
    spans: list[Span] = []
    open_ev: Event | None = None
    open_num: float = 0.0
    closer: Event | None = None  # first eval_start/block_stop after the open epoch_start

    def close_missing(at: Event) -> None:
        end = closer or at
        spans.append(_timed_span("train", open_ev, end, 1, open_num, open_num,  # type: ignore[arg-type]
                                 cut))
        fix.add("missing_epoch_stop", open_ev.line,  # type: ignore[union-attr]
                f"epoch {open_num:g} has no epoch_stop: closed at line {end.line} "
                f"({end.key})")

    for ev in run:
        key = ev.key
        if key == "epoch_start":
            num = epoch_of(ev)
            if open_ev is not None:
                close_missing(ev)
            open_ev, open_num, closer = ev, num, None  # type: ignore[assignment]
        elif key == "epoch_stop":
            num = epoch_of(ev)
            if open_ev is None:
                fix.add("duplicate_mark", ev.line,
                        f"epoch_stop {num:g} with no open epoch_start: ignored")
                continue
            if num != open_num:
                if num != open_num + 1:
                    raise ParseError(f"epoch_stop {num:g} does not match the open epoch "
                                     f"{open_num:g} (line {open_ev.line})", line=ev.line)
                fix.add("mismatched_epoch_stop", ev.line,
                        f"epoch_stop {num:g} closes the open epoch {open_num:g} (line "
                        f"{open_ev.line}): stops numbered by completed epochs")
            spans.append(_timed_span("train", open_ev, ev, 1, open_num, open_num, cut))
            open_ev = None
        elif open_ev is None:
            continue
        elif key in _EPOCH_CLOSERS and closer is None and ev.time is not None:
            closer = ev
        elif key == "run_stop":
            if closer is not None:
                close_missing(ev)
            else:
                cut.truncated = True
            open_ev = None
    if open_ev is not None:
        if closer is not None:
            close_missing(closer)
        else:
            cut.truncated = True
    return spans


def _timed_span(phase: str, start: Event, stop: Event, epochs: float,
                first: float | None, last: float | None, cut: Truncation) -> Span:
    if start.time is None or stop.time is None:
        bad = start if start.time is None else stop
        raise ParseError(f"{bad.key} has no time", line=bad.line)
    stepped = bool(cut.clock_steps) and any(start.line < n <= stop.line
                                            for n in cut.clock_steps)
    if stop.time < start.time - BACKWARDS_TOLERANCE_S and not stepped:
        raise ParseError(f"{stop.key} is {start.time - stop.time:.1f} s before its "
                         f"{start.key} (line {start.line})", line=stop.line)
    return Span(phase, start.time, max(stop.time, start.time), start.line, stop.line,
                epochs, first, last, start.index, stop.index)


def block_spans(run: list[Event], cut: Truncation, fix: Repairs) -> tuple[list[Span], bool]:
    """Train spans from block records; True when some block holds an eval that has no
    ``eval_start`` of its own (the block then includes the eval time)."""
    spans: list[Span] = []
    includes_eval = False
    open_ev: Event | None = None
    first = logged = 0.0  # the open block's first epoch: as numbered here / as logged
    count: int | None = None
    eval_start: Event | None = None
    eval_open = False  # the block's eval_start has no eval_stop yet
    saw_accuracy = False
    early: dict[float, tuple[Repair, int, float]] = {}  # logged first -> closed at a start

    def close(at: Event) -> None:
        nonlocal includes_eval
        beside = eval_open  # still running at the block's end: pipelined, not inside it
        end = eval_start if eval_start is not None and not beside else at
        if eval_start is None and saw_accuracy:
            includes_eval = True
        spans.append(_timed_span("train", open_ev, end, count, first,  # type: ignore[arg-type]
                                 first + count - 1, cut))  # type: ignore[operator]

    for ev in run:
        if ev.key == "block_start":
            if "first_epoch_num" not in ev.meta:
                raise ParseError("block_start has no first_epoch_num", line=ev.line)
            new_logged = to_number(ev.meta["first_epoch_num"], "block_start first_epoch_num",
                                   ev.line)
            new_first = new_logged
            raw_count = ev.meta.get("epoch_count")
            new_count = (positive_int(raw_count, "block_start epoch_count", ev.line)
                         if raw_count is not None else None)
            if open_ev is not None:
                if count is None:
                    raise ParseError(f"block_start while the block of line {open_ev.line} "
                                     "has no block_stop and no epoch_count", line=ev.line)
                close(ev)
                note = ""
                if new_logged == logged:
                    new_first = first + count
                    note = f"; its epochs numbered from {new_first:g}"
                early[logged] = (fix.add(
                    "unclosed_block", open_ev.line,
                    f"block from epoch {first:g} has no block_stop: closed at the "
                    f"block_start of line {ev.line}{note}"), ev.line, first)
            first, logged, count = new_first, new_logged, new_count
            open_ev, eval_start, saw_accuracy, eval_open = ev, None, False, False
        elif open_ev is not None and ev.key == "eval_start" and eval_start is None:
            eval_start, eval_open = ev, True
        elif ev.key == "eval_stop" and eval_open:
            eval_open = not _same_eval(eval_start, ev)  # type: ignore[arg-type]
        elif open_ev is not None and ev.key == "eval_accuracy":
            saw_accuracy = True
        elif ev.key == "block_stop":
            stop_first = (to_number(ev.meta["first_epoch_num"], "block_stop first_epoch_num",
                                    ev.line) if "first_epoch_num" in ev.meta else None)
            if stop_first is not None and stop_first != logged and stop_first in early:
                _late_stop(ev, stop_first, early.pop(stop_first), fix)
                continue
            if open_ev is None:
                fix.add("duplicate_mark", ev.line, "block_stop with no open block_start: "
                        "ignored")
                continue
            if stop_first is not None and stop_first != logged:
                if count is None or stop_first not in (logged + count, logged + count - 1):
                    raise ParseError(f"block_stop for epoch {stop_first:g} does not match "
                                     f"the open block from epoch {logged:g} (line "
                                     f"{open_ev.line})", line=ev.line)
                how = ("the next block's first epoch" if stop_first == logged + count
                       else "the block's last epoch")
                fix.add("mismatched_block_stop", ev.line,
                        f"block_stop for epoch {stop_first:g} closes the open block of "
                        f"epochs {logged:g}..{logged + count - 1:g} (line {open_ev.line}): "
                        f"stops numbered with {how}")
            if count is None:
                raw_count = ev.meta.get("epoch_count")
                if raw_count is None:
                    raise ParseError("block has no epoch_count on block_start or block_stop",
                                     line=ev.line)
                count = positive_int(raw_count, "block_stop epoch_count", ev.line)
            close(ev)
            open_ev = None
        elif ev.key == "run_stop" and open_ev is not None:
            cut.truncated = True
            open_ev = None
    if open_ev is not None:
        cut.truncated = True
    return spans, includes_eval


def _same_eval(start: Event, stop: Event) -> bool:
    """Whether ``stop`` ends the eval ``start`` began (same epoch number where both have
    one: a pipelined runner's eval_stop may be the previous block's)."""
    a, b = epoch_of(start, required=False), epoch_of(stop, required=False)
    return a is None or b is None or a == b


def _late_stop(ev: Event, stop_first: float, early: tuple[Repair, int, float],
               fix: Repairs) -> None:
    """A block_stop for a block the next block_start closed: the ``unclosed_block`` repair
    noted then becomes a ``late_block_stop`` (pipelined runners, Google TPU v0.6-v0.7)."""
    rep, closed_at, first = early
    fix.retract(rep)
    fix.add("late_block_stop", ev.line,
            f"block_stop for the block from epoch {first:g} (line {rep.line}) comes after the "
            f"next block_start (line {closed_at}), which closed it: ignored")


def mark_spans(run: list[Event], cut: Truncation) -> list[Span]:
    """v0.5 ``train_epoch: N`` marks: an epoch runs to the next closing record."""
    spans: list[Span] = []
    group: list[tuple[Event, float]] = []
    for ev in run:
        if ev.key == "train_epoch":
            num = to_number(ev.value, "train_epoch epoch number", ev.line)
            if ev.time is None:
                raise ParseError("train_epoch has no time", line=ev.line)
            if group and abs(ev.time - group[0][0].time) <= SAME_MARK_S:  # type: ignore[operator]
                group.append((ev, num))
                continue
        if group and ev.key in _V05_CLOSERS:
            first_ev, first_num = group[0]
            last_num = group[-1][1]
            spans.append(_timed_span("train", first_ev, ev, len(group), first_num, last_num,
                                     cut))
            group = []
        if ev.key == "train_epoch":
            group = [(ev, num)]
    if group:
        cut.truncated = True
    return spans


def eval_spans(run: list[Event], cut: Truncation, fix: Repairs) -> list[Span]:
    """Evals: ``eval_start`` .. ``eval_stop``; in a run that logs no ``eval_stop`` at all,
    an eval ends at the next record that is not an ``eval_*`` record."""
    has_stop = any(e.key == "eval_stop" for e in run)
    spans: list[Span] = []
    open_ev: Event | None = None
    num: float | None = None
    for ev in run:
        if ev.key == "eval_start":
            if open_ev is not None:
                fix.add("unclosed_eval", open_ev.line,
                        f"eval_start with no eval_stop before the eval_start of line "
                        f"{ev.line}: that eval is dropped")
            open_ev, num = ev, epoch_of(ev, required=False)
        elif open_ev is None:
            if ev.key == "eval_stop":
                fix.add("duplicate_mark", ev.line, "eval_stop with no open eval_start: "
                        "ignored")
        elif ev.key == "eval_accuracy":
            if num is None:
                num = epoch_of(ev, required=False)
        elif (ev.key == "eval_stop" if has_stop else not ev.key.startswith("eval_")):
            if ev.time is None:
                continue
            if num is None and ev.key == "eval_stop":
                num = epoch_of(ev, required=False)
            span = _timed_span("test", open_ev, ev, 1, num, num, cut)
            if span.end > span.start:
                spans.append(span)
            else:
                fix.add("instant_eval", open_ev.line,
                        f"eval_start and {ev.key} (line {ev.line}) share one timestamp: the "
                        "eval ran asynchronously and times nothing (no test segment)")
            open_ev = None
    if open_ev is not None:
        cut.truncated = True
    return spans


EPOCH_GAP_NOTE_S = 1.0  # gaps summing to more than this (and EPOCH_GAP_NOTE_SHARE) are noted
EPOCH_GAP_NOTE_SHARE = 0.05


def close_epoch_gaps(spans: list[Span], evals: list[Span], run: list[Event],
                     fix: Repairs) -> list[Span]:
    """Epoch spans extended to the start of the next segment (or ``run_stop``): see the
    module rules. Spans are returned in their order; their lines and scan places stay."""
    stop = next((e.time for e in run if e.key == "run_stop" and e.time is not None), None)
    starts = sorted([s.start for s in spans] + [s.start for s in evals]
                    + ([stop] if stop is not None else []))
    out: list[Span] = []
    gaps = own = 0.0
    first_line: int | None = None
    for span in spans:
        at = bisect.bisect_left(starts, span.end)
        while at < len(starts) and starts[at] <= span.start:  # its own start (a 0 s span)
            at += 1
        nxt = starts[at] if at < len(starts) else None
        own += span.end - span.start
        if nxt is not None and nxt > span.end:
            gaps += nxt - span.end
            if first_line is None and nxt - span.end > SAME_MARK_S:
                first_line = span.end_line
            span = replace(span, end=nxt)
        out.append(span)
    if gaps > EPOCH_GAP_NOTE_S and gaps > EPOCH_GAP_NOTE_SHARE * own:
        fix.add("epoch_gap", first_line,
                f"{gaps:.1f} s between epoch_stop marks and the next segment (the epochs' own "
                f"marks span {own:.1f} s): counted as training")
    return out


def drop_stepped(spans: list[Span], steps: list[int], fix: Repairs) -> list[Span]:
    """``spans`` without those whose lines hold a clock step (noted on the step's repair)."""
    if not steps:
        return spans
    kept = []
    for span in spans:
        step = next((n for n in steps if span.start_line < n <= span.end_line), None)
        if step is None:
            kept.append(span)
            continue
        what = (f"epochs {span.epoch_start:g}..{span.epoch_end:g}"
                if span.epoch_start is not None and span.epoch_end is not None else "a span")
        fix.add("clock_step", step, f"{span.phase} span of {what} (lines {span.start_line}-"
                f"{span.end_line}) crosses the clock step: dropped")
    return kept
