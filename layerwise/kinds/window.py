"""Shared pieces of window kinds (conv, depthwise conv, pool): NHWC input of side ``matsize``
and a square ``kernelsize`` window moved by ``strides`` with ``padding``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from typing_extensions import override

from layerwise.kinds.base import LayerKind, Row
from layerwise.kinds.mapping import square
from layerwise.kinds.space import PADDINGS, FeatureSpace, draw_choice, draw_int, out_side

if TYPE_CHECKING:  # annotations only: a forecast needs no pandas
    import pandas as pd

WINDOW_COLUMNS = ("batchsize", "matsize", "kernelsize", "strides", "padding")


def spatial_in(row: Row) -> tuple[int, ...]:
    """Input shape (batch, matsize, matsize, channels_in)."""
    m = int(row["matsize"])
    return (int(row["batchsize"]), m, m, int(row["channels_in"]))


def window_shape(row: Row, channels: int) -> tuple[int, ...]:
    """Output shape (batch, side, side, ``channels``) with Keras output sides."""
    side = out_side(row["matsize"], row["kernelsize"], row["strides"], str(row["padding"]))
    return (int(row["batchsize"]), side, side, channels)


def window_check(row: Row) -> list[str]:
    """Valid padding, strides/kernel/side >= 1, no kernel larger than a valid-padded input."""
    problems = []
    k, m = int(row["kernelsize"]), int(row["matsize"])
    if str(row["padding"]) not in PADDINGS:
        problems.append(f"padding {row['padding']!r} not in {PADDINGS}")
    if int(row["strides"]) < 1:
        problems.append(f"strides {row['strides']} < 1")
    if k < 1:
        problems.append(f"kernelsize {k} < 1")
    if m < 1:
        problems.append(f"matsize {m} < 1")
    if k > m and str(row["padding"]) == "valid":
        problems.append(f"kernel {k} larger than input side {m} with valid padding")
    return problems


def draw_window(rng: np.random.Generator, sp: FeatureSpace, kernel: tuple[int, int]) -> dict:
    """Batch, side, kernel (<= side), strides and padding, drawn in that order."""
    m = draw_int(rng, sp.matsize, sp.log_matsize)
    return {
        "batchsize": draw_int(rng, sp.batchsize),
        "matsize": m,
        "kernelsize": draw_int(rng, (kernel[0], max(kernel[0], min(kernel[1], m)))),
        "strides": draw_int(rng, sp.strides),
        "padding": draw_choice(rng, PADDINGS),
    }


def window_features(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """Output side, total and odd (asymmetric) SAME padding, and input rows left unused by VALID.

    TensorFlow pads an odd SAME total explicitly before cuDNN (an extra copy of the input),
    which makes those configurations markedly slower: the ``pad_asym`` flag carries this.
    """
    import pandas as pd

    n = pd.to_numeric(rows["matsize"], errors="coerce").astype(float)
    k = pd.to_numeric(rows["kernelsize"], errors="coerce").astype(float)
    s = pd.to_numeric(rows["strides"], errors="coerce").astype(float)
    same = rows["padding"].astype(str).str.strip().str.lower() == "same"
    side = np.where(same, np.ceil(n / s), np.floor((n - k) / s) + 1)
    side = np.maximum(side, 0.0)
    pad = np.where(same, np.maximum((side - 1) * s + k - n, 0.0), 0.0)
    unused = np.where(same, 0.0, np.maximum(n - ((side - 1) * s + k), 0.0))
    index = rows.index
    return {
        "out_side": pd.Series(side, index=index),
        "pad_total": pd.Series(pad, index=index),
        "pad_asym": pd.Series((pad % 2 == 1).astype(float), index=index),
        "unused": pd.Series(unused, index=index),
    }


def conv_reasons(cfg: Mapping[str, Any], x: tuple) -> list[str]:
    """Why a Keras Conv2D-like layer is not a benchmarked (square, plain) configuration."""
    k = tuple(cfg.get("kernel_size", (1, 1)))
    s = tuple(cfg.get("strides", (1, 1)))
    dil = tuple(cfg.get("dilation_rate", (1, 1)))
    groups = int(cfg.get("groups", 1))
    mult = int(cfg.get("depth_multiplier", 1))
    reasons = []
    if len(k) != 2 or k[0] != k[1]:
        reasons.append(f"non-square kernel {k}")
    if s[0] != s[1]:
        reasons.append(f"non-square strides {s}")
    if dil != (1, 1):
        reasons.append(f"dilation {dil}")
    if groups != 1:
        reasons.append(f"groups={groups}")
    if mult != 1:
        reasons.append(f"depth_multiplier={mult}")
    if not square(x):
        reasons.append(f"non-square input {x}")
    pad = str(cfg.get("padding", "valid"))
    if pad not in PADDINGS:
        reasons.append(f"padding {pad}")
    return reasons


def conv_window(cfg: Mapping[str, Any], x: tuple) -> dict[str, Any]:
    """``matsize``, ``kernelsize``, ``strides``, ``padding`` of a plain Keras Conv2D-like layer."""
    return {"matsize": x[0], "kernelsize": tuple(cfg.get("kernel_size", (1, 1)))[0],
            "strides": tuple(cfg.get("strides", (1, 1)))[0],
            "padding": str(cfg.get("padding", "valid"))}


def conv_unknown_reason(cls: str, reasons: list[str]) -> str:
    """The note of a Conv2D-like layer that is not benchmarked."""
    return f"{cls} with {', '.join(reasons)}: rough FLOPs estimate"


def kernel_elements(cfg: Mapping[str, Any]) -> int:
    """Kernel height x width of a Keras config."""
    return math.prod(tuple(cfg.get("kernel_size", (1, 1))))


class WindowKind(LayerKind):
    """A window kind: NHWC input, output sides from ``out_side``, window features."""

    out_channels_column: ClassVar[str] = "channels_in"

    @override
    def input_shape(self, row: Row) -> tuple[int, ...]:
        return spatial_in(row)

    @override
    def output_shape(self, row: Row) -> tuple[int, ...]:
        return window_shape(row, int(row[self.out_channels_column]))

    @override
    def problems(self, row: Row) -> list[str]:
        return window_check(row)

    def engineered_features(self, rows: pd.DataFrame,
                            feats: Mapping[str, pd.Series]) -> dict[str, pd.Series]:
        """Window features (see :func:`window_features`)."""
        return window_features(rows)
