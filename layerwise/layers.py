"""Benchmarkable layer types: hyper-parameters, feature spaces, shapes and costs.

Pure Python/numpy (no TensorFlow). A row is a dict (or pandas row) in the published
Justus et al. (2018) layout: e.g. a conv row has ``batchsize, matsize, kernelsize,
channels_in, channels_out, strides, padding, use_bias, activation, optimizer, precision``.

The layer types are the kinds of the registry in :mod:`layerwise.kinds` (one module per
kind; conventions for shapes and costs in :mod:`layerwise.kinds.base`). This module is the
stable entry point: ``KINDS`` *is* the registry dict, so kinds registered later appear here
too. Adding a layer type = one module in ``layerwise/kinds/`` + one ``register`` line.
"""

from __future__ import annotations

import math
from typing import Any

from layerwise.kinds import KINDS, InvalidLayerConfig, LayerKind, get_kind
from layerwise.kinds.base import Row
from layerwise.kinds.space import (
    ACTIVATIONS,
    OPTIMIZERS,
    PADDINGS,
    POOL_TYPES,
    SPACES,
    TIME_COLUMNS,
    TRAIN_OPTIMIZERS,
    FeatureSpace,
    get_space,
    out_side,
)

get_layer = get_kind


def layer_of(row: Row, columns: Any = None) -> str:
    """The layer type of a row: its ``layer`` value, else conv if it has ``kernelsize``, else dense.

    ``columns`` (e.g. a DataFrame's columns) decides for rows without a ``layer`` value (the
    published files, which hold one of the two types each).
    """
    value = row.get("layer") if hasattr(row, "get") else None
    if value is not None and not (isinstance(value, float) and math.isnan(value)) and value != "":
        return str(value)
    cols = columns if columns is not None else row.keys()
    return "conv" if "kernelsize" in cols else "dense"


def all_columns() -> list[str]:
    """Union of the hyper-parameter columns of every layer type, in registry order, then
    ``optimizer`` and ``precision``."""
    seen: dict[str, None] = {}
    for spec in KINDS.values():
        for col in spec.columns:
            seen.setdefault(col, None)
    for col in ("optimizer", "precision"):
        seen.setdefault(col, None)
    return list(seen)


__all__ = [
    "ACTIVATIONS", "KINDS", "OPTIMIZERS", "PADDINGS", "POOL_TYPES", "SPACES",
    "TIME_COLUMNS", "TRAIN_OPTIMIZERS", "FeatureSpace", "InvalidLayerConfig", "LayerKind",
    "Row", "all_columns", "get_layer", "get_space", "layer_of", "out_side",
]
