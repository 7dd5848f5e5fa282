"""Train and test spans of one MLPerf run, truncation, and progress points inside them.

Rules
-----
* Several runs in one file (in time order): a ``run_stop`` ends a run, and so does a
  header record (``submission_*``, ``cache_clear``, ``init_*``, ``run_start``) that
  follows training; stretches without any training are dropped (:func:`split_runs`).
* Train spans, by what the log has:

  - ``epoch_start``/``epoch_stop`` (v0.6 on, most submitters): one span per epoch;
    ``block_*`` records are then ignored (:func:`epoch_spans`).
  - only ``block_start``/``block_stop`` (Google v1.0, Habana): one span per block,
    ``epoch_start`` = ``first_epoch_num``, ``epoch_end`` = ``first_epoch_num +
    epoch_count - 1`` (as logged: Google's numbering overlaps between blocks). A block
    ends at its first ``eval_start`` if the eval runs inside it; when the eval has no
    ``eval_start`` (Google), the block includes the eval (:func:`block_spans` says so).
  - v0.5 ``train_epoch: N`` marks (start of epoch N, no stop): the epoch ends at the
    next ``train_epoch``/``eval_*``/``run_stop``/``run_final`` record. Marks sharing one
    timestamp (Google v0.5) are one span covering those epochs (:func:`mark_spans`).
* Test spans: one per ``eval_start``..``eval_stop``. In a log with no ``eval_stop``
  at all, an eval ends at the next record that is not an ``eval_*`` record (training
  resuming or ``run_stop``); evals without ``eval_start`` (Google) give no test span.
* Errors: a stop that does not match the open start, a stop with nothing open, a start
  while another is open, a span end without a time or more than 5 s before its start.
* Not errors: a run killed mid-training (a start still open at end of file or at
  ``run_stop``): the complete spans are kept, the open one dropped and
  :class:`Truncation` set.
* Points: MXNet display lines between an epoch's start and stop records give
  (batches ``b`` of ``Batch [a-b]``, local time). Their clock is local time without a
  zone: the offset to unix time is the one multiple of 15 min consistent with the
  neighbouring MLPerf records of every display line; no unique fit -> no such points.
  Only the lowest node's lines count. Every span's points end with ``(iterations, seconds)``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from ingest.events import ParseError
from ingest.parsers.mlperf.records import (
    BACKWARDS_TOLERANCE_S,
    Display,
    Event,
    epoch_of,
    positive_int,
    to_number,
)

SAME_MARK_S = 0.001  # v0.5 train_epoch marks this close share one timestamp
TZ_STEP_S = 900  # local-time offsets are multiples of 15 minutes
TZ_SLACK_S = 2.0

_V05_CLOSERS = {"train_epoch", "eval_start", "eval_accuracy", "eval_stop", "run_stop",
                "run_final", "block_start", "block_stop"}
SEGMENT_KEYS = {"epoch_start", "epoch_stop", "block_start", "block_stop", "train_epoch"}
_HEADER_KEYS = {"submission_benchmark", "submission_org", "submission_division",
                "submission_status", "submission_platform", "cache_clear", "init_start",
                "init_stop", "run_start", "run_clear_caches"}


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


def split_runs(events: list[Event]) -> list[list[Event]]:
    """A ``run_stop`` ends a run; a header record after training starts a new one."""
    runs: list[list[Event]] = [[]]
    trained = False
    for ev in events:
        if trained and ev.key in _HEADER_KEYS:
            runs.append([])
            trained = False
        runs[-1].append(ev)
        trained = trained or ev.key in SEGMENT_KEYS
        if ev.key == "run_stop":
            runs.append([])
            trained = False
    return [r for r in runs if any(e.key in SEGMENT_KEYS for e in r)]


@dataclass
class Truncation:
    """Set when a segment was left open (killed run) or the run has no ``run_stop``."""

    truncated: bool = False


def epoch_spans(run: list[Event], cut: Truncation) -> list[Span]:
    spans: list[Span] = []
    open_ev: Event | None = None
    open_num: float | None = None
    for ev in run:
        if ev.key == "epoch_start":
            num = epoch_of(ev)
            if open_ev is not None:
                raise ParseError(f"epoch_start {num:g} while epoch {open_num:g} (line "
                                 f"{open_ev.line}) has no epoch_stop", line=ev.line)
            open_ev, open_num = ev, num
        elif ev.key == "epoch_stop":
            num = epoch_of(ev)
            if open_ev is None:
                raise ParseError(f"epoch_stop {num:g} without an open epoch_start", line=ev.line)
            if num != open_num:
                raise ParseError(f"epoch_stop {num:g} does not match the open epoch "
                                 f"{open_num:g} (line {open_ev.line})", line=ev.line)
            spans.append(_timed_span("train", open_ev, ev, 1, num, num))
            open_ev = None
        elif ev.key == "run_stop" and open_ev is not None:
            cut.truncated = True
            open_ev = None
    if open_ev is not None:
        cut.truncated = True
    return spans


def _timed_span(phase: str, start: Event, stop: Event, epochs: float,
                first: float | None, last: float | None) -> Span:
    if start.time is None or stop.time is None:
        bad = start if start.time is None else stop
        raise ParseError(f"{bad.key} has no time", line=bad.line)
    if stop.time < start.time - BACKWARDS_TOLERANCE_S:
        raise ParseError(f"{stop.key} is {start.time - stop.time:.1f} s before its "
                         f"{start.key} (line {start.line})", line=stop.line)
    return Span(phase, start.time, max(stop.time, start.time), start.line, stop.line,
                 epochs, first, last)


def block_spans(run: list[Event], cut: Truncation) -> tuple[list[Span], bool]:
    """Train spans from block records; True when some block holds an eval that has no
    ``eval_start`` of its own (the block then includes the eval time)."""
    spans: list[Span] = []
    includes_eval = False
    open_ev: Event | None = None
    first = count = None
    eval_start: Event | None = None
    saw_accuracy = False
    for ev in run:
        if ev.key == "block_start":
            if open_ev is not None:
                raise ParseError(f"block_start while the block of line {open_ev.line} "
                                 "has no block_stop", line=ev.line)
            if "first_epoch_num" not in ev.meta:
                raise ParseError("block_start has no first_epoch_num", line=ev.line)
            first = to_number(ev.meta["first_epoch_num"], "block_start first_epoch_num", ev.line)
            raw_count = ev.meta.get("epoch_count")
            count = (positive_int(raw_count, "block_start epoch_count", ev.line)
                     if raw_count is not None else None)
            open_ev, eval_start, saw_accuracy = ev, None, False
        elif open_ev is not None and ev.key == "eval_start" and eval_start is None:
            eval_start = ev
        elif open_ev is not None and ev.key == "eval_accuracy":
            saw_accuracy = True
        elif ev.key == "block_stop":
            if open_ev is None:
                raise ParseError("block_stop without an open block_start", line=ev.line)
            if "first_epoch_num" in ev.meta:
                stop_first = to_number(ev.meta["first_epoch_num"], "block_stop first_epoch_num",
                                     ev.line)
                if stop_first != first:
                    raise ParseError(f"block_stop for epoch {stop_first:g} does not match the "
                                     f"open block from epoch {first:g} (line {open_ev.line})",
                                     line=ev.line)
            if count is None:
                raw_count = ev.meta.get("epoch_count")
                if raw_count is None:
                    raise ParseError("block has no epoch_count on block_start or block_stop",
                                     line=ev.line)
                count = positive_int(raw_count, "block_stop epoch_count", ev.line)
            end = eval_start if eval_start is not None else ev
            if eval_start is None and saw_accuracy:
                includes_eval = True
            spans.append(_timed_span("train", open_ev, end, count, first, first + count - 1))
            open_ev = None
        elif ev.key == "run_stop" and open_ev is not None:
            cut.truncated = True
            open_ev = None
    if open_ev is not None:
        cut.truncated = True
    return spans, includes_eval


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
            spans.append(_timed_span("train", first_ev, ev, len(group), first_num, last_num))
            group = []
        if ev.key == "train_epoch":
            group = [(ev, num)]
    if group:
        cut.truncated = True
    return spans


def eval_spans(run: list[Event], cut: Truncation) -> list[Span]:
    """Evals: ``eval_start`` .. ``eval_stop``; in a run that logs no ``eval_stop`` at all,
    an eval ends at the next record that is not an ``eval_*`` record."""
    has_stop = any(e.key == "eval_stop" for e in run)
    spans: list[Span] = []
    open_ev: Event | None = None
    num: float | None = None
    for ev in run:
        if ev.key == "eval_start":
            if open_ev is not None:
                raise ParseError(f"eval_start while the eval of line {open_ev.line} has no "
                                 "eval_stop", line=ev.line)
            open_ev, num = ev, epoch_of(ev, required=False)
        elif open_ev is None:
            if ev.key == "eval_stop":
                raise ParseError("eval_stop without an open eval_start", line=ev.line)
        elif ev.key == "eval_accuracy":
            if num is None:
                num = epoch_of(ev, required=False)
        elif (ev.key == "eval_stop" if has_stop else not ev.key.startswith("eval_")):
            if ev.time is None:
                continue
            if num is None and ev.key == "eval_stop":
                num = epoch_of(ev, required=False)
            spans.append(_timed_span("test", open_ev, ev, 1, num, num))
            open_ev = None
    if open_ev is not None:
        cut.truncated = True
    return spans


def tz_offset(displays: list[Display], events: list[Event]) -> int | None:
    """The multiple of 15 min that maps display clocks onto the records around them."""
    timed = [e for e in events if e.time is not None]
    if not displays or not timed:
        return None
    lines = [e.line for e in timed]
    lo, hi = -math.inf, math.inf
    for d in displays:
        i = bisect.bisect_left(lines, d.line)
        if i > 0:
            lo = max(lo, timed[i - 1].time - d.naive - TZ_SLACK_S)  # type: ignore[operator]
        if i < len(timed):
            hi = min(hi, timed[i].time - d.naive + TZ_SLACK_S)  # type: ignore[operator]
    if lo > hi or not math.isfinite(lo) or not math.isfinite(hi):
        return None
    fits = list(range(math.ceil(lo / TZ_STEP_S), math.floor(hi / TZ_STEP_S) + 1))
    return fits[0] * TZ_STEP_S if len(fits) == 1 else None


@dataclass(frozen=True)
class DisplayClock:
    """The display lines of the lowest node, and their clock's offset to unix time."""

    displays: list[Display]
    offset: int | None  # None: no unique fit, so no points from display lines
    lines: list[int]

    @classmethod
    def of(cls, displays: list[Display], events: list[Event]) -> DisplayClock:
        node = min((d.node for d in displays), default=0)
        mine = [d for d in displays if d.node == node]
        return cls(mine, tz_offset(mine, events), [d.line for d in mine])


def span_points(span: Span, iterations: float, clock: DisplayClock
                ) -> tuple[tuple[float, float], ...]:
    """Progress marks of a one-epoch train span from display lines, ending with its end."""
    seconds = span.end - span.start
    marks: list[tuple[float, float]] = []
    offset = clock.offset
    if offset is not None and span.phase == "train" and span.epochs == 1:
        i = bisect.bisect_right(clock.lines, span.start_line)
        j = bisect.bisect_left(clock.lines, span.end_line)
        for d in clock.displays[i:j]:
            s = d.naive + offset - span.start
            if s < -TZ_SLACK_S or s > seconds + TZ_SLACK_S:
                return ((iterations, seconds),)  # clock does not fit this span: no marks
            s = min(max(s, 0.0), seconds)
            if not 0 < d.batches < iterations:
                continue
            if marks and (d.batches <= marks[-1][0] or s < marks[-1][1]):
                continue
            marks.append((float(d.batches), s))
    marks.append((iterations, seconds))
    return tuple(marks)
