"""Numeric features of benchmark rows: hyper-parameters, one-hot categories, derived costs
(FLOPs, bytes, output size, arithmetic intensity), hardware features and a roofline time.

Derived costs, boolean and categorical columns and kind-specific features (e.g. window
features, GEMM sizes of convolutions) come from the layer kind (``layerwise.kinds``), so every
layer type the bench knows gets them. Hardware features come from a row's ``hw_*`` columns
when present, else from the GPU catalog by the ``gpu`` column.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pandas as pd

from fleet.catalog import HW_KEYS, UnknownGpuError, resolve_gpu
from layerwise.errors import LayerwiseError
from layerwise.layers import KINDS, OPTIMIZERS

NUMERIC_HW = tuple(k for k in HW_KEYS if k != "hw_kind")
# Features that carry the device's identity; hardware-agnostic models drop them.
HARDWARE_FEATURES = (
    "log_peak_tflops", "log_bandwidth_gbs", "clock_ghz", "cores", "log_memory_gb",
    "log_roofline_ms", "log_compute_ms", "log_memory_ms",
)

# Optimizer state tensors per weight (read and written by the update step).
OPTIMIZER_SLOTS = {
    "none": 0, "sgd": 0, "momentum": 1, "adagrad": 1, "rmsprop": 2, "adadelta": 2, "adam": 2,
}
# A training step runs the forward pass, the input and weight gradients (about 3x the work).
TRAIN_WORK_FACTOR = 3.0


class FeatureError(LayerwiseError, ValueError):
    """Rows whose features cannot be computed (missing column, unknown GPU, bad value)."""

    kind: ClassVar[str] = "feature"


def _bool_series(values: pd.Series) -> pd.Series:
    if values.dtype == bool:
        return values.astype(float)
    text = values.astype(str).str.strip().str.lower()
    return text.isin(("true", "1", "1.0", "yes")).astype(float)


def hardware_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Numeric ``hw_*`` features per row: the row's own values, missing ones from the catalog."""
    out = pd.DataFrame(index=rows.index, columns=list(NUMERIC_HW), dtype=float)
    for key in NUMERIC_HW:
        if key in rows.columns:
            out[key] = pd.to_numeric(rows[key], errors="coerce")
    missing = out.isna().any(axis=1)
    if missing.any():
        if "gpu" not in rows.columns:
            raise FeatureError("rows have neither complete hw_* columns nor a 'gpu' column")
        for name in rows.loc[missing, "gpu"].astype(str).unique():
            try:
                spec = resolve_gpu(name).hardware_features()
            except UnknownGpuError as exc:
                first = rows.index[missing & (rows["gpu"].astype(str) == name)][0]
                raise FeatureError(
                    f"row {first}: no hw_* values and GPU not in the catalog: {exc}"
                ) from None
            sel = missing & (rows["gpu"].astype(str) == name)
            for key in NUMERIC_HW:
                out.loc[sel, key] = out.loc[sel, key].fillna(float(spec[key]))
    bad = ~(out > 0).all(axis=1)
    if bad.any():
        raise FeatureError(f"row {rows.index[bad][0]}: hardware features must be positive")
    return out


def cost_frame(rows: pd.DataFrame, layer: str) -> pd.DataFrame:
    """Derived forward costs per row from the layer registry (flops, bytes, output size)."""
    if layer not in KINDS:
        raise FeatureError(f"unknown layer type {layer!r}; known: {', '.join(KINDS)}")
    spec = KINDS[layer]
    missing = [c for c in spec.columns if c not in rows.columns and c not in spec.flags]
    if missing:
        raise FeatureError(f"{layer} rows lack column(s): {', '.join(missing)}")
    records = rows.to_dict("records")
    values = []
    for index, record in zip(rows.index, records, strict=True):
        try:
            values.append(spec.features(record))
        except (KeyError, ValueError, TypeError) as exc:
            raise FeatureError(f"row {index}: bad {layer} configuration ({exc})") from None
    return pd.DataFrame(values, index=rows.index, dtype=float)


def feature_frame(rows: pd.DataFrame, layer: str) -> pd.DataFrame:
    """All model features of ``rows`` (all of one layer type), one numeric column per feature."""
    spec = KINDS.get(layer)
    if spec is None:
        raise FeatureError(f"unknown layer type {layer!r}; known: {', '.join(KINDS)}")
    feats: dict[str, pd.Series | np.ndarray] = {}
    for col in spec.columns:
        if col in spec.flags:
            feats[col] = (
                _bool_series(rows[col]) if col in rows.columns
                else pd.Series(1.0, index=rows.index)
            )
        elif col in spec.categories:
            values = rows[col].astype(str).str.strip().str.lower()
            for option in spec.categories[col]:
                feats[f"{col}_{option}"] = (values == option).astype(float)
        else:
            feats[col] = pd.to_numeric(rows[col], errors="coerce").astype(float)
    optimizer = (
        rows["optimizer"].astype(str).str.strip().str.lower() if "optimizer" in rows.columns
        else pd.Series("none", index=rows.index)
    )
    unknown = ~optimizer.isin(OPTIMIZERS)
    if unknown.any():
        raise FeatureError(
            f"row {rows.index[unknown][0]}: optimizer {optimizer[unknown].iloc[0]!r} "
            f"not in {OPTIMIZERS}"
        )
    for option in OPTIMIZERS:
        feats[f"optimizer_{option}"] = (optimizer == option).astype(float)
    training = (optimizer != "none").astype(float)
    feats["training"] = training

    feats.update(spec.engineered_features(rows, feats))

    cost = cost_frame(rows, layer)
    hw = hardware_frame(rows)
    slots = optimizer.map(OPTIMIZER_SLOTS).astype(float)
    work_flops = cost["flops"] * (1.0 + (TRAIN_WORK_FACTOR - 1.0) * training)
    act_bytes = cost["bytes_in"] + cost["bytes_out"]
    work_bytes = (
        act_bytes * (1.0 + (TRAIN_WORK_FACTOR - 1.0) * training)
        + cost["bytes_weights"] * (1.0 + training * (2.0 + 2.0 * slots))
    )
    for key in ("flops", "bytes_in", "bytes_out", "bytes_weights", "output_size"):
        feats[f"log_{key}"] = np.log1p(cost[key])
    feats["log_work_flops"] = np.log1p(work_flops)
    feats["log_work_bytes"] = np.log1p(work_bytes)
    feats["log_intensity"] = np.log1p(work_flops) - np.log1p(work_bytes)
    feats.update(signature_columns(hw))
    # FP32 lanes per SM (GPU) or per core (CPU): 192 on Kepler, 128 on Maxwell, 64 on GP100/Volta.
    feats["lanes_per_core"] = (
        hw["hw_peak_tflops"] * 1e12 / (2.0 * hw["hw_cores"] * hw["hw_clock_mhz"] * 1e6)
    )
    feats["log_roofline_ms"] = np.log(roofline_ms(work_flops, work_bytes, hw))
    feats["log_compute_ms"] = np.log(np.maximum(work_flops / hw["hw_peak_tflops"] * 1e-9, 1e-6))
    feats["log_memory_ms"] = np.log(np.maximum(work_bytes / hw["hw_bandwidth_gbs"] * 1e-6, 1e-6))
    frame = pd.DataFrame(feats, index=rows.index).astype(float)
    bad = ~np.isfinite(frame.to_numpy()).all(axis=1)
    if bad.any():
        first = frame.index[bad][0]
        cols = [c for c in frame.columns if not math.isfinite(frame.at[first, c])]
        raise FeatureError(f"row {first}: non-numeric or missing value in {', '.join(cols)}")
    return frame


SIGNATURE_FEATURES = ("log_peak_tflops", "log_bandwidth_gbs", "clock_ghz", "cores", "log_memory_gb")


def signature_columns(hw: pd.DataFrame) -> dict[str, pd.Series]:
    """The :data:`SIGNATURE_FEATURES` of a :func:`hardware_frame` (what identifies a device)."""
    return {
        "log_peak_tflops": np.log(hw["hw_peak_tflops"]),
        "log_bandwidth_gbs": np.log(hw["hw_bandwidth_gbs"]),
        "clock_ghz": hw["hw_clock_mhz"] / 1000.0,
        "cores": hw["hw_cores"],
        "log_memory_gb": np.log(hw["hw_memory_gb"]),
    }


def hardware_signatures(features: pd.DataFrame) -> np.ndarray:
    """One rounded row of hardware features per row of a feature frame (identifies a device)."""
    return np.round(features[list(SIGNATURE_FEATURES)].to_numpy(np.float64), 6)


def known_device(features: pd.DataFrame, signatures: np.ndarray) -> np.ndarray:
    """True for rows whose hardware signature is one of ``signatures``."""
    sig = hardware_signatures(features)
    if len(signatures) == 0:
        return np.zeros(len(sig), dtype=bool)
    return (sig[:, None, :] == signatures[None, :, :]).all(axis=2).any(axis=1)


def roofline_ms(work_flops: pd.Series, work_bytes: pd.Series, hw: pd.DataFrame) -> pd.Series:
    """max(FLOPs / peak, bytes / bandwidth) in ms, floored at 1 ns to stay log-safe."""
    compute = work_flops / (hw["hw_peak_tflops"] * 1e12)
    memory = work_bytes / (hw["hw_bandwidth_gbs"] * 1e9)
    return np.maximum(np.maximum(compute, memory) * 1e3, 1e-6)
