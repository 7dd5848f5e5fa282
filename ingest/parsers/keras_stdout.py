"""Keras ``model.fit`` console output (verbose=1 or 2) -> one ``train`` segment per epoch.

What is read
------------
Each line is split at carriage returns (verbose=1 redraws its progress bar with ``\\r``
and backspaces); ANSI colours and backspaces are removed. Then:

* ``Epoch i/N`` starts epoch *i* (1-based, as printed; ``Segment.epoch_start/end``).
* A progress record ``k/K`` (or ``k/Unknown``) with, in any Keras 2/3 layout, the elapsed
  time ``12s``, the time per step ``45ms/step`` (s, ms or us) and metrics ``- loss: 0.1``.
  Keras 2's ``175ms/epoch`` is used when present.
* Callback messages (``Epoch 3: val_loss improved ...``), TensorFlow/absl lines and
  anything else are noise.

Segments
--------
* The first progress bar after ``Epoch i/N`` is the epoch: iterations = K steps.
  Seconds: Keras prints per step ``(now - time after step 1) / (k - 1)``, and, in
  verbose=1, the first step's own time on the ``1/K`` record; so seconds = first step +
  (K - 1) x time per step (K x time per step when the first step is not shown),
  clamped to the printed elapsed whole seconds +- 0.5. verbose=1 records give points
  (k, seconds at k) computed the same way.
* With validation data the epoch's last record is written after the validation pass, so
  its times include validation (``meta["validation_in_train_time"]``): stdout cannot time
  the validation pass separately (use the jobcast JSON-lines logger for that).
* A bar after the epoch's own bar is ``model.evaluate`` (metrics with ``loss``): a
  ``test`` segment with iterations = its K; a bar without metrics (``predict``) is
  ignored (``meta["predict_bars"]``).
* Epoch numbers that do not increase start a new run (another ``fit`` call).
* The log has no network, batch size, deployment or clock: ``ctx.batch_size`` is used,
  ``meta["needs"]`` lists what the caller must supply; ``start_time`` is None.

Errors and truncation
---------------------
ParseError (with the line) for: a malformed ``Epoch`` header (``Epoch 2/`` cut, ``Epoch
x/2``); a progress record with no time (a cut last line included); a step or epoch
number longer than :data:`MAX_DIGITS` digits; a time that is not finite; a non-numeric
loss; per-sample progress (``us/sample``, Keras < 2.3: steps unknown); no
``Epoch`` header with a bar (no training progress). An epoch whose bar never reaches K/K
(run killed) is dropped and ``meta["truncated"] = True``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from ingest.events import ParseContext, ParsedRun, ParseError, Segment

FORMAT = "keras"
LABEL = "Keras"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)$")
_EPOCH_LIKE = re.compile(r"^Epoch(?:\s+\S*/\S*|\s+\d*)$")  # a header, but garbled or cut
_BAR = re.compile(r"^(\d+)/(\d+|Unknown)(?=\s*(?:━|\[|-\s*\d+s\b|$))(.*)$")
_PER_STEP = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)(s|ms|us|µs)/step\b")
_PER_SAMPLE = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?:s|ms|us|µs)/sample\b")
_PER_EPOCH = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)(s|ms|us|µs)/epoch\b")
_ELAPSED = re.compile(r"(?<![\w.:/])(\d+)s(?![\w/])")
_METRIC = re.compile(r"\s-\s([A-Za-z_][\w.]*):\s+(\S+)")
# Number patterns start where a number starts ((?<![\d.])): a search over a long run of
# digits is then linear, not quadratic.
_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
MAX_DIGITS = 18  # a longer step or epoch number is an error, not a number


def _whole(text: str, what: str, line: int) -> int:
    """A printed whole number of at most :data:`MAX_DIGITS` digits, else ParseError."""
    if len(text) > MAX_DIGITS:
        raise ParseError(f"{what} has {len(text)} digits (at most {MAX_DIGITS})", line=line)
    return int(text)


def _time(text: str, unit: str, what: str, line: int) -> float:
    """A printed duration in seconds; ParseError if it is not finite (``1e999``-like)."""
    value = float(text) * _UNIT[unit]
    if not math.isfinite(value):
        raise ParseError(f"{what} {text[:20]}{unit} is not a finite number", line=line)
    return value


def _fragments(line: str) -> list[tuple[str, bool]]:
    """Clean records of one line and whether each was followed by a redraw."""
    out = []
    for piece in line.rstrip("\n").split("\r"):
        redrawn = piece.rstrip(" ").endswith("\b")
        text = _ANSI.sub("", piece).replace("\b", "").strip()
        if text:
            out.append((text, redrawn))
    return out


def sniff(head: list[str]) -> bool:
    """True if the head has an ``Epoch i/N`` header and a progress record."""
    epoch = bar = False
    for line in head:
        for text, _ in _fragments(line):
            epoch = epoch or bool(_EPOCH.match(text))
            bar = bar or bool(_BAR.match(text))
    return epoch and bar


@dataclass
class _Record:
    line: int
    current: int
    target: int | None
    per_step: float | None
    per_epoch: float | None
    elapsed: float | None  # whole seconds as printed (final records only)
    final: bool  # not followed by a redraw, no ETA
    metrics: dict[str, float]
    style: int  # 1: bar redrawn in place, 2: one line per epoch


def _record(text: str, redrawn: bool, number: int) -> _Record | None:
    m = _BAR.match(text)
    if m is None:
        return None
    rest = m.group(3)
    if _PER_SAMPLE.search(rest):
        raise ParseError("per-sample progress (old Keras): steps per epoch unknown",
                         line=number)
    step = _PER_STEP.search(rest)
    epoch = _PER_EPOCH.search(rest)
    metrics: dict[str, float] = {}
    first_metric = len(rest)
    for m_metric in _METRIC.finditer(rest):
        name, value = m_metric.group(1), m_metric.group(2)
        if name == "ETA":
            continue
        first_metric = min(first_metric, m_metric.start())
        try:
            metrics[name] = float(value)
        except ValueError as err:
            if name.endswith("loss"):  # other metrics may print objects; a loss is a number
                raise ParseError(f"non-numeric {name}: {value!r}", line=number) from err
            metrics[name] = float("nan")
    timing = rest[:first_metric]
    eta = "ETA" in timing
    elapsed_m = _ELAPSED.search(timing)
    if step is None and epoch is None and elapsed_m is None:
        raise ParseError(f"progress record without a time (cut?): {text[:80]!r}", line=number)
    style = 2 if re.match(r"^\s*-\s*\d+s\s*-", rest) else 1
    target = None if m.group(2) == "Unknown" else _whole(m.group(2), "step count", number)
    per_epoch = _time(epoch.group(1), epoch.group(2), "time per epoch", number) if epoch else None
    elapsed = _time(elapsed_m.group(1), "s", "elapsed time", number) \
        if elapsed_m and not eta else None
    if epoch is not None and epoch.group(2) == "s":  # whole seconds: a bound, like elapsed
        elapsed, per_epoch = per_epoch, None
    return _Record(
        line=number,
        current=_whole(m.group(1), "step", number),
        target=target,
        per_step=_time(step.group(1), step.group(2), "time per step", number) if step else None,
        per_epoch=per_epoch,
        elapsed=elapsed,
        final=not redrawn and not eta,
        metrics=metrics,
        style=style,
    )


@dataclass
class _Bar:
    records: list[_Record] = field(default_factory=list)

    @property
    def last(self) -> _Record:
        return self.records[-1]

    @property
    def complete(self) -> bool:
        return self.last.target is not None and self.last.current >= self.last.target

    def accepts(self, record: _Record) -> bool:
        last = self.last
        if self.complete and (last.final or last.style == 2):
            return False
        if record.current < last.current:
            return False
        return not (last.target is not None and record.target != last.target)

    def timing(self) -> tuple[float, tuple[tuple[float, float], ...], int]:
        """(seconds, points, steps) of a complete bar."""
        last = self.last
        steps = last.current
        first_step = next((r.per_step for r in self.records
                           if r.current == 1 and r.per_step is not None), None)

        def at(record: _Record) -> float | None:
            if record.per_step is None:
                return None
            if record.current == 1:
                return record.per_step
            if first_step is not None:
                return first_step + (record.current - 1) * record.per_step
            return record.current * record.per_step

        if last.per_epoch is not None:
            seconds = last.per_epoch
        else:
            estimate = at(last)
            if estimate is None:
                estimate = last.elapsed or 0.0
            if last.elapsed is not None and last.final:
                estimate = min(max(estimate, last.elapsed - 0.5), last.elapsed + 0.5)
            seconds = max(0.0, estimate)
        points: list[tuple[float, float]] = []
        for record in self.records:
            if record.current >= steps:
                continue
            t = at(record)
            if t is None:
                continue
            t = min(t, seconds)
            if points:
                t = max(t, points[-1][1])
                if record.current <= points[-1][0]:
                    continue
            points.append((float(record.current), t))
        points.append((float(steps), seconds))
        return seconds, tuple(points), steps


@dataclass
class _Run:
    first_line: int
    segments: list[Segment] = field(default_factory=list)
    last_line: int = 0
    last_epoch: int = 0
    epochs_total: int | None = None
    meta: dict[str, object] = field(default_factory=dict)


class _Builder:
    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.runs: list[_Run] = []
        self.run: _Run | None = None
        self.epoch: tuple[int, int, int] | None = None  # (epoch, total, header line)
        self.bars: list[_Bar] = []

    def header(self, epoch: int, total: int, number: int) -> None:
        self.close_epoch()
        if self.run is None or epoch <= self.run.last_epoch or total != self.run.epochs_total:
            self._finish_run()
            self.run = _Run(first_line=number, epochs_total=total)
        self.run.last_epoch = epoch
        self.run.last_line = number
        self.epoch = (epoch, total, number)

    def progress(self, record: _Record) -> None:
        if self.bars and self.bars[-1].accepts(record):
            self.bars[-1].records.append(record)
        else:
            self.bars.append(_Bar([record]))
        if self.run is not None:
            self.run.last_line = record.line

    def close_epoch(self) -> None:
        bars, self.bars = self.bars, []
        if self.run is None:
            return  # bars before any fit (evaluate/predict alone) are not a training run
        run = self.run
        for index, bar in enumerate(bars):
            if not bar.complete:
                run.meta["truncated"] = True
                continue
            seconds, points, steps = bar.timing()
            metrics = bar.last.metrics
            if index == 0 and self.epoch is not None:
                epoch = self.epoch[0]
                if any(name.startswith("val_") for name in metrics):
                    run.meta["validation_in_train_time"] = True
                run.segments.append(Segment(
                    phase="train", iterations=float(steps), seconds=seconds,
                    batch_size=self.ctx.batch_size, epoch_start=float(epoch),
                    epoch_end=float(epoch), line=bar.last.line, points=points,
                ))
            elif "loss" in metrics:
                run.segments.append(Segment(
                    phase="test", iterations=float(steps), seconds=seconds,
                    batch_size=self.ctx.batch_size, line=bar.last.line, points=points,
                ))
            else:
                run.meta["predict_bars"] = int(cast("int", run.meta.get("predict_bars", 0))) + 1
        if self.epoch is not None and (not bars or not bars[0].complete):
            run.meta["truncated"] = True
        self.epoch = None

    def _finish_run(self) -> None:
        if self.run is not None:
            self.runs.append(self.run)
        self.run = None

    def finish(self) -> list[_Run]:
        self.close_epoch()
        self._finish_run()
        return self.runs


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse Keras ``fit`` console output (see module doc)."""
    builder = _Builder(ctx)
    keras3 = keras2 = False
    verbose: set[int] = set()
    for number, raw in enumerate(lines, start=1):
        keras3 = keras3 or "━" in raw
        keras2 = keras2 or "[=" in raw or "/epoch" in raw
        for text, redrawn in _fragments(raw):
            m = _EPOCH.match(text)
            if m:
                epoch = _whole(m.group(1), "epoch number", number)
                total = _whole(m.group(2), "epoch count", number)
                builder.header(epoch, total, number)
                continue
            if _EPOCH_LIKE.match(text):
                raise ParseError(f"malformed epoch header: {text[:40]!r}", line=number)
            record = _record(text, redrawn, number)
            if record is not None:
                verbose.add(record.style)
                builder.progress(record)
    runs = builder.finish()
    if not any(s.phase == "train" for r in runs for s in r.segments):
        raise ParseError("no 'Epoch i/N' header followed by a complete progress bar: "
                         "no training progress")
    parsed = []
    for run in runs:
        if not run.segments:
            continue
        meta = dict(run.meta)
        needs = [name for name, given in (("network", ctx.network),
                                          ("batch_size", ctx.batch_size),
                                          ("deployment", ctx.deployment)) if given is None]
        if needs:
            meta["needs"] = needs
        meta["epochs_planned"] = run.epochs_total
        meta["keras_verbose"] = sorted(verbose)
        meta["timing"] = "progress bar (time per step and whole elapsed seconds)"
        framework = "Keras 3" if keras3 or (verbose == {2} and not keras2) else (
            "Keras 2" if keras2 else "Keras")
        parsed.append(ParsedRun(
            format=FORMAT, stack=framework, batch_size=ctx.batch_size,
            segments=run.segments, meta=meta, first_line=run.first_line,
            last_line=run.last_line,
        ))
    return parsed
