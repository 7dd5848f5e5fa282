"""tf_cnn_benchmarks output -> one ``train`` segment per benchmark run.

What is read
------------
* The header ``Key: value`` lines printed before ``==========``: ``TensorFlow`` (version),
  ``Model``, ``Mode``, ``Batch size: G global`` and ``P per device`` (the latter on the
  same or the next line), ``Devices: ['/gpu:0', ...]`` (how many), and the rest into
  ``meta["header"]``. A new ``TensorFlow:``/``Model:`` header after step lines starts a
  new run (several benchmarks appended to one file).
* The GPU name from TensorFlow's device lines (``name: A100-SXM4-40GB computeCapability``,
  ``physical GPU (device: 0, name: ...``, ``StreamExecutor device (0): ..., Compute``).
  A deployment (name, number of devices) is set only when a name is printed.
* Step lines ``N images/sec: X +/- Y (jitter = Z) <loss> [<more>] [<unix time>]``
  (printed after warm-up, every ``display_every`` steps) and ``total images/sec: X``.

Segments
--------
One segment per run: ``train`` in ``Mode: training``, ``test`` in any other mode. It
starts at the first step line: iterations = last step - first step, seconds = the
difference of their unix times, and one point per step line. The stamps have 1 s
resolution in the known logs (``meta["time_resolution_s"]``). When step lines carry no
unix time, cumulative seconds are estimated as ``step * global_batch / mean images/sec``
(``meta["timing"] = "images/sec"``) and the segment has no ``start_time``. The warm-up
steps before ``Done warm up`` are not in the segment (``meta["warmup"]``).

Errors and truncation
---------------------
ParseError (with the line) for: a line that starts like a step line but does not parse
(a cut last line included); a step line without unix time when the earlier ones had one;
steps going backwards; unix time going backwards by more than 2 s; a non-numeric batch
size; a file with no step lines. A run without ``total images/sec`` keeps its step lines
and gets ``meta["truncated"] = True``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleet.deployment import Deployment
from ingest.events import ParseContext, ParsedRun, ParseError, Segment

FORMAT = "tf_cnn_benchmarks"
LABEL = "tf_cnn_benchmarks"

BACKWARDS_TOLERANCE_S = 2.0

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
_STEP_START = re.compile(r"^\s*\d+\s+images/sec")
_STEP = re.compile(
    rf"^\s*(\d+)\s+images/sec: ({_NUM}) \+/- ({_NUM}) \(jitter = ({_NUM})\)\s*(.*)$"
)
_TOTAL = re.compile(rf"^total images/sec: ({_NUM})\s*$")
_HEADER = re.compile(r"^([A-Z][A-Za-z0-9 _]*?):\s+(.*?)\s*$")
_BATCH = re.compile(r"^(\d+) global(?:\s+(\d+) per device)?$")
_PER_DEVICE = re.compile(r"^\s*(\d+) per device\s*$")
_GPU_NAMES = (
    re.compile(r"\bname: (.+?) computeCapability"),
    re.compile(r"physical GPU \(device: \d+, name: (.+?), pci bus id"),
    re.compile(r"StreamExecutor device \(\d+\): (.+?), Compute Capability"),
)
_HEADER_KEYS = {"TensorFlow", "Model", "Dataset", "Mode", "SingleSess", "Batch size",
                "Num batches", "Num epochs", "Devices", "NUMA bind", "Data format",
                "Optimizer", "Variables", "AllReduce", "Precision", "Data type",
                "Num workers", "Sync", "XLA", "Horovod"}


def sniff(head: list[str]) -> bool:
    """True if the head shows a tf_cnn_benchmarks header, step line or script path."""
    for line in head:
        if "tf_cnn_benchmarks" in line or _STEP.match(line):
            return True
        m = _HEADER.match(line)
        if m and m.group(1) == "Batch size" and _BATCH.match(m.group(2)):
            return True
    return False


@dataclass
class _Run:
    first_line: int
    header: dict[str, str] = field(default_factory=dict)
    batch_global: int | None = None
    batch_per_device: int | None = None
    steps: list[tuple[int, float, float | None, int]] = field(default_factory=list)
    total_rate: float | None = None
    last_line: int = 0
    warmup_line: int | None = None


def _int(text: str, what: str, line: int) -> int:
    try:
        return int(text)
    except ValueError as err:
        raise ParseError(f"{what} is not an integer: {text!r}", line=line) from err


def _step(line: str, number: int) -> tuple[int, float, float | None, float | None]:
    """(step, images/sec, loss, unix time) of a step line."""
    m = _STEP.match(line)
    if m is None:
        raise ParseError(f"malformed step line: {line.strip()[:80]!r}", line=number)
    step = int(m.group(1))
    rate = float(m.group(2))
    fields = m.group(5).split()
    values = []
    for text in fields:
        try:
            values.append(float(text))
        except ValueError as err:
            raise ParseError(f"non-numeric field {text!r} in step line", line=number) from err
    unix = values.pop() if len(values) >= 2 and values[-1] > 1e8 else None
    loss = values[0] if values else None
    return step, rate, loss, unix


def _build(run: _Run, gpu_name: str | None, ctx: ParseContext) -> ParsedRun:
    header = run.header
    devices_text = header.get("Devices", "")
    devices = re.findall(r"'([^']+)'", devices_text)
    n_devices = len(devices)
    on_cpu = bool(devices) and all("cpu" in d.lower() for d in devices)
    meta: dict[str, object] = {"header": dict(header), "tool": "tf_cnn_benchmarks"}
    needs: list[str] = []
    deployment = None
    if gpu_name and not on_cpu:
        deployment = Deployment(gpu_name, per_node=max(1, n_devices))
    else:
        needs.append("deployment")
    batch = run.batch_global
    if batch is None and run.batch_per_device is not None and n_devices:
        batch = run.batch_per_device * n_devices
    if batch is None and ctx.batch_size is not None:
        batch = ctx.batch_size
        meta["batch_from_ctx"] = True
    if batch is None:
        needs.append("batch_size")
    if run.batch_per_device is not None:
        meta["batch_per_device"] = run.batch_per_device
    meta["devices"] = "cpu" if on_cpu else (n_devices or None)
    if needs:
        meta["needs"] = needs
    if run.total_rate is not None:
        meta["total_images_per_sec"] = run.total_rate
    else:
        meta["truncated"] = True
    meta["warmup"] = "warm-up steps run before the first step line and are not in the segment"

    first_step, _, first_unix, _ = run.steps[0]
    last_step = run.steps[-1][0]
    timed = first_unix is not None
    points: list[tuple[float, float]] = []
    if timed:
        for step, _, unix, _ in run.steps:
            points.append((float(step - first_step), float(unix) - float(first_unix)))
        meta["time_resolution_s"] = 1.0 if all(
            float(u).is_integer() for _, _, u, _ in run.steps if u is not None) else None
        meta["timing"] = "unix time"
    elif batch is not None:
        elapsed = [step * batch / rate if rate > 0 else 0.0 for step, rate, _, _ in run.steps]
        for (step, _, _, _), cumulative in zip(run.steps, elapsed, strict=True):
            points.append((float(step - first_step), cumulative - elapsed[0]))
        meta["timing"] = "images/sec"
    else:
        raise ParseError("step lines carry no unix time and no batch size is known "
                         "(pass --batch-size)", line=run.steps[0][3])
    monotone: list[tuple[float, float]] = []
    for it, sec in points:
        if monotone:
            sec = max(sec, monotone[-1][1])
        monotone.append((it, sec))
    mode = header.get("Mode", "training").strip().lower()
    segment = Segment(
        phase="train" if mode == "training" else "test",
        iterations=float(last_step - first_step),
        seconds=monotone[-1][1],
        batch_size=batch,
        start_time=float(first_unix) if timed else None,
        iteration_start=first_step,
        iteration_end=last_step - 1,
        line=run.steps[-1][3],
        points=tuple(monotone),
    )
    meta["steps_logged"] = len(run.steps)
    model = header.get("Model")
    version = header.get("TensorFlow")
    return ParsedRun(
        format=FORMAT,
        network=model.strip().lower() if model else None,
        deployment=deployment,
        framework=f"TensorFlow {version}" if version else "TensorFlow",
        batch_size=batch,
        start_time=float(first_unix) if timed else None,
        segments=[segment],
        meta=meta,
        first_line=run.first_line,
        last_line=run.last_line,
    )


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse tf_cnn_benchmarks output (see module doc)."""
    runs: list[_Run] = []
    run: _Run | None = None
    gpu_name: str | None = None
    expect_per_device = False
    in_header = False
    last_unix: float | None = None
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if gpu_name is None:
            for pattern in _GPU_NAMES:
                m = pattern.search(line)
                if m:
                    gpu_name = m.group(1).strip()
                    break
        if expect_per_device:
            expect_per_device = False
            m = _PER_DEVICE.match(line)
            if m and run is not None:
                run.batch_per_device = int(m.group(1))
                continue
        m = _HEADER.match(line)
        if m and m.group(1) in _HEADER_KEYS and not _STEP_START.match(line):
            key, value = m.group(1), m.group(2)
            if key in ("TensorFlow", "Model") and (run is None or run.steps or not in_header):
                if run is not None and run.steps:
                    runs.append(run)
                run = _Run(first_line=number)
                in_header = True
            if run is None:
                continue
            run.header[key] = value
            run.last_line = number
            if key == "Batch size":
                b = _BATCH.match(value)
                if b is None:
                    raise ParseError(f"batch size is not '<N> global': {value!r}", line=number)
                run.batch_global = int(b.group(1))
                if b.group(2):
                    run.batch_per_device = int(b.group(2))
                else:
                    expect_per_device = True
            continue
        if line.startswith("=========="):
            in_header = False
            continue
        if line.strip() == "Done warm up" and run is not None:
            run.warmup_line = number
            continue
        if _STEP_START.match(line):
            if run is None:
                run = _Run(first_line=number)
            step, rate, _loss, unix = _step(line, number)
            if run.steps:
                previous_step, _, previous_unix, _ = run.steps[-1]
                if step < previous_step:
                    raise ParseError(f"step goes backwards ({previous_step} -> {step})",
                                     line=number)
                if (previous_unix is None) != (unix is None):
                    raise ParseError("step line has no unix time but earlier ones do"
                                     if unix is None else
                                     "step line has a unix time but earlier ones do not",
                                     line=number)
            if unix is not None and last_unix is not None \
                    and unix < last_unix - BACKWARDS_TOLERANCE_S:
                raise ParseError(f"unix time goes backwards ({last_unix:.0f} -> {unix:.0f})",
                                 line=number)
            if unix is not None:
                last_unix = unix
            run.steps.append((step, rate, unix, number))
            run.last_line = number
            continue
        m = _TOTAL.match(line.strip())
        if m and run is not None:
            run.total_rate = float(m.group(1))
            run.last_line = number
    if run is not None and run.steps:
        runs.append(run)
    if not runs:
        raise ParseError("no step lines ('N images/sec: ...'): no training progress")
    return [_build(r, gpu_name, ctx) for r in runs]
