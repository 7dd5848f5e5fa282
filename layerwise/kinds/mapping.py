"""Helpers for mapping network layers to kinds: activation costs, shape rules, JSON windows.

No kind or registry import here (kinds import this module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from layerwise.errors import LayerwiseError
from layerwise.kinds.space import PADDINGS, out_side

# Keras activation -> the activation whose cost it is given (the predictor knows four).
ACTIVATION_COST = {
    "linear": "none", "none": "none", "relu": "relu", "relu6": "relu", "leaky_relu": "relu",
    "tanh": "tanh", "gelu": "tanh", "elu": "tanh", "selu": "tanh", "sigmoid": "sigmoid",
    "hard_sigmoid": "sigmoid", "softmax": "sigmoid", "swish": "sigmoid", "silu": "sigmoid",
    "softplus": "sigmoid", "hard_swish": "sigmoid", "hard_silu": "sigmoid",
}


class NetworkSpecError(LayerwiseError, ValueError):
    """A network spec, file or name that cannot be decomposed (message says where and why)."""

    kind: ClassVar[str] = "network_spec"


class UnknownNetworkError(NetworkSpecError):
    """A network name that no shipped zoo (Keras or torchvision) and no ``keras.applications``
    model knows; the message names close names. Still a :class:`NetworkSpecError` and a
    ``ValueError`` for the callers that catch those."""

    kind: ClassVar[str] = "unknown_network"


def shape_text(shape: tuple) -> str:
    """``(7, 7, 64)`` -> ``7x7x64``."""
    return "x".join(str(int(d)) for d in shape)


def square(shape: tuple) -> bool:
    """An image shape (height, width, channels) with height == width."""
    return len(shape) == 3 and shape[0] == shape[1]


def plane_params(shape: tuple) -> dict[str, int] | None:
    """``matsize``/``channels_in`` of a square image or a flat vector (side 1), else None."""
    if square(shape):
        return {"matsize": shape[0], "channels_in": shape[-1]}
    if len(shape) == 1:
        return {"matsize": 1, "channels_in": shape[0]}
    return None


def need_image(kind: str, x: tuple, at: str) -> None:
    """JSON spec rule: window layers need an image input (height, width, channels)."""
    if len(x) != 3:
        raise NetworkSpecError(f"{at}: {kind} needs an image input, got shape {x}")


def spec_window(entry: Mapping[str, Any], x: tuple, at: str, *, kernel: int,
                strides: int | None, padding: str) -> tuple[int, int, str, int]:
    """(kernel, strides, padding, output side) of a JSON window entry with these defaults.

    ``kernel`` (or ``size``), ``strides`` (default: the kernel when ``strides`` is None) and
    ``padding`` are read from the entry; an output side of 0 is an error.
    """
    k = int(entry.get("kernel", entry.get("size", kernel)))
    s = int(entry.get("strides", k if strides is None else strides))
    pad = str(entry.get("padding", padding))
    if pad not in PADDINGS:
        raise NetworkSpecError(f"{at}: padding {pad!r} not in {PADDINGS}")
    side = out_side(x[0], k, s, pad)
    if side <= 0:
        raise NetworkSpecError(f"{at}: kernel {k} stride {s} {pad} on side {x[0]} gives no output")
    return k, s, pad, side
