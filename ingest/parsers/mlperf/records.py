"""MLPerf log records of the three generations, read into events (plus display lines).

Record forms (a record may follow a rank label ``0: `` or ``[1,0]<stdout>:``)::

    :::MLPv0.5.0 resnet 1541720386.71 (file.py:49) key: value      v0.5
    :::MLL 1560881700.827 key: {"value": ..., "metadata": {...}}   v0.6
    :::MLLOG {"key": ..., "time_ms": ..., "value": ..., ...}       v0.7 on

Rules
-----
* Everything else is noise and skipped, except the MXNet display lines
  ``<local date> Node[k] Epoch[e] Batch [a-b] Speed: ...`` that NVIDIA-derived MXNet
  submissions print; they are kept as :class:`Display` (progress points: see ``spans``).
* Events are matched on ``key`` only, never on ``event_type`` (Google omits it,
  tinycorp logs ``epoch_stop`` as POINT_IN_TIME). ``time_ms`` 0 means "no time"
  (Google's submission lines); such records take part in nothing time-based.
* Duplicates: a record equal to an earlier one in key, value and metadata (file and
  line of the logging call excepted) within 1 s is a copy from another rank, dropped.
* Errors (``ParseError`` with the 1-based line): a ``:::MLLOG``/``:::MLL`` record whose
  JSON does not parse or lacks ``key``/``time_ms`` (a last line cut mid-record is one:
  the message then says the file looks cut off); a malformed ``:::MLPv0.5`` record;
  records of two generations in one file; a non-numeric time; time going back more than
  5 s. Values read from records (batch size, sample count, epoch number or count) must be
  finite numbers: :func:`to_number`, :func:`positive_int`, :func:`epoch_of`.
"""

from __future__ import annotations

import calendar
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from ingest.events import ParseError

BACKWARDS_TOLERANCE_S = 5.0
DUPLICATE_WINDOW_S = 1.0

_PREFIX = r"^(?:\d+: |\[\d+,\d+\]<std(?:out|err)>:)?"
_ANY_RECORD = re.compile(_PREFIX + r":::(MLLOG|MLL|MLPv)")
_MLLOG = re.compile(_PREFIX + r":::MLLOG (.*)$")
_MLL = re.compile(_PREFIX + r":::MLL (\S+) (\w+): (.*)$")
_MLL_START = re.compile(_PREFIX + r":::MLL ")
_V05 = re.compile(_PREFIX + r":::MLPv(\d+\.\d+\.\d+) (\S+) (\S+) \(([^)]*)\) (\w+)(?:: ?(.*))?$")
_V05_START = re.compile(_PREFIX + r":::MLPv\d")
_DISPLAY = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) Node\[(\d+)\] Epoch\[(\d+)\] Batch \[(\d+)-(\d+)\]"
)
_SNIFF = re.compile(_PREFIX + r":::(MLLOG \{|MLL \d|MLPv0\.\d)")


def sniff(head: list[str]) -> bool:
    """True if one of the first lines is an MLPerf log record of any generation."""
    return any(_SNIFF.match(line) for line in head)


@dataclass
class Event:
    """One record: key, time (unix s; None where the log gives 0), value, metadata."""

    key: str
    time: float | None
    value: object
    meta: dict
    line: int


@dataclass
class Display:
    """One MXNet ``Epoch[e] Batch [a-b]`` display line (clock without a zone)."""

    line: int
    naive: float  # local wall clock read as if UTC
    node: int
    batches: int


@dataclass
class Scan:
    """A whole log read: events in order (duplicates dropped), display lines, facts."""

    events: list[Event] = field(default_factory=list)
    displays: list[Display] = field(default_factory=list)
    generation: str | None = None
    benchmark_token: str | None = None
    evidence: set[str] = field(default_factory=set)  # framework names seen in the text
    duplicates: int = 0


def _json(text: str, what: str, line: int) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"{what} is not valid JSON: {exc.msg} at column {exc.colno}",
                         line=line) from None


def _time(raw: object, what: str, line: int) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ParseError(f"{what} time {raw!r} is not a number", line=line)
    try:
        value = float(raw)
    except ValueError:
        raise ParseError(f"{what} time {raw!r} is not a number", line=line) from None
    if not math.isfinite(value):
        raise ParseError(f"{what} time {raw!r} is not finite", line=line)
    return value


def _parse_record(text: str, lineno: int) -> tuple[str, Event, str | None] | None:
    """One MLPerf record -> (generation, event, v0.5 benchmark token); None if noise."""
    m = _MLLOG.match(text)
    if m:
        rec = _json(m.group(1), ":::MLLOG record", lineno)
        if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
            raise ParseError(":::MLLOG record has no string 'key'", line=lineno)
        if "time_ms" not in rec:
            raise ParseError(f":::MLLOG record {rec['key']!r} has no 'time_ms'", line=lineno)
        ms = _time(rec["time_ms"], f":::MLLOG {rec['key']!r}", lineno)
        meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
        return "v0.7+", Event(rec["key"], ms / 1000.0 if ms else None, rec.get("value"),
                               meta, lineno), None
    if _MLL_START.match(text):
        m = _MLL.match(text)
        if not m:
            raise ParseError("malformed :::MLL record (want ':::MLL <time> <key>: {json}')",
                             line=lineno)
        payload = _json(m.group(3), f":::MLL {m.group(2)} payload", lineno)
        if not isinstance(payload, dict):
            raise ParseError(f":::MLL {m.group(2)} payload is not a JSON object", line=lineno)
        meta = payload.get("metadata") if isinstance(payload.get("metadata"), dict) else {}
        t = _time(m.group(1), f":::MLL {m.group(2)}", lineno)
        return "v0.6", Event(m.group(2), t or None, payload.get("value"), meta, lineno), None
    if _V05_START.match(text):
        m = _V05.match(text)
        if not m:
            raise ParseError("malformed :::MLPv0.5 record "
                             "(want ':::MLPv0.5.0 <benchmark> <time> (<file:line>) <key>')",
                             line=lineno)
        raw = m.group(6)
        value: object = None
        if raw is not None and raw.strip():
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = raw.strip()
        t = _time(m.group(3), f":::MLPv0.5 {m.group(5)}", lineno)
        return "v0.5", Event(m.group(5), t or None, value, {}, lineno), m.group(2)
    return None


def _dedup_key(ev: Event) -> str:
    meta = {k: v for k, v in ev.meta.items() if k not in ("file", "lineno")}
    return json.dumps([ev.key, ev.value, meta], sort_keys=True, default=str)


def _display_time(date: str, millis: str) -> float | None:
    try:
        dt = datetime.strptime(date, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return calendar.timegm(dt.timetuple()) + int(millis) / 1000.0


def _scan(lines: Iterable[str]) -> Scan:
    scan = Scan()
    last_seen: dict[str, float | None] = {}
    latest = -math.inf
    latest_line = 0
    for lineno, raw in enumerate(lines, start=1):
        text = raw.rstrip("\r\n")
        low = text.lower()
        for token in ("mxnet", "pytorch", "tensorflow"):
            if token in low:
                scan.evidence.add(token)
        if not text.startswith(":::"):
            dm = _DISPLAY.match(text)
            naive = _display_time(dm.group(1), dm.group(2)) if dm else None
            if dm and naive is not None:
                scan.displays.append(Display(lineno, naive, int(dm.group(3)),
                                              int(dm.group(6))))
            if not _ANY_RECORD.match(text):
                continue
        parsed = _parse_record(text, lineno)
        if parsed is None:
            continue
        generation, ev, token = parsed
        if scan.generation is None:
            scan.generation = generation
        elif generation != scan.generation:
            raise ParseError(f"{generation} record in a {scan.generation} log "
                             "(two MLPerf log generations in one file)", line=lineno)
        if token and scan.benchmark_token is None:
            scan.benchmark_token = token
        dkey = _dedup_key(ev)
        if dkey in last_seen:
            prev = last_seen[dkey]
            if prev is None or ev.time is None or abs(ev.time - prev) <= DUPLICATE_WINDOW_S:
                scan.duplicates += 1
                continue
        last_seen[dkey] = ev.time
        if ev.time is not None:
            if ev.time < latest - BACKWARDS_TOLERANCE_S:
                raise ParseError(f"time goes back {latest - ev.time:.1f} s from line "
                                 f"{latest_line} ({ev.key!r})", line=lineno)
            if ev.time > latest:
                latest, latest_line = ev.time, lineno
        scan.events.append(ev)
    return scan


def scan_checked(lines: Iterable[str]) -> Scan:
    """:func:`_scan`, adding the 'cut off' hint to errors on the last line."""
    buffered = list(lines)
    try:
        return _scan(buffered)
    except ParseError as exc:
        if exc.line is not None and exc.line == len(buffered):
            raise ParseError(exc.reason + " (last line of the file: it looks cut off)",
                             line=exc.line) from None
        raise


def to_number(value: object, what: str, line: int) -> float:
    if isinstance(value, dict) and "value" in value:  # v0.5 {"epoch": 2, "value": ...}
        value = value["value"]
    if isinstance(value, bool) or value is None:
        raise ParseError(f"{what} is {value!r}, not a number", line=line)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParseError(f"{what} is {value!r}, not a number", line=line) from None
    if not math.isfinite(number):
        raise ParseError(f"{what} is {value!r}, not a finite number", line=line)
    return number


def positive_int(value: object, what: str, line: int) -> int:
    number = to_number(value, what, line)
    if number <= 0 or number != int(number):
        raise ParseError(f"{what} is {value!r}, not a positive whole number", line=line)
    return int(number)


def epoch_of(ev: Event, required: bool = True) -> float | None:
    """Epoch number of an epoch/eval record: metadata ``epoch_num``, else v0.5's
    ``{"epoch": N, ...}`` value, else the value itself (tinycorp) unless it is the
    accuracy of an ``eval_accuracy`` record."""
    raw = ev.meta.get("epoch_num")
    if raw is None and isinstance(ev.value, dict):
        raw = ev.value.get("epoch")
    if (raw is None and ev.key != "eval_accuracy" and ev.value is not None
            and not isinstance(ev.value, dict)):
        raw = ev.value
    if raw is None:
        if required:
            raise ParseError(f"{ev.key} has no epoch number", line=ev.line)
        return None
    return to_number(raw, f"{ev.key} epoch number", ev.line)
