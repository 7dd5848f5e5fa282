"""Kind ``pool``: MaxPooling2D / AveragePooling2D (global pooling = a window of the whole input)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import LayerKind, NetLayer, Row, RowContext, elements
from layerwise.kinds.mapping import NetworkSpecError, need_image, spec_window, square
from layerwise.kinds.space import POOL_TYPES, FeatureSpace, draw_choice, draw_int
from layerwise.kinds.window import WindowKind, draw_window, window_check

GLOBAL_CLASSES = ("GlobalAveragePooling2D", "GlobalMaxPooling2D")


class Pool(WindowKind):
    """Pooling; FLOPs = one per output element and window element."""

    name = "pool"
    columns = ("batchsize", "matsize", "kernelsize", "channels_in", "strides", "padding",
               "pool_type")
    description = "MaxPooling2D / AveragePooling2D"
    categories = {**LayerKind.categories, "pool_type": POOL_TYPES}
    floor_values = {"pool_type": "max"}
    keras_classes = ("MaxPooling2D", "AveragePooling2D", *GLOBAL_CLASSES)
    spec_types = ("pool", "global_pool")

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        row = draw_window(rng, space, space.pool_kernelsize)
        return {
            "batchsize": row["batchsize"],
            "matsize": row["matsize"],
            "kernelsize": row["kernelsize"],
            "channels_in": draw_int(rng, space.channels, log=True),
            "strides": row["strides"],
            "padding": row["padding"],
            "pool_type": draw_choice(rng, POOL_TYPES),
        }

    @override
    def problems(self, row: Row) -> list[str]:
        problems = window_check(row)
        if str(row["pool_type"]) not in POOL_TYPES:
            problems.append(f"pool_type {row['pool_type']!r} not in {POOL_TYPES}")
        return problems

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return elements(row, shape) * int(row["kernelsize"]) ** 2

    @override
    def build(self, keras: Any, row: Row) -> Any:
        cls = keras.layers.MaxPooling2D if row["pool_type"] == "max" \
            else keras.layers.AveragePooling2D
        return cls(int(row["kernelsize"]), strides=int(row["strides"]),
                   padding=str(row["padding"]))


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.pool_module(torch, row)

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """Square windows map to a row; global pooling of a square input is a whole-input window."""
        cfg, x, out, cls = ctx.layer.config, ctx.layer.x, ctx.layer.out_shape, ctx.layer.cls
        if cls in GLOBAL_CLASSES:
            if not square(x):
                return None
            row = ctx.known(self.name, {"matsize": x[0], "kernelsize": x[0], "strides": x[0],
                                        "padding": "valid", "channels_in": x[-1],
                                        "pool_type": "max" if "Max" in cls else "avg"})
            row["note"] = "global pooling costed as a pool with a window of the whole input"
            return [row]
        pool = tuple(cfg.get("pool_size", (2, 2)))
        s = tuple(cfg.get("strides") or pool)
        if pool[0] != pool[1] or s[0] != s[1] or not square(x):
            return ctx.unknown(f"{cls} with non-square window/strides/input: rough FLOPs estimate",
                               flops=float(np.prod(out, dtype=float)) * ctx.batch * math.prod(pool))
        return [ctx.known(self.name, {"matsize": x[0], "kernelsize": pool[0], "strides": s[0],
                                      "padding": str(cfg.get("padding", "valid")),
                                      "channels_in": x[-1],
                                      "pool_type": "max" if cls.startswith("Max") else "avg"})]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        kind = entry["type"]
        need_image(kind, x, at)
        if kind == "global_pool":
            cls = "GlobalMaxPooling2D" if entry.get("pool", "avg") == "max" else \
                "GlobalAveragePooling2D"
            return NetLayer(name, cls, [x], (x[2],), {})
        k, s, pad, side = spec_window(entry, x, at, kernel=2, strides=None, padding="valid")
        ptype = str(entry.get("pool", "max"))
        if ptype not in POOL_TYPES:
            raise NetworkSpecError(f"{at}: pool {ptype!r} not in {POOL_TYPES}")
        cls = "MaxPooling2D" if ptype == "max" else "AveragePooling2D"
        return NetLayer(name, cls, [x], (side, side, x[2]),
                        {"pool_size": (k, k), "strides": (s, s), "padding": pad})

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        if layer.cls in GLOBAL_CLASSES:
            return getattr(keras.layers, layer.cls)(name=layer.name)
        cfg = layer.config
        return getattr(keras.layers, layer.cls)(cfg["pool_size"], cfg["strides"], cfg["padding"],
                                                name=layer.name)
