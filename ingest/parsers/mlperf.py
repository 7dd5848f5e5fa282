"""MLPerf Training result logs (``result_N.txt``), all three log generations.

Record forms (a record may follow a rank label ``0: `` or ``[1,0]<stdout>:``)::

    :::MLPv0.5.0 resnet 1541720386.71 (file.py:49) key: value      v0.5
    :::MLL 1560881700.827 key: {"value": ..., "metadata": {...}}   v0.6
    :::MLLOG {"key": ..., "time_ms": ..., "value": ..., ...}       v0.7 on

Everything else is noise and skipped, except the MXNet display lines
``<local date> Node[k] Epoch[e] Batch [a-b] Speed: ...`` that NVIDIA-derived
MXNet submissions print; they become progress ``points`` (see below).

Rules
-----
* Events are matched on ``key`` only, never on ``event_type`` (Google omits it,
  tinycorp logs ``epoch_stop`` as POINT_IN_TIME). ``time_ms`` 0 means "no time"
  (Google's submission lines); such records take part in nothing time-based.
* Duplicates: a record equal to an earlier one in key, value and metadata (file and
  line of the logging call excepted) within 1 s is a copy from another rank, dropped.
* Train segments, by what the log has:

  - ``epoch_start``/``epoch_stop`` (v0.6 on, most submitters): one segment per epoch;
    ``block_*`` records are then ignored.
  - only ``block_start``/``block_stop`` (Google v1.0, Habana): one segment per block,
    ``epoch_start`` = ``first_epoch_num``, ``epoch_end`` = ``first_epoch_num +
    epoch_count - 1`` (as logged: Google's numbering overlaps between blocks). A block
    ends at its first ``eval_start`` if the eval runs inside it; when the eval has no
    ``eval_start`` (Google), the block includes the eval: ``meta["train_includes_eval"]``.
  - v0.5 ``train_epoch: N`` marks (start of epoch N, no stop): the epoch ends at the
    next ``train_epoch``/``eval_*``/``run_stop``/``run_final`` record. Marks sharing one
    timestamp (Google v0.5) are one segment spanning those epochs.

  ``iterations`` = ceil(train_samples / global batch) per epoch, x epochs per block.
  train_samples: ``train_samples`` (v0.7+), ``preproc_num_train_examples`` /
  ``input_size`` (v0.5), else ImageNet's 1,281,167 for ResNet (``train_samples_assumed``).
* Test segments: one per ``eval_start``..``eval_stop``. In a log with no ``eval_stop``
  at all, an eval ends at the next record that is not an ``eval_*`` record (training
  resuming or ``run_stop``); evals without ``eval_start`` (Google) give no test segment.
  ``iterations`` = ceil(eval_samples / eval batch), the eval batch being
  ``eval_batch_size`` where logged (no real log here does), else the global batch
  (``eval_batch_size_assumed``); eval_samples: ``eval_samples`` /
  ``preproc_num_eval_examples`` / ``eval_size``, else ImageNet's 50,000.
* Global batch: ``global_batch_size``; v0.5 logs the per-GPU ``input_batch_size``, so
  global = per-GPU x accelerators per node x nodes from the system description; else
  ``ctx.batch_size``; else ParseError.
* Points: MXNet display lines between an epoch's start and stop records give
  (batches ``b`` of ``Batch [a-b]``, local time). Their clock is local time without a
  zone: the offset to unix time is the one multiple of 15 min consistent with the
  neighbouring MLPerf records of every display line; no unique fit -> no such points.
  Every segment's points end with ``(iterations, seconds)``.
* Several runs in one file (in time order): a ``run_stop`` ends a run, and so does a
  header record (``submission_*``, ``cache_clear``, ``init_*``, ``run_start``) that
  follows training; stretches without any training are dropped. Parameters are the latest value
  logged before the run's training, else the first logged within it.
* Errors (``ParseError`` with the 1-based line): a ``:::MLLOG``/``:::MLL`` record whose
  JSON does not parse or lacks ``key``/``time_ms`` (a last line cut mid-record is one);
  a malformed ``:::MLPv0.5`` record; records of two generations in one file; a
  non-numeric time, batch size, sample count, epoch number or epoch count; time going
  back more than 5 s; a stop that does not match the open start, or a stop with nothing
  open; no complete train segment at all; no global batch size.
* Not errors: a run killed mid-training (a start still open at end of file or at
  ``run_stop``): the complete segments are kept, the open one dropped,
  ``meta["truncated"] = True``; a run without ``run_stop`` (``meta["run_stop"]`` None,
  ``meta["truncated"]`` True).
* ``meta``: submitter, system, mlperf_version, log_generation, segment_mode,
  eval_every_epochs, train/eval samples, run_start/run_stop (unix s), status
  (``run_stop`` status: success/aborted; None where not logged, v0.5), warm-up
  (the first train segment: ``warmup_epoch``, ``first_segment_slowdown`` = its
  seconds per iteration over the median of the others), final_eval_accuracy, ...
* ``network``: ``submission_benchmark`` / the v0.5 benchmark token / the benchmark
  folder, lower-case, ``resnet`` -> ``resnet50`` (MLPerf's image classification is
  ResNet-50 v1.5). Deployment and framework come from ``ctx.system`` (see
  :func:`system_deployment`, :func:`system_framework`).
"""

from __future__ import annotations

import bisect
import calendar
import json
import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from fleet.deployment import Deployment
from ingest.events import ParseContext, ParsedRun, ParseError, Segment

FORMAT = "mlperf"

IMAGENET_TRAIN_SAMPLES = 1_281_167
IMAGENET_EVAL_SAMPLES = 50_000
BACKWARDS_TOLERANCE_S = 5.0
DUPLICATE_WINDOW_S = 1.0
SAME_MARK_S = 0.001  # v0.5 train_epoch marks this close share one timestamp
TZ_STEP_S = 900  # local-time offsets are multiples of 15 minutes
TZ_SLACK_S = 2.0

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

_V05_CLOSERS = {"train_epoch", "eval_start", "eval_accuracy", "eval_stop", "run_stop",
                "run_final", "block_start", "block_stop"}
_SEGMENT_KEYS = {"epoch_start", "epoch_stop", "block_start", "block_stop", "train_epoch"}
_HEADER_KEYS = {"submission_benchmark", "submission_org", "submission_division",
                "submission_status", "submission_platform", "cache_clear", "init_start",
                "init_stop", "run_start", "run_clear_caches"}


def sniff(head: list[str]) -> bool:
    """True if one of the first lines is an MLPerf log record of any generation."""
    return any(_SNIFF.match(line) for line in head)


# --------------------------------------------------------------------------- records


@dataclass
class _Event:
    key: str
    time: float | None
    value: object
    meta: dict
    line: int


@dataclass
class _Display:
    line: int
    naive: float  # local wall clock read as if UTC
    node: int
    batches: int


@dataclass
class _Scan:
    events: list[_Event] = field(default_factory=list)
    displays: list[_Display] = field(default_factory=list)
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


def _parse_record(text: str, lineno: int) -> tuple[str, _Event, str | None] | None:
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
        return "v0.7+", _Event(rec["key"], ms / 1000.0 if ms else None, rec.get("value"),
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
        return "v0.6", _Event(m.group(2), t or None, payload.get("value"), meta, lineno), None
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
        return "v0.5", _Event(m.group(5), t or None, value, {}, lineno), m.group(2)
    return None


def _dedup_key(ev: _Event) -> str:
    meta = {k: v for k, v in ev.meta.items() if k not in ("file", "lineno")}
    return json.dumps([ev.key, ev.value, meta], sort_keys=True, default=str)


def _display_time(date: str, millis: str) -> float | None:
    try:
        dt = datetime.strptime(date, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return calendar.timegm(dt.timetuple()) + int(millis) / 1000.0


def _scan(lines: Iterable[str]) -> _Scan:
    scan = _Scan()
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
                scan.displays.append(_Display(lineno, naive, int(dm.group(3)),
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


def _scan_checked(lines: Iterable[str]) -> _Scan:
    """:func:`_scan`, adding the 'cut off' hint to errors on the last line."""
    buffered = list(lines)
    try:
        return _scan(buffered)
    except ParseError as exc:
        if exc.line is not None and exc.line == len(buffered):
            raise ParseError(exc.reason + " (last line of the file: it looks cut off)",
                             line=exc.line) from None
        raise


# --------------------------------------------------------------------------- numbers


def _number(value: object, what: str, line: int) -> float:
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


def _positive_int(value: object, what: str, line: int) -> int:
    number = _number(value, what, line)
    if number <= 0 or number != int(number):
        raise ParseError(f"{what} is {value!r}, not a positive whole number", line=line)
    return int(number)


def _epoch_of(ev: _Event, required: bool = True) -> float | None:
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
    return _number(raw, f"{ev.key} epoch number", ev.line)


# --------------------------------------------------------------------------- system


def _count(raw: object) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw > 0 else None
    if isinstance(raw, float):
        return int(raw) if raw > 0 and raw == int(raw) else None
    if isinstance(raw, str) and re.fullmatch(r"\s*\d+\s*", raw):
        return int(raw) if int(raw) > 0 else None
    return None


def _norm_keys(d: dict) -> dict:
    return {str(k).strip().lower().replace(" ", "_"): v for k, v in d.items()}


def _clean_accelerator(name: str) -> str:
    """Drop a trailing parenthesised note: ``"NVIDIA A100-SXM4-40GB (400W)"``."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", name).strip()


def _with_generation(name: str, system_name: object) -> str:
    """A bare ``"TPU"`` takes its generation from the system name (``tpu-v4-128`` -> ``TPU v4``),
    so different TPU generations never share a deployment key."""
    if name.strip().lower() == "tpu" and isinstance(system_name, str):
        m = re.search(r"tpu[-_ ]?(v\d+\w*)", system_name, flags=re.I)
        if m:
            return f"TPU {m.group(1).lower()}"
    return name


def system_deployment(system: dict | None) -> Deployment | None:
    """Deployment from a system description: v0.7+ ``accelerator_model_name`` /
    ``accelerators_per_node`` / ``number_of_nodes`` (also ``number of nodes``); v0.5
    ``entry.json`` ``nodes[].accelerator`` / ``num_accelerators`` / ``num_nodes``; v0.6
    ``entry`` (decoded by :mod:`ingest.mlperf_layout`) with the same ``nodes``."""
    if not system:
        return None
    norm = _norm_keys(system)
    if isinstance(norm.get("accelerator_model_name"), str):
        name = _with_generation(
            _clean_accelerator(norm["accelerator_model_name"]), norm.get("system_name")
        )
        per_node = _count(norm.get("accelerators_per_node"))
        nodes = _count(norm.get("number_of_nodes"))
        if name and per_node and nodes:
            return Deployment(name, per_node, nodes)
        return None
    entry = norm.get("entry") if isinstance(norm.get("entry"), dict) else norm
    node_specs = _norm_keys(entry).get("nodes")
    if isinstance(node_specs, dict):
        node_specs = [node_specs]
    if not isinstance(node_specs, list) or not node_specs:
        return None
    specs = [_norm_keys(s) for s in node_specs if isinstance(s, dict)]
    names = {s.get("accelerator") for s in specs}
    per = {_count(s.get("num_accelerators")) for s in specs}
    if len(names) != 1 or len(per) != 1:
        return None  # heterogeneous nodes: no single deployment
    name, per_node = names.pop(), per.pop()
    node_counts = [_count(s.get("num_nodes", 1)) for s in specs]
    if not isinstance(name, str) or not per_node or None in node_counts:
        return None
    return Deployment(_clean_accelerator(name), per_node, sum(node_counts))  # type: ignore[arg-type]


def system_framework(system: dict | None, evidence: set[str] | frozenset = frozenset()
                     ) -> str | None:
    """``framework`` of the system description. Some list several stacks
    (``"NGC MXNet 20.06 , NGC PyTorch 20.06"``): the one the log's text names is kept,
    the whole string when that is not exactly one."""
    if not system:
        return None
    norm = _norm_keys(system)
    raw = norm.get("framework")
    if raw is None and isinstance(norm.get("entry"), dict):
        raw = _norm_keys(norm["entry"]).get("framework")
    if not isinstance(raw, str) or not raw.strip():
        return None
    items = [p.strip() for p in re.split(r"\s*[,;]\s*", raw) if p.strip()]
    if len(items) > 1:
        def token(item: str) -> str | None:
            low = item.lower()
            for name, tok in (("mxnet", "mxnet"), ("pytorch", "pytorch"),
                              ("tensorflow", "tensorflow")):
                if name in low:
                    return tok
            return None

        hits = [item for item in items if token(item) in evidence]
        if len(hits) == 1:
            return hits[0]
    return raw.strip()


def _normalise_network(name: str | None) -> str | None:
    if not name:
        return None
    low = name.strip().lower()
    if re.fullmatch(r"resnet(?:[-_ ]?50)?(?:[-_ ]?v1\.?5)?", low):
        return "resnet50"
    return low


# --------------------------------------------------------------------------- runs


@dataclass
class _Span:
    phase: str
    start: float
    end: float
    start_line: int
    end_line: int
    epochs: float  # epochs covered (train) / 1 (test)
    epoch_start: float | None
    epoch_end: float | None


def _split_runs(events: list[_Event]) -> list[list[_Event]]:
    """A ``run_stop`` ends a run; a header record after training starts a new one."""
    runs: list[list[_Event]] = [[]]
    trained = False
    for ev in events:
        if trained and ev.key in _HEADER_KEYS:
            runs.append([])
            trained = False
        runs[-1].append(ev)
        trained = trained or ev.key in _SEGMENT_KEYS
        if ev.key == "run_stop":
            runs.append([])
            trained = False
    return [r for r in runs if any(e.key in _SEGMENT_KEYS for e in r)]


def _param(key_order: tuple[str, ...], events: list[_Event], run: list[_Event],
           first_train_line: int) -> _Event | None:
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


@dataclass
class _Truncation:
    """Set when a segment was left open (killed run) or the run has no ``run_stop``."""

    truncated: bool = False


def _epoch_spans(run: list[_Event], cut: _Truncation) -> list[_Span]:
    spans: list[_Span] = []
    open_ev: _Event | None = None
    open_num: float | None = None
    for ev in run:
        if ev.key == "epoch_start":
            num = _epoch_of(ev)
            if open_ev is not None:
                raise ParseError(f"epoch_start {num:g} while epoch {open_num:g} (line "
                                 f"{open_ev.line}) has no epoch_stop", line=ev.line)
            open_ev, open_num = ev, num
        elif ev.key == "epoch_stop":
            num = _epoch_of(ev)
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


def _timed_span(phase: str, start: _Event, stop: _Event, epochs: float,
                first: float | None, last: float | None) -> _Span:
    if start.time is None or stop.time is None:
        bad = start if start.time is None else stop
        raise ParseError(f"{bad.key} has no time", line=bad.line)
    if stop.time < start.time - BACKWARDS_TOLERANCE_S:
        raise ParseError(f"{stop.key} is {start.time - stop.time:.1f} s before its "
                         f"{start.key} (line {start.line})", line=stop.line)
    return _Span(phase, start.time, max(stop.time, start.time), start.line, stop.line,
                 epochs, first, last)


def _block_spans(run: list[_Event], cut: _Truncation) -> tuple[list[_Span], bool]:
    """Train spans from block records; True when some block holds an eval that has no
    ``eval_start`` of its own (the block then includes the eval time)."""
    spans: list[_Span] = []
    includes_eval = False
    open_ev: _Event | None = None
    first = count = None
    eval_start: _Event | None = None
    saw_accuracy = False
    for ev in run:
        if ev.key == "block_start":
            if open_ev is not None:
                raise ParseError(f"block_start while the block of line {open_ev.line} "
                                 "has no block_stop", line=ev.line)
            if "first_epoch_num" not in ev.meta:
                raise ParseError("block_start has no first_epoch_num", line=ev.line)
            first = _number(ev.meta["first_epoch_num"], "block_start first_epoch_num", ev.line)
            raw_count = ev.meta.get("epoch_count")
            count = (_positive_int(raw_count, "block_start epoch_count", ev.line)
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
                stop_first = _number(ev.meta["first_epoch_num"], "block_stop first_epoch_num",
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
                count = _positive_int(raw_count, "block_stop epoch_count", ev.line)
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


def _mark_spans(run: list[_Event], cut: _Truncation) -> list[_Span]:
    """v0.5 ``train_epoch: N`` marks: an epoch runs to the next closing record."""
    spans: list[_Span] = []
    group: list[tuple[_Event, float]] = []
    for ev in run:
        if ev.key == "train_epoch":
            num = _number(ev.value, "train_epoch epoch number", ev.line)
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


def _eval_spans(run: list[_Event], cut: _Truncation) -> list[_Span]:
    """Evals: ``eval_start`` .. ``eval_stop``; in a run that logs no ``eval_stop`` at all,
    an eval ends at the next record that is not an ``eval_*`` record."""
    has_stop = any(e.key == "eval_stop" for e in run)
    spans: list[_Span] = []
    open_ev: _Event | None = None
    num: float | None = None
    for ev in run:
        if ev.key == "eval_start":
            if open_ev is not None:
                raise ParseError(f"eval_start while the eval of line {open_ev.line} has no "
                                 "eval_stop", line=ev.line)
            open_ev, num = ev, _epoch_of(ev, required=False)
        elif open_ev is None:
            if ev.key == "eval_stop":
                raise ParseError("eval_stop without an open eval_start", line=ev.line)
        elif ev.key == "eval_accuracy":
            if num is None:
                num = _epoch_of(ev, required=False)
        elif (ev.key == "eval_stop" if has_stop else not ev.key.startswith("eval_")):
            if ev.time is None:
                continue
            if num is None and ev.key == "eval_stop":
                num = _epoch_of(ev, required=False)
            spans.append(_timed_span("test", open_ev, ev, 1, num, num))
            open_ev = None
    if open_ev is not None:
        cut.truncated = True
    return spans


# --------------------------------------------------------------------------- points


def _tz_offset(displays: list[_Display], events: list[_Event]) -> int | None:
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


def _points(span: _Span, iterations: float, displays: list[_Display], offset: int | None,
            display_lines: list[int]) -> tuple[tuple[float, float], ...]:
    seconds = span.end - span.start
    marks: list[tuple[float, float]] = []
    if offset is not None and span.phase == "train" and span.epochs == 1:
        i = bisect.bisect_right(display_lines, span.start_line)
        j = bisect.bisect_left(display_lines, span.end_line)
        for d in displays[i:j]:
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


# --------------------------------------------------------------------------- parse


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse one MLPerf result log into runs of epoch/block and eval segments."""
    scan = _scan_checked(lines)
    if scan.generation is None:
        raise ParseError("no MLPerf log records (':::MLLOG', ':::MLL' or ':::MLPv0.5') found")
    runs = _split_runs(scan.events)
    if not runs:
        last = scan.events[-1].line if scan.events else None
        raise ParseError("no training progress: no epoch, block or train_epoch record",
                         line=last)
    node = min((d.node for d in scan.displays), default=0)
    displays = [d for d in scan.displays if d.node == node]
    offset = _tz_offset(displays, scan.events)
    display_lines = [d.line for d in displays]
    out = []
    for run in runs:
        parsed = _build_run(run, scan, ctx, displays, offset, display_lines)
        if parsed is not None:
            out.append(parsed)
    if not out:
        opener = next(e for e in runs[0] if e.key in _SEGMENT_KEYS)
        raise ParseError(f"no complete training segment: {opener.key} never closed",
                         line=opener.line)
    return out


def _build_run(run: list[_Event], scan: _Scan, ctx: ParseContext, displays: list[_Display],
               offset: int | None, display_lines: list[int]) -> ParsedRun | None:
    cut = _Truncation()
    keys = {e.key for e in run}
    includes_eval = False
    if "epoch_start" in keys or "epoch_stop" in keys:
        mode, spans = "epoch", _epoch_spans(run, cut)
    elif "block_start" in keys or "block_stop" in keys:
        mode = "block"
        spans, includes_eval = _block_spans(run, cut)
    else:
        mode, spans = "train_epoch_mark", _mark_spans(run, cut)
    if not spans:
        return None
    evals = _eval_spans(run, cut)
    first_train_line = next(e.line for e in run if e.key in _SEGMENT_KEYS)

    def param(*key_order: str) -> _Event | None:
        return _param(key_order, scan.events, run, first_train_line)

    system = ctx.system or None
    deployment = system_deployment(system)
    meta: dict[str, object] = {"log_generation": scan.generation, "segment_mode": mode}

    # batch size
    gbs_ev = param("global_batch_size")
    per_gpu_ev = param("input_batch_size") if gbs_ev is None else None
    if gbs_ev is not None:
        batch = _positive_int(gbs_ev.value, "global_batch_size", gbs_ev.line)
    elif per_gpu_ev is not None:
        per_gpu = _positive_int(per_gpu_ev.value, "input_batch_size", per_gpu_ev.line)
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
        train_samples = _positive_int(train_ev.value, train_ev.key, train_ev.line)
    elif network == "resnet50":
        train_samples = IMAGENET_TRAIN_SAMPLES
        meta["train_samples_assumed"] = True
    else:
        raise ParseError(f"no train_samples in a {network or 'unknown'} log (the ImageNet "
                         "default applies to ResNet only)", line=first_train_line)
    if eval_ev is not None:
        eval_samples = _positive_int(eval_ev.value, eval_ev.key, eval_ev.line)
    else:
        eval_samples = IMAGENET_EVAL_SAMPLES
        meta["eval_samples_assumed"] = True
    eval_bs_ev = param("eval_batch_size")
    if eval_bs_ev is not None:
        eval_batch = _positive_int(eval_bs_ev.value, "eval_batch_size", eval_bs_ev.line)
    else:
        eval_batch = batch
        meta["eval_batch_size_assumed"] = True
    steps_per_epoch = math.ceil(train_samples / batch)
    eval_steps = math.ceil(eval_samples / eval_batch)
    accum_ev = param("gradient_accumulation_steps")
    if accum_ev is not None:
        meta["gradient_accumulation_steps"] = _positive_int(accum_ev.value,
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
            points=_points(span, its, displays, offset, display_lines),
        ))
    if offset is not None and any(len(s.points) > 1 for s in segments):
        meta["points_from"] = "MXNet 'Epoch[e] Batch [a-b]' display lines"
        meta["display_clock_offset_s"] = offset

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
    sys_norm = _norm_keys(system) if system else {}
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


def _eval_facts(run: list[_Event], evals: list[_Span], spans: list[_Span]) -> dict[str, object]:
    accuracies = [e for e in run if e.key == "eval_accuracy"]
    epochs = [s.epoch_start for s in evals if s.epoch_start is not None]
    if len(epochs) < len(accuracies):  # evals without eval_start (Google): accuracy epochs
        epochs = [n for n in (_epoch_of(e, required=False) for e in accuracies) if n is not None]
    facts: dict[str, object] = {"evals": len(accuracies)}
    gaps = [b - a for a, b in zip(epochs, epochs[1:], strict=False) if b > a]
    if gaps:
        facts["eval_every_epochs"] = statistics.median(gaps)
    elif len(spans) > 1 and all(s.epochs > 1 for s in spans):
        facts["eval_every_epochs"] = statistics.median(s.epochs for s in spans)
    if accuracies:
        facts["final_eval_accuracy"] = _number(accuracies[-1].value, "eval_accuracy",
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
