"""timm's ``train.py`` (pytorch-image-models) stdout, with ``args.yaml`` and ``summary.csv``
of its output folder.

What is read
------------
* Train lines ``Train: e [ i/N ( p%)]  Loss: ... Time: v s, r/s  (a s, q/s)  LR: ...  Data:
  ...``: step ``i`` (0-based) of ``N``, the last step's time ``v`` and rate ``r`` (samples per
  second over all processes), the epoch's mean step ``a`` and mean rate ``q``. Printed every
  ``log_interval`` steps and at the last.
* Test lines ``Test: [ i/L]  Time: v (a) ...`` (``L`` = the last index, so ``L + 1``
  batches); ``Test (EMA): ...`` likewise.
* ``Model <name> created``, ``Training with a single process on 1 device`` and ``Training in
  distributed mode ... total W ...`` (the process count).
* ``args.yaml`` beside the log (context): ``model``, ``batch_size`` (per process),
  ``validation_batch_size``, ``epochs``, ``amp``, ``amp_dtype``; ``summary.csv``: its rows
  (epochs finished, ``meta["summary_epochs"]``).

Segments
--------
* One ``train`` segment per epoch whose last step (``i = N - 1``) is printed: iterations
  ``N``; seconds after step ``i`` = ``(i + 1) x a``, or ``(i + 1) x b / q`` with ``b = v x r``
  (the samples of that step, which timm also divides by ``a`` for ``q``) where that reads
  to more digits; a point per line, the first step's own ``v``
  after step 0. Epochs are stored 1-based.
* One ``test`` segment per complete test pass: ``L + 1`` batches x its mean time.
* Warm-up: the run's first step (and slow marks after it) is a segment of its own
  (:func:`~ingest.parsers.history_common.split_warmup`).
* Facts: global batch ``B`` = the median over the full (not last) steps of ``v x r`` rounded
  (samples per step over all processes) where that is within 2 % of a whole number, else
  ``batch_size x`` processes;
  network from the ``Model`` line, else ``args.yaml``; no GPU name (``--deployment``);
  ``variant["precision"]``: ``amp`` with ``amp_dtype`` (``float16`` -> fp16, ``bfloat16`` ->
  bf16), else fp32.
* A new ``Train: 0`` after later epochs, or an epoch that goes back, starts a new run; an
  epoch without its last step is dropped (``meta["truncated"]``).

Errors: ParseError (with the line) for a train or test line that does not read (a cut last
line included), a step beyond ``N``, and a file with no complete epoch.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import ParseOverrides, with_overrides
from ingest.parsers.history_common import (
    Facts,
    HistoryContext,
    build_run,
    curve_points,
    facts,
    history_context,
    name_value,
    number,
    positive_int,
    read_text,
    read_yaml,
    sibling,
    split_warmup,
    whole,
)

FORMAT = "timm"
LABEL = "timm train.py"
FRAMEWORK = "PyTorch (timm)"

_TRAIN = re.compile(r"^Train: (\d+) \[\s*(\d+)/(\d+) \(\s*\d+%\)\]\s+Loss:")
_TRAIN_TIME = re.compile(r"Time:\s*(\S+?)s,\s*(\S+?)/s\s+\(\s*(\S+?)s,\s*(\S+?)/s\s*\)")
_TEST = re.compile(r"^Test(?: \(EMA\))?: \[\s*(\d+)/(\d+)\]\s+Time: (\S+) \(\s*(\S+?)\)")
_TEST_LIKE = re.compile(r"^Test(?: \(EMA\))?: \[")
_MODEL = re.compile(r"^Model (\S+) created")
_PROCESSES = re.compile(r"Training in distributed mode.*?total (\d+)")
_SINGLE = "Training with a single process"
_AMP = {"float16": "fp16", "bfloat16": "bf16"}


def sniff(head: list[str]) -> bool:
    """True if the head holds a timm train line with its timing."""
    return any(_TRAIN.match(line.strip()) and "Time:" in line for line in head)


def context(path: Path, source: str, overrides: ParseOverrides) -> HistoryContext:
    """``args.yaml`` and ``summary.csv`` beside the log (module doc)."""
    ctx = with_overrides(ParseContext(), source, overrides)
    config: dict[str, object] = {}
    files = []
    args_path = sibling(path, "args.yaml")
    args = read_yaml(args_path) if args_path else None
    if args:
        files.append(str(args_path))
        for key in ("model", "batch_size", "validation_batch_size", "epochs", "amp",
                    "amp_dtype"):
            if key in args:
                config[f"args_{key}"] = args[key]
        if name_value(args.get("model")):
            config["network"] = name_value(args.get("model"))
    summary = sibling(path, "summary.csv")
    text = read_text(summary) if summary else None
    if text is not None:
        files.append(str(summary))
        config["summary_epochs"] = max(0, len([x for x in text.splitlines() if x.strip()]) - 1)
    return history_context(ctx, config, files)


@dataclass
class _Epoch:
    epoch: int
    steps: int
    marks: list[tuple[int, float, float, float, float]] = field(default_factory=list)
    line: int = 0

    @property
    def complete(self) -> bool:
        return bool(self.marks) and self.marks[-1][0] == self.steps - 1


@dataclass
class _Run:
    first_line: int
    last_line: int = 0
    epochs: list[_Epoch] = field(default_factory=list)
    tests: list[tuple[int, int, float, int]] = field(default_factory=list)  # epoch, n, s, line
    model: str | None = None
    processes: int | None = None
    test_open: list[tuple[int, float]] = field(default_factory=list)


def _line_batch(val: float, rate: float) -> int | None:
    """Samples in the printed step (all processes): ``v x r`` where that is within 2 % of a
    whole number, else None."""
    product = val * rate
    if not math.isfinite(product):
        return None
    batch = round(product)
    return batch if batch >= 1 and abs(product - batch) <= 0.02 * batch else None


def _global_batch(run: _Run) -> int | None:
    """The global batch: the median of the full steps' samples (the last step of an epoch
    may be a partial batch)."""
    found = [_line_batch(v, r) for e in run.epochs for step, v, r, _, _ in e.marks
             if step < e.steps - 1 and v > 0 and r > 0]
    sizes = [b for b in found if b]
    return round(statistics.median(sizes)) if sizes else None


def _seconds_after(step: int, val: float, rate: float, mean: float, rate_mean: float) -> float:
    """Elapsed seconds after ``step`` (0-based): ``(step + 1)`` mean steps, the mean read from
    the mean rate (``samples / q``) where that has more digits than ``a`` (3 decimals)."""
    batch = _line_batch(val, rate) if val > 0 and rate > 0 else None
    if batch and rate_mean > 0 and (0.005 / rate_mean) < (0.0005 / max(mean, 1e-9)):
        return (step + 1) * batch / rate_mean
    return (step + 1) * mean


def _train_line(m: re.Match[str], text: str, run: _Run, number_: int) -> None:
    epoch, step, steps = (whole(m.group(k), w, number_) for k, w in
                          ((1, "epoch"), (2, "step"), (3, "step count")))
    if steps < 1 or step >= steps:
        raise ParseError(f"step {step} of {steps} (steps are 0 .. N-1)", line=number_)
    t = _TRAIN_TIME.search(text)
    if t is None:
        raise ParseError(f"train line without its Time field (cut?): {text[:80]!r}",
                         line=number_)
    val, rate, mean, rate_mean = (number(t.group(k), "time or rate", number_) for k in
                                  range(1, 5))
    current = run.epochs[-1] if run.epochs else None
    if current is None or current.epoch != epoch or current.steps != steps or (
            current.marks and step <= current.marks[-1][0]):
        current = _Epoch(epoch, steps)
        run.epochs.append(current)
    current.marks.append((step, val, rate, mean, rate_mean))
    current.line = number_


def _test_line(m: re.Match[str], run: _Run, number_: int) -> None:
    index, last = whole(m.group(1), "test step", number_), whole(m.group(2), "test steps",
                                                                   number_)
    mean = number(m.group(4), "test time", number_)
    number(m.group(3), "test time", number_)
    if index > last:
        raise ParseError(f"test step {index} beyond the last index {last}", line=number_)
    if index == last and mean > 0:
        epoch = run.epochs[-1].epoch if run.epochs else 0
        run.tests.append((epoch, last + 1, (last + 1) * mean, number_))


def _segments(run: _Run, meta: dict[str, object]) -> list[Segment]:
    out: list[tuple[int, Segment]] = []
    for ep in run.epochs:
        if not ep.complete:
            meta["truncated"] = True
            continue
        marks = [(1.0, val) if step == 0 else
                 (step + 1.0, _seconds_after(step, val, rate, mean, rate_mean))
                 for step, val, rate, mean, rate_mean in ep.marks]
        seconds = marks[-1][1]
        if seconds <= 0:
            continue
        epoch = float(ep.epoch + 1)
        out.append((ep.line, Segment("train", float(ep.steps), seconds, epoch_start=epoch,
                                     epoch_end=epoch, line=ep.line,
                                     points=curve_points(marks, ep.steps, seconds))))
    for epoch, steps, seconds, line in run.tests:
        out.append((line, Segment("test", float(steps), seconds, epoch_start=epoch + 1.0,
                                  epoch_end=epoch + 1.0, line=line)))
    return [s for _, s in sorted(out, key=lambda x: x[0])]


def _to_parsed(run: _Run, ctx: ParseContext) -> ParsedRun | None:
    config = ctx.config if isinstance(ctx, HistoryContext) else {}
    meta: dict[str, object] = {"timing": "timm mean step time and rate per epoch"}
    batch = _global_batch(run)
    per_process = positive_int(config.get("args_batch_size"))
    if batch is None and per_process and run.processes:
        batch = per_process * run.processes
    segments = _segments(run, meta)
    if not any(s.phase == "train" for s in segments):
        return None
    segments, warmup = split_warmup(segments, "the first step (its own time)")
    meta.update(warmup)
    if per_process:
        meta["batch_per_process"] = per_process
        if batch and batch % per_process == 0:
            meta["processes"] = batch // per_process
            val_batch = positive_int(config.get("args_validation_batch_size")) or per_process
            segments = [s if s.phase == "train" else Segment(
                s.phase, s.iterations, s.seconds, batch_size=val_batch * (batch // per_process),
                epoch_start=s.epoch_start, epoch_end=s.epoch_end, line=s.line,
                points=s.points) for s in segments]
    found = facts(Facts(network=run.model, batch_size=batch), ctx, meta)
    amp = config.get("args_amp")
    if isinstance(amp, bool):
        dtype = str(config.get("args_amp_dtype") or "float16")
        meta["variant"] = {"precision": _AMP.get(dtype, "fp16") if amp else "fp32"}
    if isinstance(config.get("args_epochs"), int):
        meta["epochs_planned"] = config["args_epochs"]
    if isinstance(config.get("summary_epochs"), int):
        meta["summary_epochs"] = config["summary_epochs"]
    return build_run(FORMAT, FRAMEWORK, found, segments, meta, run.first_line, run.last_line)


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse timm ``train.py`` stdout (see module doc)."""
    runs: list[_Run] = []
    run: _Run | None = None
    model: str | None = None
    processes: int | None = None
    for number_, raw in enumerate(lines, start=1):
        text = raw.strip()
        m = _TRAIN.match(text)
        if m is not None:
            epoch = whole(m.group(1), "epoch", number_)
            if run is None or (run.epochs and epoch < run.epochs[-1].epoch):
                run = _Run(first_line=number_, model=model, processes=processes)
                runs.append(run)
            _train_line(m, text, run, number_)
            run.last_line = number_
            continue
        m = _TEST.match(text)
        if m is not None and run is not None:
            _test_line(m, run, number_)
            run.last_line = number_
            continue
        if _TEST_LIKE.match(text) and run is not None:
            raise ParseError(f"test line that does not read (cut?): {text[:80]!r}",
                             line=number_)
        found = _MODEL.match(text)
        if found:
            model = found.group(1)
            if run is not None and not run.epochs:
                run.model = model
        found = _PROCESSES.search(text)
        if found or text.startswith(_SINGLE):
            processes = whole(found.group(1), "process count", number_) if found else 1
            if run is not None and run.processes is None:
                run.processes = processes
    parsed = [p for p in (_to_parsed(r, ctx) for r in runs) if p is not None]
    if not parsed:
        raise ParseError("no epoch whose last step is printed: no complete training epoch")
    return parsed
