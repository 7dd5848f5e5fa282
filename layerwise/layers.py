"""Registry of benchmarkable layer types: hyper-parameters, feature space, shapes and costs.

Pure Python/numpy (no TensorFlow). A row is a dict (or pandas row) in the published
Justus et al. (2018) layout: e.g. a conv row has ``batchsize, matsize, kernelsize,
channels_in, channels_out, strides, padding, use_bias, activation, optimizer, precision``.

Conventions (shared with the predictor and the network decomposition):

* tensors are NHWC with square spatial sides ``matsize`` (input side);
* ``flops(row)`` = forward FLOPs for one batch, counting a multiply-add as 2 FLOPs
  (so VGG16 at 224x224, ~15.5 G multiply-adds per image, is ~31 GFLOPs per image);
  element-wise work (bias, activation, pooling window, batch-norm) is counted as one FLOP
  per element and operation;
* ``bytes_in``/``bytes_out`` = size of the input/output activations of one batch,
  ``weights`` = parameter count (not bytes); element size = ``precision`` bits / 8;
* output sides follow Keras: ``same`` -> ceil(n / s), ``valid`` -> floor((n - k) / s) + 1.
  Impossible configurations get a side of 0 (costs 0); ``check(row)`` says why.

Adding a layer type = one ``LayerSpec`` here + one builder in ``layerwise/bench.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ACTIVATIONS = ("none", "relu", "tanh", "sigmoid")
OPTIMIZERS = ("none", "sgd", "adadelta", "adagrad", "momentum", "adam", "rmsprop")
TRAIN_OPTIMIZERS = OPTIMIZERS[1:]
PADDINGS = ("same", "valid")
POOL_TYPES = ("max", "avg")
TIME_COLUMNS = ("time_ms_median", "time_ms_min", "time_ms_max", "time_ms_std")

Row = Mapping[str, Any]


class InvalidLayerConfig(ValueError):
    """A layer configuration that cannot be built (e.g. kernel larger than a valid-padded input)."""


# --------------------------------------------------------------------------- feature spaces


@dataclass(frozen=True)
class FeatureSpace:
    """Ranges the random configurations are drawn from (inclusive integer ranges).

    ``log_*`` flags draw log-uniformly (small sizes as likely per octave as large ones).
    Draws are rejected and redrawn while ``flops`` exceeds ``max_flops`` or the activations
    plus weights exceed ``max_bytes``.
    """

    name: str
    batchsize: tuple[int, int] = (1, 64)
    matsize: tuple[int, int] = (1, 512)
    log_matsize: bool = False
    kernelsize: tuple[int, int] = (1, 7)
    pool_kernelsize: tuple[int, int] = (1, 7)
    strides: tuple[int, int] = (1, 4)
    channels: tuple[int, int] = (1, 10000)
    dense_dim: tuple[int, int] = (1, 4096)
    log_dense_dim: bool = False
    forward_share: float = 0.5  # share of rows with optimizer "none" (forward only)
    max_flops: float = math.inf  # forward FLOPs of one batch
    max_bytes: float = 2e9  # input + output activations + weights, in bytes
    description: str = ""


SPACES: dict[str, FeatureSpace] = {
    "paper": FeatureSpace(
        name="paper",
        description=(
            "Justus et al. 2018: batch 1-64, input side 1-512 (uniform), kernel 1-7, stride 1-4, "
            "channels 1-10000 (log-uniform), dense dims 1-4096; kernel <= input side; "
            "activations + weights <= 2 GB."
        ),
    ),
    "cpu": FeatureSpace(
        name="cpu",
        matsize=(1, 160),
        log_matsize=True,
        strides=(1, 2),
        pool_kernelsize=(1, 4),
        channels=(1, 2048),
        dense_dim=(1, 8192),
        log_dense_dim=True,
        max_flops=4e8,
        max_bytes=2.5e8,
        description=(
            "Scaled down for a few-core CPU: batch 1-64, input side 1-160 (log-uniform), "
            "kernel 1-7 (pool 1-4), stride 1-2, channels 1-2048 and dense dims 1-8192 "
            "(log-uniform); forward FLOPs of a batch <= 0.4 GFLOP, tensors <= 250 MB."
        ),
    ),
}


def get_space(space: str | FeatureSpace) -> FeatureSpace:
    """Return a feature space by name (``paper``, ``cpu``) or pass one through."""
    if isinstance(space, FeatureSpace):
        return space
    try:
        return SPACES[space]
    except KeyError:
        raise ValueError(
            f"unknown feature space {space!r}; known: {', '.join(sorted(SPACES))}"
        ) from None


def _int(rng: np.random.Generator, bounds: tuple[int, int], log: bool = False) -> int:
    lo, hi = bounds
    if log:
        value = math.floor(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))
        return int(min(hi, max(lo, value)))
    return int(rng.integers(lo, hi + 1))


def _choice(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return str(options[int(rng.integers(len(options)))])


def _optimizer(rng: np.random.Generator, space: FeatureSpace) -> str:
    if rng.random() < space.forward_share:
        return "none"
    return _choice(rng, TRAIN_OPTIMIZERS)


# --------------------------------------------------------------------------- shape helpers


def out_side(n: int, k: int, s: int, padding: str) -> int:
    """Output side of a window op with Keras semantics (0 when impossible)."""
    n, k, s = int(n), int(k), int(s)
    if n <= 0 or k <= 0 or s <= 0:
        return 0
    if padding == "same":
        return -(-n // s)
    return max(0, (n - k) // s + 1)


def _elem_bytes(row: Row) -> float:
    return float(row.get("precision", 32) or 32) / 8.0


def _act_flops(row: Row, elements: float) -> float:
    return 0.0 if str(row.get("activation", "none")) == "none" else elements


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


# --------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class LayerSpec:
    """One benchmarkable layer type.

    ``columns``: its hyper-parameter columns (besides ``optimizer`` and ``precision``,
    which every type has). ``sample(rng, space)`` draws one row from a feature space.
    """

    name: str
    columns: tuple[str, ...]
    description: str
    _draw: Callable[[np.random.Generator, FeatureSpace], dict[str, Any]] = field(repr=False)
    _shape: Callable[[Row], tuple[int, ...]] = field(repr=False)
    _flops: Callable[[Row, tuple[int, ...]], float] = field(repr=False)
    _weights: Callable[[Row], int] = field(repr=False)
    _input_shape: Callable[[Row], tuple[int, ...]] = field(repr=False)
    _check: Callable[[Row], list[str]] = field(repr=False, default=lambda row: [])
    n_inputs: int = 1

    # ---- sampling
    def sample(self, rng: np.random.Generator, space: str | FeatureSpace = "paper") -> dict:
        """Draw one valid configuration (a row dict with ``layer``) from ``space``."""
        sp = get_space(space)
        for _ in range(10000):
            row = self._draw(rng, sp)
            row["optimizer"] = _optimizer(rng, sp)
            row["precision"] = 32
            row = {"layer": self.name, **row}
            if self.check(row):
                continue
            size = self.bytes_in(row) + self.bytes_out(row) + 4.0 * self.weights(row)
            if self.flops(row) <= sp.max_flops and size <= sp.max_bytes:
                return row
        raise RuntimeError(f"feature space {sp.name!r} too tight for layer {self.name!r}")

    # ---- shapes and costs
    def check(self, row: Row) -> list[str]:
        """Reasons the configuration cannot be built; empty when it is valid."""
        problems = list(self._check(row))
        if not problems and min(self.output_shape(row)) <= 0:
            problems.append(f"output shape {self.output_shape(row)} has a side <= 0")
        return problems

    def validate(self, row: Row) -> None:
        """Raise ``InvalidLayerConfig`` with the reasons when ``check`` finds any."""
        problems = self.check(row)
        if problems:
            raise InvalidLayerConfig(f"{self.name}: " + "; ".join(problems))

    def input_shape(self, row: Row) -> tuple[int, ...]:
        """Shape of one input tensor including the batch dimension."""
        return self._input_shape(row)

    def output_shape(self, row: Row) -> tuple[int, ...]:
        """Shape of the output including the batch dimension (a side of 0 if impossible)."""
        return self._shape(row)

    def flops(self, row: Row) -> float:
        """Forward FLOPs of one batch (multiply-add = 2)."""
        shape = self.output_shape(row)
        if min(shape) <= 0:
            return 0.0
        return float(self._flops(row, shape))

    def macs(self, row: Row) -> float:
        """Forward multiply-accumulates of one batch (conv/dense/depthwise only, else 0)."""
        if self.name not in ("conv", "dense", "dwconv"):
            return 0.0
        shape = self.output_shape(row)
        if min(shape) <= 0:
            return 0.0
        if self.name == "dense":
            return float(int(row["batchsize"]) * int(row["dim_input"]) * int(row["dim_output"]))
        k = int(row["kernelsize"])
        cin = int(row["channels_in"])
        per_out = k * k * cin if self.name == "conv" else k * k
        return float(np.prod(shape, dtype=float) * per_out)

    def bytes_in(self, row: Row) -> float:
        """Bytes of the input activations of one batch (all inputs)."""
        return float(np.prod(self.input_shape(row), dtype=float)) * _elem_bytes(row) * self.n_inputs

    def bytes_out(self, row: Row) -> float:
        """Bytes of the output activations of one batch."""
        return float(np.prod(self.output_shape(row), dtype=float)) * _elem_bytes(row)

    def weights(self, row: Row) -> int:
        """Number of parameters (trainable and not)."""
        return int(self._weights(row))

    def features(self, row: Row) -> dict[str, float]:
        """Derived cost features of a row: flops, bytes in/out/weights, output size."""
        return {
            "flops": self.flops(row),
            "bytes_in": self.bytes_in(row),
            "bytes_out": self.bytes_out(row),
            "bytes_weights": float(self.weights(row)) * _elem_bytes(row),
            "output_size": float(np.prod(self.output_shape(row), dtype=float)),
        }


# --------------------------------------------------------------------------- per-type pieces


def _spatial_in(row: Row) -> tuple[int, ...]:
    m = int(row["matsize"])
    return (int(row["batchsize"]), m, m, int(row["channels_in"]))


def _window_check(row: Row) -> list[str]:
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


def _act_check(row: Row) -> list[str]:
    act = str(row.get("activation", "none"))
    return [] if act in ACTIVATIONS else [f"activation {act!r} not in {ACTIVATIONS}"]


def _window_shape(row: Row, channels: int) -> tuple[int, ...]:
    side = out_side(row["matsize"], row["kernelsize"], row["strides"], str(row["padding"]))
    return (int(row["batchsize"]), side, side, channels)


def _draw_window(rng: np.random.Generator, sp: FeatureSpace, kernel: tuple[int, int]) -> dict:
    m = _int(rng, sp.matsize, sp.log_matsize)
    return {
        "batchsize": _int(rng, sp.batchsize),
        "matsize": m,
        "kernelsize": _int(rng, (kernel[0], max(kernel[0], min(kernel[1], m)))),
        "strides": _int(rng, sp.strides),
        "padding": _choice(rng, PADDINGS),
    }


def _draw_conv(rng: np.random.Generator, sp: FeatureSpace) -> dict:
    row = _draw_window(rng, sp, sp.kernelsize)
    return {
        "batchsize": row["batchsize"],
        "matsize": row["matsize"],
        "kernelsize": row["kernelsize"],
        "channels_in": _int(rng, sp.channels, log=True),
        "channels_out": _int(rng, sp.channels, log=True),
        "strides": row["strides"],
        "padding": row["padding"],
        "use_bias": bool(rng.integers(2)),
        "activation": _choice(rng, ACTIVATIONS),
    }


def _conv_flops(row: Row, shape: tuple[int, ...]) -> float:
    out = float(np.prod(shape, dtype=float))
    k, cin = int(row["kernelsize"]), int(row["channels_in"])
    bias = out if _bool(row.get("use_bias", True)) else 0.0
    return 2.0 * out * k * k * cin + bias + _act_flops(row, out)


def _conv_weights(row: Row) -> int:
    k, cin, cout = int(row["kernelsize"]), int(row["channels_in"]), int(row["channels_out"])
    return k * k * cin * cout + (cout if _bool(row.get("use_bias", True)) else 0)


def _draw_dwconv(rng: np.random.Generator, sp: FeatureSpace) -> dict:
    row = _draw_conv(rng, sp)
    del row["channels_out"]
    return row


def _dwconv_flops(row: Row, shape: tuple[int, ...]) -> float:
    out = float(np.prod(shape, dtype=float))
    k = int(row["kernelsize"])
    bias = out if _bool(row.get("use_bias", True)) else 0.0
    return 2.0 * out * k * k + bias + _act_flops(row, out)


def _dwconv_weights(row: Row) -> int:
    k, c = int(row["kernelsize"]), int(row["channels_in"])
    return k * k * c + (c if _bool(row.get("use_bias", True)) else 0)


def _draw_dense(rng: np.random.Generator, sp: FeatureSpace) -> dict:
    return {
        "batchsize": _int(rng, sp.batchsize),
        "dim_input": _int(rng, sp.dense_dim, sp.log_dense_dim),
        "dim_output": _int(rng, sp.dense_dim, sp.log_dense_dim),
        "activation": _choice(rng, ACTIVATIONS),
    }


def _dense_check(row: Row) -> list[str]:
    problems = _act_check(row)
    for col in ("batchsize", "dim_input", "dim_output"):
        if int(row[col]) < 1:
            problems.append(f"{col} {row[col]} < 1")
    return problems


def _dense_flops(row: Row, shape: tuple[int, ...]) -> float:
    out = float(np.prod(shape, dtype=float))
    bias = out if _bool(row.get("use_bias", True)) else 0.0
    return 2.0 * out * int(row["dim_input"]) + bias + _act_flops(row, out)


def _dense_weights(row: Row) -> int:
    din, dout = int(row["dim_input"]), int(row["dim_output"])
    return din * dout + (dout if _bool(row.get("use_bias", True)) else 0)


def _draw_pool(rng: np.random.Generator, sp: FeatureSpace) -> dict:
    row = _draw_window(rng, sp, sp.pool_kernelsize)
    return {
        "batchsize": row["batchsize"],
        "matsize": row["matsize"],
        "kernelsize": row["kernelsize"],
        "channels_in": _int(rng, sp.channels, log=True),
        "strides": row["strides"],
        "padding": row["padding"],
        "pool_type": _choice(rng, POOL_TYPES),
    }


def _pool_check(row: Row) -> list[str]:
    problems = _window_check(row)
    if str(row["pool_type"]) not in POOL_TYPES:
        problems.append(f"pool_type {row['pool_type']!r} not in {POOL_TYPES}")
    return problems


def _draw_plane(rng: np.random.Generator, sp: FeatureSpace) -> dict:
    return {
        "batchsize": _int(rng, sp.batchsize),
        "matsize": _int(rng, sp.matsize, sp.log_matsize),
        "channels_in": _int(rng, sp.channels, log=True),
    }


def _draw_act(rng: np.random.Generator, sp: FeatureSpace) -> dict:
    return {**_draw_plane(rng, sp), "activation": _choice(rng, ACTIVATIONS[1:])}


def _plane_check(row: Row) -> list[str]:
    return [f"{c} {row[c]} < 1" for c in ("batchsize", "matsize", "channels_in") if int(row[c]) < 1]


def _elements(row: Row, shape: tuple[int, ...]) -> float:
    return float(np.prod(shape, dtype=float))


LAYER_TYPES: dict[str, LayerSpec] = {
    "conv": LayerSpec(
        name="conv",
        columns=("batchsize", "matsize", "kernelsize", "channels_in", "channels_out", "strides",
                 "padding", "use_bias", "activation"),
        description="Conv2D (NHWC, square input and kernel)",
        _draw=_draw_conv,
        _shape=lambda r: _window_shape(r, int(r["channels_out"])),
        _flops=_conv_flops,
        _weights=_conv_weights,
        _input_shape=_spatial_in,
        _check=lambda r: _window_check(r) + _act_check(r),
    ),
    "dense": LayerSpec(
        name="dense",
        columns=("batchsize", "dim_input", "dim_output", "activation"),
        description="Dense (fully connected, with bias)",
        _draw=_draw_dense,
        _shape=lambda r: (int(r["batchsize"]), int(r["dim_output"])),
        _flops=_dense_flops,
        _weights=_dense_weights,
        _input_shape=lambda r: (int(r["batchsize"]), int(r["dim_input"])),
        _check=_dense_check,
    ),
    "dwconv": LayerSpec(
        name="dwconv",
        columns=("batchsize", "matsize", "kernelsize", "channels_in", "strides", "padding",
                 "use_bias", "activation"),
        description="DepthwiseConv2D with depth multiplier 1 (channels_out = channels_in)",
        _draw=_draw_dwconv,
        _shape=lambda r: _window_shape(r, int(r["channels_in"])),
        _flops=_dwconv_flops,
        _weights=_dwconv_weights,
        _input_shape=_spatial_in,
        _check=lambda r: _window_check(r) + _act_check(r),
    ),
    "pool": LayerSpec(
        name="pool",
        columns=("batchsize", "matsize", "kernelsize", "channels_in", "strides", "padding",
                 "pool_type"),
        description="MaxPooling2D / AveragePooling2D",
        _draw=_draw_pool,
        _shape=lambda r: _window_shape(r, int(r["channels_in"])),
        _flops=lambda r, s: _elements(r, s) * int(r["kernelsize"]) ** 2,
        _weights=lambda r: 0,
        _input_shape=_spatial_in,
        _check=_pool_check,
    ),
    "bn": LayerSpec(
        name="bn",
        columns=("batchsize", "matsize", "channels_in"),
        description="BatchNormalization over the channel axis (training mode when training)",
        _draw=_draw_plane,
        _shape=_spatial_in,
        _flops=lambda r, s: 2.0 * _elements(r, s),
        _weights=lambda r: 4 * int(r["channels_in"]),
        _input_shape=_spatial_in,
        _check=_plane_check,
    ),
    "act": LayerSpec(
        name="act",
        columns=("batchsize", "matsize", "channels_in", "activation"),
        description="Stand-alone activation (relu, tanh, sigmoid)",
        _draw=_draw_act,
        _shape=_spatial_in,
        _flops=_elements,
        _weights=lambda r: 0,
        _input_shape=_spatial_in,
        _check=lambda r: _plane_check(r) + _act_check(r),
    ),
    "add": LayerSpec(
        name="add",
        columns=("batchsize", "matsize", "channels_in"),
        description="Element-wise sum of two equal tensors (residual connections)",
        _draw=_draw_plane,
        _shape=_spatial_in,
        _flops=_elements,
        _weights=lambda r: 0,
        _input_shape=_spatial_in,
        _check=_plane_check,
        n_inputs=2,
    ),
}


def layer_of(row: Row, columns: Any = None) -> str:
    """The layer type of a row: its ``layer`` value, else conv if it has ``kernelsize``, else dense.

    ``columns`` (e.g. a DataFrame's columns) decides for rows without a ``layer`` value.
    """
    value = row.get("layer") if hasattr(row, "get") else None
    if value is not None and not (isinstance(value, float) and math.isnan(value)) and value != "":
        return str(value)
    cols = columns if columns is not None else row.keys()
    return "conv" if "kernelsize" in cols else "dense"


def get_layer(name: str) -> LayerSpec:
    """Return the spec of a layer type, with a clear error for an unknown name."""
    try:
        return LAYER_TYPES[name]
    except KeyError:
        raise ValueError(
            f"unknown layer type {name!r}; known: {', '.join(LAYER_TYPES)}"
        ) from None


def all_columns() -> list[str]:
    """Union of the hyper-parameter columns of every layer type, in registry order."""
    seen: dict[str, None] = {}
    for spec in LAYER_TYPES.values():
        for col in spec.columns:
            seen.setdefault(col, None)
    for col in ("pool_type", "optimizer", "precision"):
        seen.setdefault(col, None)
    return list(seen)
