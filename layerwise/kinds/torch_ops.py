"""Shared PyTorch pieces of the kinds' ``build_torch`` hooks (imported only when timing in torch).

Rules: a torch module of a kind takes its input(s) in the kind's ``torch_layout``: ``nchw``
(the spatial kinds, PyTorch's default layout: NHWC rows permuted), ``nhwc`` (ln, softmax:
normalised over the last, channel axis) or ``flat`` (dense). Keras ``same`` padding is
reproduced exactly: total padding ``max((ceil(m / s) - 1) * s + k - m, 0)``, the odd pixel on
the bottom/right; symmetric amounts go to the op's own ``padding`` (no extra kernel), odd ones
to an explicit ``F.pad`` before it.
"""

from __future__ import annotations

import math
from typing import Any

from fleet.precision import parse_precision
from layerwise.kinds.base import Row
from layerwise.kinds.space import as_bool


def same_padding(side: int, kernel: int, stride: int) -> tuple[int, int]:
    """(before, after) pixels of Keras ``same`` padding for one spatial axis."""
    total = max((math.ceil(side / stride) - 1) * stride + kernel - side, 0)
    return total // 2, total - total // 2


def window_padding(row: Row) -> tuple[int, tuple[int, int, int, int] | None]:
    """(symmetric padding for the op, explicit F.pad amounts or None) of a window row."""
    if str(row["padding"]) != "same":
        return 0, None
    lo, hi = same_padding(int(row["matsize"]), int(row["kernelsize"]), int(row["strides"]))
    if lo == hi:
        return lo, None
    return 0, (lo, hi, lo, hi)


def activation(torch: Any, name: str) -> Any:
    """The torch module of a benchmarked activation (``none`` = identity)."""
    nn = torch.nn
    table = {"none": nn.Identity, "relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}
    try:
        return table[str(name)]()
    except KeyError:
        raise ValueError(f"activation {name!r} has no torch module; known: "
                         f"{', '.join(table)}") from None


def window_module(torch: Any, row: Row, make_op: Any) -> Any:
    """``[F.pad] -> make_op(symmetric padding) -> activation`` as one ``nn.Sequential``."""
    nn = torch.nn
    sym, explicit = window_padding(row)
    parts = []
    if explicit is not None:
        parts.append(nn.ZeroPad2d(explicit))
    parts.append(make_op(sym))
    act = str(row.get("activation", "none"))
    if act != "none":
        parts.append(activation(torch, act))
    return nn.Sequential(*parts)


def conv_module(torch: Any, row: Row, groups: bool = False) -> Any:
    """Conv2d (``groups``: depthwise, one filter per channel) with Keras padding semantics."""
    cin = int(row["channels_in"])
    cout = cin if groups else int(row["channels_out"])
    return window_module(torch, row, lambda pad: torch.nn.Conv2d(
        cin, cout, int(row["kernelsize"]), stride=int(row["strides"]), padding=pad,
        groups=cin if groups else 1, bias=as_bool(row.get("use_bias", True))))


def pool_module(torch: Any, row: Row) -> Any:
    """Max or average pooling (average over the real pixels only, as Keras)."""
    nn = torch.nn
    k, s = int(row["kernelsize"]), int(row["strides"])
    if str(row["pool_type"]) == "max":
        return window_module(torch, {**row, "activation": "none"},
                             lambda pad: nn.MaxPool2d(k, s, padding=min(pad, k // 2)))
    return window_module(torch, {**row, "activation": "none"},
                         lambda pad: nn.AvgPool2d(k, s, padding=min(pad, k // 2),
                                                  count_include_pad=False))


def dense_module(torch: Any, row: Row) -> Any:
    """Linear (+ activation)."""
    nn = torch.nn
    linear = nn.Linear(int(row["dim_input"]), int(row["dim_output"]),
                       bias=as_bool(row.get("use_bias", True)))
    act = str(row.get("activation", "none"))
    return linear if act == "none" else nn.Sequential(linear, activation(torch, act))


def lambda_module(torch: Any, fn: Any) -> Any:
    """A parameter-free module whose forward is ``fn(*inputs)``."""

    class Fn(torch.nn.Module):
        def forward(self, *inputs: Any) -> Any:
            return fn(*inputs)

    return Fn()


def activation_dtype(torch: Any, row: Row) -> Any:
    """The dtype activations flow in at the row's precision (fp16/bf16; else float32)."""
    name = str(parse_precision(row.get("precision", 32)))
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name, torch.float32)


def concat_module(torch: Any, row: Row, others: list[int]) -> Any:
    """Concatenates its NCHW input with fixed tensors of ``others`` channels (buffers)."""
    batch, side = int(row["batchsize"]), int(row["matsize"])
    dtype = activation_dtype(torch, row)

    class Concat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for i, c in enumerate(others):
                self.register_buffer(f"input_{i + 1}",
                                     torch.randn(batch, c, side, side, dtype=dtype))

        def forward(self, x: Any) -> Any:
            fixed = [getattr(self, f"input_{i + 1}") for i in range(len(others))]
            return torch.cat([x, *fixed], dim=1)

    return Concat()
