"""Layer microbenchmark campaigns: draw, time and record random layer configurations.

A campaign draws configuration ``i`` from ``numpy.random.default_rng([seed, i])`` (layer types
taken in turn; with several precisions, each drawn shape is timed at each of them), so the
i-th configuration is known without running the earlier ones. Every row gets a
``config_id`` (hash of seed, index, layer list, feature space, and the precisions and backend
when they are not the defaults); a rerun on the same file skips the ids already present,
drops a partial last line, and appends the rest.

Timing is a backend's (:mod:`layerwise.backends`: ``tensorflow``, the default, or ``torch``);
this module names no framework and no layer kind.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import hashlib
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fleet.precision import parse_precision
from fleet.quiet_tf import quiet_import
from layerwise.backends import (
    BackendError,
    TimingPlan,
    check_precision,
    ensure_backend,
    get_backend,
    require_module,
)
from layerwise.errors import LayerwiseError, UnknownLayerKindError
from layerwise.layers import (
    KINDS,
    TIME_COLUMNS,
    FeatureSpace,
    all_columns,
    get_layer,
    get_space,
)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
__all__ = ["CSV_COLUMNS", "CampaignError", "CampaignFileError", "CampaignResult", "TimingPlan",
           "bench_row", "campaign_configs", "config_id", "format_row", "parse_layers",
           "parse_precisions", "prepare_campaign_file", "run_campaign"]

HW_COLUMNS = ("hw_kind", "hw_memory_gb", "hw_bandwidth_gbs", "hw_clock_mhz", "hw_cores",
              "hw_peak_tflops")
SW_COLUMNS = ("sw_tensorflow", "sw_python", "sw_torch", "sw_cuda", "sw_cudnn", "sw_driver")
EXTRA_COLUMNS = (
    "layer", "status", "error", "device", *HW_COLUMNS, "hw_model", "framework", *SW_COLUMNS,
    "reps", "runs", "warmup", "grad_input", "backward", "flops", "run_id", "config_id", "seed",
    "index", "space",
)
DEFAULT_PRECISIONS = ("fp32",)
CSV_COLUMNS: tuple[str, ...] = ("gpu", *all_columns(), *TIME_COLUMNS, *EXTRA_COLUMNS)


def _error_text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if "ResourceExhausted" in name or "out of memory" in first.lower() or "OOM" in first:
        name = "OOM"
    return f"{name}: {first}"[:300]


def bench_row(row: dict, device: str = "cpu", plan: TimingPlan | None = None,
              backend: str = "tensorflow") -> dict:
    """Time one configuration with ``backend``; never raises for a bad config or a framework
    error: ``status=failed`` with the reason."""
    out = dict(row)
    plan = plan or TimingPlan()
    engine = get_backend(backend)
    out.update(reps=plan.reps, warmup=plan.warmup, grad_input=plan.grad_input,
               backward=plan.backward, framework=engine.framework)
    spec = get_layer(str(row["layer"]))
    out["flops"] = spec.flops(row)
    try:
        out.update(engine.time_config(row, device, plan))
        out.update(status="ok", error="")
    except Exception as exc:  # noqa: BLE001 - every failure becomes a failed row
        out.update({c: math.nan for c in TIME_COLUMNS})
        out.update(status="failed", error=_error_text(exc), runs=0)
        gc.collect()
    return out


# --------------------------------------------------------------------------- campaigns


class CampaignError(LayerwiseError, ValueError):
    """A campaign that cannot run as asked: no layer types or precisions, bad chunking, a Ray
    cluster without the resources it needs (the message says which)."""

    kind: ClassVar[str] = "campaign"


def parse_precisions(text: str | Sequence[str]) -> tuple[str, ...]:
    """``fp32,bf16`` (or a sequence) -> unique precision names in order, with clear errors."""
    parts = text.split(",") if isinstance(text, str) else list(text)
    names: list[str] = []
    for part in parts:
        if str(part).strip():
            name = str(parse_precision(str(part).strip()))
            if name not in names:
                names.append(name)
    if not names:
        raise CampaignError("no precision given (e.g. fp32 or fp32,tf32,fp16,bf16)")
    return tuple(names)


def config_id(seed: int, index: int, layers: Sequence[str], space: str,
              precisions: Sequence[str] = DEFAULT_PRECISIONS, backend: str = "tensorflow") -> str:
    """Stable id of the ``index``-th configuration of a campaign (12 hex digits).

    The default precisions and backend add nothing to the key (older campaigns keep their ids).
    """
    key = f"{seed}|{index}|{','.join(layers)}|{space}"
    if tuple(precisions) != DEFAULT_PRECISIONS:
        key += f"|{','.join(precisions)}"
    if backend != "tensorflow":
        key += f"|{backend}"
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def campaign_configs(
    layers: Sequence[str], samples: int, seed: int = 0, space: str | FeatureSpace = "paper",
    precisions: Sequence[str] = DEFAULT_PRECISIONS, backend: str = "tensorflow",
) -> Iterator[dict]:
    """The deterministic configurations of a campaign, each with index, config_id, seed, space.

    Configuration ``i`` is shape ``i // len(precisions)`` (drawn as above) at precision
    ``precisions[i % len(precisions)]``: every shape is timed at every precision in turn.
    """
    if not layers:
        raise CampaignError("no layer types given")
    for name in layers:
        get_layer(name)
    precisions = parse_precisions(precisions)
    sp = get_space(space)
    per_shape = len(precisions)
    for index in range(samples):
        shape = index // per_shape
        name = layers[shape % len(layers)]
        rng = np.random.default_rng([seed, shape])
        row = KINDS[name].sample(rng, sp)
        if precisions != DEFAULT_PRECISIONS:
            row["precision"] = precisions[index % per_shape]
        row.update(index=index, seed=seed, space=sp.name,
                   config_id=config_id(seed, index, layers, sp.name, precisions, backend))
        yield row


class CampaignFileError(CampaignError):
    """The output file exists but cannot be resumed (e.g. a different header); :attr:`file`
    and :attr:`line` say where (the message starts ``file:line:``)."""

    kind: ClassVar[str] = "campaign_file"

    def __init__(self, message: str, file: object = None, line: int | None = None):
        super().__init__(message)
        self.file = None if file is None else str(file)
        self.line = line


def prepare_campaign_file(path: Path) -> set[str]:
    """Make ``path`` ready for appending; return the config_ids already recorded.

    Writes the header to a new/empty file, drops a partial last line (no trailing newline)
    left by a kill, and refuses a file whose header is not the campaign layout.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.stat().st_size == 0:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerow(CSV_COLUMNS)
        return set()
    with open(path, "rb+") as handle:
        data = handle.read()
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            handle.seek(cut)
            handle.truncate()
            data = data[:cut]
    if not data:
        return prepare_campaign_file(path)
    text = data.decode("utf-8", errors="replace")
    reader = csv.reader(text.splitlines())
    header = next(reader)
    if tuple(header) != CSV_COLUMNS:
        raise CampaignFileError(
            f"{path}:1: header is not the benchmark layout of this version "
            f"(expected {len(CSV_COLUMNS)} columns starting {', '.join(CSV_COLUMNS[:4])}, …); "
            "write to a new file", path, 1
        )
    pos = CSV_COLUMNS.index("config_id")
    done: set[str] = set()
    for line_no, fields in enumerate(reader, start=2):
        if len(fields) != len(CSV_COLUMNS):
            raise CampaignFileError(f"{path}:{line_no}: {len(fields)} fields, expected "
                                    f"{len(CSV_COLUMNS)}", path, line_no)
        done.add(fields[pos])
    return done


def format_row(record: dict) -> list[str]:
    """The CSV fields of a record in :data:`CSV_COLUMNS` order (NaN and None as empty)."""
    return [_format(record.get(col)) for col in CSV_COLUMNS]


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else format(value, ".7g")
    return str(value)


@dataclass
class CampaignResult:
    """Summary of one :func:`run_campaign` call."""

    out: str
    requested: int
    skipped_existing: int = 0
    written: int = 0
    ok: int = 0
    failed: int = 0
    stopped_early: bool = False
    seconds: float = 0.0
    device: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Every field, as the JSON summary of ``jobcast bench`` shows it."""
        return dict(self.__dict__)


CRASH_ATTEMPTS = 2  # a configuration that kills the process this often becomes a failed row


def _marker_path(path: Path) -> Path:
    return path.with_name(path.name + ".inflight")


def _read_marker(marker: Path) -> tuple[str, int] | None:
    """(config_id, attempts) of the configuration being timed when the process last died."""
    try:
        cid, attempts = marker.read_text().split()
        return cid, int(attempts)
    except (OSError, ValueError):
        return None


def failed_record(row: dict, plan: TimingPlan, error: str, backend: str = "tensorflow") -> dict:
    """The failed row of a configuration that could not be timed (``error`` says why)."""
    record = dict(row)
    record.update({c: math.nan for c in TIME_COLUMNS})
    record.update(status="failed", error=error, runs=0, reps=plan.reps, warmup=plan.warmup,
                  grad_input=plan.grad_input, backward=plan.backward,
                  framework=get_backend(backend).framework,
                  flops=get_layer(str(row["layer"])).flops(row))
    return record


def run_campaign(
    out: str | Path,
    layers: Sequence[str],
    samples: int,
    *,
    seed: int = 0,
    space: str | FeatureSpace = "paper",
    device: str = "cpu",
    plan: TimingPlan | None = None,
    max_rows: int | None = None,
    max_seconds: float | None = None,
    progress: Callable[[int, int, dict | None], None] | None = None,
    isolate: bool = False,
    max_restarts: int = 50,
    backend: str = "tensorflow",
    precisions: Sequence[str] = DEFAULT_PRECISIONS,
) -> CampaignResult:
    """Run (or resume) a campaign of ``samples`` configurations, appending rows to ``out``.

    ``max_rows``/``max_seconds`` stop early (rerun to resume). ``progress(done, total, row)``
    is called once with ``row=None`` before the first new row, then after every row.

    A configuration that kills the process (a native crash inside TensorFlow) is retried once
    on the next run and then recorded as a failed row. With ``isolate=True`` the campaign runs
    in a child process that is restarted after such a crash (up to ``max_restarts`` times), so
    one call always finishes the campaign; the child finds a backend registered outside
    :mod:`layerwise.backends` by importing its module (:attr:`Backend.home`). ``backend``
    times the rows (``tensorflow``, ``torch`` or any registered one); ``precisions`` times
    each drawn shape at each precision.
    """
    plan = plan or TimingPlan()
    engine = get_backend(backend)
    require_module(engine)
    precisions = tuple(check_precision(engine, p) for p in parse_precisions(precisions))
    if isolate:
        return _run_isolated(out, layers, samples, seed=seed, space=space, device=device,
                             plan=plan, max_rows=max_rows, max_seconds=max_seconds,
                             progress=progress, max_restarts=max_restarts,
                             backend=engine.name, precisions=precisions, home=engine.home)
    started = time.perf_counter()
    path = Path(out)
    done = prepare_campaign_file(path)
    configs = list(campaign_configs(layers, samples, seed, space, precisions, engine.name))
    todo = [row for row in configs if row["config_id"] not in done]
    result = CampaignResult(out=str(path), requested=samples,
                            skipped_existing=len(configs) - len(todo))
    hw = engine.detect(device)
    result.device = dict(hw)
    run_id = uuid.uuid4().hex[:12]
    total = len(configs)
    marker = _marker_path(path)
    pending = _read_marker(marker)
    if progress:
        progress(result.skipped_existing, total, None)
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        for n, row in enumerate(todo):
            if max_rows is not None and result.written >= max_rows:
                result.stopped_early = True
                break
            if max_seconds is not None and time.perf_counter() - started > max_seconds:
                result.stopped_early = True
                break
            attempts = pending[1] if pending and pending[0] == row["config_id"] else 0
            if attempts >= CRASH_ATTEMPTS:
                record = failed_record(row, plan, f"process died {attempts} times while "
                                       "timing this configuration (native crash)", engine.name)
            else:
                marker.write_text(f"{row['config_id']} {attempts + 1}\n")
                try:
                    record = bench_row(row, device, plan, engine.name)
                except KeyboardInterrupt:
                    marker.unlink(missing_ok=True)
                    raise
            record.update(hw, run_id=run_id)
            writer.writerow(format_row(record))
            handle.flush()
            marker.unlink(missing_ok=True)
            result.written += 1
            result.ok += record["status"] == "ok"
            result.failed += record["status"] == "failed"
            if (n + 1) % 100 == 0:
                _clear_session(engine.name)
            if progress:
                progress(result.skipped_existing + result.written, total, record)
    result.seconds = time.perf_counter() - started
    return result


def _worker(queue: Any, out: str, layers: list[str], samples: int, kwargs: dict,
            home: str = "") -> None:
    """Child process of an isolated campaign: get its backend (from ``home`` when it is not
    a built-in one), run it, report rows and the result."""

    def progress(done: int, total: int, row: dict | None) -> None:
        queue.put(("progress", (done, total, row)))

    try:
        ensure_backend(str(kwargs.get("backend", "tensorflow")), home)
        result = run_campaign(out, layers, samples, progress=progress, **kwargs)
        queue.put(("result", result.as_dict()))
        code = 0
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which re-raises
        queue.put(("error", (type(exc).__name__, str(exc))))
        code = 1
    queue.close()
    queue.join_thread()
    raise SystemExit(code)


def _run_isolated(out: str | Path, layers: Sequence[str], samples: int, *, progress: Any,
                  max_rows: int | None, max_seconds: float | None, max_restarts: int,
                  home: str = "", **kwargs: Any) -> CampaignResult:
    import multiprocessing as mp
    import queue as queue_module

    ctx = mp.get_context("spawn")
    started = time.perf_counter()
    total = CampaignResult(out=str(out), requested=samples)
    restarts, first = 0, True
    while True:
        rows_left = None if max_rows is None else max_rows - total.written
        secs_left = None if max_seconds is None else max_seconds - (time.perf_counter() - started)
        if (rows_left is not None and rows_left <= 0) or (secs_left is not None and secs_left <= 0):
            total.stopped_early = True
            break
        queue = ctx.Queue()
        child_kwargs = dict(kwargs, max_rows=rows_left, max_seconds=secs_left)
        proc = ctx.Process(target=_worker, args=(queue, str(out), list(layers), samples,
                                                 child_kwargs, home), daemon=True)
        proc.start()
        result = error = None
        while True:
            try:
                kind, payload = queue.get(timeout=0.5)
            except queue_module.Empty:
                if proc.is_alive():
                    continue
                try:
                    kind, payload = queue.get(timeout=0.5)
                except queue_module.Empty:
                    break
            if kind == "progress":
                done, count, row = payload
                if row is None:
                    if first:
                        total.skipped_existing, first = done, False
                else:
                    total.written += 1
                    total.ok += row["status"] == "ok"
                    total.failed += row["status"] == "failed"
                    total.device = {k: v for k, v in row.items()
                                    if k in ("device", "gpu") or k.startswith(("hw_", "sw_"))}
                if progress:
                    progress(done, count, row)
            elif kind == "result":
                result = payload
            else:
                error = payload
        proc.join()
        if error is not None:
            cls = {"CampaignFileError": CampaignFileError,
                   "BackendError": BackendError}.get(error[0], ValueError)
            raise cls(error[1])
        if result is not None:
            total.device = result["device"] or total.device
            total.stopped_early = result["stopped_early"]
            break
        restarts += 1
        if restarts > max_restarts:
            raise RuntimeError(f"benchmark process died {restarts} times (exit code "
                               f"{proc.exitcode}); see {out}")
    total.seconds = time.perf_counter() - started
    return total


def _clear_session(backend: str) -> None:
    if backend == "tensorflow":
        with contextlib.suppress(Exception):
            keras = quiet_import("keras")
            keras.backend.clear_session()
    gc.collect()


def parse_layers(text: str) -> list[str]:
    """``conv,dense,pool`` -> list (``all`` = every type); a clear error names unknown types."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return list(KINDS)
    unknown = [n for n in names if n not in KINDS]
    if unknown or not names:
        raise UnknownLayerKindError(
            f"unknown layer type(s) {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(KINDS)}"
        )
    return names
