"""Kind ``add``: element-wise sum of two equal tensors (residual connections)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import NetLayer, Row, RowContext, elements
from layerwise.kinds.mapping import plane_params
from layerwise.kinds.plane import PlaneKind


class Add(PlaneKind):
    """Add of two inputs; FLOPs = one per output element."""

    name = "add"
    description = "Element-wise sum of two equal tensors (residual connections)"
    n_inputs = 2
    keras_classes = ("Add", "Subtract")
    spec_types = ("add",)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return elements(row, shape)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.Add()


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.lambda_module(torch, lambda a, b: a + b)

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """Two inputs of the output's shape (a square image or a flat vector) map to a row."""
        ins, out = ctx.layer.in_shapes, ctx.layer.out_shape
        params = plane_params(out)
        if len(ins) != 2 or any(s != out for s in ins) or params is None:
            return None
        return [ctx.known(self.name, params, in_shape=out)]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        return NetLayer(name, "Add", [x, x], x, {})

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        return keras.layers.Add(name=layer.name)
