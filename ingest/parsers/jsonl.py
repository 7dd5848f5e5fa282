"""jobcast JSON-lines logs (docs/jsonl-format.md) -> runs of train/test segments.

Rules (the format's own, checked here)
--------------------------------------
* Every non-blank line is a JSON object with ``"v": 1``, a string ``event`` and a numeric
  ``time`` (unix seconds, 1990 .. 2100: :func:`ingest.validate.plausible_time`). Anything
  else is a ParseError with its line: a line that is not JSON (a cut last line
  included), another version, a missing, non-numeric or non-finite (``NaN``,
  ``Infinity``, ``1e999``) field, an integer of more than
  :data:`~ingest.validate.JSON_INT_DIGITS` digits (read as a float, so refused as a count).
* Events live inside a run (``run_start`` ... ``run_end``); phases (``phase_start`` ...
  ``phase_end``) do not nest; ``progress`` and ``phase_end`` must name the open phase and
  epoch; ``step`` never decreases nor exceeds ``iterations``; ``time`` never goes back by
  more than 1 s. Violations are ParseErrors.
* Unknown events and unknown fields are ignored (forward compatible within version 1).
* A run without ``run_end`` (or followed by another ``run_start``) keeps its closed phases,
  drops the open one and gets ``meta["truncated"] = True``.
* Each closed phase is a segment: iterations = ``phase_end.iterations``, seconds = the time
  between its start and end, points = its ``progress`` marks plus the end; epochs are
  1-based as written. A file with no ``train`` segment is a ParseError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleet.deployment import Deployment
from ingest.events import PHASES, ParseContext, ParsedRun, ParseError, Segment, short_repr
from ingest.validate import loads, plausible_time

FORMAT = "jsonl"
LABEL = "jobcast JSON-lines"
VERSION = 1
BACKWARDS_TOLERANCE_S = 1.0


def sniff(head: list[str]) -> bool:
    """True if the first non-blank line is a version-tagged jobcast event."""
    for line in head:
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except ValueError:
            return False
        return isinstance(obj, dict) and "v" in obj and "event" in obj and "time" in obj
    return False


def deployment_from(value: object, line: int) -> Deployment | None:
    """A Deployment from a key, a free form ("8x A100") or an object."""
    if value is None:
        return None
    if isinstance(value, dict):
        try:
            counts = [value.get("per_node", 1), value.get("nodes", 1)]
            if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
                raise ValueError("per_node and nodes must be whole numbers")
            return Deployment(str(value["accelerator"]), counts[0], counts[1])
        except (KeyError, TypeError, ValueError) as err:
            raise ParseError(f"bad deployment object {short_repr(value, 80)}: {err}",
                             line=line) from err
    if not isinstance(value, str) or not value.strip():
        raise ParseError(f"deployment must be a string or an object, got {short_repr(value)}",
                         line=line)
    try:
        return Deployment.parse(value)
    except ValueError as err:
        raise ParseError(f"bad deployment {short_repr(value)}: {err}", line=line) from err


def _number(obj: dict, key: str, line: int, *, required: bool = True) -> float | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError(f"'{key}' must be a number, got {short_repr(value)}", line=line)
    if not math.isfinite(value):
        raise ParseError(f"'{key}' must be a finite number, got {short_repr(value)}", line=line)
    return float(value)


def _count(obj: dict, key: str, line: int, *, required: bool = True) -> int | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParseError(f"'{key}' must be a non-negative integer, got {short_repr(value)}",
                         line=line)
    return value


@dataclass
class _Phase:
    phase: str
    epoch: int | None
    time: float
    line: int
    points: list[tuple[float, float]] = field(default_factory=list)
    last_step: int = 0


@dataclass
class _Run:
    start: dict
    line: int
    segments: list[Segment] = field(default_factory=list)
    phase: _Phase | None = None
    last_line: int = 0
    truncated: bool = False


def _close_segment(run: _Run, obj: dict, time: float, line: int) -> None:
    phase = run.phase
    assert phase is not None
    iterations = _count(obj, "iterations", line)
    assert iterations is not None
    if phase.last_step > iterations:
        raise ParseError(f"phase_end iterations {iterations} < progress step {phase.last_step}",
                         line=line)
    batch = _count(obj, "batch_size", line, required=False) or run.start.get("batch_size")
    seconds = time - phase.time
    points: list[tuple[float, float]] = []
    for it, sec in [*(p for p in phase.points if p[0] < iterations),
                    (float(iterations), seconds)]:
        points.append((it, max(sec, points[-1][1] if points else 0.0)))
    epoch = phase.epoch
    run.segments.append(Segment(
        phase=phase.phase,  # type: ignore[arg-type]
        iterations=float(iterations),
        seconds=points[-1][1],
        batch_size=batch,
        start_time=phase.time,
        epoch_start=float(epoch) if epoch is not None else None,
        epoch_end=float(epoch) if epoch is not None else None,
        line=line,
        points=tuple(points),
    ))
    run.phase = None


def _check_phase(run: _Run, obj: dict, line: int, event: str) -> _Phase:
    phase = run.phase
    if phase is None:
        raise ParseError(f"{event} without an open phase", line=line)
    if obj.get("phase") != phase.phase:
        raise ParseError(f"{event} for phase {short_repr(obj.get('phase'))} but {phase.phase!r} "
                         f"(line {phase.line}) is open", line=line)
    if "epoch" in obj and obj["epoch"] != phase.epoch:
        raise ParseError(f"{event} for epoch {short_repr(obj['epoch'])} but epoch {phase.epoch!r} "
                         f"is open", line=line)
    return phase


def _to_parsed(run: _Run, ctx: ParseContext) -> ParsedRun:
    start = run.start
    meta: dict[str, object] = {}
    for key in ("run_id", "epochs", "steps_per_epoch", "kind", "status"):
        if key in start:
            meta[key] = start[key]
    if isinstance(start.get("meta"), dict):
        meta["logger_meta"] = start["meta"]
    if run.truncated:
        meta["truncated"] = True
    batch = start.get("batch_size")
    if batch is None and ctx.batch_size is not None:
        batch = ctx.batch_size
        meta["batch_from_ctx"] = True
    deployment = deployment_from(start.get("deployment"), run.line)
    network = start.get("network")
    needs = [name for name, value in (("network", network), ("batch_size", batch),
                                      ("deployment", deployment)) if value is None]
    if needs:
        meta["needs"] = needs
    return ParsedRun(
        format=FORMAT,
        network=str(network).strip().lower() if network else None,
        deployment=deployment,
        stack=start.get("framework"),
        batch_size=batch,
        start_time=float(start["time"]),
        segments=run.segments,
        meta=meta,
        first_line=run.line,
        last_line=run.last_line,
    )


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse a jobcast JSON-lines log (see module doc and docs/jsonl-format.md)."""
    runs: list[_Run] = []
    run: _Run | None = None
    last_time: float | None = None
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            obj = loads(text)
        except ValueError as err:
            why = getattr(err, "msg", None) or str(err)[:80]
            raise ParseError(f"not JSON ({why}): {text[:60]!r}", line=number) from None
        if not isinstance(obj, dict):
            raise ParseError("a line must be a JSON object", line=number)
        if obj.get("v") != VERSION:
            raise ParseError(f"unsupported format version {short_repr(obj.get('v'))} "
                             f"(this reader knows {VERSION})", line=number)
        event = obj.get("event")
        if not isinstance(event, str):
            raise ParseError("missing 'event'", line=number)
        time = _number(obj, "time", number)
        assert time is not None
        if not plausible_time(time):
            raise ParseError(f"'time' {time!r} is not unix seconds between 1990 and 2100",
                             line=number)
        if last_time is not None and time < last_time - BACKWARDS_TOLERANCE_S:
            raise ParseError(f"time goes backwards by {last_time - time:.3f} s", line=number)
        last_time = max(time, last_time or time)

        if event == "run_start":
            if run is not None:
                run.truncated = True
                runs.append(run)
            batch = _count(obj, "batch_size", number, required=False)
            if batch == 0:
                raise ParseError("batch_size must be positive", line=number)
            run = _Run(start=obj, line=number, last_line=number)
            continue
        if event not in ("phase_start", "progress", "phase_end", "run_end"):
            continue  # unknown event: ignored by design
        if run is None:
            raise ParseError(f"{event} before any run_start", line=number)
        run.last_line = number
        if event == "phase_start":
            if run.phase is not None:
                raise ParseError(f"phase_start while phase {run.phase.phase!r} "
                                 f"(line {run.phase.line}) is open", line=number)
            phase = obj.get("phase")
            if phase not in PHASES:
                raise ParseError(f"phase must be one of {PHASES}, got {short_repr(phase)}",
                                 line=number)
            epoch = obj.get("epoch")
            if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
                raise ParseError(f"epoch must be an integer or null, got {short_repr(epoch)}",
                                 line=number)
            run.phase = _Phase(str(phase), epoch, time, number)
        elif event == "progress":
            open_phase = _check_phase(run, obj, number, event)
            step = _count(obj, "step", number)
            assert step is not None
            if step < open_phase.last_step:
                raise ParseError(f"step goes backwards ({open_phase.last_step} -> {step})",
                                 line=number)
            open_phase.last_step = step
            open_phase.points.append((float(step), time - open_phase.time))
        elif event == "phase_end":
            _check_phase(run, obj, number, event)
            _close_segment(run, obj, time, number)
        elif event == "run_end":
            if run.phase is not None:
                run.truncated = True
                run.phase = None
            if "status" in obj:
                run.start = {**run.start, "status": obj["status"]}
            runs.append(run)
            run = None
    if run is not None:
        run.truncated = True
        runs.append(run)
    parsed = [_to_parsed(r, ctx) for r in runs if r.segments]
    if not any(s.phase == "train" for r in parsed for s in r.segments):
        raise ParseError("no closed train phase: no training progress")
    return parsed
