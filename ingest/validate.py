"""Range checks at the edge: every parsed run is checked before it is stored.

Rules
-----
* A file is stored whole or rejected (the pipeline's rule), and so is a file with one value
  out of range: :func:`validate_run` raises a :class:`~ingest.events.ParseError` naming the
  run, the segment, the line (the segment's own line where the parser knows it, else the
  run's first line) and the reason. Nothing is clamped, dropped or repaired here: a value a
  parser could not read sensibly means the file cannot be trusted, and the user sees why.
* Every number must be finite (no NaN, no infinity).
* A segment: ``iterations`` in [1, :data:`MAX_ITERATIONS`]; ``seconds`` in
  (0, :data:`MAX_SEGMENT_SECONDS`]; ``batch_size`` None or a whole number in
  [1, :data:`MAX_BATCH_SIZE`]; ``start_time`` None or unix seconds in
  [:data:`MIN_UNIX_TIME`, :data:`MAX_UNIX_TIME`); ``epoch_start``/``epoch_end`` None or in
  [0, :data:`MAX_EPOCH`] with start <= end; ``iteration_start``/``iteration_end`` None or
  whole numbers in [0, :data:`MAX_STEP_INDEX`] with start <= end + 1; ``line`` None or >= 1.
* A segment's ``points`` are (iterations, seconds) since the segment start: finite, inside
  [0, iterations] x [0, seconds] (relative slack :data:`POINT_SLACK`), and monotone: neither
  coordinate decreases from one point to the next (same slack).
* A run: ``batch_size`` a whole number in [1, :data:`MAX_BATCH_SIZE`]; ``start_time`` None
  or plausible as above; a deployment's accelerators per node in [1,
  :data:`MAX_ACCELERATORS_PER_NODE`] and nodes in [1, :data:`MAX_NODES`]; names (network,
  software stack, accelerator, deployment key) at most :data:`MAX_NAME_CHARS` characters without
  control characters other than tab and line breaks (they are database keys and are shown
  in terminals; PostgreSQL refuses NUL).
* A truncated run (the log ends before the run did: ``meta["truncated"]``, set by every
  parser that can tell) is stored, but never silently: :func:`note_truncation` adds a warning
  saying so (``meta["warnings"]``: the ingest line and ``--json`` show it), and a truncated
  run rejected for another reason names the truncation first (:func:`also_truncated`).
* Parsers of JSON logs read integers with :func:`json_int` (:func:`loads`): a huge integer
  becomes a float, so it fails a finiteness or whole-number check with a line instead of
  raising ``ValueError``/``OverflowError`` deep inside a parser.
"""

from __future__ import annotations

import json
import math
import operator
import re
from typing import Any, cast

from ingest.events import ParsedRun, ParseError, Segment, short_repr

MAX_SEGMENT_SECONDS = 30 * 86400.0  # one segment (an epoch, a block, a test pass): 30 days
MAX_ITERATIONS = 1e9  # steps in one segment
MAX_BATCH_SIZE = 10**7  # global batch size (samples per step)
MIN_UNIX_TIME = 631_152_000.0  # 1990-01-01T00:00:00Z
MAX_UNIX_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z
MAX_EPOCH = 1e7
MAX_STEP_INDEX = 10**15  # a step counter; far below SQLite's and PostgreSQL's 2**63
MAX_ACCELERATORS_PER_NODE = 65_536
MAX_NODES = 1_000_000
MAX_NAME_CHARS = 128  # the store's network/deployment/accelerator columns
POINT_SLACK = 1e-6  # relative tolerance for points against the segment's own end

JSON_INT_DIGITS = 18  # longer JSON integers are read as floats (see :func:`loads`)

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # C0 controls and DEL, not \t\n\r
_PLAIN_NUMBERS = frozenset({int, float})  # exactly these types (not bool, not subclasses)


def json_int(text: str) -> int | float:
    """A JSON integer: exact up to :data:`JSON_INT_DIGITS` digits, else a float (``inf`` when
    out of range), so a 5,000-digit number never reaches Python's int limits (``int()``
    refuses more than 4,300 digits, ``float()`` of a huge int overflows)."""
    return int(text) if len(text.lstrip("-")) <= JSON_INT_DIGITS else float(text)


def loads(text: str) -> object:
    """``json.loads`` with :func:`json_int` for integers (for parsers of JSON logs)."""
    return json.loads(text, parse_int=json_int)


def _finite(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _whole(value: object) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        _finite(value) and float(value).is_integer()  # type: ignore[arg-type]
    )


def _bounded(value: object, low: float, high: float) -> bool:
    return _finite(value) and low <= value <= high  # type: ignore[operator]


def plausible_time(value: object) -> bool:
    """Unix seconds between 1990 and 2100."""
    return _finite(value) and MIN_UNIX_TIME <= value < MAX_UNIX_TIME  # type: ignore[operator]


def _segment_fine(seg: Segment) -> bool:
    """True when the segment's own values surely pass :func:`segment_problem`'s checks
    (plain ints and floats inside their ranges: the common case, tested inline); False when
    unsure: then each check runs in turn and words the error."""
    plain = _PLAIN_NUMBERS
    it, sec = seg.iterations, seg.seconds
    if not (type(it) in plain and 1 <= it <= MAX_ITERATIONS
            and type(sec) in plain and 0 < sec <= MAX_SEGMENT_SECONDS):
        return False
    batch, start = seg.batch_size, seg.start_time
    if batch is not None and not (type(batch) is int and 1 <= batch <= MAX_BATCH_SIZE):
        return False
    if start is not None and not (type(start) in plain
                                  and MIN_UNIX_TIME <= start < MAX_UNIX_TIME):
        return False
    first, last = seg.epoch_start, seg.epoch_end
    if first is not None and not (type(first) in plain and 0 <= first <= MAX_EPOCH):
        return False
    if last is not None and not (type(last) in plain and 0 <= last <= MAX_EPOCH):
        return False
    if first is not None and last is not None and last < first:
        return False
    first, last = seg.iteration_start, seg.iteration_end
    if first is not None and not (type(first) is int and 0 <= first <= MAX_STEP_INDEX):
        return False
    if last is not None and not (type(last) is int and 0 <= last <= MAX_STEP_INDEX):
        return False
    return first is None or last is None or last + 1 >= first


def segment_problem(seg: Segment) -> str | None:
    """Why ``seg`` cannot be stored (the rules in the module doc), or None."""
    if _segment_fine(seg):
        return _points_problem(seg)
    if not _bounded(seg.iterations, 1, MAX_ITERATIONS):
        return f"iterations = {short_repr(seg.iterations)} (want 1 .. {MAX_ITERATIONS:.0e})"
    if not _finite(seg.seconds) or not 0 < seg.seconds <= MAX_SEGMENT_SECONDS:
        return (f"seconds = {short_repr(seg.seconds)} (want more than 0 and at most "
                f"{MAX_SEGMENT_SECONDS / 86400:.0f} days)")
    if seg.batch_size is not None and not (
        _whole(seg.batch_size) and _bounded(seg.batch_size, 1, MAX_BATCH_SIZE)
    ):
        return f"batch size = {short_repr(seg.batch_size)} (want 1 .. {MAX_BATCH_SIZE:,})"
    if seg.start_time is not None and not plausible_time(seg.start_time):
        return f"start time = {short_repr(seg.start_time)} (want unix seconds in 1990 .. 2100)"
    for name in ("epoch_start", "epoch_end"):
        value = getattr(seg, name)
        if value is not None and not _bounded(value, 0, MAX_EPOCH):
            return f"{name} = {short_repr(value)} (want 0 .. {MAX_EPOCH:.0e})"
    if seg.epoch_start is not None and seg.epoch_end is not None \
            and seg.epoch_end < seg.epoch_start:
        return f"epoch_end {seg.epoch_end:g} before epoch_start {seg.epoch_start:g}"
    for name in ("iteration_start", "iteration_end"):
        value = getattr(seg, name)
        if value is not None and not (_whole(value) and _bounded(value, 0, MAX_STEP_INDEX)):
            return f"{name} = {short_repr(value)} (want a step number 0 .. {MAX_STEP_INDEX:.0e})"
    if seg.iteration_start is not None and seg.iteration_end is not None \
            and seg.iteration_end + 1 < seg.iteration_start:
        return f"iteration_end {seg.iteration_end} before iteration_start {seg.iteration_start}"
    return _points_problem(seg)


def _points_fine(points: object, it_max: float, sec_max: float) -> bool:
    """True when every point surely passes :func:`_points_problem`'s checks, tested a whole
    coordinate at a time by built-ins (no Python loop per point); False when unsure (an odd
    type, a huge int, a step back within the slack): then the loop decides, and words the
    error."""
    if not points:
        return True
    if type(points) not in (tuple, list):
        return False
    seq = cast("list[Any] | tuple[Any, ...]", points)  # the exact type test above
    try:
        if set(map(len, seq)) != {2}:
            return False
        its, secs = zip(*seq, strict=True)
        if not {*map(type, its), *map(type, secs)} <= _PLAIN_NUMBERS:
            return False
        if not (all(map(math.isfinite, its)) and all(map(math.isfinite, secs))):
            return False
    except (TypeError, OverflowError):
        return False
    return (min(its) >= 0 and max(its) <= it_max and min(secs) >= 0 and max(secs) <= sec_max
            and all(map(operator.le, its, its[1:])) and all(map(operator.le, secs, secs[1:])))


def _points_problem(seg: Segment) -> str | None:
    it_max = seg.iterations * (1 + POINT_SLACK)
    sec_max = seg.seconds * (1 + POINT_SLACK)
    if _points_fine(seg.points, it_max, sec_max):
        return None
    previous = (0.0, 0.0)
    for number, point in enumerate(seg.points, start=1):
        if len(point) != 2 or not all(_finite(v) for v in point):
            return f"progress point {number} = {short_repr(point)} is not two finite numbers"
        it, sec = point
        if not (0 <= it <= it_max and 0 <= sec <= sec_max):
            return (f"progress point {number} ({it:g} iterations, {sec:g} s) lies outside the "
                    f"segment ({seg.iterations:g} iterations, {seg.seconds:g} s)")
        if it < previous[0] * (1 - POINT_SLACK) or sec < previous[1] * (1 - POINT_SLACK):
            return (f"progress point {number} ({it:g} iterations, {sec:g} s) goes back from "
                    f"({previous[0]:g}, {previous[1]:g})")
        previous = (it, sec)
    return None


def _name_problem(what: str, value: object) -> str | None:
    if value is None:
        return None
    text = str(value)
    if len(text) > MAX_NAME_CHARS:
        return f"{what} is {len(text)} characters long (at most {MAX_NAME_CHARS})"
    if _CONTROL.search(text):
        return f"{what} {short_repr(text)} holds control characters"
    return None


def run_problem(run: ParsedRun) -> tuple[str, int | None] | None:
    """Why the run's own facts (not its segments) cannot be stored, with the line, or None."""
    line = run.first_line
    if not (_whole(run.batch_size) and _bounded(run.batch_size, 1, MAX_BATCH_SIZE)):
        return f"batch size = {short_repr(run.batch_size)} (want 1 .. {MAX_BATCH_SIZE:,})", line
    if run.start_time is not None and not plausible_time(run.start_time):
        return (f"start time = {short_repr(run.start_time)} (want unix seconds in 1990 .. 2100)",
                line)
    dep = run.deployment
    if dep is not None:
        if not (_whole(dep.per_node) and _bounded(dep.per_node, 1, MAX_ACCELERATORS_PER_NODE)):
            return (f"{short_repr(dep.per_node)} accelerators per node "
                    f"(want 1 .. {MAX_ACCELERATORS_PER_NODE:,})", line)
        if not (_whole(dep.nodes) and _bounded(dep.nodes, 1, MAX_NODES)):
            return f"{short_repr(dep.nodes)} nodes (want 1 .. {MAX_NODES:,})", line
    for what, value in (("network", run.network), ("stack", run.stack),
                        ("accelerator", dep.accelerator if dep else None),
                        ("deployment", run.stored_key())):
        why = _name_problem(what, value)
        if why:
            return why, line
    return None


def validate_run(run: ParsedRun, index: int) -> None:
    """Raise :class:`ParseError` (line and reason) if ``run`` holds a value out of range."""
    label = f"run {index + 1}"
    found = run_problem(run)
    if found is not None:
        why, line = found
        raise ParseError(f"{label}: {why}", line=line)
    for number, seg in enumerate(run.segments, start=1):
        seg_why = segment_problem(seg)
        if seg_why is not None:
            raise ParseError(f"{label}, {seg.phase} segment {number}: {seg_why}",
                             line=seg.line or run.first_line)


def note_truncation(run: ParsedRun) -> str | None:
    """For a truncated run (module rules), the words that say so (kept, with what was
    stored, as one of its warnings: ``meta["warnings"]``); None for a whole run."""
    if not run.meta.get("truncated"):
        return None
    where = f" at line {run.last_line}" if run.last_line else ""
    fact = f"the log is truncated (it ends{where} before the run did)"
    text = (f"{fact}: only the phases it completed are stored; the run's end and its wall "
            "clock are not known")
    warnings = run.meta.setdefault("warnings", [])
    if isinstance(warnings, list) and text not in warnings:
        warnings.append(text)
    return fact


def also_truncated(exc: ParseError, fact: str) -> ParseError:
    """``exc`` (a run's rejection, ``run N: reason``) naming the run's truncation first."""
    label, sep, reason = exc.reason.partition(": ")
    said = f"{label}: {fact}, and {reason}" if sep and label.startswith("run ") \
        else f"{fact}; {exc.reason}"
    return ParseError(said, line=exc.line, source=exc.source)
