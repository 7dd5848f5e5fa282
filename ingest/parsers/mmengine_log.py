"""MMEngine runs (MMDetection, MMPretrain, MMPose, MMSegmentation, ... 2.x/3.x): the text log
``<work_dir>/<timestamp>/<timestamp>.log`` or, alone, ``vis_data/scalars.json``.

What is read
------------
* Text log lines ``YYYY/MM/DD HH:MM:SS - mmengine - INFO - <message>`` (the clock, whole
  seconds) with messages ``Epoch(train) [e][ i/N]  lr: ...  eta: ...  time: t  data_time:
  d ...`` (by epoch) or ``Iter(train) [ i/N] ...`` (by iteration), ``Epoch(val) [e][ i/N]
  ...`` / ``Iter(val) [ i/N] ...`` (the last one, ``i = N``, also carries the metrics). ``t``
  is the mean step time over the log processor's window.
* Its header: ``GPU 0,1: <name>`` (the GPUs of the node, named as PyTorch names them),
  ``GPU number: W`` (processes), ``Distributed training``, and the config dump's
  ``train_dataloader = dict(... batch_size=B ...)`` (per process).
* ``scalars.json`` (JSON lines, no clock): train entries (with ``lr``) ``step`` (the global
  iteration), ``epoch``, ``time``; validation entries (no ``lr``) are counted only. Its
  folder's ``config.py`` (context) gives ``batch_size`` the same way.
* Side files (:func:`side_file`): ``vis_data/<timestamp>.json`` and ``vis_data/scalars.json``
  when the run's text log ``../<timestamp>.log`` is there (the same run, without a clock),
  ``vis_data/<timestamp>.json`` beside ``scalars.json`` (MMEngine writes the same lines to
  both), and ``last_checkpoint``.

Segments (text log)
-------------------
* ``train``: one per epoch (by epoch) or per stretch between validation passes (by
  iteration), ending at its last train line and starting where the previous segment (train
  or validation) ended; seconds from the clock. Where the clock spans less than
  :data:`MIN_CLOCK_SECONDS` (whole seconds cannot tell), seconds are the sum of the lines'
  mean step times x the steps since the previous line (``meta["timing"]`` notes it). An
  epoch without its last step is dropped (``meta["truncated"]``).
* ``test``: one per validation pass whose last line (``i = N``) is printed; iterations ``N``;
  seconds from the end of the train segment before it (checkpoint saving included).
* Warm-up: the steps up to the run's first train line, timed as that many mean step times;
  they are the run's warm-up segment (:func:`~ingest.parsers.history_common.split_warmup`).
* ``meta["clock_resolution_s"] = 1.0``; the clock has no time zone, so runs keep no start
  time.

Segments (scalars.json): one ``train`` segment per run: iterations the last ``step``,
seconds the sum over entries of (steps since the previous entry) x ``time``; a step that goes
back starts a new run (MMEngine appends a resumed run). Warm-up as above.

Facts: global batch = ``batch_size x W``; the deployment from the header's GPU line
(``min(W, GPUs listed)`` per node); no GPU line (``CUDA available: False``): ``--deployment``.
Errors: ParseError (with the line) for a train/val line whose numbers do not read (a cut line
included), a step past ``N``, a JSON line that is not an object, and no complete epoch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from fleet.deployment import Deployment
from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import ParseOverrides, with_overrides
from ingest.parsers.history_common import (
    Facts,
    build_run,
    curve_points,
    facts,
    history_context,
    json_number,
    json_objects,
    number,
    read_text,
    sibling,
    split_warmup,
    timed_marks,
    whole,
)

FORMAT = "mmengine"
LABEL = "MMEngine"
FRAMEWORK = "PyTorch (MMEngine)"
MIN_CLOCK_SECONDS = 10.0

_STAMP = re.compile(r"^(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d) - mmengine - \w+ - (.*)$")
_PROGRESS = re.compile(r"^(Epoch|Iter)\((train|val|test)\)\s*(?:\[(\d+)\])?\s*\[\s*(\d+)/(\d+)\]"
                       r"(.*)$")
_TIME = re.compile(r"(?<![\w/])time: (\S+)")
_GPU = re.compile(r"^GPU ([\d,]+): (.+)$")
_WORLD = re.compile(r"^GPU number: (\d+)$")
_BATCH = re.compile(r"batch_size\s*=\s*(\d+)")
_TS_NAME = re.compile(r"\d{8}_\d{6}")


def side_file(path: Path) -> bool:
    """``last_checkpoint``; ``vis_data/*.json`` of a run whose text log is there, or
    ``vis_data/<timestamp>.json`` beside ``scalars.json`` (module doc)."""
    if path.name == "last_checkpoint":
        return True
    if path.parent.name != "vis_data" or path.suffix != ".json":
        return False
    run_dir = path.parent.parent
    if _TS_NAME.fullmatch(run_dir.name) and (run_dir / f"{run_dir.name}.log").is_file():
        return True
    return _TS_NAME.fullmatch(path.stem) is not None and (path.parent / "scalars.json").is_file()


def sniff(head: list[str]) -> bool:
    """True for an MMEngine logger line (``... - mmengine - INFO - ...``; the progress lines
    of a text log follow its environment and config dump), or a scalars.json train entry."""
    for line in head:
        if _STAMP.match(line.strip()):
            return True
        text = line.strip()
        if text.startswith("{") and '"step"' in text and '"time"' in text and (
                '"lr"' in text or '"base_lr"' in text) and '"data_time"' in text:
            return True
    return False


def context(path: Path, source: str, overrides: ParseOverrides):
    """``config.py`` beside a ``scalars.json`` (its ``train_dataloader`` batch size)."""
    ctx = with_overrides(ParseContext(), source, overrides)
    config_path = sibling(path, "config.py") if path.suffix == ".json" else None
    text = read_text(config_path) if config_path else None
    batch = _config_batch(text.splitlines()) if text else None
    return history_context(ctx, {"per_process_batch": batch} if batch else {},
                           [str(config_path)] if batch else [])


def _config_batch(lines: list[str]) -> int | None:
    """``batch_size`` of the ``train_dataloader = dict(...)`` block of a dumped config."""
    inside = False
    for line in lines:
        if line.startswith("train_dataloader"):
            inside = True
        elif inside and line and not line[0].isspace() and not line.startswith(")"):
            return None
        if inside:
            m = _BATCH.search(line)
            if m and len(m.group(1)) <= 9:
                return int(m.group(1))
    return None


@dataclass
class _Line:
    kind: str  # train | val
    epoch: int | None
    step: int
    steps: int
    time: float  # clock (unix s, read as UTC)
    mean: float | None  # mean step time of the window
    line: int


@dataclass
class _Header:
    gpus: tuple[str, int] | None = None
    world: int = 1
    config: list[str] = field(default_factory=list)


def _progress(m: re.Match[str], clock: float, number_: int) -> _Line:
    epoch = whole(m.group(3), "epoch", number_) if m.group(3) else None
    step, steps = whole(m.group(4), "step", number_), whole(m.group(5), "steps", number_)
    if steps < 1 or step > steps or step < 1:
        raise ParseError(f"step {step} of {steps} (steps are 1 .. N)", line=number_)
    t = _TIME.search(m.group(6))
    mean = number(t.group(1), "time", number_) if t else None
    if mean is None and m.group(2) == "train":
        raise ParseError(f"train line without its time field (cut?): {m.group(0)[:80]!r}",
                         line=number_)
    return _Line("train" if m.group(2) == "train" else "val", epoch, step, steps, clock, mean,
                 number_)


def _clock(m: re.Match[str], number_: int) -> float:
    try:
        y, mo, d, h, mi, s = (int(m.group(k)) for k in range(1, 7))
        return datetime(y, mo, d, h, mi, s, tzinfo=UTC).timestamp()
    except ValueError:
        raise ParseError(f"bad clock {m.group(0)[:19]!r}", line=number_) from None


def _train_segment(group: list[_Line], start: float, start_step: int, timing: set[str]
                   ) -> Segment | None:
    last = group[-1]
    iterations = last.step - start_step
    if iterations < 1:
        return None
    clock_s = last.time - start
    marks, est, prev = [], 0.0, start_step
    for ln in group:
        est += (ln.step - prev) * (ln.mean or 0.0)
        prev = ln.step
        marks.append((float(ln.step - start_step), est, ln.time - start))
    use_clock = clock_s >= MIN_CLOCK_SECONDS
    timing.add("clock" if use_clock else "mean step times")
    seconds = clock_s if use_clock else est
    if seconds <= 0:
        return None
    epoch = float(last.epoch) if last.epoch is not None else None
    points = curve_points([(it, c if use_clock else e) for it, e, c in marks], iterations,
                          seconds)
    return Segment("train", float(iterations), seconds, epoch_start=epoch, epoch_end=epoch,
                   line=last.line, points=points)


def _val_segment(group: list[_Line], start: float, timing: set[str]) -> Segment | None:
    last = group[-1]
    clock_s = last.time - start
    est = sum(((ln.step - (group[i - 1].step if i else 0)) * (ln.mean or 0.0))
              for i, ln in enumerate(group))
    seconds = clock_s if clock_s >= MIN_CLOCK_SECONDS or est <= 0 else est
    if seconds <= 0:
        return None
    timing.add("clock" if seconds == clock_s else "mean step times")
    epoch = float(last.epoch) if last.epoch is not None else None
    return Segment("test", float(last.steps), seconds, epoch_start=epoch, epoch_end=epoch,
                   line=last.line)


def _text_segments(lines_: list[_Line], meta: dict[str, object]) -> list[Segment]:
    """Group the progress lines into train and validation segments (module doc)."""
    groups: list[list[_Line]] = []
    for ln in lines_:
        new = not groups or groups[-1][-1].kind != ln.kind or (
            ln.kind == "train" and ln.epoch is not None and ln.epoch != groups[-1][-1].epoch) or (
            ln.step < groups[-1][-1].step)
        if new:
            groups.append([ln])
        else:
            groups[-1].append(ln)
    segments: list[Segment] = []
    timing: set[str] = set()
    boundary: float | None = None
    done = 0  # by iteration: the global step where the previous train stretch ended
    for group in groups:
        first, last = group[0], group[-1]
        if first.kind == "train":
            epoch_based = last.epoch is not None
            if epoch_based and last.step != last.steps:
                meta["truncated"] = True
                boundary = last.time
                continue
            start_step = 0 if epoch_based else done
            if boundary is None:  # the run's first line: warm-up before it, timed by its mean
                start = first.time - (first.step - start_step) * (first.mean or 0.0)
            else:
                start = boundary
            seg = _train_segment(group, start, start_step, timing)
            if seg is not None:
                segments.append(seg)
            boundary, done = last.time, last.step
        else:
            if last.step == last.steps and boundary is not None:
                seg = _val_segment(group, boundary, timing)
                if seg is not None:
                    segments.append(seg)
            else:
                meta["truncated"] = True
            boundary = last.time
    meta["timing"] = " and ".join(sorted(timing)) or "none"
    return segments


def _parse_text(lines: list[str], ctx: ParseContext) -> list[ParsedRun]:
    header, progress = _Header(), []
    in_config, first = False, None
    for number_, raw in enumerate(lines, start=1):
        m = _STAMP.match(raw.rstrip("\r\n"))
        if m is None:
            text = raw.strip()
            g = _GPU.match(text)
            if g and header.gpus is None:
                header.gpus = (g.group(2).strip(), len(g.group(1).split(",")))
            w = _WORLD.match(text)
            if w:
                header.world = max(1, whole(w.group(1), "GPU number", number_))
            if in_config:
                header.config.append(raw.rstrip("\r\n"))
            continue
        in_config = m.group(7).startswith("Config:")
        p = _PROGRESS.match(m.group(7).strip())
        if p is not None:
            progress.append(_progress(p, _clock(m, number_), number_))
            first = first or number_
    meta: dict[str, object] = {"clock_resolution_s": 1.0}
    segments = _text_segments(progress, meta)
    if not any(s.phase == "train" for s in segments):
        raise ParseError("no complete train epoch (or stretch) in the log")
    segments, warmup = split_warmup(segments, "the steps up to the first train line "
                                            "(that many mean step times)")
    meta.update(warmup)
    per_process = _config_batch(header.config)
    deployment = None
    if header.gpus is not None:
        name, listed = header.gpus
        per_node = max(1, min(header.world, listed))
        deployment = Deployment(name, per_node, max(1, math.ceil(header.world / per_node)))
    meta["processes"] = header.world
    if per_process:
        meta["batch_per_process"] = per_process
    found = facts(Facts(batch_size=per_process * header.world if per_process else None,
                        deployment=deployment), ctx, meta)
    return [build_run(FORMAT, FRAMEWORK, found, segments, meta, first, progress[-1].line)]


def _parse_scalars(lines: list[str], ctx: ParseContext) -> list[ParsedRun]:
    runs: list[list[tuple[int, float, float | None, int]]] = []
    evals = 0
    for number_, obj in json_objects(lines, "scalars.json"):
        if "lr" not in obj and "base_lr" not in obj:
            evals += 1
            continue
        step = json_number(obj, "step", number_)
        mean = json_number(obj, "time", number_)
        epoch = json_number(obj, "epoch", number_, required=False)
        assert step is not None and mean is not None
        if not step.is_integer() or step < 1 or mean < 0:
            raise ParseError(f"step {step:g} with time {mean:g}: want a step >= 1 and a time "
                             ">= 0", line=number_)
        if not runs or step <= runs[-1][-1][0]:
            runs.append([])
        runs[-1].append((int(step), mean, epoch, number_))
    parsed = []
    for run in runs:
        marks, total = timed_marks((step, mean) for step, mean, _, _ in run)
        if total <= 0 or len(run) < 2:
            continue
        epochs = [e for _, _, e, _ in run if e is not None]
        seg = Segment("train", float(run[-1][0]), total, line=run[-1][3],
                      epoch_start=min(epochs) if epochs else None,
                      epoch_end=max(epochs) if epochs else None,
                      points=curve_points(marks, run[-1][0], total))
        meta: dict[str, object] = {"timing": "mean step times x steps (scalars.json has no "
                                             "clock)", "evaluations": evals}
        segments, warmup = split_warmup([seg], "the steps up to the first entry "
                                                "(that many mean step times)")
        meta.update(warmup)
        config = getattr(ctx, "config", {}) or {}
        batch = config.get("per_process_batch")
        found = facts(Facts(batch_size=batch if isinstance(batch, int) else None), ctx, meta)
        if batch:
            meta["batch_per_process"] = batch
            meta["processes"] = "unknown (scalars.json does not say): batch is per process"
        parsed.append(build_run(FORMAT, FRAMEWORK, found, segments, meta, run[0][3],
                                run[-1][3]))
    if not parsed:
        raise ParseError("no run with two or more timed train entries in scalars.json")
    return parsed


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse an MMEngine text log or a ``scalars.json`` (see module doc)."""
    lines = lines if isinstance(lines, list) else list(lines)
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    return _parse_scalars(lines, ctx) if first.startswith("{") else _parse_text(lines, ctx)
