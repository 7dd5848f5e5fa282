"""Layer microbenchmarks in TensorFlow: build, time and record random layer configurations.

A campaign draws configuration ``i`` from ``numpy.random.default_rng([seed, i])`` (layer types
taken in turn), so the i-th configuration is known without running the earlier ones. Every
row gets a ``config_id`` (hash of seed, index, layer list and feature space); a rerun on the
same file skips the ids already present, drops a partial last line, and appends the rest.

Timing (as Justus et al. 2018): the layer step runs in a ``tf.function`` (forward only, or a
training step: forward + backward + ``optimizer.apply``),
``warmup`` untimed calls, then ``reps`` repetitions, each the mean of ``runs`` calls;
``time_ms_median/min/max/std`` summarise the repetitions. ``runs=0`` picks the number of calls
per repetition so one repetition lasts about ``target_rep_ms`` (1 to 50 calls).

A training step times what the layer costs inside a network: the backward pass starts from a
random upstream gradient of the output's shape (``backward="upstream"``) and also computes
the gradient of the layer input (``grad_input=True``). Justus et al. instead differentiated an
MSE loss against a random target and only the weights: ``backward="mse"`` with
``grad_input=False`` (``--backward mse --no-grad-input``) reproduces that. The MSE loss adds
several passes over the output, which dominates cheap layers (batch norm, activations, adds).
Layers without weights always differentiate the input.

The Keras layer timed for a row is built by its kind (``LayerKind.build`` in
:mod:`layerwise.kinds`); this module names no layer kind.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import hashlib
import math
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from layerwise.layers import (
    LAYER_TYPES,
    TIME_COLUMNS,
    FeatureSpace,
    all_columns,
    get_layer,
    get_space,
)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HW_COLUMNS = ("hw_kind", "hw_memory_gb", "hw_bandwidth_gbs", "hw_clock_mhz", "hw_cores",
              "hw_peak_tflops")
EXTRA_COLUMNS = (
    "layer", "status", "error", "device", *HW_COLUMNS, "hw_model", "sw_tensorflow", "sw_python",
    "reps", "runs", "warmup", "grad_input", "backward", "flops", "run_id", "config_id", "seed",
    "index", "space",
)
CSV_COLUMNS: tuple[str, ...] = ("gpu", *all_columns(), *TIME_COLUMNS, *EXTRA_COLUMNS)


# --------------------------------------------------------------------------- optimizers

OPTIMIZERS: dict[str, Callable[[Any], Any]] = {
    "sgd": lambda keras: keras.optimizers.SGD(learning_rate=0.01),
    "momentum": lambda keras: keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
    "adadelta": lambda keras: keras.optimizers.Adadelta(),
    "adagrad": lambda keras: keras.optimizers.Adagrad(),
    "adam": lambda keras: keras.optimizers.Adam(),
    "rmsprop": lambda keras: keras.optimizers.RMSprop(),
}

# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class TimingPlan:
    """How one configuration is timed."""

    warmup: int = 5
    reps: int = 5
    runs: int = 0  # calls per repetition; 0 = adapt to target_rep_ms
    target_rep_ms: float = 50.0
    max_runs: int = 50
    grad_input: bool = True
    backward: str = "upstream"  # or "mse" (Justus et al.: MSE loss against a random target)

    def __post_init__(self) -> None:
        if self.backward not in ("upstream", "mse"):
            raise ValueError(f"backward must be 'upstream' or 'mse', got {self.backward!r}")


def _make_step(tf: Any, keras: Any, row: dict, grad_input: bool,
               backward: str = "upstream") -> tuple[Callable, tuple]:
    """Build the layer and return (tf.function step, its arguments)."""
    spec = get_layer(str(row["layer"]))
    layer = spec.build(keras, row)
    in_shape = spec.input_shape(row)
    seed = int(row.get("index", 0) or 0)
    inputs = [
        tf.random.stateless_normal(in_shape, seed=[seed, j]) for j in range(spec.n_inputs)
    ]
    layer_input = inputs if spec.n_inputs > 1 else inputs[0]
    out = layer(layer_input)  # builds the weights eagerly
    optimizer_name = str(row.get("optimizer", "none"))
    if optimizer_name == "none":

        @tf.function
        def forward(x: Any) -> Any:
            return layer(x, training=False)

        return forward, (layer_input,)

    if optimizer_name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer_name!r}")
    optimizer = OPTIMIZERS[optimizer_name](keras)
    variables = list(layer.trainable_variables)
    if variables:
        optimizer.build(variables)
    target = tf.random.stateless_normal(tuple(out.shape), seed=[seed, 99])
    watch_input = grad_input or not variables
    upstream = backward == "upstream"

    @tf.function
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            if watch_input:
                tape.watch(x)
            pred = layer(x, training=True)
            if not upstream:
                loss = tf.reduce_mean(tf.square(pred - y))
        sources = list(variables) + ([x] if watch_input else [])
        if upstream:  # y is the gradient arriving from the next layer
            grads = tape.gradient(pred, sources, output_gradients=y)
        else:
            grads = tape.gradient(loss, sources)
        if variables:
            optimizer.apply(grads[: len(variables)], variables)
        # return the output and the input gradient so that neither is pruned from the graph
        return (pred, *tf.nest.flatten(grads[len(variables):]))

    return train_step, (layer_input, target)


def _sync(result: Any) -> None:
    """Wait for the device: fetch one element of the last result to the host."""
    tensor = result[0] if isinstance(result, (list, tuple)) else result
    rank = len(tensor.shape)
    (tensor[(0,) * rank] if rank else tensor).numpy()


def time_config(row: dict, device: str = "cpu", plan: TimingPlan | None = None) -> dict:
    """Time one configuration on ``device``; returns time_ms_* plus ``runs``.

    Raises for invalid configurations (``InvalidLayerConfig``) and TensorFlow errors (OOM…);
    :func:`bench_row` turns those into failed rows.
    """
    import keras
    import tensorflow as tf

    from layerwise.hardware import tf_device_string

    plan = plan or TimingPlan()
    get_layer(str(row["layer"])).validate(row)
    with tf.device(tf_device_string(device)):
        step, args = _make_step(tf, keras, row, plan.grad_input, plan.backward)
        result = step(*args)  # traces
        for _ in range(max(0, plan.warmup - 1)):
            result = step(*args)
        _sync(result)
        runs = plan.runs
        if runs <= 0:
            start = time.perf_counter()
            result = step(*args)
            _sync(result)
            one = max(time.perf_counter() - start, 1e-6)
            runs = int(min(plan.max_runs, max(1, round(plan.target_rep_ms / 1000.0 / one))))
        times = []
        for _ in range(plan.reps):
            start = time.perf_counter()
            for _ in range(runs):
                result = step(*args)
            _sync(result)
            times.append((time.perf_counter() - start) / runs * 1000.0)
    return {
        "time_ms_median": statistics.median(times),
        "time_ms_min": min(times),
        "time_ms_max": max(times),
        "time_ms_std": statistics.pstdev(times) if len(times) > 1 else 0.0,
        "runs": runs,
    }


def _error_text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if "ResourceExhausted" in name or "out of memory" in first.lower() or "OOM" in first:
        name = "OOM"
    return f"{name}: {first}"[:300]


def bench_row(row: dict, device: str = "cpu", plan: TimingPlan | None = None) -> dict:
    """Time one configuration; never raises for a bad config or a TF error: ``status=failed``."""
    out = dict(row)
    plan = plan or TimingPlan()
    out.update(reps=plan.reps, warmup=plan.warmup, grad_input=plan.grad_input,
               backward=plan.backward)
    spec = get_layer(str(row["layer"]))
    out["flops"] = spec.flops(row)
    try:
        out.update(time_config(row, device, plan))
        out.update(status="ok", error="")
    except Exception as exc:  # noqa: BLE001 - every failure becomes a failed row
        out.update({c: math.nan for c in TIME_COLUMNS})
        out.update(status="failed", error=_error_text(exc), runs=0)
        gc.collect()
    return out


# --------------------------------------------------------------------------- campaigns


def config_id(seed: int, index: int, layers: Sequence[str], space: str) -> str:
    """Stable id of the ``index``-th configuration of a campaign (12 hex digits)."""
    key = f"{seed}|{index}|{','.join(layers)}|{space}"
    return hashlib.sha1(key.encode()).hexdigest()[:12]


def campaign_configs(
    layers: Sequence[str], samples: int, seed: int = 0, space: str | FeatureSpace = "paper"
) -> Iterator[dict]:
    """The deterministic configurations of a campaign, each with index, config_id, seed, space."""
    if not layers:
        raise ValueError("no layer types given")
    for name in layers:
        get_layer(name)
    sp = get_space(space)
    for index in range(samples):
        name = layers[index % len(layers)]
        rng = np.random.default_rng([seed, index])
        row = LAYER_TYPES[name].sample(rng, sp)
        row.update(index=index, seed=seed, space=sp.name,
                   config_id=config_id(seed, index, layers, sp.name))
        yield row


class CampaignFileError(ValueError):
    """The output file exists but cannot be resumed (e.g. a different header)."""


def _prepare_file(path: Path) -> set[str]:
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
        return _prepare_file(path)
    text = data.decode("utf-8", errors="replace")
    reader = csv.reader(text.splitlines())
    header = next(reader)
    if tuple(header) != CSV_COLUMNS:
        raise CampaignFileError(
            f"{path}:1: header is not the benchmark layout of this version "
            f"(expected {len(CSV_COLUMNS)} columns starting {', '.join(CSV_COLUMNS[:4])}, …); "
            "write to a new file"
        )
    pos = CSV_COLUMNS.index("config_id")
    done: set[str] = set()
    for line_no, fields in enumerate(reader, start=2):
        if len(fields) != len(CSV_COLUMNS):
            raise CampaignFileError(f"{path}:{line_no}: {len(fields)} fields, expected "
                                    f"{len(CSV_COLUMNS)}")
        done.add(fields[pos])
    return done


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


def _failed_record(row: dict, plan: TimingPlan, error: str) -> dict:
    record = dict(row)
    record.update({c: math.nan for c in TIME_COLUMNS})
    record.update(status="failed", error=error, runs=0, reps=plan.reps, warmup=plan.warmup,
                  grad_input=plan.grad_input, backward=plan.backward,
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
) -> CampaignResult:
    """Run (or resume) a campaign of ``samples`` configurations, appending rows to ``out``.

    ``max_rows``/``max_seconds`` stop early (rerun to resume). ``progress(done, total, row)``
    is called once with ``row=None`` before the first new row, then after every row.

    A configuration that kills the process (a native crash inside TensorFlow) is retried once
    on the next run and then recorded as a failed row. With ``isolate=True`` the campaign runs
    in a child process that is restarted after such a crash (up to ``max_restarts`` times), so
    one call always finishes the campaign.
    """
    plan = plan or TimingPlan()
    if isolate:
        return _run_isolated(out, layers, samples, seed=seed, space=space, device=device,
                             plan=plan, max_rows=max_rows, max_seconds=max_seconds,
                             progress=progress, max_restarts=max_restarts)
    from layerwise.hardware import detect_device

    started = time.perf_counter()
    path = Path(out)
    done = _prepare_file(path)
    configs = list(campaign_configs(layers, samples, seed, space))
    todo = [row for row in configs if row["config_id"] not in done]
    result = CampaignResult(out=str(path), requested=samples,
                            skipped_existing=len(configs) - len(todo))
    hw = detect_device(device)
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
                record = _failed_record(row, plan, f"process died {attempts} times while "
                                        "timing this configuration (native crash)")
            else:
                marker.write_text(f"{row['config_id']} {attempts + 1}\n")
                try:
                    record = bench_row(row, device, plan)
                except KeyboardInterrupt:
                    marker.unlink(missing_ok=True)
                    raise
            record.update(hw, run_id=run_id)
            writer.writerow([_format(record.get(col)) for col in CSV_COLUMNS])
            handle.flush()
            marker.unlink(missing_ok=True)
            result.written += 1
            result.ok += record["status"] == "ok"
            result.failed += record["status"] == "failed"
            if (n + 1) % 100 == 0:
                _clear_session()
            if progress:
                progress(result.skipped_existing + result.written, total, record)
    result.seconds = time.perf_counter() - started
    return result


def _worker(queue: Any, out: str, layers: list[str], samples: int, kwargs: dict) -> None:
    """Child process of an isolated campaign: run it, report rows and the result."""

    def progress(done: int, total: int, row: dict | None) -> None:
        queue.put(("progress", (done, total, row)))

    try:
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
                  **kwargs: Any) -> CampaignResult:
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
                                                 child_kwargs), daemon=True)
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
            cls = CampaignFileError if error[0] == "CampaignFileError" else ValueError
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


def _clear_session() -> None:
    with contextlib.suppress(Exception):
        import keras

        keras.backend.clear_session()
    gc.collect()


def parse_layers(text: str) -> list[str]:
    """``conv,dense,pool`` -> list (``all`` = every type); a clear error names unknown types."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return list(LAYER_TYPES)
    unknown = [n for n in names if n not in LAYER_TYPES]
    if unknown or not names:
        raise ValueError(
            f"unknown layer type(s) {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(LAYER_TYPES)}"
        )
    return names
