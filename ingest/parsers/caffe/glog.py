"""Caffe's glog lines: reading them, and their clock (glog prints no year and no zone).

Rules
-----
* A glog line is ``I0402 07:44:16.590070 <thread> file.cpp:123] message``; the lines
  that follow a record without being glog lines are its echo (prototxt). A line that
  starts like a glog line but is malformed (a cut last line included) is a ParseError,
  except absl's pre-init ``I0000 00:00:...`` lines, which are skipped; so is an
  impossible date or time.
* Clock: glog prints local time with neither year nor zone. Times are read as UTC
  (durations are exact; ``start_time`` may be off by the machine's UTC offset). The year
  comes, in this order, from ``*** Aborted at <unix> (unix time)`` (the year that puts the
  glog time nearest that instant; an instant outside 1990 .. 2100 is ignored), from a
  ``YYYY-MM-DD`` date printed anywhere in the file whose month and day match a glog line
  (e.g. ``Logging output to x__2016-08-14_00-25-56.log``), else it is assumed to be 2000
  (a leap year, so Feb 29 parses); :func:`read_records` says which
  (``meta["year_source"]``). When the month
  decreases (Dec -> Jan) the year is incremented. After that the clock must not go
  backwards by more than 2 s, else ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from ingest.events import ParseError
from ingest.validate import plausible_time

BASE_YEAR = 2000
BACKWARDS_TOLERANCE_S = 2.0

_GLOG = re.compile(
    r"^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})\s+(\d+) ([^\s\]]+:\d+)\] ?(.*)$"
)
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{1,4}(?: |$)")
_ABSL_PREINIT = re.compile(r"^[IWEF]0000 00:00:\d+\.\d+ ")  # absl before InitializeLog
_CAFFE_SOURCES = re.compile(
    r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}\s+\d+ "
    r"(?:caffe|solver|sgd_solver|net|upgrade_proto|parallel)\.cpp:\d+\]"
)
_ABORTED = re.compile(r"\*\*\* Aborted at (\d+) \(unix time\)")
_DATE_HINT = re.compile(r"(?<!\d)((?:19|20)\d\d)-(\d\d)-(\d\d)(?!\d)")


def sniff(head: list[str]) -> bool:
    """True if a glog line from Caffe's own sources appears in the head."""
    return any(_CAFFE_SOURCES.match(line) for line in head)


@dataclass
class Glog:
    """One glog record: its line, clock fields, message and (once set) unix time."""

    line: int
    month: int
    day: int
    clock: tuple[int, int, int, int]  # hour, minute, second, microsecond
    message: str
    rollovers: int = 0
    time: float = 0.0


def strip_line(line: str) -> str:
    """The line without its line ending."""
    return line.rstrip("\r\n")


def _read_glog(lines: list[str]) -> tuple[list[Glog], dict[int, list[str]]]:
    """Glog records plus, for each record, the non-glog lines that follow it."""
    records: list[Glog] = []
    echoes: dict[int, list[str]] = {}
    for number, raw in enumerate(lines, start=1):
        text = strip_line(raw)
        m = _GLOG.match(text)
        if m is None:
            if _GLOG_PREFIX.match(text) and not _ABSL_PREINIT.match(text):
                raise ParseError(f"malformed glog line: {text[:80]!r}", line=number)
            if records:
                echoes.setdefault(len(records) - 1, []).append(text)
            continue
        month, day = int(m.group(2)), int(m.group(3))
        if month == 0 and day == 0:  # absl's pre-init stderr line, not Caffe's
            continue
        hour, minute, second = int(m.group(4)), int(m.group(5)), int(m.group(6))
        if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60
                and second < 61):
            raise ParseError(f"impossible glog date/time in {text[:30]!r}", line=number)
        records.append(
            Glog(number, month, day, (hour, minute, second, int(m.group(7))), m.group(10))
        )
    return records, echoes


def _count_rollovers(records: list[Glog]) -> None:
    rollovers = 0
    previous = None
    for record in records:
        if previous is not None and record.month < previous:
            rollovers += 1
        previous = record.month
        record.rollovers = rollovers


def _timestamp(year: int, record: Glog) -> float:
    hour, minute, second, micro = record.clock
    try:
        moment = datetime(year, record.month, record.day, hour, minute, min(second, 59),
                          micro, tzinfo=UTC)
    except ValueError as err:
        raise ParseError(f"impossible date {year}-{record.month:02d}-{record.day:02d}: {err}",
                         line=record.line) from err
    return moment.timestamp() + (1 if second == 60 else 0)


def _base_year(lines: list[str], records: list[Glog]) -> tuple[int, str]:
    """The year of the first glog line, and where it came from."""
    if not records:
        return BASE_YEAR, "assumed"
    for number, raw in enumerate(lines, start=1):
        m = _ABORTED.search(raw)
        if not m:
            continue
        instant = int(m.group(1)) if len(m.group(1)) <= 12 else 0
        if not plausible_time(instant):
            continue  # a garbled instant is no evidence of the year
        before = [r for r in records if r.line < number] or records[:1]
        anchor = before[-1]
        utc_year = datetime.fromtimestamp(instant, tz=UTC).year
        best = min(
            (abs(_timestamp(y, anchor) - instant), y)
            for y in (utc_year - 1, utc_year, utc_year + 1)
            if not (anchor.month == 2 and anchor.day == 29 and y % 4)
        )
        if best[0] < 2 * 86400:
            return best[1] - anchor.rollovers, f"line {number}: Aborted at {instant}"
    by_day: dict[tuple[int, int], int] = {}
    for record in records:
        by_day.setdefault((record.month, record.day), record.rollovers)
    for number, raw in enumerate(lines, start=1):
        for m in _DATE_HINT.finditer(raw):
            key = (int(m.group(2)), int(m.group(3)))
            if key in by_day:
                return int(m.group(1)) - by_day[key], f"line {number}: date {m.group(0)}"
    return BASE_YEAR, "assumed"


def _set_times(records: list[Glog], base_year: int) -> None:
    previous: Glog | None = None
    for record in records:
        record.time = _timestamp(base_year + record.rollovers, record)
        if previous is not None and record.time < previous.time - BACKWARDS_TOLERANCE_S:
            raise ParseError(
                f"timestamp goes backwards by {previous.time - record.time:.1f} s "
                f"(previous glog line {previous.line})",
                line=record.line,
            )
        previous = record


def read_records(text: list[str]) -> tuple[list[Glog], dict[int, list[str]], str]:
    """Glog records with their unix times, each record's echo lines, and the year's source."""
    records, echoes = _read_glog(text)
    if not records:
        raise ParseError("no glog lines: not a Caffe log")
    _count_rollovers(records)
    base_year, year_source = _base_year(text, records)
    _set_times(records, base_year)
    return records, echoes, year_source
