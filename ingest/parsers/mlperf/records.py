"""MLPerf log records of the three generations, read into events (plus display lines).

Record forms (a record may follow a rank label ``0: ``, ``[1,0]<stdout>:`` or a glog
prefix ``I0518 21:33:07.307321 427370 mllog.py:168] ``)::

    :::MLPv0.5.0 resnet 1541720386.71 (file.py:49) key: value      v0.5
    :::MLL 1560881700.827 key: {"value": ..., "metadata": {...}}   v0.6
    :::MLLOG {"key": ..., "time_ms": ..., "value": ..., ...}       v0.7 on

Rules
-----
* Everything else is noise and skipped, except the MXNet display lines that NVIDIA-derived
  MXNet submissions print (:mod:`.displays`, progress points inside epochs).
* Speed: the lines are joined into one text and searched with C-speed string and regex
  scans, never line by line in Python. A ``:::MLLOG`` log is read by finding the records
  whose ``"key": "..."`` is one of :data:`READ_KEYS` (a regular expression over the text);
  the others (``weights_initialization``, ``tracked_stats``, ...) are never decoded. A record
  alone on its line whose text after ``time_ms`` equals that of a record read before is a
  rank copy when its time is within 1 s (decided without decoding it). The older
  generations (rare, small logs) are read record by record, every record.
* A record after other output on its line (another rank's or tool's output written into
  the same line, terminal junk) is read from where it starts and noted as an
  ``interleaved_record`` repair (known prefixes above are not repairs). JSON after which the
  line goes on is read up to its end.
* Events are matched on ``key`` only, never on ``event_type`` (Google omits it,
  tinycorp logs ``epoch_stop`` as POINT_IN_TIME). ``time_ms`` 0 means "no time"
  (Google's submission lines); such records take part in nothing time-based.
* Duplicates: a record equal to an earlier one in key, value and metadata (file and
  line of the logging call excepted) within 1 s is a copy from another rank, dropped.
* The clock of the records is checked afterwards (:mod:`.clock`): clock steps, lone
  marks out of order, records out of order with the marks.
* Errors (``ParseError`` with the 1-based line): a ``:::MLLOG``/``:::MLL`` record that is
  read and whose JSON does not parse or lacks ``key``/``time_ms``; the file's last
  ``:::MLLOG`` record when it has no findable key (cut mid-record: the message then says the
  file looks cut off; elsewhere such a broken line is noise, like any other); a malformed
  ``:::MLPv0.5`` record; records of two generations in one file; a non-numeric time.
  Values read from records (batch size, sample count, epoch number or count) must be finite
  numbers: :func:`to_number`, :func:`positive_int`, :func:`epoch_of`.
* Facts for the run meta: ``clock_resolution_s`` (0.001 for ``time_ms``; v0.5/v0.6 stamps:
  one unit of their last decimal) and the precision the command line or argument dump
  states before training (``dtype='float16'``, ``--dtype float16``, ``--fp16=True``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ingest.events import ParseError, short_repr
from ingest.parsers.mlperf.displays import Displays, find_displays
from ingest.parsers.mlperf.repairs import Repairs
from ingest.validate import json_int

BACKWARDS_TOLERANCE_S = 5.0
_EXACT = 2**53  # integers a float holds exactly
DUPLICATE_WINDOW_S = 1.0

SEGMENT_KEYS = frozenset({"epoch_start", "epoch_stop", "block_start", "block_stop",
                          "train_epoch"})
TIMING_KEYS = SEGMENT_KEYS | {"eval_start", "eval_stop", "eval_accuracy", "run_start",
                              "run_stop", "run_final"}
HEADER_KEYS = frozenset({"submission_benchmark", "submission_org", "submission_division",
                         "submission_status", "submission_platform", "cache_clear",
                         "init_start", "init_stop", "run_start", "run_clear_caches"})
PARAM_KEYS = frozenset({"global_batch_size", "input_batch_size", "train_samples",
                        "preproc_num_train_examples", "input_size", "eval_samples",
                        "preproc_num_eval_examples", "eval_size", "eval_batch_size",
                        "gradient_accumulation_steps", "samples_per_epoch"})
READ_KEYS = TIMING_KEYS | HEADER_KEYS | PARAM_KEYS

_KNOWN_PREFIX = re.compile(
    r"\s*(?:\d+: ?|\[\d+,\d+\]<std(?:out|err)>: ?"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\s]+\] )?\s*"
)
_MLL = re.compile(r":::MLL (\S+) (\w+): (.*)$")
_V05 = re.compile(r":::MLPv(\d+\.\d+\.\d+) (\S+) (\S+) \(([^)]*)\) (\w+)(?:: ?(.*))?$")
_SNIFF = re.compile(r":::(MLLOG \{|MLL \d|MLPv0\.\d)")
_DTYPE = re.compile(r"""dtype([= ])['"]?([A-Za-z][\w.]*)""")  # after "--" or as "dtype="
_HALF_FLAG = re.compile(r"--(fp16|bf16)(?:=(\w+))?(?=\s|'|\"|$)")
_KEY_AT = '"key": "'
_READ_KEY = re.compile('"key": "(' + "|".join(sorted(READ_KEYS)) + ')"')
_OLDER = re.compile(r":::ML(?:L |Pv)")  # a record of the two older generations
# what the MLPerf run scripts print before the records: the reference run_and_time.sh,
# NVIDIA's run.sub (one trial per result file), the v0.5/v0.6 cache-clear key
_RUN_SCRIPT = re.compile(r"STARTING TIMING RUN AT |^Beginning trial \d+ of \d+|run_clear_caches")
# a lone record at the start of its line: its time_ms text and the rest of the line after it
_SHAPE = re.compile(r':::MLLOG \{[^\n]*?"time_ms": (-?\d+(?:\.\d+)?)(,[^\n]*)')
_DECODE_FAST = json.JSONDecoder().raw_decode
_SAFE = json.JSONDecoder(parse_int=json_int)  # no 5,000-digit ints
_DECODE_SAFE = _SAFE.raw_decode


def sniff(head: list[str]) -> bool:
    """True if one of the first lines holds an MLPerf log record of any generation (after
    any prefix); else, weakly, if a line names MLPerf or holds a line of the MLPerf run
    scripts (:data:`_RUN_SCRIPT`) and no other format claims the head (result files whose
    records start after a long shell trace or one cache-clearing line per node)."""
    weak = False
    for line in head:
        k = line.find(":::ML")
        if k >= 0 and _SNIFF.match(line, k):
            return True
        weak = weak or "mlperf" in line.lower() or _RUN_SCRIPT.search(line) is not None
    if not weak:
        return False
    from ingest.parsers import registered  # the registry, without importing it at load

    return not any(p.sniff(head) for p in registered() if p.FORMAT != "mlperf")


@dataclass(slots=True)
class Event:
    """One record: key, time (unix s; None where the log gives 0), value, metadata."""

    key: str
    time: float | None
    value: object
    meta: dict
    line: int
    pos: int = 0  # character offset in the scanned text
    index: int = 0  # place in Scan.events (display lines lie between records)


@dataclass
class Scan:
    """A whole log read: events in order (duplicates dropped), display lines, facts."""

    events: list[Event] = field(default_factory=list)
    displays: Displays = field(default_factory=Displays.empty)
    generation: str | None = None
    benchmark_token: str | None = None
    evidence: set[str] = field(default_factory=set)  # framework names seen in the text
    duplicates: int = 0
    repairs: Repairs = field(default_factory=Repairs)
    clock_steps: list[int] = field(default_factory=list)  # lines where the clock stepped back
    resolution_s: float | None = None
    precision: tuple[str, int] | None = None  # (spelling, line) stated before training
    lines: int = 0


def _json(text: str, what: str, line: int) -> object:
    try:
        return _SAFE.decode(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"{what} is not valid JSON: {exc.msg} at column {exc.colno}",
                         line=line) from None


def _time(raw: object, what: str, line: int) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ParseError(f"{what} time {short_repr(raw)} is not a number", line=line)
    try:
        value = float(raw)
    except ValueError:
        raise ParseError(f"{what} time {short_repr(raw)} is not a number", line=line) from None
    except OverflowError:  # an integer too large for a float
        value = math.inf
    if not math.isfinite(value):
        raise ParseError(f"{what} time {short_repr(raw)} is not finite", line=line)
    return value


def _decimals(token: str) -> int:
    dot = token.find(".")
    return 0 if dot < 0 else len(token) - dot - 1


def _decode(text: str, at: int) -> tuple[object, int]:
    """JSON at ``at``; integers past :data:`JSON_INT_DIGITS` digits that the fast decoder
    cannot hold (over 4,300 digits) are read by :func:`ingest.validate.json_int` instead."""
    try:
        return _DECODE_FAST(text, at)
    except json.JSONDecodeError:
        raise
    except ValueError:
        return _DECODE_SAFE(text, at)


def _mllog(text: str, start: int, lineno: int, line_end: int) -> tuple[Event | None, int]:
    """The ``:::MLLOG`` record at ``start`` on a line ending at ``line_end``: (event, or None
    when it is not read, and where it ends)."""
    j = start + 8
    while j < line_end and text[j] == " ":
        j += 1
    ki = text.find(_KEY_AT, j, line_end)
    if ki >= 0:
        kend = text.find('"', ki + 8, line_end)
        if kend > 0 and text[ki + 8:kend] not in READ_KEYS:
            nxt = text.find(":::ML", kend, line_end)
            return None, line_end if nxt < 0 else nxt
    try:
        rec, end = _decode(text, j)
    except json.JSONDecodeError as exc:
        column = exc.pos - text.rfind("\n", 0, start)
        raise ParseError(f":::MLLOG record is not valid JSON: {exc.msg} at column "
                         f"{column}", line=lineno) from None
    if end > line_end:  # valid JSON holds no raw newline; a safeguard
        raise ParseError(":::MLLOG record runs past its line", line=lineno)
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
        raise ParseError(":::MLLOG record has no string 'key'", line=lineno)
    key = rec["key"]
    if key not in READ_KEYS:
        return None, end
    if "time_ms" not in rec:
        raise ParseError(f":::MLLOG record {key!r} has no 'time_ms'", line=lineno)
    ms = _time(rec["time_ms"], f":::MLLOG {key!r}", lineno)
    meta = rec.get("metadata")
    return Event(key, ms / 1000.0 if ms else None, rec.get("value"),
                 meta if isinstance(meta, dict) else {}, lineno), end


def _mll(text: str, start: int, lineno: int) -> tuple[Event, str]:
    m = _MLL.match(text, start)
    if not m:
        raise ParseError("malformed :::MLL record (want ':::MLL <time> <key>: {json}')",
                         line=lineno)
    payload = _json(m.group(3), f":::MLL {m.group(2)} payload", lineno)
    if not isinstance(payload, dict):
        raise ParseError(f":::MLL {m.group(2)} payload is not a JSON object", line=lineno)
    metadata = payload.get("metadata")
    meta = metadata if isinstance(metadata, dict) else {}
    t = _time(m.group(1), f":::MLL {m.group(2)}", lineno)
    return Event(m.group(2), t or None, payload.get("value"), meta, lineno), m.group(1)


def _v05(text: str, start: int, lineno: int) -> tuple[Event, str, str]:
    m = _V05.match(text, start)
    if not m:
        raise ParseError("malformed :::MLPv0.5 record "
                         "(want ':::MLPv0.5.0 <benchmark> <time> (<file:line>) <key>')",
                         line=lineno)
    raw = m.group(6)
    value: object = None
    if raw is not None and raw.strip():
        try:
            value = _SAFE.decode(raw)
        except json.JSONDecodeError:
            value = raw.strip()
    t = _time(m.group(3), f":::MLPv0.5 {m.group(5)}", lineno)
    return Event(m.group(5), t or None, value, {}, lineno), m.group(3), m.group(2)


_CALL_SITE = frozenset({"file", "lineno"})


def _hashable(value: object) -> object:
    """``value`` as a dict key that tells 1, 1.0 and True apart (as JSON text does)."""
    if value is None or type(value) is str:
        return value
    if type(value) in (int, float, bool):
        return (type(value), value)
    return ("json", json.dumps(value, sort_keys=True, default=str))


def _meta_key(meta: dict) -> tuple:
    """Metadata without the logging call's file and line, as a dict key."""
    names = meta.keys() - _CALL_SITE
    if not names:
        return ()
    return tuple(sorted((n, _hashable(meta[n])) for n in names))


def _dedup_key(ev: Event) -> tuple:
    return (ev.key, _hashable(ev.value), _meta_key(ev.meta))


class _Reader:
    """One pass over a log joined into one text (see :func:`scan`)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.scan = Scan()
        self.last_seen: dict[tuple, float | None] = {}
        self.last_dkey: tuple | None = None  # dedup key of the record read last
        self.decimals = -1
        self.line_at = 0  # position up to which newlines are counted
        self.lineno = 0  # line of position line_at (the text starts with "\n")

    def line_of(self, pos: int) -> int:
        """1-based line of ``pos``; positions must be asked in increasing order."""
        if pos < self.line_at:
            return self.text.count("\n", 0, pos)
        self.lineno += self.text.count("\n", self.line_at, pos)
        self.line_at = pos
        return self.lineno

    def at(self, k: int) -> int:
        """Read the record that starts at ``k`` and any records after it on its line;
        returns the end of the last one read."""
        text = self.text
        lineno = self.line_of(k)
        start = text.rfind("\n", 0, k) + 1
        junk = k > start and not _KNOWN_PREFIX.fullmatch(text, start, k)
        line_end = text.find("\n", k)
        if line_end < 0:
            line_end = len(text)
        while True:
            end = self.record(k, lineno, junk, line_end)
            nxt = text.find(":::ML", end, line_end)
            junk = end < line_end and bool(text[end:line_end].strip())
            if nxt < 0:
                return line_end
            k = nxt

    def record(self, k: int, lineno: int, junk: bool, line_end: int) -> int:
        """Read the record at ``k``; returns where it ends."""
        text = self.text
        tag = text[k + 5:k + 9]
        token = None
        if tag == "LOG ":
            ev, end = _mllog(text, k, lineno, line_end)
            generation = "v0.7+"
            if ev is None:
                return end
            self.decimals = 3
        elif tag.startswith("L "):
            ev, stamp = _mll(text[:line_end], k, lineno)
            generation, end = "v0.6", line_end
            self.decimals = max(self.decimals, _decimals(stamp))
        elif tag.startswith("Pv"):
            ev, stamp, token = _v05(text[:line_end], k, lineno)
            generation, end = "v0.5", line_end
            self.decimals = max(self.decimals, _decimals(stamp))
        else:
            return k + 5
        ev.pos = k
        ev.index = len(self.scan.events)
        scan = self.scan
        if scan.generation is None:
            scan.generation = generation
        elif generation != scan.generation:
            raise ParseError(f"{generation} record in a {scan.generation} log "
                             "(two MLPerf log generations in one file)", line=lineno)
        if token and scan.benchmark_token is None:
            scan.benchmark_token = token
        dkey = self.last_dkey = _dedup_key(ev)
        if dkey in self.last_seen:
            prev = self.last_seen[dkey]
            if prev is None or ev.time is None or abs(ev.time - prev) <= DUPLICATE_WINDOW_S:
                scan.duplicates += 1
                return end
        self.last_seen[dkey] = ev.time
        if junk:
            before = text[text.rfind("\n", 0, k) + 1:k]
            scan.repairs.add("interleaved_record", lineno,
                             f"{ev.key!r} record read from inside a line that other output "
                             f"ran into ({before[-40:]!r} before it)")
        scan.events.append(ev)
        return end

    def mllog_records(self) -> None:
        """Every ``:::MLLOG`` record whose key is read (a record without a findable key is
        noise, except the file's last record: an error, the file is cut off)."""
        text = self.text
        last = text.rfind(":::MLLOG")
        end = text.find("\n", last)
        keyless_last = text.find(_KEY_AT, last, len(text) if end < 0 else end) < 0
        scan, last_seen = self.scan, self.last_seen
        find, rfind = text.find, text.rfind
        raw_seen: dict[str, tuple] = {}  # line text after time_ms -> dedup key of its record
        done = 0
        for m in _READ_KEY.finditer(text):
            at = m.start()
            if at < done:
                continue
            start = rfind("\n", 0, at) + 1
            shape = _SHAPE.match(text, start)
            rest = None
            if shape is not None and find(":::ML", start + 8, shape.end()) < 0:
                # one record, alone on its line: the usual case
                k = start
                end = shape.end()
                rest = shape.group(2)
                dkey = raw_seen.get(rest)
                if dkey is not None:  # a copy of a record read before (another rank's)
                    try:
                        ms = float(shape.group(1))
                    except ValueError:
                        ms = math.nan
                    t = ms / 1000.0 if ms else None
                    prev = last_seen[dkey]
                    if prev is None or t is None or abs(t - prev) <= DUPLICATE_WINDOW_S:
                        scan.duplicates += 1
                        done = end
                        continue
                if self.plain(k, end, rest, raw_seen):
                    done = end
                    continue
            else:
                k = find(":::MLLOG", start, at)
                if k < 0:
                    continue
            self.last_dkey = None
            done = self.at(k)
            if rest is not None and self.last_dkey is not None:
                raw_seen[rest] = self.last_dkey
        if keyless_last and last >= done:
            self.at(last)  # the last record has no key: cut off (the error says so)

    def plain(self, k: int, end: int, rest: str, raw_seen: dict[str, tuple]) -> bool:
        """Read the lone, well-formed ``:::MLLOG`` record at the start of its line (the common
        case) as :meth:`at` would; False (nothing done) for anything else."""
        text = self.text
        if text[k + 8:k + 10] != " {":
            return False
        try:
            rec, _ = _DECODE_FAST(text, k + 9)
        except ValueError:
            return False
        if type(rec) is not dict:
            return False
        key = rec.get("key")
        ms: Any = rec.get("time_ms")  # a JSON value: its type is checked next
        if type(key) is not str or type(ms) not in (int, float):
            return False
        try:
            ms = float(ms)  # as _time reads it
        except OverflowError:
            return False
        if not math.isfinite(ms):
            return False
        if key not in READ_KEYS:
            return True
        meta = rec.get("metadata")
        if type(meta) is not dict:
            meta = {}
        value = rec.get("value")
        t = ms / 1000.0 if ms else None
        if len(meta) == 3 and "file" in meta and "lineno" in meta:  # the usual shape
            for name in meta:
                if name != "file" and name != "lineno":
                    break
            v = meta[name]
            mkey: tuple = ((name, v if v is None or type(v) is str else _hashable(v)),)
        elif len(meta) == 2 and "file" in meta and "lineno" in meta:
            mkey = ()
        else:
            mkey = _meta_key(meta)
        dkey = (key, value if value is None or type(value) is str else _hashable(value), mkey)
        raw_seen[rest] = dkey
        last_seen = self.last_seen
        scan = self.scan
        if dkey in last_seen:
            prev = last_seen[dkey]
            if prev is None or t is None or abs(t - prev) <= DUPLICATE_WINDOW_S:
                scan.duplicates += 1
                return True
        last_seen[dkey] = t
        if scan.generation is None:
            scan.generation = "v0.7+"
        self.decimals = 3
        self.lineno += text.count("\n", self.line_at, k)
        self.line_at = k
        events = scan.events
        events.append(Event(key, t, value, meta, self.lineno, k, len(events)))
        return True

    def every_record(self) -> None:
        text = self.text
        k = text.find(":::ML")
        while k >= 0:
            end = self.at(k)
            k = text.find(":::ML", end)

    def header_facts(self, evidence: bool) -> None:
        """Precision stated before training; framework names in the text (``evidence``)."""
        end = self.scan_text_end()
        text = self.text
        for m in _DTYPE.finditer(text, 0, end):
            at = m.start()
            if (text[at - 2:at] == "--") if m.group(1) == " " else not (
                    text[at - 1:at].isalnum() or text[at - 1:at] == "_"):
                self.scan.precision = (m.group(2), text.count("\n", 0, at))
                return self.evidence(evidence)
        for m in _HALF_FLAG.finditer(text, 0, end):
            if (m.group(2) or "true").lower() in ("true", "1", "yes"):
                self.scan.precision = (m.group(1), text.count("\n", 0, m.start()))
                break
        self.evidence(evidence)

    def evidence(self, wanted: bool) -> None:
        if wanted:
            low = self.text.lower()
            self.scan.evidence = {t for t in ("mxnet", "pytorch", "tensorflow") if t in low}

    def scan_text_end(self) -> int:
        """Where training starts (the first train record), else the end of the text."""
        first = next((e.pos for e in self.scan.events if e.key in SEGMENT_KEYS), None)
        return len(self.text) if first is None else first

    def finish(self, lines: int) -> Scan:
        scan = self.scan
        scan.lines = lines
        if self.decimals >= 0:
            scan.resolution_s = 10.0 ** -self.decimals
        scan.displays = find_displays(self.text, [e.pos for e in scan.events])
        return scan


def scan(lines: Iterable[str], evidence: bool = False) -> Scan:
    """Read every record and display line of a log (rules in the module doc), given as
    ``str.splitlines()`` gives its lines (or with their line ends, as ``readlines()``). With
    ``evidence``, also note which framework names (mxnet, pytorch, tensorflow) the text
    mentions (for systems that list several stacks)."""
    buffered = lines if isinstance(lines, list) else list(lines)
    text = "\n".join(["", *buffered])
    if buffered and (buffered[0][-1:] in ("\n", "\r") or buffered[-1][-1:] in ("\n", "\r")):
        # lines that still hold their line ends (readlines())
        buffered = [ln.rstrip("\r\n") for ln in buffered]
        text = "\n" + "\n".join(ln.replace("\n", " ") for ln in buffered)
    reader = _Reader(text)
    first = text.find(":::ML")
    if first >= 0:
        if _OLDER.search(text, first) is None:
            reader.mllog_records()
        else:  # older generations (small logs), or mixed ones: the error names the line
            reader.every_record()
    reader.header_facts(evidence)
    return reader.finish(len(buffered))


def scan_checked(lines: Iterable[str], evidence: bool = False) -> Scan:
    """:func:`scan`, adding the 'cut off' hint to errors on the last line."""
    buffered = lines if isinstance(lines, list) else list(lines)
    try:
        return scan(buffered, evidence)
    except ParseError as exc:
        if exc.line is not None and exc.line == len(buffered):
            raise ParseError(exc.reason + " (last line of the file: it looks cut off)",
                             line=exc.line) from None
        raise


def to_number(value: object, what: str, line: int) -> float:
    """A record's number (v0.5's ``{"value": ...}`` unwrapped); a :class:`ParseError` at
    ``line`` naming ``what`` for anything else or a non-finite one."""
    if isinstance(value, dict) and "value" in value:  # v0.5 {"epoch": 2, "value": ...}
        value = value["value"]
    if isinstance(value, bool) or value is None:
        raise ParseError(f"{what} is {short_repr(value)}, not a number", line=line)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParseError(f"{what} is {short_repr(value)}, not a number", line=line) from None
    except OverflowError:  # an integer too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise ParseError(f"{what} is {short_repr(value)}, not a finite number", line=line)
    return number


def positive_int(value: object, what: str, line: int) -> int:
    """A record's positive whole number (at most 1e18); else a :class:`ParseError` at ``line``."""
    number = to_number(value, what, line)
    if number <= 0 or number != int(number) or number > 1e18:  # 1e18: products stay finite
        raise ParseError(f"{what} is {short_repr(value)}, not a positive whole number", line=line)
    return int(number)


def epoch_of(ev: Event, required: bool = True) -> float | None:
    """Epoch number of an epoch/eval record: metadata ``epoch_num``, else v0.5's
    ``{"epoch": N, ...}`` value, else the value itself (tinycorp) unless it is the
    accuracy of an ``eval_accuracy`` record."""
    raw = ev.meta.get("epoch_num")
    if type(raw) is int and -_EXACT < raw < _EXACT:  # the usual case, as to_number reads it
        return float(raw)
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
