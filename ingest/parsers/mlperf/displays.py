"""MXNet display lines of an MLPerf log: progress points inside epochs.

NVIDIA-derived MXNet submissions print, besides the MLPerf records::

    2020-06-20 09:06:58,252 Node[0] Epoch[0] Batch [0-20]	Speed: 22056.96 samples/sec ...

Rules
-----
* A display line starts with a local date ``YYYY-MM-DD HH:MM:SS,mmm`` (a real calendar
  date and time) followed by ``Node[k] Epoch[e] Batch [a-b]``; only the lowest node's lines
  count. Each gives the local wall clock read as if UTC and ``b``.
* Lines are placed by the records around them: the lines between record ``i - 1`` and
  record ``i`` of the scan form gap ``i`` (gap 0 before the first record).
* The clock has no zone: its offset to unix time is the one multiple of 15 min consistent
  with the neighbouring timed records of every display line (within 2 s); no unique fit ->
  no points from display lines (:func:`tz_offset`).
* Points of a one-epoch train span (:func:`span_points`): the display lines between its
  start and stop records give (``b``, seconds since the span start, clamped to the span);
  lines with ``b`` outside (0, iterations) are skipped, and so is a line that does not
  advance both coordinates; one line more than 2 s outside the span drops them all. Every
  span's points end with ``(iterations, seconds)``.
* Speed: lines are found by a regular expression per gap and converted, fitted and matched
  to spans with numpy, all spans of a run at once; results equal a line-by-line reading.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass

import numpy as np

TZ_STEP_S = 900  # local-time offsets are multiples of 15 minutes
TZ_SLACK_S = 2.0

_STAMP_RE = r"\n(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) Node\["
_ANY_NODE = re.compile(_STAMP_RE + r"(\d{1,9})\] Epoch\[\d+\] Batch \[\d+-(\d{1,9})\]",
                       re.ASCII)
_STAMP = 23  # len("2020-06-20 09:06:58,252")
_DAYS_IN_MONTH = np.array([0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


@dataclass(frozen=True)
class Displays:
    """Display lines of the lowest node, in text order (parallel arrays), and where each
    gap's lines start: those of gap ``g`` are ``cum[g]:cum[g + 1]``."""

    naive: np.ndarray  # float64 local wall clock read as if UTC
    batches: np.ndarray  # int64 ``b`` of ``Batch [a-b]``
    cum: np.ndarray  # int64, one more than the gaps

    @classmethod
    def empty(cls, gaps: int = 1) -> Displays:
        """No display lines, for ``gaps`` gaps."""
        return cls(np.zeros(0), np.zeros(0, np.int64), np.zeros(gaps + 1, np.int64))

    def __len__(self) -> int:
        return len(self.naive)


def _rows(text: str, bounds: list[int], pattern: re.Pattern[str]) -> tuple[list, list[int]]:
    """The matches of ``pattern`` in text order, and how many fall in each gap. When every
    ``] Batch [`` of the stretch holding them is a match (the usual case), one search and a
    count per gap; else a search per gap."""
    first, last = text.find("] Batch ["), text.rfind("] Batch [")
    lo = bisect.bisect_right(bounds, first) - 1
    hi = bisect.bisect_left(bounds, last + 1)
    start, stop = bounds[lo], bounds[hi]
    rows = pattern.findall(text, start, stop)
    gaps = len(bounds) - 1
    counts = [0] * gaps
    if len(rows) == text.count("] Batch [", start, stop):
        count = text.count
        for g in range(lo, hi):
            counts[g] = count("] Batch [", bounds[g], bounds[g + 1])
        if sum(counts) == len(rows):  # no match straddles a record position
            return rows, counts
    rows = []
    for g in range(lo, hi):
        found = pattern.findall(text, bounds[g], bounds[g + 1])
        counts[g] = len(found)
        rows.extend(found)
    return rows, counts


def find_displays(text: str, positions: list[int]) -> Displays:
    """The display lines of ``text`` (lines joined by ``\\n`` after a leading ``\\n``) by gap
    between the records at ``positions`` (increasing)."""
    gaps = len(positions) + 1
    if "] Batch [" not in text:
        return Displays.empty(gaps)
    found = _from_regex(text, positions)
    if found is None:
        return Displays.empty(gaps)
    digits, node, batches, gap_of = found
    naive, valid = _clock(digits)
    if valid.any():
        valid &= node == node[valid].min()
    if not valid.all():
        naive, batches, gap_of = naive[valid], batches[valid], gap_of[valid]
    cum = np.zeros(gaps + 1, np.int64)
    np.cumsum(np.bincount(gap_of, minlength=gaps), out=cum[1:])
    return Displays(naive, batches, cum)


_Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # stamp digits, node, b, gap


def _from_regex(text: str, positions: list[int]) -> _Rows | None:
    """Display lines found by :data:`_ANY_NODE`, one search per gap."""
    bounds = [0, *positions, len(text)]
    rows, counts = _rows(text, bounds, _ANY_NODE)
    if not rows:
        return None
    raw = np.frombuffer("".join([r[0] for r in rows]).encode("ascii"), np.uint8)
    digits = raw.reshape(-1, _STAMP).astype(np.int64) - 48
    return (digits, np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows], dtype=np.int64),
            np.repeat(np.arange(len(bounds) - 1), counts))


def _clock(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Local clock (as if UTC, s) of ``YYYY-MM-DD HH:MM:SS,mmm`` stamps given as digit values
    (one row of 23 per stamp), and which are real dates and times (``strptime``'s ranges:
    seconds up to 61)."""

    def num(a: int, b: int) -> np.ndarray:
        out = d[:, a]
        for i in range(a + 1, b):
            out = out * 10 + d[:, i]
        return out

    year, month, day = num(0, 4), num(5, 7), num(8, 10)
    hour, minute, sec, ms = num(11, 13), num(14, 16), num(17, 19), num(20, 23)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_ok = (month >= 1) & (month <= 12)
    dim = _DAYS_IN_MONTH[np.where(month_ok, month, 0)] - ((month == 2) & ~leap)
    valid = (month_ok & (day >= 1) & (day <= dim) & (hour < 24) & (minute < 60)
             & (sec < 62))
    # days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    naive = (days * 86400 + hour * 3600 + minute * 60 + sec).astype(np.float64) + ms / 1000.0
    return naive, valid


def tz_offset(displays: Displays, times: list[float | None]) -> int | None:
    """The multiple of 15 min that maps display clocks onto the timed records around them
    (``times``: every record's time in scan order, None where it has none)."""
    if not len(displays):
        return None
    gaps = len(times) + 1
    t = np.array([math.nan if x is None else x for x in times] + [math.nan])
    have = ~np.isnan(t)
    idx = np.arange(gaps)
    # prev[g]: the last timed record before gap g; nxt[g]: the first one from record g on
    last = np.maximum.accumulate(np.where(have, idx, -1))
    prev = np.concatenate([[math.nan], np.where(last >= 0, t[np.maximum(last, 0)], math.nan)])
    first = np.minimum.accumulate(np.where(have, idx, gaps)[::-1])[::-1]
    nxt = np.where(first < gaps, t[np.minimum(first, gaps - 1)], math.nan)
    gap_of = np.repeat(idx, np.diff(displays.cum))
    before, after = prev[gap_of], nxt[gap_of]
    has_before, has_after = ~np.isnan(before), ~np.isnan(after)
    if not has_before.any() or not has_after.any():
        return None
    lo = float(np.max(before[has_before] - displays.naive[has_before] - TZ_SLACK_S))
    hi = float(np.min(after[has_after] - displays.naive[has_after] + TZ_SLACK_S))
    if lo > hi or not math.isfinite(lo) or not math.isfinite(hi):
        return None
    fits = list(range(math.ceil(lo / TZ_STEP_S), math.floor(hi / TZ_STEP_S) + 1))
    return fits[0] * TZ_STEP_S if len(fits) == 1 else None


@dataclass(frozen=True)
class DisplayClock:
    """The display lines of the lowest node, and their clock's offset to unix time."""

    displays: Displays
    offset: int | None  # None: no unique fit, so no points from display lines

    @classmethod
    def of(cls, displays: Displays, times: list[float | None]) -> DisplayClock:
        """``displays`` with their offset to the records' unix ``times`` (:func:`tz_offset`)."""
        return cls(displays, tz_offset(displays, times))


@dataclass(frozen=True)
class PointSpan:
    """A one-epoch train span as :func:`span_points` needs it (records by scan index)."""

    first: int  # index of the start record
    last: int  # index of the end record
    start: float
    end: float
    iterations: float


def _marks(bs: list[float], ss: list[float]) -> list[tuple[float, float]]:
    marks: list[tuple[float, float]] = []
    for b, s in zip(bs, ss, strict=True):
        if marks and (b <= marks[-1][0] or s < marks[-1][1]):
            continue
        marks.append((b, s))
    return marks


def span_points(spans: list[PointSpan], clock: DisplayClock | None
                ) -> list[tuple[tuple[float, float], ...]]:
    """Progress marks of each span from display lines, each ending with the span's end."""
    ends = [(sp.iterations, sp.end - sp.start) for sp in spans]
    out: list[tuple[tuple[float, float], ...]] = [(end,) for end in ends]
    if clock is None or clock.offset is None or not len(clock.displays) or not spans:
        return out
    cum = clock.displays.cum
    lo = np.array([cum[sp.first + 1] for sp in spans], np.int64)
    hi = np.array([cum[sp.last + 1] for sp in spans], np.int64)
    lens = np.maximum(hi - lo, 0)
    total = int(lens.sum())
    if not total:
        return out
    sid = np.repeat(np.arange(len(spans)), lens)
    heads = np.cumsum(lens) - lens
    idx = lo[sid] + (np.arange(total) - heads[sid])
    start = np.array([sp.start for sp in spans])
    seconds = np.array([e[1] for e in ends])
    its = np.array([sp.iterations for sp in spans])
    s = clock.displays.naive[idx] + clock.offset - start[sid]
    sec = seconds[sid]
    off = (s < -TZ_SLACK_S) | (s > sec + TZ_SLACK_S)
    bad = np.zeros(len(spans), bool)
    bad[sid[off]] = True  # the clock does not fit these spans: no marks
    s = np.minimum(np.maximum(s, 0.0), sec)
    b = clock.displays.batches[idx]
    keep = (b > 0) & (b < its[sid]) & ~bad[sid]
    kb, ks, ksid = b[keep].astype(np.float64), s[keep], sid[keep]
    same = ksid[1:] == ksid[:-1]
    tangled = set(ksid[1:][same & ((np.diff(kb) <= 0) | (np.diff(ks) < 0))].tolist())
    per = np.bincount(ksid, minlength=len(spans)).tolist()
    bl, sl = kb.tolist(), ks.tolist()
    at = 0
    for k, n in enumerate(per):
        if n:
            bs, ss = bl[at:at + n], sl[at:at + n]
            marks = _marks(bs, ss) if k in tangled else list(zip(bs, ss, strict=True))
            out[k] = (*marks, ends[k])
        at += n
    return out
