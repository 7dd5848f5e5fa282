"""Caffe training logs (glog) -> runs of ``train`` / ``test`` segments.

What is read
------------
* glog lines ``I0402 07:44:16.590070 <thread> file.cpp:123] message``. Every other line
  is either the echo of a prototxt (the lines after ``Initializing solver from
  parameters:`` / ``Initializing net from parameters:``) or harmless noise (shell echo,
  stack traces, ``*** Aborted at ...``) and is skipped.
* Solver echo: ``test_iter`` (one per test net), ``test_interval``, ``display``,
  ``max_iter``. Net echoes (one per net, phase-filtered by Caffe): ``name``, the
  ``phase`` of the net and the first ``batch_size``; when an echo has no ``batch_size``
  the ``output data size: N,...`` line of its data layer is used.
* Hardware: ``Using GPUs 0, 1`` (how many) and ``GPU 0: <name>`` (which). A deployment is
  set only when a GPU name is printed; otherwise ``meta["needs"]`` lists "deployment".

Clock
-----
Times come from the glog clock, read as UTC with a year found in the file (see :mod:`.glog`);
``meta["year_source"]`` says where the year came from.

Runs and segments
-----------------
* A run starts at ``Solving <net>``. A new header (``Using GPUs``, ``Use CPU``,
  ``Initializing solver from parameters``) or another ``Solving`` line after a run has
  started begins the next run (restarts: new process, ``Restoring``/``Resuming``).
* ``Iteration N, Testing net (#i)`` ... ``Test net output`` lines form one ``test``
  segment: iterations = ``test_iter[i]``, batch = TEST-net batch size, seconds from the
  ``Testing net`` line to its last ``Test net output`` line.
* The training between two tests (or between ``Solving`` and the first test, or the last
  test and ``Optimization Done.``) is one ``train`` segment. Its points are the display
  lines ``Iteration k, loss = ...`` and ``Iteration k (x iter/s, ys/n iters), loss = ...``
  at (k - N_start, t - t_start); it ends at the next ``Testing net`` line (iterations
  = N_test - N_start) or at ``Optimization Done.`` (iterations up to ``max_iter``). A
  stretch with zero iterations (set-up before a first test) is no segment. The first
  train segment after ``Solving`` includes warm-up (``meta["warmup"]``).
* Batch size is global: TRAIN-net ``batch_size`` x number of GPUs (Caffe's multi-GPU
  solver runs the prototxt batch on every GPU; ``meta["batch_per_device"]`` keeps the
  prototxt value). Test passes run on the root GPU only. ``ctx.batch_size`` is used when
  the log has no batch size.

Errors and truncation
---------------------
ParseError (with the line) for: a line that starts like a glog line but is malformed (a
cut last line included); an impossible date; the clock going backwards; an
``Iteration`` message of no known form or with a non-numeric field; a whole number
(iteration, batch size, GPU id, ``test_iter``, ``max_iter``) of more than
:data:`MAX_DIGITS` digits; iterations going backwards inside a run; a file with no
``Solving`` line or no training progress at all.
A run that ends without ``Optimization Done.`` (killed, or followed by a restart) keeps
its complete segments; its open train stretch is cut at its last display line (a test
pass without output is dropped) and ``meta["truncated"] = True``.
``Optimization stopped early.`` ends the run at its last display line
(``meta["stopped_early"]``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from fleet.deployment import Deployment
from ingest.events import ParseContext, ParsedRun, ParseError, Segment, short_repr
from ingest.parsers.caffe.glog import Glog, read_records, sniff, strip_line

__all__ = ["FORMAT", "LABEL", "parse", "sniff"]

FORMAT = "caffe"
LABEL = "Caffe"
MAX_DIGITS = 18  # a longer iteration, batch size or id is an error, not a number

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
_DISPLAY = re.compile(rf"^Iteration (\d+), loss = ({_NUM})$", re.I)
_DISPLAY_RATE = re.compile(
    rf"^Iteration (\d+) \(({_NUM}) iter/s, ({_NUM})s/(\d+) iters?\), loss = ({_NUM})$", re.I
)
_TESTING = re.compile(r"^Iteration (\d+), Testing net \(#(\d+)\)$")
_LR = re.compile(rf"^Iteration (\d+), lr = ({_NUM})$", re.I)
_TEST_OUTPUT = re.compile(r"^\s*Test net output #\d+:")
_SOLVING = re.compile(r"^Solving(?: (.*))?$")  # a net without a name logs "Solving "
_USING_GPUS = re.compile(r"^Using GPUs ([\d,\s]+)$")
_USE_GPU_ID = re.compile(r"^Use GPU with device ID (\d+)$")
_GPU_NAME = re.compile(r"^GPU (\d+): (.+?)\s*$")
_OUTPUT_SIZE = re.compile(r"^output data size: (\d+),")


@dataclass
class _Header:
    """What the lines before ``Solving`` say about the run."""

    first_line: int
    solver: dict[str, list[str]] = field(default_factory=dict)
    nets: list[dict[str, object]] = field(default_factory=list)  # in creation order
    gpu_ids: list[int] = field(default_factory=list)
    gpu_names: dict[int, str] = field(default_factory=dict)
    cpu: bool = False
    creating: str | None = None  # "TRAIN" or "TEST" while a net is being created

    def net(self, phase: str, index: int = 0) -> dict[str, object] | None:
        nets = [n for n in self.nets if n.get("phase") == phase]
        return nets[index] if index < len(nets) else None


def _parse_solver_echo(text: list[str], header: _Header) -> None:
    for line in text:
        m = re.match(r"^(\w+): (.*?)\s*$", line)  # top level only (no indent)
        if m:
            header.solver.setdefault(m.group(1), []).append(m.group(2).strip('"'))


def _parse_net_echo(text: list[str], header: _Header, line: int) -> None:
    """The net echoed after glog line ``line`` (errors name that line)."""
    net: dict[str, object] = {"phase": header.creating}
    for echoed in text:
        if "name" not in net:
            m = re.match(r'^name: "(.*)"', echoed)
            if m:
                net["name"] = m.group(1)
        m = re.match(r"^\s*phase: (TRAIN|TEST)\s*$", echoed)
        if m and net.get("phase_from_state") is None:
            net["phase_from_state"] = m.group(1)
        m = re.match(r"^\s*batch_size: (\d+)\s*$", echoed)
        if m and "batch_size" not in net:
            net["batch_size"] = _int(m.group(1), "batch_size of the net echoed after this line",
                                     line)
        m = re.match(r'^\s*source: "(.*)"', echoed)
        if m and "source" not in net:
            net["source"] = m.group(1)
    phase = net.pop("phase_from_state", None) or net["phase"]
    net["phase"] = phase
    header.nets.append(net)


def _batch_size(net: dict[str, object] | None) -> int | None:
    """The net's ``batch_size`` as a whole number (the echo stores it from :func:`_int`), or
    None for no net or a net without one."""
    value = net.get("batch_size") if net else None
    return None if value is None else int(cast("int", value))


def _int(text: str, what: str, line: int) -> int:
    """A whole number of at most :data:`MAX_DIGITS` digits, else ParseError at ``line``."""
    digits = len(text.strip().lstrip("+-"))
    if digits > MAX_DIGITS:
        raise ParseError(f"{what} has {digits} digits (at most {MAX_DIGITS})", line=line)
    try:
        return int(text)
    except ValueError as err:
        raise ParseError(f"{what} is not an integer: {short_repr(text)}", line=line) from err


@dataclass
class _Run:
    header: _Header
    name: str
    start: Glog
    segments: list[Segment] = field(default_factory=list)
    last_line: int = 0
    last_iteration: int | None = None
    done: bool = False
    meta: dict[str, object] = field(default_factory=dict)
    # open train stretch
    train_start: tuple[float, int | None] | None = None  # (time, iteration)
    train_points: list[tuple[float, float]] = field(default_factory=list)
    train_last: tuple[int, float, int] | None = None  # last display: (iteration, time, line)
    # open test pass
    test: tuple[Glog, int, int] | None = None  # (Testing line, iteration, net index)
    test_end: Glog | None = None


class _Builder:
    """Turns glog records into runs."""

    def __init__(self, echoes: dict[int, list[str]], ctx: ParseContext):
        self.echoes = echoes
        self.ctx = ctx
        self.header = _Header(first_line=1)
        self.run: _Run | None = None
        self.runs: list[_Run] = []
        self.header_fresh = True  # header lines seen since the last run started

    # --- header -----------------------------------------------------------
    def _new_header(self, record: Glog) -> None:
        if self.run is not None:
            self._close_run(self.run.last_line)
        if not self.header_fresh:
            self.header = _Header(first_line=record.line)
            self.header_fresh = True

    def header_line(self, index: int, record: Glog) -> bool:
        msg = record.message.strip()
        if msg.startswith("Initializing solver from parameters") or _USING_GPUS.match(msg) \
                or _USE_GPU_ID.match(msg) or msg == "Use CPU.":
            self._new_header(record)
        h = self.header
        if msg.startswith("Initializing solver from parameters"):
            _parse_solver_echo(self.echoes.get(index, []), h)
        elif msg.startswith("Initializing net from parameters"):
            _parse_net_echo(self.echoes.get(index, []), h, record.line)
        elif msg.startswith("Creating training net"):
            h.creating = "TRAIN"
        elif msg.startswith("Creating test net"):
            h.creating = "TEST"
        elif m := _USING_GPUS.match(msg):
            h.gpu_ids = [_int(x, "GPU id", record.line)
                         for x in re.split(r"[,\s]+", m.group(1).strip()) if x]
        elif m := _USE_GPU_ID.match(msg):
            h.gpu_ids = [_int(m.group(1), "GPU id", record.line)]
        elif msg == "Use CPU.":
            h.cpu = True
        elif (m := _GPU_NAME.match(msg)) and self.run is None:
            h.gpu_names[_int(m.group(1), "GPU id", record.line)] = m.group(2)
        elif (m := _OUTPUT_SIZE.match(msg)) and h.nets and h.creating:
            net = h.nets[-1]
            if net.get("phase") == h.creating and "batch_size" not in net:
                net["batch_size"] = _int(m.group(1), "output data size", record.line)
        else:
            return False
        return True

    # --- run events -------------------------------------------------------
    def solving(self, record: Glog, name: str) -> None:
        if self.run is not None:
            self._close_run(self.run.last_line)
        self.run = _Run(header=self.header, name=name, start=record, last_line=record.line)
        self.run.train_start = (record.time, None)
        self.header_fresh = False

    def _check_iteration(self, iteration: int, record: Glog) -> None:
        run = self.run
        assert run is not None
        if run.last_iteration is not None and iteration < run.last_iteration:
            raise ParseError(
                f"iteration goes backwards ({run.last_iteration} -> {iteration})",
                line=record.line,
            )
        run.last_iteration = iteration
        run.last_line = record.line

    def display(self, record: Glog, iteration: int) -> None:
        run = self.run
        if run is None:
            return
        self._finish_test()
        self._check_iteration(iteration, record)
        if run.train_start is None:  # display right after Solving-less restart: ignore
            return
        start_time, start_iteration = run.train_start
        if start_iteration is None:
            start_iteration = iteration
            run.train_start = (start_time, iteration)
        run.train_points.append((float(iteration - start_iteration), record.time - start_time))
        run.train_last = (iteration, record.time, record.line)

    def testing(self, record: Glog, iteration: int, net_index: int) -> None:
        run = self.run
        if run is None:
            return
        self._finish_test()
        self._check_iteration(iteration, record)
        self._close_train(iteration, record.time, record.line)
        run.test = (record, iteration, net_index)
        run.test_end = None

    def test_output(self, record: Glog) -> None:
        if self.run is not None and self.run.test is not None:
            self.run.test_end = record
            self.run.last_line = record.line

    def other_event(self, record: Glog) -> None:
        """A solver line that ends an open test pass (snapshot, lr, ...)."""
        if self.run is not None:
            self._finish_test()
            self.run.last_line = max(self.run.last_line, record.line)

    def done(self, record: Glog, early: bool) -> None:
        run = self.run
        if run is None or run.done:
            return
        self._finish_test()
        run.last_line = record.line
        if early:
            run.meta["stopped_early"] = True
            self._cut_train()
        else:
            max_iter = run.header.solver.get("max_iter")
            end = run.last_iteration
            if max_iter:
                end = max(end or 0, _int(max_iter[0], "max_iter", run.header.first_line))
            if end is not None:
                self._close_train(end, record.time, record.line)
        run.done = True
        self.runs.append(run)
        self.run = None

    def finish(self) -> None:
        if self.run is not None:
            self._close_run(self.run.last_line)

    # --- segment building -------------------------------------------------
    def _finish_test(self) -> None:
        run = self.run
        if run is None or run.test is None:
            return
        testing, iteration, index = run.test
        end = run.test_end
        run.test = None
        if end is None:
            count = cast("int", run.meta.get("tests_without_output", 0))
            run.meta["tests_without_output"] = int(count) + 1
            run.train_start = None
            return
        test_iters = run.header.solver.get("test_iter")
        net = run.header.net("TEST", index) or run.header.net("TEST", 0)
        if test_iters:
            raw = test_iters[index] if index < len(test_iters) else test_iters[0]
            iterations = _int(raw, "test_iter", run.header.first_line)
            seconds = end.time - testing.time
            batch = _batch_size(net)
            run.segments.append(
                Segment(
                    phase="test",
                    iterations=float(iterations),
                    seconds=seconds,
                    batch_size=batch,
                    start_time=testing.time,
                    line=end.line,
                    points=((float(iterations), seconds),),
                )
            )
        else:
            run.meta["test_iter_unknown"] = True
        run.train_start = (end.time, iteration)
        run.train_points = []
        run.train_last = None

    def _close_train(self, end_iteration: int, end_time: float, line: int) -> None:
        run = self.run
        assert run is not None
        if run.train_start is None:
            run.train_start = (end_time, end_iteration)
            return
        start_time, start_iteration = run.train_start
        if start_iteration is None:
            start_iteration = end_iteration
        iterations = end_iteration - start_iteration
        if iterations > 0:
            seconds = end_time - start_time
            points = [p for p in run.train_points if p[0] < iterations]
            points.append((float(iterations), seconds))
            self._add_train(start_time, start_iteration, iterations, seconds, points, line)
        run.train_start = (end_time, end_iteration)
        run.train_points = []
        run.train_last = None

    def _cut_train(self) -> None:
        """Close an open train stretch at its last display line (run ended early)."""
        run = self.run
        assert run is not None
        if run.train_start is None or run.train_last is None:
            return
        start_time, start_iteration = run.train_start
        iteration, time, line = run.train_last
        iterations = iteration - (start_iteration if start_iteration is not None else iteration)
        if iterations > 0:
            self._add_train(start_time, start_iteration or 0, iterations, time - start_time,
                            run.train_points, line)
            run.meta["last_segment_partial"] = True
        run.train_start = None

    def _add_train(self, start_time: float, start_iteration: int, iterations: int,
                   seconds: float, points: list[tuple[float, float]], line: int) -> None:
        run = self.run
        assert run is not None
        monotone: list[tuple[float, float]] = []
        for it, sec in points:
            if monotone:
                it, sec = max(it, monotone[-1][0]), max(sec, monotone[-1][1])
            monotone.append((it, sec))
        run.segments.append(
            Segment(
                phase="train",
                iterations=float(iterations),
                seconds=seconds,
                batch_size=self._train_batch(run),
                start_time=start_time,
                iteration_start=start_iteration,
                iteration_end=start_iteration + iterations - 1,
                line=line,
                points=tuple(monotone),
            )
        )

    def _train_batch(self, run: _Run) -> int | None:
        net = run.header.net("TRAIN")
        per_device = _batch_size(net)
        if per_device is None:
            return self.ctx.batch_size
        return per_device * max(1, len(run.header.gpu_ids))

    def _close_run(self, last_line: int) -> None:
        run = self.run
        assert run is not None
        self._finish_test()
        self._cut_train()
        run.meta["truncated"] = True
        run.last_line = last_line
        self.runs.append(run)
        self.run = None


def _number(text: str) -> object:
    """A solver value for ``meta``: an int (<= MAX_DIGITS digits), a finite float, else text."""
    if len(text.strip().lstrip("+-")) <= MAX_DIGITS:
        try:
            return int(text)
        except ValueError:
            pass
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def _to_parsed(run: _Run, ctx: ParseContext, year_source: str) -> ParsedRun:
    h = run.header
    train_net = h.net("TRAIN")
    test_net = h.net("TEST")
    name = str((train_net or {}).get("name") or run.name).strip()
    names = sorted({h.gpu_names[i] for i in h.gpu_ids if i in h.gpu_names}) or sorted(
        set(h.gpu_names.values())
    )
    n_gpus = len(h.gpu_ids) or len(h.gpu_names)
    deployment = Deployment(names[0], per_node=max(1, n_gpus)) if names and not h.cpu else None
    meta: dict[str, object] = dict(run.meta)
    needs = []
    if deployment is None:
        needs.append("deployment")
    batch = None
    per_device = _batch_size(train_net)
    if per_device is not None:
        batch = per_device * max(1, len(h.gpu_ids))
        meta["batch_per_device"] = per_device
    elif ctx.batch_size is not None:
        batch = ctx.batch_size
        meta["batch_from_ctx"] = True
    else:
        needs.append("batch_size")
    if needs:
        meta["needs"] = needs
    if len(names) > 1:
        meta["gpu_names"] = names
    meta["devices"] = "cpu" if h.cpu else (n_gpus or None)
    test_batch = _batch_size(test_net)
    if test_batch is not None:
        meta["test_batch_size"] = test_batch
    for key in ("test_iter", "test_interval", "display", "max_iter", "type", "lr_policy",
                "base_lr", "snapshot"):
        if key in h.solver:
            values = [_number(v) for v in h.solver[key]]
            meta[f"solver_{key}"] = values if key == "test_iter" else values[0]
    if train_net and train_net.get("source"):
        meta["train_source"] = train_net["source"]
    meta["year_source"] = year_source
    meta["warmup"] = "the first train segment includes start-up and warm-up"
    return ParsedRun(
        format=FORMAT,
        network=re.sub(r"\s+", "-", name.lower()) or None,
        deployment=deployment,
        stack="Caffe",
        batch_size=batch,
        start_time=run.start.time,
        segments=run.segments,
        meta=meta,
        first_line=h.first_line,
        last_line=run.last_line,
    )


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse a Caffe glog training log; one ParsedRun per ``Solving`` (see module doc)."""
    text = [strip_line(line) for line in lines]
    records, echoes, year_source = read_records(text)

    builder = _Builder(echoes, ctx)
    for index, record in enumerate(records):
        msg = record.message.strip()
        if builder.header_line(index, record):
            continue
        if m := _SOLVING.match(msg):
            builder.solving(record, (m.group(1) or "").strip())
        elif m := _TESTING.match(msg):
            builder.testing(record, _int(m.group(1), "iteration", record.line),
                            _int(m.group(2), "test net number", record.line))
        elif _TEST_OUTPUT.match(record.message):
            builder.test_output(record)
        elif m := _DISPLAY.match(msg) or _DISPLAY_RATE.match(msg):
            builder.display(record, _int(m.group(1), "iteration", record.line))
        elif _LR.match(msg):
            builder.other_event(record)
        elif msg.startswith("Iteration"):
            raise ParseError(f"unrecognised Iteration line: {msg[:80]!r}", line=record.line)
        elif msg == "Optimization Done.":
            builder.done(record, early=False)
        elif msg == "Optimization stopped early.":
            builder.done(record, early=True)
        elif msg.startswith(("Snapshotting", "Restoring previous solver status",
                             "Resuming from")):
            builder.other_event(record)
            if builder.run is not None and not msg.startswith("Snapshotting"):
                builder.run.meta["resumed_from"] = msg.split(" from ", 1)[-1]
    builder.finish()

    if not builder.runs:
        raise ParseError("no 'Solving' line: no training run in this Caffe log",
                         line=records[-1].line)
    runs = [_to_parsed(run, ctx, year_source) for run in builder.runs]
    runs = [r for r in runs if r.segments]
    if not any(s.phase == "train" for r in runs for s in r.segments):
        raise ParseError("no training progress (no display line after 'Solving')",
                         line=records[-1].line)
    return runs
