"""Kind ``pad``: symmetric ZeroPadding2D of a square NHWC image.

``matsize`` is the input side and ``padding_px`` the zeros added on *each* of the four edges,
so the output side is ``matsize + 2 * padding_px``. FLOPs = 0 (a copy: its cost is the bytes
read and written). Keras padding that differs between edges (e.g. MobileNet's ``((0, 1),
(0, 1))``) is not this kind (left to the fallback).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from typing_extensions import override

from layerwise.kinds.base import NetLayer, Row, RowContext
from layerwise.kinds.mapping import NetworkSpecError, need_image, square
from layerwise.kinds.plane import PlaneKind
from layerwise.kinds.space import FeatureSpace, draw_int

PAD_RANGE = (1, 3)  # pixels per edge drawn for sampling (3 = a 7x7 "same" stem)


def symmetric_padding(padding: Any) -> int | None:
    """Pixels per edge of a Keras ``padding`` (int, (h, w) or ((t, b), (l, r))) when all four
    edges agree, else None."""
    if isinstance(padding, int):
        return padding
    try:
        edges = [int(p) for pair in padding for p in (pair if isinstance(pair, (list, tuple))
                                                      else (pair, pair))]
    except (TypeError, ValueError):
        return None
    return edges[0] if len(edges) == 4 and len(set(edges)) == 1 else None


class ZeroPad(PlaneKind):
    """ZeroPadding2D, ``padding_px`` zeros on every edge; FLOPs = 0, bytes = input + output."""

    name = "pad"
    columns = ("batchsize", "matsize", "channels_in", "padding_px")
    description = "ZeroPadding2D, the same number of pixels on every edge"
    keras_classes = ("ZeroPadding2D",)
    spec_types = ("pad",)

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        return {**super().draw(rng, space), "padding_px": draw_int(rng, PAD_RANGE)}

    @override
    def problems(self, row: Row) -> list[str]:
        problems = super().problems(row)
        if int(row["padding_px"]) < 1:
            problems.append(f"padding_px {row['padding_px']} < 1")
        return problems

    @override
    def output_shape(self, row: Row) -> tuple[int, ...]:
        b, m, _, c = self.input_shape(row)
        side = m + 2 * int(row["padding_px"])
        return (b, side, side, c)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return 0.0

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.ZeroPadding2D(int(row["padding_px"]))


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch.nn.ZeroPad2d(int(row["padding_px"]))

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """Equal padding on all edges of a square channels-last image maps to a row (none at
        all is a view); anything else is left to the fallback (None)."""
        cfg, x = ctx.layer.config, ctx.layer.x
        p = symmetric_padding(cfg.get("padding", 1))
        if p is None or not square(x) or cfg.get("data_format", "channels_last") != \
                "channels_last":
            return None
        if p == 0:
            return ctx.view("zero padding of 0 pixels: no computation")
        return [ctx.known(self.name, {"matsize": x[0], "channels_in": x[-1], "padding_px": p})]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        need_image("pad", x, at)
        p = int(entry.get("pad", 1))
        if p < 1:
            raise NetworkSpecError(f"{at}: pad must be >= 1, got {p}")
        return NetLayer(name, "ZeroPadding2D", [x], (x[0] + 2 * p, x[1] + 2 * p, x[2]),
                        {"padding": ((p, p), (p, p))})

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        return keras.layers.ZeroPadding2D(layer.config["padding"], name=layer.name)
