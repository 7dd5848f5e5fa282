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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

import numpy as np
import pandas as pd

from fleet.catalog import UnknownGpuError, resolve_gpu
from fleet.precision import Precision, bytes_per_element, parse_precision
from layerwise.layers import LAYER_TYPES

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


class PhysicsError(ValueError):
    """A row whose physics cannot be computed (unknown device, bad shape, bad precision)."""


@lru_cache(maxsize=512)
def _gpu_device(name: str, precision: Precision) -> tuple[float, ...]:
    spec = resolve_gpu(name)
    return (spec.peak_tflops(precision) * 1e12, spec.bandwidth_gbs * 1e9,
            float(spec.sm_count),
            float(spec.l2_mb or 4.0), float(spec.boost_clock_mhz),
            float(spec.has_tensor_cores(precision)), float(spec.tdp_w or DEFAULT_TDP_W))


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


def device_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """:data:`DEVICE_COLUMNS` per row, from the catalog by ``gpu`` (else the ``hw_*`` columns)."""
    gpu = rows["gpu"].astype(str) if "gpu" in rows.columns else pd.Series("", index=rows.index)
    prec = rows["precision"] if "precision" in rows.columns else pd.Series("fp32", index=rows.index)
    has_hw = "hw_peak_tflops" in rows.columns
    keys = pd.DataFrame({"gpu": gpu, "precision": prec.astype(str)})
    values: dict[tuple[str, str], tuple[float, ...]] = {}
    for (name, p_text), idx in keys.groupby(["gpu", "precision"], sort=False).groups.items():
        try:
            p = parse_precision(p_text)
        except ValueError as exc:
            raise PhysicsError(f"row {idx[0]}: {exc}") from None
        first = rows.loc[idx[0]]
        hw_kind = str(first.get("hw_kind", "gpu")) if has_hw else "gpu"
        try:
            if hw_kind == "cpu" or not name.strip() or name == "nan":
                raise UnknownGpuError(name, [])
            values[(name, p_text)] = _gpu_device(name, p)
        except UnknownGpuError as exc:
            if not has_hw:
                raise PhysicsError(f"row {idx[0]}: {exc}") from None
            try:
                values[(name, p_text)] = _hw_device(first)
            except PhysicsError as inner:
                raise PhysicsError(f"row {idx[0]}: {inner}") from None
    table = np.array([values[(g, p)] for g, p in zip(keys["gpu"], keys["precision"],
                                                      strict=True)], dtype=float)
    return pd.DataFrame(table.reshape(len(rows), len(DEVICE_COLUMNS)), index=rows.index,
                        columns=list(DEVICE_COLUMNS))


def _costs(rows: pd.DataFrame) -> pd.DataFrame:
    """flops, bytes_in, bytes_out, weights, gemm m/n/k per row (one pass over the records)."""
    layer = rows["layer"].astype(str)
    for name in layer.unique():
        kind = LAYER_TYPES.get(name)
        if kind is None:
            raise PhysicsError(f"unknown layer kind {name!r}; known: {', '.join(LAYER_TYPES)}")
        missing = [c for c in kind.columns if c not in rows.columns and c not in kind.flags]
        if missing:
            raise PhysicsError(f"{name} rows lack column(s): {', '.join(missing)}")
    out = np.zeros((len(rows), 7))
    for i, (index, record) in enumerate(zip(rows.index, rows.to_dict("records"), strict=True)):
        kind = LAYER_TYPES[str(record["layer"])]
        try:
            gemm = kind.gemm_shape(record) or (0, 0, 0)
            out[i] = (kind.flops(record), kind.bytes_in(record), kind.bytes_out(record),
                      float(kind.weights(record)), *gemm)
        except (KeyError, ValueError, TypeError) as exc:
            raise PhysicsError(f"row {index}: bad {kind.name} configuration ({exc})") from None
    return pd.DataFrame(out, index=rows.index,
                        columns=["flops", "bytes_in", "bytes_out", "weights", "m", "n", "k"])


def physics_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Per row: work (flops, bytes), device, bounds and ratios (see the module rules)."""
    cost = _costs(rows)
    dev = device_frame(rows)
    prec = rows["precision"] if "precision" in rows.columns else pd.Series("fp32", index=rows.index)
    elem = prec.map(bytes_per_element).astype(float)
    opt = (rows["optimizer"].astype(str).str.strip().str.lower()
           if "optimizer" in rows.columns else pd.Series("none", index=rows.index))
    unknown = ~opt.isin(list(OPTIMIZER_SLOTS))
    if unknown.any():
        raise PhysicsError(f"row {rows.index[unknown][0]}: optimizer {opt[unknown].iloc[0]!r} "
                           f"not in {', '.join(OPTIMIZER_SLOTS)}")
    train = (opt != "none").astype(float)
    slots = opt.map(OPTIMIZER_SLOTS).astype(float)
    w_bytes = cost["weights"] * elem
    act = cost["bytes_in"] + cost["bytes_out"]
    flops = cost["flops"] * (1.0 + train)
    bytes_ = act + w_bytes + train * (act + w_bytes * (3.0 + 2.0 * slots))
    m, n = cost["m"], cost["n"]
    gemm = m > 0
    tiles = np.where(gemm, np.ceil(m / TILE) * np.ceil(n / TILE), 1.0)
    sms = dev["sm_count"]
    wave_eff = np.where(gemm, tiles / (np.ceil(tiles / sms) * sms), 1.0)
    compute_ms = flops / (dev["peak_flops"] * wave_eff) * 1e3
    memory_ms = bytes_ / dev["bandwidth"] * 1e3
    bound = np.maximum(np.maximum(compute_ms, memory_ms) + LAUNCH_MS, 1e-6)
    frame = pd.DataFrame({
        "flops": flops, "bytes": bytes_, "weight_bytes": w_bytes, "train": train,
        "slots": slots, "m": m, "n": n, "k": cost["k"], "tiles": tiles, "wave_eff": wave_eff,
        "compute_ms": compute_ms, "memory_ms": memory_ms, "bound_ms": bound,
        **{c: dev[c] for c in DEVICE_COLUMNS},
    }, index=rows.index)
    bad = ~np.isfinite(frame.to_numpy(float)).all(axis=1)
    if bad.any():
        raise PhysicsError(f"row {rows.index[bad][0]}: non-finite work or bound "
                           "(missing or non-numeric shape values)")
    return frame
