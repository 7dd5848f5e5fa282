"""Shared pieces of element-wise kinds (batch norm, activation, add): an NHWC tensor of side
``matsize`` (1 for a flat vector) and ``channels_in`` channels, output shape = input shape.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from typing_extensions import override

from layerwise.kinds.base import LayerKind, Row
from layerwise.kinds.space import FeatureSpace, draw_int
from layerwise.kinds.window import spatial_in


def draw_plane(rng: np.random.Generator, sp: FeatureSpace) -> dict[str, Any]:
    """Batch, side and channels (log-uniform), drawn in that order."""
    return {
        "batchsize": draw_int(rng, sp.batchsize),
        "matsize": draw_int(rng, sp.matsize, sp.log_matsize),
        "channels_in": draw_int(rng, sp.channels, log=True),
    }


class PlaneKind(LayerKind):
    """An element-wise kind: output shape = input shape, all sizes >= 1."""

    columns: ClassVar[tuple[str, ...]] = ("batchsize", "matsize", "channels_in")

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        return draw_plane(rng, space)

    @override
    def problems(self, row: Row) -> list[str]:
        return [f"{c} {row[c]} < 1" for c in ("batchsize", "matsize", "channels_in")
                if int(row[c]) < 1]

    @override
    def input_shape(self, row: Row) -> tuple[int, ...]:
        return spatial_in(row)

    @override
    def output_shape(self, row: Row) -> tuple[int, ...]:
        return spatial_in(row)
