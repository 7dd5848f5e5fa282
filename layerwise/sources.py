"""Layer-timing tables as they come: detect the column format and map rows to layer kinds.

Three formats are read as they are (the format is told by the columns):

* ``justus``: the published Justus et al. (2018) files (``conv_<GPU>.csv.gz`` /
  ``dense_<GPU>.csv.gz``): TensorFlow 1.10, fp32; ``optimizer`` none = forward pass, else a
  training step (forward, weight gradient and the optimizer update); time ``time_ms_median``.
* ``neusight``: NeuSight's PyTorch 2.1 operator timings (``op``, ``gpu``, ``latency_ms``):
  conv, linear (a GEMM m x k by k x n), element-wise add/mul/div/pow/relu/gelu/tanh on a
  (batch x h) tensor, ``ln`` and ``softmax`` over h; fp32, forward only.
* ``bench``: this project's own bench CSV (a ``layer`` column and the kind columns).

:func:`kind_rows` returns rows in the kind layout (``layer`` + the kind's columns +
``optimizer``, ``precision``, ``framework``, ``gpu``, any ``hw_*``) with the original index,
plus the measured time in ms (NaN where the table has none). Rules: NeuSight ``gelu`` is
costed as ``tanh`` (closest activation kind), binary ops as ``add``; a NeuSight row that no
kind can express gets ``layer`` = "" and is reported by :func:`unsupported`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pandas as pd

from fleet.framework import Framework
from layerwise.errors import LayerwiseError

FORMATS = ("justus", "neusight", "bench")
NEUSIGHT_UNARY = {"relu": "relu", "gelu": "tanh", "tanh": "tanh", "sigmoid": "sigmoid"}
NEUSIGHT_BINARY = ("add", "mul", "div", "pow", "sub")
NEUSIGHT_FRAMEWORK = Framework.PYTORCH.value
DEFAULT_FRAMEWORK = Framework.TENSORFLOW.value


class SourceFormatError(LayerwiseError, ValueError):
    """A table whose columns match none of the known formats (message lists what is missing)."""

    kind: ClassVar[str] = "source_format"


def detect_format(columns: pd.Index | list[str]) -> str:
    """``justus``, ``neusight`` or ``bench`` from the column names."""
    cols = set(columns)
    if {"op", "latency_ms"} <= cols:
        return "neusight"
    if "layer" in cols:
        return "bench"
    if "batchsize" in cols and ("kernelsize" in cols or "dim_input" in cols):
        return "justus"
    raise SourceFormatError(
        "unrecognised layer table: expected Justus columns (batchsize + kernelsize or "
        "dim_input), NeuSight columns (op, gpu, latency_ms) or a bench CSV (layer + kind "
        f"columns); got {', '.join(sorted(map(str, cols))) or 'no columns'}"
    )


def _neusight_rows(table: pd.DataFrame) -> pd.DataFrame:
    op = table["op"].astype(str).str.strip().str.lower()
    num = {c: pd.to_numeric(table[c], errors="coerce") for c in table.columns
           if c in ("batch", "in_channels", "out_channels", "kernel_size", "input_size",
                    "stride", "padding", "m", "n", "k", "h")}
    out = pd.DataFrame(index=table.index)
    out["layer"] = ""
    out["optimizer"] = "none"
    out["precision"] = "fp32"
    out["framework"] = NEUSIGHT_FRAMEWORK
    out["gpu"] = table["gpu"].astype(str) if "gpu" in table.columns else ""
    out["op"] = op
    if "kernel_size" in num:
        conv = op.eq("conv")
        k, p, s = num["kernel_size"], num["padding"], num["stride"]
        same = conv & (2 * p == k - 1)
        valid = conv & p.eq(0)
        sel = same | valid
        out.loc[sel, "layer"] = "conv"
        out.loc[sel, "batchsize"] = num["batch"][sel]
        out.loc[sel, "matsize"] = num["input_size"][sel]
        out.loc[sel, "kernelsize"] = k[sel]
        out.loc[sel, "channels_in"] = num["in_channels"][sel]
        out.loc[sel, "channels_out"] = num["out_channels"][sel]
        out.loc[sel, "strides"] = s[sel]
        out.loc[sel, "padding"] = np.where(same[sel], "same", "valid")
        out.loc[sel, "use_bias"] = True
        out.loc[sel, "activation"] = "none"
    if "m" in num:
        lin = op.isin(("linear", "gemm", "matmul"))
        batch = num["batch"].fillna(1) if "batch" in num else 1
        out.loc[lin, "layer"] = "dense"
        out.loc[lin, "batchsize"] = (num["m"] * batch)[lin]
        out.loc[lin, "dim_input"] = num["k"][lin]
        out.loc[lin, "dim_output"] = num["n"][lin]
        out.loc[lin, "activation"] = "none"
    if "h" in num:
        flat = {"batchsize": num["batch"], "matsize": pd.Series(1.0, index=table.index),
                "channels_in": num["h"]}
        for sel, layer in ((op.isin(list(NEUSIGHT_UNARY)), "act"),
                           (op.isin(NEUSIGHT_BINARY), "add"),
                           (op.isin(("ln", "layernorm", "layer_norm")), "ln"),
                           (op.eq("softmax"), "softmax")):
            out.loc[sel, "layer"] = layer
            for col, values in flat.items():
                out.loc[sel, col] = values[sel]
        unary = op.isin(list(NEUSIGHT_UNARY))
        out.loc[unary, "activation"] = op[unary].map(NEUSIGHT_UNARY)
    return out


def kind_rows(table: pd.DataFrame, fmt: str | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """(rows in the kind layout, measured ms) of a table in one of :data:`FORMATS`."""
    fmt = fmt or detect_format(table.columns)
    if fmt == "neusight":
        rows = _neusight_rows(table)
        time_col = "latency_ms"
    elif fmt in ("justus", "bench"):
        rows = table.copy()
        if fmt == "justus":
            rows["layer"] = "conv" if "kernelsize" in table.columns else "dense"
        time_col = "time_ms_median"
    else:
        raise SourceFormatError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if "framework" not in rows.columns:
        rows["framework"] = DEFAULT_FRAMEWORK
    if "optimizer" not in rows.columns:
        rows["optimizer"] = "none"
    if "precision" not in rows.columns:
        rows["precision"] = "fp32"
    measured = (pd.to_numeric(table[time_col], errors="coerce") if time_col in table.columns
                else pd.Series(np.nan, index=table.index))
    return rows, measured.astype(float)


def unsupported(rows: pd.DataFrame) -> pd.Index:
    """Index of rows no layer kind expresses (``layer`` empty)."""
    layer = rows["layer"].astype(str).str.strip()
    return rows.index[layer.eq("") | layer.eq("nan")]


def read_table(path: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series, str]:
    """(original table, kind rows, measured ms, format) of a CSV file (gzip by suffix)."""
    table = pd.read_csv(path)
    fmt = detect_format(table.columns)
    rows, measured = kind_rows(table, fmt)
    return table, rows, measured, fmt
