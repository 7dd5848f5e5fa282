"""Value domains of layer hyper-parameters and the feature spaces configurations are drawn from.

Pure Python/numpy. Rules: integer ranges are inclusive; ``log_*`` flags draw log-uniformly;
``forward_share`` of the rows get optimizer ``none`` (forward only), the rest a training
optimizer drawn uniformly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ACTIVATIONS = ("none", "relu", "tanh", "sigmoid")
OPTIMIZERS = ("none", "sgd", "adadelta", "adagrad", "momentum", "adam", "rmsprop")
TRAIN_OPTIMIZERS = OPTIMIZERS[1:]
PADDINGS = ("same", "valid")
POOL_TYPES = ("max", "avg")
TIME_COLUMNS = ("time_ms_median", "time_ms_min", "time_ms_max", "time_ms_std")


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
    "gpu": FeatureSpace(
        name="gpu",
        batchsize=(1, 256),
        matsize=(1, 256),
        log_matsize=True,
        strides=(1, 2),
        channels=(1, 4096),
        dense_dim=(1, 16384),
        log_dense_dim=True,
        max_flops=5e11,
        max_bytes=6e9,
        description=(
            "Today's CNN layers on a data-centre GPU: batch 1-256, input side 1-256 "
            "(log-uniform), kernel 1-7 (pool 1-7), stride 1-2, channels 1-4096 and dense dims "
            "1-16384 (log-uniform); forward FLOPs of a batch <= 0.5 TFLOP, tensors <= 6 GB."
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


def draw_int(rng: np.random.Generator, bounds: tuple[int, int], log: bool = False) -> int:
    """An integer in the inclusive ``bounds``, log-uniform when ``log``."""
    lo, hi = bounds
    if log:
        value = math.floor(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))
        return int(min(hi, max(lo, value)))
    return int(rng.integers(lo, hi + 1))


def draw_choice(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    """One of ``options``, uniformly."""
    return str(options[int(rng.integers(len(options)))])


def draw_optimizer(rng: np.random.Generator, space: FeatureSpace) -> str:
    """``none`` with probability ``forward_share``, else a training optimizer."""
    if rng.random() < space.forward_share:
        return "none"
    return draw_choice(rng, TRAIN_OPTIMIZERS)


def as_bool(value: object) -> bool:
    """A row's boolean value: the strings true/1/yes are True, other strings False."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def out_side(n: int, k: int, s: int, padding: str) -> int:
    """Output side of a window op with Keras semantics (0 when impossible).

    ``same`` -> ceil(n / s), ``valid`` -> floor((n - k) / s) + 1.
    """
    n, k, s = int(n), int(k), int(s)
    if n <= 0 or k <= 0 or s <= 0:
        return 0
    if padding == "same":
        return -(-n // s)
    return max(0, (n - k) // s + 1)
