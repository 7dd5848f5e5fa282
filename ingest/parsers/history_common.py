"""Rules the PyTorch-era history parsers share (torchvision references, timm, Lightning,
Hugging Face Trainer, MMEngine, Detectron2). Not a log format itself (not registered).

Rules
-----
* **Side files come in through the context.** A parser's ``context`` reads the config files
  of the run's folder (``args.yaml``, ``hparams.yaml``, ``config.json``, ``config.yaml``,
  ``config.py``) with :func:`read_yaml` / :func:`read_json` / :func:`read_text` (at most
  :data:`MAX_CONFIG_BYTES`; unreadable, too big or not a mapping: ignored) and hands the facts
  it found to ``parse`` in a :class:`HistoryContext` (``config``: ``network``,
  ``batch_size``, ``deployment``, ``per_device_batch``, ``precision``, ...;
  ``config_files``: which files said so). ``parse`` stays a pure function of lines.
* **What a run lacks** (:func:`facts`): each of network, global batch size and deployment is
  taken from the log where it says so, else from the folder's config files, else left to
  the flags (``--network``, ``--batch-size``, ``--deployment``, applied by the pipeline);
  ``meta["needs"]`` lists what neither said, and the pipeline rejects such a run naming the
  flag. ``meta["from_config"]`` lists what came from config files.
* **Warm-up** (:func:`split_warmup`), the rule :mod:`ingest.parsers.steps` applies to
  step-stamped histories (and as MLPerf's first epoch and Caffe's first display block): the
  run's first train segment is split at its progress marks into intervals; the first interval
  (the first steps, start-up included) and the leading ones after it slower than
  ``WARMUP_FACTOR`` times the steady time per step (the median over the later half), at most
  half of them, become a warm-up segment of their own, the rest a second segment, so the
  per-step fit's slope comes from the steady part and the one-off cost from the first.
  Reported: ``meta["warmup"]`` (what), ``warmup_steps``, ``warmup_seconds``,
  ``steady_step_seconds``, ``warmup_slowdown``. Where a log has no mark inside its first
  segment the warm-up cannot be separated and ``meta["warmup"]`` says so.
* **Points** (:func:`curve_points`): progress marks inside a segment, clamped into the
  segment and made non-decreasing, ending with the segment's own end.
* JSON-lines files are read with :func:`json_objects` (blank lines skipped; a line that is not
  a JSON object is a ParseError at its line); records of a per-step time (a median or mean
  over a window) become progress marks with :func:`timed_marks` (each record: its time per
  step times the steps since the record before).
* Numbers are read with :func:`number` / :func:`whole`: a value that is not finite, or a
  whole number longer than :data:`MAX_DIGITS` digits, is a ParseError at its line; a segment
  faster than :data:`MIN_STEP_SECONDS` per step is one too (:func:`build_run`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from fleet.deployment import Deployment
from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers.steps import WARMUP_FACTOR
from ingest.validate import loads

MAX_CONFIG_BYTES = 2_000_000
MAX_DIGITS = 18
MIN_STEP_SECONDS = 1e-7  # 100 ns per training or evaluation step: no device is faster
_CLOCK = re.compile(r"^(?:(\d{1,9}) days?, )?(?:(\d{1,9}):)?(\d{1,2}):(\d{2})$")


@dataclass(frozen=True)
class HistoryContext(ParseContext):
    """A :class:`ParseContext` plus the facts a run's folder config files state."""

    config: Mapping[str, object] = field(default_factory=dict)
    config_files: tuple[str, ...] = ()


# -- reading side files (context only) ----------------------------------------------------


def _read_bytes(path: Path) -> bytes | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


def read_text(path: Path) -> str | None:
    """A small text file's contents, or None (missing, unreadable, too big)."""
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def read_yaml(path: Path) -> dict | None:
    """A YAML mapping (``yaml.safe_load``: no Python objects), or None."""
    text = read_text(path)
    if text is None:
        return None
    try:
        import yaml

        value = yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - any YAML problem: the file says nothing usable
        return None
    return value if isinstance(value, dict) else None


def read_json(path: Path) -> dict | None:
    """A JSON object, or None."""
    text = read_text(path)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def positive_int(value: object) -> int | None:
    """A config value that is a whole number >= 1 (an int, or digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 1 <= value <= 10**9 else None
    if isinstance(value, float) and value.is_integer() and 1 <= value <= 1e9:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 9:
        number_ = int(value.strip())
        return number_ if number_ >= 1 else None
    return None


def name_value(value: object) -> str | None:
    """A config value usable as a name (a non-empty string of at most 128 characters)."""
    if isinstance(value, str) and value.strip() and len(value.strip()) <= 128:
        return value.strip()
    return None


def history_context(ctx: ParseContext, config: Mapping[str, object],
                    files: Iterable[str]) -> HistoryContext:
    """``ctx`` (source and overrides) with the facts read from config files."""
    return HistoryContext(**{f: getattr(ctx, f) for f in ParseContext.__dataclass_fields__},
                          config=dict(config), config_files=tuple(files))


# -- reading numbers ----------------------------------------------------------------------


def whole(text: str, what: str, line: int) -> int:
    """A printed whole number of at most :data:`MAX_DIGITS` digits, else ParseError."""
    text = text.strip()
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ParseError(f"{what} has {len(text)} digits (at most {MAX_DIGITS})", line=line)
    try:
        return int(text)
    except ValueError:
        raise ParseError(f"{what} {text[:20]!r} is not a whole number", line=line) from None


def number(text: str, what: str, line: int) -> float:
    """A printed number that is finite, else ParseError."""
    try:
        value = float(text)
    except ValueError:
        raise ParseError(f"{what} {text[:20]!r} is not a number", line=line) from None
    if not math.isfinite(value):
        raise ParseError(f"{what} {text[:20]} is not a finite number", line=line)
    return value


def json_number(obj: Mapping[str, object], key: str, line: int,
                required: bool = True) -> float | None:
    """``obj[key]`` as a finite float (not a bool); None when absent and not required."""
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError(f"'{key}' must be a number, got {str(value)[:40]!r}", line=line)
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ParseError(f"'{key}' must be a finite number, got {str(value)[:40]}", line=line)
    return out


def json_objects(lines: Iterable[str], what: str,
                 cut: str = "") -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file; a line that is not
    JSON (the message says ``not a JSON line`` + ``cut``, e.g. `` (cut?)``) or not an object
    (``a <what> line must be a JSON object``) is a ParseError at its line."""
    for number_, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            obj = loads(text)
        except (ValueError, RecursionError):
            raise ParseError(f"not a JSON line{cut}: {text[:60]!r}", line=number_) from None
        if not isinstance(obj, dict):
            raise ParseError(f"a {what} line must be a JSON object", line=number_)
        yield number_, obj


def timed_marks(records: Iterable[tuple[int, float]]) -> tuple[list[tuple[float, float]], float]:
    """Progress marks (steps done, seconds so far) and the total seconds of records ``(steps
    done, seconds per step)``: each record's time per step times the steps since the one
    before (the first: since step 0)."""
    marks: list[tuple[float, float]] = []
    total, done = 0.0, 0
    for steps, per_step in records:
        total += (steps - done) * per_step
        done = steps
        marks.append((float(steps), total))
    return marks, total


def clock_seconds(text: str, what: str, line: int) -> int:
    """``[D day(s), ][H:]MM:SS`` (``datetime.timedelta`` and tqdm style) in whole seconds."""
    m = _CLOCK.match(text.strip())
    if m is None:
        raise ParseError(f"{what} {text[:30]!r} is not a duration like 1:02:03", line=line)
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    if seconds >= 60 or (hours and minutes >= 60):
        raise ParseError(f"{what} {text[:30]!r} is not a duration like 1:02:03", line=line)
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# -- segments, points, warm-up ------------------------------------------------------------


def curve_points(marks: Iterable[tuple[float, float]], iterations: float,
                 seconds: float) -> tuple[tuple[float, float], ...]:
    """Marks (iterations, seconds since the segment start) inside the segment, clamped into
    it and non-decreasing, then the segment's end."""
    points: list[tuple[float, float]] = []
    for it, sec in sorted(marks):
        if not 0 < it < iterations:
            continue
        sec = min(max(sec, points[-1][1] if points else 0.0), seconds)
        if points and it <= points[-1][0]:
            continue
        points.append((float(it), float(max(sec, 0.0))))
    points.append((float(iterations), float(seconds)))
    return tuple(points)


def _segment_from(intervals: list[tuple[float, float]], template: Segment,
                  line: int | None) -> Segment:
    """A train segment made of consecutive (steps, seconds) intervals."""
    marks, steps, seconds = [], 0.0, 0.0
    for d_it, d_s in intervals:
        steps, seconds = steps + d_it, seconds + d_s
        marks.append((steps, seconds))
    return replace(template, iterations=steps, seconds=seconds, line=line,
                   points=curve_points(marks, steps, seconds))


def split_warmup(segments: list[Segment], rule: str) -> tuple[list[Segment], dict]:
    """Split the run's first train segment into its warm-up and the rest (module rules, and
    :mod:`ingest.parsers.steps`' rule for step-stamped histories); returns the segments and
    the meta that reports the warm-up (``warmup``, ``warmup_steps``, ``warmup_seconds``,
    ``steady_step_seconds``, ``warmup_slowdown``)."""
    index = next((i for i, s in enumerate(segments) if s.phase == "train"), None)
    if index is None:
        return segments, {"warmup": "not separable: no train segment"}
    first = segments[index]
    previous, intervals = (0.0, 0.0), []
    for it, sec in first.points or ((first.iterations, first.seconds),):
        intervals.append((it - previous[0], sec - previous[1]))
        previous = (it, sec)
    timed = [(d_it, d_s) for d_it, d_s in intervals if d_it > 0]
    if len(timed) < 2 or timed[0][1] <= 0:
        return segments, {"warmup": f"not separable ({rule}): no progress mark inside the "
                                    "first train segment"}
    rates = [d_s / d_it for d_it, d_s in timed]
    steady = statistics.median(rates[len(rates) // 2:])
    count, limit = 1, max(1, len(timed) // 2)
    while count < limit and rates[count] > WARMUP_FACTOR * steady:
        count += 1
    warm = _segment_from(timed[:count], first, None)
    rest = _segment_from(timed[count:], first, first.line)
    if rest.seconds <= 0 or warm.seconds <= 0:
        return segments, {"warmup": f"not separable ({rule}): the steps after it take no time"}
    start = first.iteration_start
    if start is not None:
        warm = replace(warm, iteration_end=start + int(warm.iterations) - 1)
        rest = replace(rest, iteration_start=start + int(warm.iterations))
    per_step = rest.seconds / rest.iterations
    steps = int(warm.iterations)
    meta = {
        "warmup": (f"{steps} warm-up step{'s' if steps != 1 else ''} ({warm.seconds:.3g} s; "
                   f"{rule}): the first train segment, kept out of the steady segment"),
        "warmup_steps": steps, "warmup_seconds": warm.seconds,
        "steady_step_seconds": per_step,
        "warmup_slowdown": (warm.seconds / warm.iterations) / per_step if per_step > 0 else None,
    }
    return [*segments[:index], warm, rest, *segments[index + 1:]], meta


# -- what a run lacks ---------------------------------------------------------------------


@dataclass
class Facts:
    """Network, global batch size and deployment as the log states them (None: silent)."""

    network: str | None = None
    batch_size: int | None = None
    deployment: Deployment | None = None


def facts(log: Facts, ctx: ParseContext, meta: dict[str, object]) -> Facts:
    """The log's facts completed from the folder's config (``ctx.config``) and, for the batch
    size, ``ctx.batch_size`` (module rules); fills ``meta["needs"]``/``meta["from_config"]``."""
    config = ctx.config if isinstance(ctx, HistoryContext) else {}
    out = Facts(log.network, log.batch_size, log.deployment)
    taken: list[str] = []
    if out.network is None and name_value(config.get("network")):
        out.network = name_value(config.get("network"))
        taken.append("network")
    if out.batch_size is None and positive_int(config.get("batch_size")):
        out.batch_size = positive_int(config.get("batch_size"))
        taken.append("batch_size")
    deployment = config.get("deployment")
    if out.deployment is None and isinstance(deployment, Deployment):
        out.deployment = deployment
        taken.append("deployment")
    if out.batch_size is None and ctx.batch_size is not None:
        out.batch_size = ctx.batch_size
        meta["batch_from_ctx"] = True
    if taken:
        meta["from_config"] = taken
        files = ctx.config_files if isinstance(ctx, HistoryContext) else ()
        if files:
            meta["config_files"] = list(files)
    needs = [name for name, value in (("network", out.network if ctx.network is None else 1),
                                      ("batch_size", out.batch_size),
                                      ("deployment", out.deployment or ctx.deployment))
             if value is None]
    if needs:
        meta["needs"] = needs
    return out


def build_run(fmt: str, framework: str | None, found: Facts, segments: list[Segment],
              meta: dict[str, object], first_line: int | None, last_line: int | None,
              start_time: float | None = None) -> ParsedRun:
    """A :class:`ParsedRun`; network lower-cased, segments without a batch size get the run's.
    A segment of less than :data:`MIN_STEP_SECONDS` per step is a ParseError at its line (a
    time no device takes: a value the log printed cannot be read as time)."""
    for seg in segments:
        if seg.iterations > 0 and seg.seconds / seg.iterations < MIN_STEP_SECONDS:
            raise ParseError(f"{seg.phase} segment of {seg.iterations:g} steps in "
                             f"{seg.seconds:.3g} s: less than {MIN_STEP_SECONDS:g} s per step",
                             line=seg.line or first_line)
    segs = [s if s.batch_size is not None or found.batch_size is None
            else replace(s, batch_size=found.batch_size) for s in segments]
    return ParsedRun(
        format=fmt, network=found.network.strip().lower() if found.network else None,
        deployment=found.deployment, stack=framework, batch_size=found.batch_size,
        start_time=start_time, segments=segs, meta=meta, first_line=first_line,
        last_line=last_line,
    )


def sibling(path: Path, *names: str) -> Path | None:
    """The first of ``names`` that is a file in ``path``'s folder, or None."""
    for name in names:
        candidate = path.parent / name
        try:
            if candidate.is_file():
                return candidate
        except OSError:
            continue
    return None
