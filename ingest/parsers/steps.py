"""Step-stamped training histories -> train segments, with warm-up kept apart and reported.

TensorBoard scalars, W&B history rows and MLflow metric histories all give, for some metric,
marks ``(step, wall time)`` written after that step. :func:`train_segments` turns them into
segments the models read.

Rules
-----
* Steps must increase from one mark to the next (a repeated or decreasing step is a
  :class:`~ingest.events.ParseError` at its line); a wall time may go back by at most
  :data:`BACKWARDS_TOLERANCE_S` (clock jitter: it is then held at the previous one), else a
  ParseError. Wall times are unix seconds in 1990 .. 2100.
* Between two marks the run did ``step_b - step_a`` steps in ``time_b - time_a`` seconds.
* The first mark: where the source knows when the run started (``origin``: the writer opened,
  the tracker's run started) and the first step number says how many steps it covers (step 0
  or 1: one step, counted from 0 or 1; a first step ``s`` of at most one logging interval:
  ``s`` steps), the span from the origin to the first mark is the first interval; it holds the
  start-up as well. Otherwise the first mark only starts the clock and its steps are not timed
  (``meta["untimed_steps"]``, ``meta["timing_origin"]`` says why).
* **Warm-up**: each interval's time per step is compared with the steady time per step (the
  median over the later half of the intervals). The leading intervals slower than
  :data:`WARMUP_FACTOR` times that (and the first interval where it holds start-up) are the
  warm-up, at most half of the intervals. They form the run's first train segment; the rest
  is the second, so the per-step fit's slope comes from the steady segment and the one-off
  cost from the first (as MLPerf's first epoch and Caffe's first display block). Reported:
  ``meta["warmup"]`` (what), ``meta["warmup_steps"]``, ``meta["warmup_seconds"]``,
  ``meta["steady_step_seconds"]``, ``meta["warmup_slowdown"]`` (the warm-up's seconds per step
  over the steady ones).
* Timestamps that do not advance (more than half the intervals of zero seconds: a history
  written after training in one batch) are a ParseError: there is no per-step time.
* A segment keeps at most :data:`MAX_POINTS` progress points (evenly thinned, ends kept).
* Which metric gives the marks (:func:`progress_key`): of those logged at two or more
  increasing steps, not per-epoch (``epoch_*``, ``*_epoch``, ``epoch``), not evaluation (a name
  part in :data:`EVAL_WORDS`) and not ``hparam/``/``system/``, the one with ``loss`` in its
  name, then the most marks, then the first seen.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ingest.events import ParseError, Segment
from ingest.validate import plausible_time

BACKWARDS_TOLERANCE_S = 1.0
EVAL_WORDS = frozenset({"val", "valid", "validation", "eval", "evaluation", "test"})
WARMUP_FACTOR = 1.5
MAX_POINTS = 500


@dataclass(frozen=True)
class Mark:
    """One logged value: the step number, the wall time (unix s) and the line (record)."""

    step: int
    time: float
    line: int


@dataclass(frozen=True)
class _Interval:
    steps: int
    seconds: float
    line: int
    start: float


def is_eval(name: str) -> bool:
    """Whether a metric name is an evaluation metric (a name part in :data:`EVAL_WORDS`)."""
    return bool(set(re.split(r"[/_.\-\s]+", name.lower())) & EVAL_WORDS)


def progress_key(series: Mapping[str, Sequence[Mark]], per_epoch_hint: str = "") -> str:
    """The metric whose marks time the steps (module doc); ParseError when none can."""

    def usable(name: str) -> bool:
        low = name.lower()
        marks = series[name]
        return (len(marks) >= 2 and not low.startswith(("epoch_", "hparam/", "system/"))
                and not low.endswith("_epoch") and low != "epoch" and not is_eval(name)
                and all(b.step > a.step for a, b in zip(marks, marks[1:], strict=False)))

    candidates = [name for name in series if usable(name)]
    if not candidates:
        per_epoch = sorted(n for n in series if "epoch" in n.lower())
        if per_epoch:
            raise ParseError(f"only per-epoch values ({', '.join(per_epoch[:3])}): no per-step "
                             f"time{'; ' + per_epoch_hint if per_epoch_hint else ''}")
        names = ", ".join(sorted(series)[:5]) or "none"
        raise ParseError("no metric logged at two or more increasing steps (e.g. the train "
                         f"loss per step): no training progress (metrics: {names})")
    order = list(series)
    return max(candidates, key=lambda n: ("loss" in n.lower(), len(series[n]), -order.index(n)))


def _checked(marks: Sequence[Mark]) -> list[Mark]:
    out: list[Mark] = []
    for mark in marks:
        if not plausible_time(mark.time):
            raise ParseError(f"wall time {mark.time!r} is not unix seconds in 1990 .. 2100",
                             line=mark.line)
        if out:
            last = out[-1]
            if mark.step <= last.step:
                raise ParseError(f"step {mark.step} after step {last.step} (steps must increase)",
                                 line=mark.line)
            if mark.time < last.time - BACKWARDS_TOLERANCE_S:
                raise ParseError(f"wall time goes back {last.time - mark.time:.3f} s from the "
                                 f"mark of step {last.step}", line=mark.line)
            if mark.time < last.time:
                mark = Mark(mark.step, last.time, mark.line)
        out.append(mark)
    return out


def first_span(marks: Sequence[Mark], origin: float | None) -> tuple[int | None, str]:
    """How many steps the first mark covers from ``origin`` (None: not timed) and why."""
    if origin is None:
        return None, "no start time: the first mark starts the clock"
    first = marks[0]
    if not plausible_time(origin) or origin > first.time:
        return None, "start time after the first mark: the first mark starts the clock"
    gaps = [b.step - a.step for a, b in zip(marks, marks[1:], strict=False)]
    cadence = statistics.median(gaps) if gaps else 1
    if first.step in (0, 1):
        return 1, "run start to the first mark (one step)"
    if first.step <= cadence:
        return first.step, f"run start to the first mark ({first.step} steps)"
    return None, f"first step {first.step} (resumed?): the first mark starts the clock"


def _intervals(marks: list[Mark], origin: float | None,
               first_steps: int | None) -> list[_Interval]:
    out: list[_Interval] = []
    if first_steps is not None and origin is not None:
        out.append(_Interval(first_steps, marks[0].time - origin, marks[0].line, origin))
    for a, b in zip(marks, marks[1:], strict=False):
        out.append(_Interval(b.step - a.step, b.time - a.time, b.line, a.time))
    return out


def _warmup_count(intervals: list[_Interval], startup: bool) -> tuple[int, float]:
    """Leading warm-up intervals and the steady seconds per step."""
    rates = [i.seconds / i.steps for i in intervals]
    later = rates[len(rates) // 2:] or rates
    steady = statistics.median(later)
    limit = len(intervals) // 2
    count = 1 if startup and limit >= 1 else 0
    while count < limit and rates[count] > WARMUP_FACTOR * steady:
        count += 1
    return count, steady


def _thin(points: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    if len(points) <= MAX_POINTS:
        return tuple(points)
    step = (len(points) - 1) / (MAX_POINTS - 1)
    keep = sorted({round(i * step) for i in range(MAX_POINTS)})
    return tuple(points[i] for i in keep)


def _segment(intervals: list[_Interval], batch_size: int | None) -> Segment:
    points: list[tuple[float, float]] = []
    steps = seconds = 0.0
    for interval in intervals:
        steps += interval.steps
        seconds += interval.seconds
        points.append((steps, seconds))
    return Segment(phase="train", iterations=steps, seconds=seconds, batch_size=batch_size,
                   start_time=intervals[0].start, line=intervals[-1].line, points=_thin(points))


def train_segments(marks: Sequence[Mark], origin: float | None,
                   batch_size: int | None) -> tuple[list[Segment], dict[str, object]]:
    """The warm-up and steady train segments of ``marks`` and the meta that reports them
    (rules in the module doc); ParseError where the marks cannot time any step."""
    checked = _checked(marks)
    if not checked:
        raise ParseError("no progress marks")
    first_steps, why = first_span(checked, origin)
    intervals = _intervals(checked, origin, first_steps)
    if not intervals:
        raise ParseError(f"one progress mark only (step {checked[0].step}): no step can be "
                         "timed", line=checked[0].line)
    still = sum(1 for i in intervals if i.seconds <= 0)
    if still * 2 > len(intervals):
        raise ParseError(f"wall times do not advance ({still} of {len(intervals)} intervals "
                         "take 0 s): the history was written after training, no per-step "
                         "time", line=intervals[-1].line)
    count, steady = _warmup_count(intervals, startup=first_steps is not None)
    meta: dict[str, object] = {"timing_origin": why, "steady_step_seconds": steady,
                               "steps_logged": len(checked)}
    if first_steps is None:
        meta["untimed_steps"] = 1 if checked[0].step in (0, 1) else checked[0].step
    segments = []
    if count:
        warm = intervals[:count]
        segments.append(_segment(warm, batch_size))
        meta["warmup_steps"] = int(segments[0].iterations)
        meta["warmup_seconds"] = segments[0].seconds
        if steady > 0:
            meta["warmup_slowdown"] = segments[0].seconds / segments[0].iterations / steady
        steps = int(segments[0].iterations)
        meta["warmup"] = (f"{steps} warm-up step{'s' if steps != 1 else ''} "
                          f"({segments[0].seconds:.3g} s"
                          f"{', start-up included' if first_steps is not None else ''}): the "
                          "first train segment, kept out of the steady segment")
    rest = intervals[count:]
    if rest:
        segments.append(_segment(rest, batch_size))
    return segments, meta
