"""torchvision reference scripts (``references/classification|detection|segmentation``) and
the many projects that copied their ``MetricLogger`` (DeiT, MAE, DETR, ...): stdout.

What is read
------------
* ``Namespace(...)`` (``print(args)`` after distributed init): ``model``, ``batch_size``
  (per process), ``world_size``, ``epochs``, ``amp``, read value by value with
  :func:`ast.literal_eval` (nothing is executed). A new ``Namespace`` after progress lines,
  or an epoch number that goes back, starts a new run.
* Progress lines ``Epoch: [e]  [ i/N]  eta: H:MM:SS  lr: ...  time: t  data: d  max mem: m``
  (printed after step ``i``, 0-based, every ``print_freq`` steps and at the last one) and
  ``Test:  [ i/N]  eta: ...``; ``time`` is the mean over the last 20 steps, so at ``i = 0``
  it is the first step's own time.
* Totals ``Epoch: [e] Total time: H:MM:SS`` (classification, whole seconds) or ``... Total
  time: 0:00:05 (0.9880 s / it)`` (detection: the mean step, to 0.1 ms), and ``Test:  Total
  time: ...``.

Segments
--------
* One ``train`` segment per epoch with a total line: iterations ``N``, seconds ``N x s/it``
  where printed, else the whole seconds + 0.5 (``meta["clock_resolution_s"] = 1.0``).
  Epochs are stored 1-based (``e + 1``). Points: after step ``i``, the elapsed time
  ``eta x (i + 1) / (N - i)`` (the ETA is the mean step so far times the steps left, in
  whole seconds), and after step 0 the first step's own ``time``.
* One ``test`` segment per test pass with a total line (iterations ``N``), in the epoch it
  follows.
* Warm-up: the run's first step (and slow ones after it) is a segment of its own
  (:func:`~ingest.parsers.history_common.split_warmup`).
* An epoch or test pass without its total line (run killed) is dropped,
  ``meta["truncated"] = True``.
* Facts: network = ``model``; global batch = ``batch_size x world_size``; the log names no
  GPU (``--deployment``); ``variant["precision"]`` = ``fp16`` with ``amp=True``, else
  ``fp32``.

Errors: ParseError (with the line) for a progress or total line whose numbers do not read
(a cut last line included), a step beyond its ``N``, and a file with no complete epoch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers.history_common import (
    Facts,
    build_run,
    clock_seconds,
    curve_points,
    facts,
    number,
    positive_int,
    split_warmup,
    whole,
)

FORMAT = "torchvision"
LABEL = "torchvision reference scripts"
FRAMEWORK = "PyTorch (torchvision references)"
MAX_NAMESPACE_CHARS = 100_000

_PROGRESS = re.compile(r"^(?:Epoch: \[(\d+)\]|(Test:(?: EMA)?))\s+\[\s*(\d+)/(\d+)\]\s+eta: ")
_ETA = re.compile(r"eta: ((?:\d+ days?, )?\d+:\d\d:\d\d)(?:\.\d+)?\s")
_TIME = re.compile(r"(?<![\w/])time: (\S+)")
_TOTAL = re.compile(r"^(?:Epoch: \[(\d+)\]|(Test:(?: EMA)?))\s+Total time: "
                    r"((?:\d+ days?, )?\d+:\d\d:\d\d)(?:\s+\((\S+) s / it\))?\s*$")
_TOTAL_LIKE = re.compile(r"^(?:Epoch: \[|Test:).*Total time")


def sniff(head: list[str]) -> bool:
    """True if the head holds a MetricLogger progress line."""
    return any(_PROGRESS.match(line.strip()) and "time: " in line for line in head)


def namespace(text: str, line: int) -> dict[str, object]:
    """The keyword values of a printed ``Namespace(k=v, ...)`` that are Python literals."""
    if len(text) > MAX_NAMESPACE_CHARS:
        raise ParseError(f"Namespace line of {len(text)} characters", line=line)
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    out: dict[str, object] = {}
    if isinstance(call, ast.Call):
        for keyword in call.keywords:
            if keyword.arg is None:
                continue
            try:
                out[keyword.arg] = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                continue
    return out


@dataclass
class _Pass:
    """One epoch's training, or one test pass: its progress marks and total."""

    phase: str
    epoch: int
    steps: int
    marks: list[tuple[float, float]] = field(default_factory=list)
    first_step: float | None = None
    total: float | None = None
    line: int = 0


@dataclass
class _Run:
    args: dict[str, object] = field(default_factory=dict)
    first_line: int = 1
    last_line: int = 1
    passes: list[_Pass] = field(default_factory=list)
    last_epoch: int = -1

    def open(self, phase: str, epoch: int) -> _Pass | None:
        for p in reversed(self.passes):
            if p.phase == phase and p.epoch == epoch and p.total is None:
                return p
        return None


def _progress(m: re.Match[str], text: str, run: _Run, number_: int) -> None:
    phase = "train" if m.group(1) is not None else "test"
    epoch = whole(m.group(1), "epoch", number_) if m.group(1) else max(run.last_epoch, 0)
    step = whole(m.group(3), "step", number_)
    steps = whole(m.group(4), "step count", number_)
    if steps < 1 or step >= steps:
        raise ParseError(f"step {step} of {steps} (steps are 0 .. N-1)", line=number_)
    eta_m, time_m = _ETA.search(text + " "), _TIME.search(text)
    if eta_m is None or time_m is None:
        raise ParseError(f"progress line without eta or time (cut?): {text[:80]!r}",
                         line=number_)
    eta = clock_seconds(eta_m.group(1), "eta", number_)
    step_time = number(time_m.group(1), "time", number_)
    current = run.open(phase, epoch)
    if current is None or current.steps != steps or (current.marks and step + 1 <= max(
            it for it, _ in current.marks)):
        current = _Pass(phase, epoch, steps, line=number_)
        run.passes.append(current)
    if step == 0:
        current.first_step = step_time
        current.marks.append((1.0, step_time))
    else:
        current.marks.append((step + 1.0, (eta + 0.5) * (step + 1) / (steps - step)))
    current.line = number_


def _total(m: re.Match[str], run: _Run, number_: int) -> None:
    phase = "train" if m.group(1) is not None else "test"
    epoch = whole(m.group(1), "epoch", number_) if m.group(1) else max(run.last_epoch, 0)
    current = run.open(phase, epoch)
    if current is None:
        return  # a total without progress lines (print_freq larger than the pass)
    per_step = number(m.group(4), "seconds per step", number_) if m.group(4) else None
    whole_s = clock_seconds(m.group(3), "total time", number_)
    current.total = per_step * current.steps if per_step is not None else whole_s + 0.5
    current.line = number_


def _segments(run: _Run, meta: dict[str, object]) -> list[Segment]:
    out = []
    for p in run.passes:
        if p.total is None or p.total <= 0:
            meta["truncated"] = True
            continue
        epoch = float(p.epoch + 1)
        out.append(Segment(phase=p.phase, iterations=float(p.steps),  # type: ignore[arg-type]
                           seconds=p.total,
                           epoch_start=epoch, epoch_end=epoch, line=p.line,
                           points=curve_points(p.marks, p.steps, p.total)))
    return out


def _to_parsed(run: _Run, ctx: ParseContext) -> ParsedRun | None:
    meta: dict[str, object] = {"clock_resolution_s": 1.0,
                               "timing": "MetricLogger totals and ETAs"}
    segments = _segments(run, meta)
    if not any(s.phase == "train" for s in segments):
        return None
    segments, warmup = split_warmup(
        segments, "the first step (its own time, printed at step 0)")
    meta.update(warmup)
    args = run.args
    per_process = positive_int(args.get("batch_size"))
    world = positive_int(args.get("world_size")) or 1
    model = args.get("model")
    found = facts(Facts(network=model if isinstance(model, str) and model else None,
                        batch_size=per_process * world if per_process else None), ctx, meta)
    if per_process:
        meta["batch_per_process"] = per_process
    meta["world_size"] = world
    if isinstance(args.get("epochs"), int):
        meta["epochs_planned"] = args["epochs"]
    if isinstance(args.get("amp"), bool):
        meta["variant"] = {"precision": "fp16" if args["amp"] else "fp32"}
    return build_run(FORMAT, FRAMEWORK, found, segments, meta, run.first_line, run.last_line)


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse torchvision-reference stdout (see module doc)."""
    runs: list[_Run] = []
    run: _Run | None = None
    for number_, raw in enumerate(lines, start=1):
        text = raw.strip()
        if text.startswith("Namespace("):
            if run is None or run.passes:
                run = _Run(first_line=number_)
                runs.append(run)
            run.args = namespace(text, number_)
            run.last_line = number_
            continue
        m = _PROGRESS.match(text)
        if m is not None:
            epoch = m.group(1)
            if run is None or (epoch is not None and whole(epoch, "epoch", number_)
                               < run.last_epoch):
                run = _Run(first_line=number_)
                runs.append(run)
            if epoch is not None:
                run.last_epoch = whole(epoch, "epoch", number_)
            _progress(m, text, run, number_)
            run.last_line = number_
            continue
        m = _TOTAL.match(text)
        if m is not None and run is not None:
            _total(m, run, number_)
            run.last_line = number_
        elif _TOTAL_LIKE.match(text) and run is not None and run.passes:
            raise ParseError(f"total line that does not read (cut?): {text[:80]!r}",
                             line=number_)
    parsed = [p for p in (_to_parsed(r, ctx) for r in runs) if p is not None]
    if not parsed:
        raise ParseError("no epoch with its 'Total time' line: no complete training epoch")
    return parsed
