"""Physics of a layer on a device: work, roofline bound and the shape/hardware ratios around it.

The efficiency predictor (:mod:`layerwise.efficiency`) learns ``log(measured / bound)`` from
the columns this module computes, then multiplies the bound back, so a forecast scales with
batch and shape by construction and a GPU known only from its spec sheet gets one.

Rules (per row, one batch, ms):

* **Precision** (``precision``: fp32/tf32/fp16/bf16 or bits): element bytes from
  :func:`fleet.precision.bytes_per_element`; compute peak from the catalog
  (:meth:`fleet.catalog.GpuSpec.peak_tflops`: tensor-core peak where the GPU has one).
* **Work of a pass.** Forward: ``flops`` = the kind's forward FLOPs; ``bytes`` = input +
  output activations + weights. A training-step row of a single-layer benchmark (Justus:
  ``optimizer`` != none) adds the weight gradient (same FLOPs as forward, reads input and
  output gradient, writes weight gradient) and the optimizer update (reads and writes the
  weights and ``OPTIMIZER_SLOTS`` state tensors, reads the gradient).
* **Wave quantisation** (kinds with a GEMM shape, :meth:`LayerKind.gemm_shape`): output tiles
  of ``TILE`` x ``TILE``; ``waves`` = tiles / SMs; the compute bound is divided by the
  utilisation of the last wave (``wave_eff`` = tiles / (ceil(tiles / SMs) x SMs)).
* ``bound_ms`` = max(compute, memory) + ``LAUNCH_MS`` (one kernel launch), never below 1 ns.
* :func:`physics_columns` works on row dicts with numpy alone (the forecast path of a shipped
  network); :func:`physics_frame` is the same on a DataFrame.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fleet.catalog import UnknownGpuError, on_catalog_change, resolve_gpu
from fleet.precision import Precision, bytes_per_element, parse_precision
from layerwise.errors import LayerwiseError
from layerwise.layers import KINDS

if TYPE_CHECKING:
    import pandas as pd

TILE = 128
LAUNCH_MS = 0.005
OPTIMIZER_SLOTS = {
    "none": 0, "sgd": 0, "momentum": 1, "adagrad": 1, "rmsprop": 2, "adadelta": 2, "adam": 2,
}
DEVICE_COLUMNS = ("peak_flops", "bandwidth", "sm_count", "l2_mb", "clock_mhz", "tensor", "tdp_w")
DEFAULT_TDP_W = 250.0


GEMM_KINDS = ("conv", "dense")


def family_of(layer: str) -> str:
    """``gemm`` for conv and dense (their rows have training-step timings), ``memory`` else."""
    return "gemm" if layer in GEMM_KINDS else "memory"


class PhysicsError(LayerwiseError, ValueError):
    """A row whose physics cannot be computed (unknown device, bad shape, bad precision)."""

    kind: ClassVar[str] = "physics"


@lru_cache(maxsize=512)
def _gpu_device(name: str, precision: Precision) -> tuple[float, ...]:
    spec = resolve_gpu(name)
    return (spec.peak_tflops(precision) * 1e12, spec.bandwidth_gbs * 1e9,
            float(spec.sm_count),
            float(spec.l2_mb or 4.0), float(spec.boost_clock_mhz),
            float(spec.has_tensor_cores(precision)), float(spec.tdp_w or DEFAULT_TDP_W))


on_catalog_change(_gpu_device.cache_clear)  # a GPU registered or removed at run time


def _hw_device(row: Mapping) -> tuple[float, ...]:
    """A device described by ``hw_*`` columns (a CPU, or a GPU outside the catalog)."""
    peak = float(row.get("hw_peak_tflops", math.nan)) * 1e12
    bandwidth = float(row.get("hw_bandwidth_gbs", math.nan)) * 1e9
    cores = float(row.get("hw_cores", math.nan))
    if not (peak > 0 and bandwidth > 0 and cores > 0):
        raise PhysicsError("no usable hw_peak_tflops/hw_bandwidth_gbs/hw_cores values")
    l2 = float(row.get("hw_l2_mb", 1.0) or 1.0)
    return (peak, bandwidth, cores, l2 if l2 > 0 else 1.0,
            float(row.get("hw_clock_mhz", 1000.0) or 1000.0), 0.0,
            float(row.get("hw_tdp_w", DEFAULT_TDP_W) or DEFAULT_TDP_W))


def _device_of(record: Mapping, p_text: str, label: Any) -> tuple[float, ...]:
    """:data:`DEVICE_COLUMNS` of one record: the catalog by ``gpu``, else its ``hw_*`` values."""
    try:
        p = parse_precision(p_text)
    except ValueError as exc:
        raise PhysicsError(f"row {label}: {exc}") from None
    name = str(record.get("gpu", ""))
    hw_kind = str(record.get("hw_kind", "gpu")) if "hw_peak_tflops" in record else "gpu"
    try:
        if hw_kind == "cpu" or not name.strip() or name == "nan":
            raise UnknownGpuError(name, [])
        return _gpu_device(name, p)
    except UnknownGpuError as exc:
        if "hw_peak_tflops" not in record:
            raise PhysicsError(f"row {label}: {exc}") from None
        try:
            return _hw_device(record)
        except PhysicsError as inner:
            raise PhysicsError(f"row {label}: {inner}") from None


def _kind_costs(record: Mapping, label: Any) -> tuple[float, ...]:
    """flops, bytes_in, bytes_out, weights, gemm m/n/k of one record."""
    kind = KINDS[str(record["layer"])]
    try:
        gemm = kind.gemm_shape(record) or (0, 0, 0)
        return (kind.flops(record), kind.bytes_in(record), kind.bytes_out(record),
                float(kind.weights(record)), *gemm)
    except (KeyError, ValueError, TypeError) as exc:
        raise PhysicsError(f"row {label}: bad {kind.name} configuration ({exc})") from None


def _check_kinds(records: Sequence[Mapping], columns: set[str]) -> None:
    for name in sorted({str(r["layer"]) for r in records}):
        kind = KINDS.get(name)
        if kind is None:
            raise PhysicsError(f"unknown layer kind {name!r}; known: {', '.join(KINDS)}")
        missing = [c for c in kind.columns if c not in columns and c not in kind.flags]
        if missing:
            raise PhysicsError(f"{name} rows lack column(s): {', '.join(missing)}")


def physics_columns(records: Sequence[Mapping], labels: Sequence[Any] | None = None,
                    columns: set[str] | None = None) -> dict[str, np.ndarray]:
    """Per record (one dict per row, every dict with the same keys): work (flops, bytes),
    device, bounds and ratios (see the module rules); ``labels`` name rows in errors
    (default: positions), ``columns`` are the keys every record has (default: the first's)."""
    n = len(records)
    labels = list(range(n)) if labels is None else list(labels)
    columns = set(records[0]) if columns is None and n else (columns or set())
    if n:
        _check_kinds(records, columns)
    cost = np.zeros((n, 7))
    dev = np.zeros((n, len(DEVICE_COLUMNS)))
    elem = np.zeros(n)
    slots = np.zeros(n)
    train = np.zeros(n)
    devices: dict[tuple, tuple[float, ...]] = {}
    has_prec, has_opt = "precision" in columns, "optimizer" in columns
    for i, (rec, label) in enumerate(zip(records, labels, strict=True)):
        cost[i] = _kind_costs(rec, label)
        p_text = str(rec["precision"]) if has_prec else "fp32"
        key = (str(rec.get("gpu", "")), p_text)
        if key not in devices:
            devices[key] = _device_of(rec, p_text, label)
        dev[i] = devices[key]
        elem[i] = _elem_bytes(rec["precision"] if has_prec else "fp32")
        opt = str(rec["optimizer"]).strip().lower() if has_opt else "none"
        if opt not in OPTIMIZER_SLOTS:
            raise PhysicsError(f"row {label}: optimizer {opt!r} not in "
                               f"{', '.join(OPTIMIZER_SLOTS)}")
        slots[i] = OPTIMIZER_SLOTS[opt]
        train[i] = float(opt != "none")
    return _physics(cost, dev, elem, train, slots, labels)


def _elem_bytes(precision: Any) -> float:
    try:
        return float(bytes_per_element(precision))
    except (TypeError, ValueError):
        return math.nan


def _physics(cost: np.ndarray, dev: np.ndarray, elem: np.ndarray, train: np.ndarray,
             slots: np.ndarray, labels: list[Any]) -> dict[str, np.ndarray]:
    flops_1, bytes_in, bytes_out, weights, m, n, k = cost.T
    d = {c: dev[:, j] for j, c in enumerate(DEVICE_COLUMNS)}
    w_bytes = weights * elem
    act = bytes_in + bytes_out
    flops = flops_1 * (1.0 + train)
    bytes_ = act + w_bytes + train * (act + w_bytes * (3.0 + 2.0 * slots))
    gemm = m > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        tiles = np.where(gemm, np.ceil(m / TILE) * np.ceil(n / TILE), 1.0)
        sms = d["sm_count"]
        wave_eff = np.where(gemm, tiles / (np.ceil(tiles / sms) * sms), 1.0)
        compute_ms = flops / (d["peak_flops"] * wave_eff) * 1e3
        memory_ms = bytes_ / d["bandwidth"] * 1e3
    bound = np.maximum(np.maximum(compute_ms, memory_ms) + LAUNCH_MS, 1e-6)
    out = {
        "flops": flops, "bytes": bytes_, "weight_bytes": w_bytes, "train": train,
        "slots": slots, "m": m, "n": n, "k": k, "tiles": tiles, "wave_eff": wave_eff,
        "compute_ms": compute_ms, "memory_ms": memory_ms, "bound_ms": bound, **d,
    }
    finite = np.ones(len(bound), dtype=bool)
    for values in out.values():
        finite &= np.isfinite(values)
    if not finite.all():
        raise PhysicsError(f"row {labels[int(np.flatnonzero(~finite)[0])]}: non-finite work "
                           "or bound (missing or non-numeric shape values)")
    return out


def device_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """:data:`DEVICE_COLUMNS` per row, from the catalog by ``gpu`` (else the ``hw_*`` columns)."""
    import pandas as pd

    records = rows.to_dict("records")
    has_prec = "precision" in rows.columns
    devices: dict[tuple, tuple[float, ...]] = {}
    table = np.zeros((len(rows), len(DEVICE_COLUMNS)))
    for i, (rec, label) in enumerate(zip(records, rows.index, strict=True)):
        p_text = str(rec["precision"]) if has_prec else "fp32"
        key = (str(rec.get("gpu", "")), p_text)
        if key not in devices:
            devices[key] = _device_of(rec, p_text, label)
        table[i] = devices[key]
    return pd.DataFrame(table, index=rows.index, columns=list(DEVICE_COLUMNS))


def physics_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Per row: work (flops, bytes), device, bounds and ratios (see the module rules)."""
    import pandas as pd

    cols = physics_columns(rows.to_dict("records"), rows.index, set(rows.columns))
    return pd.DataFrame(cols, index=rows.index)
