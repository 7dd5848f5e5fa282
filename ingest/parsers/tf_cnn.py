"""tf_cnn_benchmarks output -> one ``train`` (or, for inference, ``test``) segment per run.

What is read
------------
* The header ``Key: value`` lines printed before ``==========``: ``TensorFlow`` (version),
  ``Model``, ``Dataset``, ``Mode``, ``Batch size: G global`` and ``P per device`` (the latter
  on the same or the next line), ``Devices: ['/gpu:0', ...]`` (how many), ``Variables``, and
  the rest into ``meta["header"]``. A new ``TensorFlow:``/``Model:`` header after step lines
  starts a new run (several benchmarks appended to one file).
* The GPU name from TensorFlow's device lines (``name: A100-SXM4-40GB computeCapability``,
  ``physical GPU (device: 0, name: ...``, ``StreamExecutor device (0): ..., Compute``).
  A deployment (name, number of devices) is set only when a name is printed, or, for a log
  in the Lambda layout that prints none, from its ``metadata`` ``GPU 0`` line (repair
  ``accelerator_from_system``, with a warning).
* Step lines ``N images/sec: X +/- Y (jitter = Z) <loss> [<more>] [<unix time>]``
  (printed after warm-up, every ``display_every`` steps) and ``total images/sec: X``.
* Lines are filtered by a cheap substring test before any regular expression runs.

Segments
--------
One segment per run: ``train`` in ``Mode: training``, ``test`` in any other mode (``forward
only``: an inference benchmark, ``meta["mode"] = "inference"``; never stored as training).
It starts at the first step line: iterations = last step - first step, seconds = the
difference of their unix times, and one point per step line. ``meta["clock_resolution_s"]``
is the stamps' resolution (1.0: whole seconds, as in all Lambda logs). When step lines carry
no unix time, cumulative seconds are estimated as ``step * global_batch / mean images/sec``
(``meta["timing"] = "images/sec"``) and the segment has no ``start_time``. The warm-up steps
before ``Done warm up`` are not in the segment (``meta["warmup"]``).

Variants (``meta["variant"]``) and system
-----------------------------------------
From the log: ``precision`` (a ``Precision``/``Data type`` header line, or ``--use_fp16`` on
an echoed command line), ``compiler`` (``xla`` when TensorFlow logs ``Compiled cluster using
XLA``, an ``XLA: True`` header or ``--xla``/``--xla_compile`` flag; ``none`` when a log of
TensorFlow >= 1.14, which logs every XLA compilation, ran its steps without one), ``data``
(``Dataset: imagenet (synthetic)`` -> ``synthetic``, another dataset -> ``real``) and the
variable update (``Variables:``; kept as ``variables`` only when not ``replicated``).

From the Lambda layout (LambdaColdStorage/lambda-tensorflow-benchmark; its folder names are
read by :mod:`fleet.lambda_layout`, which states the rules): ``precision``, ``data``, the
update, ``N`` devices, training or inference, ``distortions`` (``"on"``), ``compiler = xla``
when the ``.logs`` name holds the option ``XLA``, ``<B>`` the batch per device (the network
lower-cased); ``meta["system"]`` is the ``.logs`` folder name without ``.logs``. ``metadata``
and ``thermal/<rep>`` files of that layout are side files (:func:`side_file`), never logs.

Where the log and the layout both state a fact (precision, compiler, data, update, mode,
device count, batch per device, network) and disagree, the file is rejected naming both (a
mislabelled folder is worth knowing) unless the fact is a variant key given by ``--tag``
(tags win; the pipeline applies them).

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
from functools import lru_cache
from pathlib import Path
from typing import cast

from fleet.deployment import Deployment
from fleet.lambda_layout import is_side_file, parse_log_path, parse_metadata
from fleet.precision import parse_precision
from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import ParseOverrides, with_overrides

FORMAT = "tf_cnn_benchmarks"
LABEL = "tf_cnn_benchmarks"

BACKWARDS_TOLERANCE_S = 2.0
XLA_COMPILED = "Compiled cluster using XLA"
XLA_LOGGED_SINCE = (1, 14)  # TensorFlow versions that log every XLA compilation

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
_STEP_START = re.compile(r"^\s*\d+\s+images/sec")
_STEP = re.compile(
    rf"^\s*(\d{{1,18}})\s+images/sec: ({_NUM}) \+/- ({_NUM}) \(jitter = ({_NUM})\)\s*(.*)$"
)
_TOTAL = re.compile(rf"^total images/sec: ({_NUM})\s*$")
_HEADER = re.compile(r"^([A-Z][A-Za-z0-9 _]*?):\s+(.*?)\s*$")
_BATCH = re.compile(r"^(\d{1,18}) global(?:\s+(\d{1,18}) per device)?$")  # no 5,000 digits
_PER_DEVICE = re.compile(r"^\s*(\d{1,18}) per device\s*$")
_VERSION = re.compile(r"^(\d{1,9})\.(\d{1,9})")
_FLAG = re.compile(r"--(use_fp16|xla_compile|xla)(?:[= ](true|false|1|0)\b)?", re.IGNORECASE)
_GPU_NAMES = (
    re.compile(r"\bname: (.+?) computeCapability"),
    re.compile(r"physical GPU \(device: \d+, name: (.+?), pci bus id"),
    re.compile(r"StreamExecutor device \(\d+\): (.+?), Compute Capability"),
)
_HEADER_KEYS = {"TensorFlow", "Model", "Dataset", "Mode", "SingleSess", "Batch size",
                "Num batches", "Num epochs", "Devices", "NUMA bind", "Data format",
                "Optimizer", "Variables", "AllReduce", "Precision", "Data type",
                "Num workers", "Sync", "XLA", "Horovod"}
_KEY_MAX = max(len(k) for k in _HEADER_KEYS)

def sniff(head: list[str]) -> bool:
    """True if the head shows a tf_cnn_benchmarks header, step line or script path."""
    for line in head:
        if "tf_cnn_benchmarks" in line or ("images/sec" in line and _STEP.match(line)):
            return True
        if line.startswith("Batch size:"):
            m = _HEADER.match(line)
            if m and _BATCH.match(m.group(2)):
                return True
    return False


# -- the Lambda layout ------------------------------------------------------------------------


def lambda_layout(path: Path | str) -> dict[str, object] | None:
    """The facts of a log path in the Lambda layout (:mod:`fleet.lambda_layout`), None
    outside it."""
    found = parse_log_path(path)
    if found is None:
        return None
    config = found.config
    return {
        "folder": found.folder,
        "system": found.system.name,
        "data": config.dataset,
        "variables": config.update,
        "precision": config.precision,
        "devices": config.gpus,
        "mode": config.mode,
        "distortions": config.distortions,
        "compiler": "xla" if found.system.xla else None,
        "network": found.network.network.lower(),
        "batch_per_device": found.network.batch,
        "metadata": found.metadata,
    }


def claims(path: Path) -> bool:
    """A log in the Lambda layout: asked first when formats are detected."""
    return parse_log_path(path) is not None


def side_file(path: Path) -> bool:
    """Lambda's ``<system>.logs/metadata`` and ``<network>-<B>/thermal/<rep>`` (GPU clocks and
    temperatures): files of the layout that are not logs."""
    return is_side_file(path)


@lru_cache(maxsize=256)
def read_metadata(path: str) -> tuple[tuple[str, str], ...]:
    """A Lambda ``metadata`` file as (key, value) pairs (:func:`fleet.lambda_layout.
    parse_metadata`); empty when it cannot be read. Cached: one read per system folder."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    return tuple(parse_metadata(text).items())


@dataclass(frozen=True)
class LambdaContext(ParseContext):
    """A :class:`ParseContext` plus what the Lambda layout says of a log: ``layout`` (the
    facts its path states, :func:`lambda_layout`; None outside the layout), ``metadata``
    (its system's ``metadata`` side file) and ``tagged`` (the variant keys ``--tag`` sets,
    whose layout/log disagreements are not errors)."""

    layout: dict[str, object] | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tagged: frozenset[str] = frozenset()


def context(path: Path, source: str, overrides: ParseOverrides) -> ParseContext:
    """The overrides, plus for a log in the Lambda layout its facts, ``metadata`` and the
    folder names, and the keys ``--tag`` sets (:class:`LambdaContext`)."""
    ctx = with_overrides(ParseContext(), source, overrides)
    layout = lambda_layout(path)
    tagged = frozenset(k for k, _ in overrides.tags)
    if layout is None:
        return LambdaContext(**vars(ctx), tagged=tagged) if tagged else ctx
    return LambdaContext(**{**vars(ctx), "folder_network": str(layout["network"]),
                            "folder_system": str(layout["system"])},
                         layout=layout, metadata=dict(read_metadata(str(layout["metadata"]))),
                         tagged=tagged)


# -- parsing ----------------------------------------------------------------------------------


@dataclass
class _Run:
    first_line: int
    header: dict[str, str] = field(default_factory=dict)
    header_lines: dict[str, int] = field(default_factory=dict)
    batch_global: int | None = None
    batch_per_device: int | None = None
    steps: list[tuple[int, float, float | None, int]] = field(default_factory=list)
    decimals: int = 0  # most decimals of a unix stamp
    total_rate: float | None = None
    last_line: int = 0
    said: dict[str, tuple[str, int]] = field(default_factory=dict)  # variant -> (value, line)
    repairs: list[dict] = field(default_factory=list)  # {"kind", "line", "detail"}


def _step(line: str, number: int) -> tuple[int, float, str | None]:
    """(step, images/sec, unix time as printed) of a step line."""
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
    unix = fields[-1] if len(values) >= 2 and values[-1] > 1e8 else None
    return step, rate, unix


def _tf_version(text: str | None) -> tuple[int, int] | None:
    m = _VERSION.match(text.strip()) if text else None
    return (int(m[1]), int(m[2])) if m else None


def _precision(text: str) -> str:
    """The canonical precision name (:mod:`fleet.precision`), else the text lower-cased."""
    try:
        return parse_precision(text).value
    except ValueError:
        return text.strip().lower()


def _log_variant(run: _Run) -> dict[str, tuple[str, int | None]]:
    """What the log's own lines say about the variant: key -> (value, line)."""
    said: dict[str, tuple[str, int | None]] = dict(run.said)
    header, where = run.header, run.header_lines
    for key in ("Precision", "Data type"):
        if key in header and "precision" not in said:
            said["precision"] = (_precision(header[key]), where[key])
    if "XLA" in header and "compiler" not in said:
        on = header["XLA"].strip().lower() in ("true", "1", "yes", "on")
        said["compiler"] = ("xla" if on else "none", where["XLA"])
    version = _tf_version(header.get("TensorFlow"))
    if "compiler" not in said and version is not None and version >= XLA_LOGGED_SINCE:
        said["compiler"] = ("none", None)  # steps ran, no XLA compilation logged
    if "Dataset" in header:
        synthetic = "(synthetic)" in header["Dataset"].lower()
        said["data"] = ("synthetic" if synthetic else "real", where["Dataset"])
    if "Variables" in header:
        said["variables"] = (header["Variables"].strip().lower(), where["Variables"])
    return said


def _disagreement(what: str, logged: object, line: int | None, layout: dict) -> ParseError:
    """The rejection of a log whose own ``what`` disagrees with its Lambda folder's."""
    where = f"line {line}" if line else "the log"
    fix = "correct the folder name"
    if what in ("precision", "data", "variables"):
        fix += f", or pass --tag {what}=<value> for these logs"
    return ParseError(f"the log says {what} {logged} ({where}) but its folder "
                      f"{layout['folder']} says {layout[what]}; {fix}", line=line)


def _reconcile(run: _Run, ctx: ParseContext, mode: str, n_devices: int) -> dict[str, str]:
    """The run's variant from its log and the Lambda layout (module doc); ParseError where
    both state a fact and disagree."""
    said = _log_variant(run)
    layout = ctx.layout if isinstance(ctx, LambdaContext) else None
    tagged = ctx.tagged if isinstance(ctx, LambdaContext) else frozenset()
    variant = {k: v for k, (v, _) in said.items() if (k, v) != ("variables", "replicated")}
    if not isinstance(layout, dict):
        return variant
    unconfirmed = layout["compiler"] == "xla" and "compiler" not in tagged \
        and said.get("compiler", ("", 0)) == ("none", None)
    if unconfirmed:
        # The folder says XLA, the log shows no compilation: a lack of evidence, not a
        # statement. Salvaged: stored as the log's evidence (no XLA) with a repair note.
        variant["compiler"] = "none"
        detail = (f"the folder {layout['folder']} names the option XLA but the log shows no "
                  f"XLA compilation ('{XLA_COMPILED}'); stored as compiler=none (pass --tag "
                  "compiler=xla to override)")
        run.repairs.append({"kind": "variant_unconfirmed", "line": None, "detail": detail})
    elif layout["compiler"] == "xla" and said.get("compiler", ("",))[0] == "none" \
            and "compiler" not in tagged:
        raise ParseError(
            f"the folder {layout['folder']} names the option XLA but the log says XLA is off; "
            "correct the folder name, or pass --tag compiler=none (or xla) for these logs",
            line=said["compiler"][1] or run.first_line)
    for key in ("precision", "data", "variables"):
        if key in said and said[key][0] != layout[key] and key not in tagged:
            raise _disagreement(key, said[key][0], said[key][1], layout)
        if (key, layout[key]) != ("variables", "replicated"):
            variant.setdefault(key, str(layout[key]))
    if layout["compiler"] and not unconfirmed:
        variant["compiler"] = str(layout["compiler"])
    if layout["mode"] != mode:
        raise _disagreement("mode", mode, run.header_lines.get("Mode"), layout)
    if n_devices and n_devices != layout["devices"]:
        raise _disagreement("devices", n_devices, run.header_lines.get("Devices"), layout)
    if run.batch_per_device is not None and run.batch_per_device != layout["batch_per_device"]:
        raise _disagreement("batch_per_device", run.batch_per_device,
                            run.header_lines.get("Batch size"), layout)
    model = run.header.get("Model", "").strip().lower()
    if model and model != layout["network"]:
        raise _disagreement("network", model, run.header_lines.get("Model"), layout)
    if layout["distortions"]:
        variant["distortions"] = "on"
    return variant


def _metadata_gpu(ctx: ParseContext) -> tuple[str, str] | None:
    """(GPU name, metadata file) from a Lambda ``metadata`` side file, if it names one."""
    if not isinstance(ctx, LambdaContext):
        return None
    meta, layout = ctx.metadata, ctx.layout
    if isinstance(layout, dict) and meta.get("GPU 0"):
        return str(meta["GPU 0"]), str(layout["metadata"])
    return None


def _build(run: _Run, gpu_name: str | None, ctx: ParseContext) -> ParsedRun:
    header = run.header
    devices_text = header.get("Devices", "")
    devices = re.findall(r"'([^']+)'", devices_text)
    n_devices = len(devices)
    on_cpu = bool(devices) and all("cpu" in d.lower() for d in devices)
    meta: dict[str, object] = {"header": dict(header), "tool": "tf_cnn_benchmarks"}
    needs: list[str] = []
    deployment = None
    from_system = _metadata_gpu(ctx) if gpu_name is None and not on_cpu else None
    if gpu_name and not on_cpu:
        deployment = Deployment(gpu_name, per_node=max(1, n_devices))
    elif from_system is not None:
        deployment = Deployment(from_system[0], per_node=max(1, n_devices))
        detail = f"GPU {from_system[0]!r} from {from_system[1]} (the log names no GPU)"
        meta["repairs"] = [{"kind": "accelerator_from_system", "line": None, "detail": detail}]
        meta["warnings"] = [f"accelerator taken from the system description: {detail}"]
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
    mode_text = header.get("Mode", "training").strip().lower()
    mode = "training" if mode_text == "training" else "inference"
    meta["mode"] = mode
    variant = _reconcile(run, ctx, mode, n_devices)
    if run.repairs:
        repairs = cast("list[object]", meta.setdefault("repairs", []))
        warnings = cast("list[object]", meta.setdefault("warnings", []))
        for repair in run.repairs:
            repairs.append(repair)
            warnings.append(repair["detail"])
    if variant:
        meta["variant"] = dict(sorted(variant.items()))
    if ctx.folder_system:
        meta["system"] = ctx.folder_system

    first_step, _, first_unix, _ = run.steps[0]
    last_step = run.steps[-1][0]
    points: list[tuple[float, float]] = []
    if first_unix is not None:
        start = float(first_unix)
        for step, _, unix, _ in run.steps:  # all timed: a later step line without is refused
            points.append((float(step - first_step), float(cast("float", unix)) - start))
        meta["clock_resolution_s"] = 10.0 ** -run.decimals
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
    segment = Segment(
        phase="train" if mode == "training" else "test",
        iterations=float(last_step - first_step),
        seconds=monotone[-1][1],
        batch_size=batch,
        start_time=float(first_unix) if first_unix is not None else None,
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
        stack=f"TensorFlow {version}" if version else "TensorFlow",
        batch_size=batch,
        start_time=float(first_unix) if first_unix is not None else None,
        segments=[segment],
        meta=meta,
        first_line=run.first_line,
        last_line=run.last_line,
    )


def _flags(line: str, number: int, said: dict[str, tuple[str, int]]) -> None:
    """``--use_fp16`` / ``--xla`` / ``--xla_compile`` on an echoed command line."""
    for m in _FLAG.finditer(line):
        on = (m.group(2) or "true").lower() in ("true", "1")
        if m.group(1).lower() == "use_fp16":
            said["precision"] = ("fp16" if on else "fp32", number)
        elif on or "compiler" not in said:
            said["compiler"] = ("xla" if on else "none", number)


def _header(run: _Run, key: str, value: str, number: int) -> bool:
    """Record one header line; True when the next line may hold ``P per device``."""
    run.header[key] = value
    run.header_lines[key] = number
    run.last_line = number
    if key != "Batch size":
        return False
    b = _BATCH.match(value)
    if b is None:
        raise ParseError(f"batch size is not '<N> global': {value!r}", line=number)
    run.batch_global = int(b.group(1))
    if b.group(2):
        run.batch_per_device = int(b.group(2))
        return False
    return True


def _line_numbers(text: str, needles: tuple[str, ...]) -> list[int]:
    """The numbers of the lines of ``text`` holding any of ``needles`` (rare lines, found
    by a search of the whole text instead of a test of every line)."""
    found: set[int] = set()
    for needle in needles:
        pos, line, counted = text.find(needle), 1, 0
        while pos >= 0:
            line += text.count("\n", counted, pos)
            counted = pos
            found.add(line)
            pos = text.find(needle, pos + 1)
    return sorted(found)


def _attach(runs: list[_Run], lines: list[str], numbers: list[int]) -> None:
    """Read the rare lines (XLA compilation, flags) into the run they belong to: the last
    run begun before them, else the first run."""
    for number in numbers:
        owner = runs[0]
        for run in runs:
            if run.first_line <= number:
                owner = run
        line = lines[number - 1]
        if XLA_COMPILED in line:
            owner.said["compiler"] = ("xla", number)
        else:
            _flags(line, number, owner.said)


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse tf_cnn_benchmarks output (see module doc)."""
    lines = lines if isinstance(lines, list) else list(lines)
    runs: list[_Run] = []
    run: _Run | None = None
    gpu_name: str | None = None
    expect_per_device = False
    in_header = False
    last_unix: float | None = None
    for number, line in enumerate(lines, start=1):
        if gpu_name is None and ("name: " in line or "Compute Capability" in line):
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
        colon = line.find(":", 1, _KEY_MAX + 1)
        if colon > 0 and line[:colon] in _HEADER_KEYS and line[colon + 1: colon + 2].isspace():
            key, value = line[:colon], line[colon + 1:].strip()
            if key in ("TensorFlow", "Model") and (run is None or run.steps or not in_header):
                if run is not None and run.steps:
                    runs.append(run)
                run = _Run(first_line=number)
                in_header = True
            if run is not None:
                expect_per_device = _header(run, key, value, number)
            continue
        if line.startswith("=========="):
            in_header = False
            continue
        if "images/sec" not in line:
            continue
        if not _STEP_START.match(line):
            m = _TOTAL.match(line.strip())
            if m and run is not None:
                run.total_rate = float(m.group(1))
                run.last_line = number
            continue
        if run is None:
            run = _Run(first_line=number)
        step, rate, unix_text = _step(line, number)
        unix = float(unix_text) if unix_text is not None else None
        if run.steps:
            previous_step, _, previous_unix, _ = run.steps[-1]
            if step < previous_step:
                raise ParseError(f"step goes backwards ({previous_step} -> {step})", line=number)
            if (previous_unix is None) != (unix is None):
                raise ParseError("step line has no unix time but earlier ones do"
                                 if unix is None else
                                 "step line has a unix time but earlier ones do not",
                                 line=number)
        if unix is not None and last_unix is not None \
                and unix < last_unix - BACKWARDS_TOLERANCE_S:
            raise ParseError(f"unix time goes backwards ({last_unix:.0f} -> {unix:.0f})",
                             line=number)
        if unix_text is not None:
            last_unix = unix
            dot = unix_text.find(".")
            if dot >= 0:
                run.decimals = max(run.decimals, len(unix_text) - dot - 1)
        run.steps.append((step, rate, unix, number))
        run.last_line = number
    if run is not None and run.steps:
        runs.append(run)
    if not runs:
        raise ParseError("no step lines ('N images/sec: ...'): no training progress")
    _attach(runs, lines, _line_numbers("\n".join(lines), (XLA_COMPILED, "--use_fp16", "--xla")))
    return [_build(r, gpu_name, ctx) for r in runs]
