"""Kind ``softmax``: the Keras ``Softmax`` layer over the last axis of a square image or a flat
vector.

FLOPs = 5 per element: subtract the maximum (compare + subtract: 2), exponential (1), sum (1),
divide (1). ``Activation("softmax")`` and a fused ``activation="softmax"`` stay with the kinds
that own those layers (costed as sigmoid, see ``ACTIVATION_COST``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import NetLayer, Row, RowContext, elements
from layerwise.kinds.ln import last_axis_only
from layerwise.kinds.mapping import plane_params
from layerwise.kinds.plane import PlaneKind

SOFTMAX_FLOPS_PER_ELEMENT = 5.0


class Softmax(PlaneKind):
    """Softmax over channels; FLOPs = 5 per element, no parameters."""

    name = "softmax"
    torch_layout = "nhwc"
    description = "Softmax layer over the last (channel) axis"
    keras_classes = ("Softmax",)
    spec_types = ("softmax",)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return SOFTMAX_FLOPS_PER_ELEMENT * elements(row, shape)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.Softmax(axis=-1)


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.lambda_module(torch, lambda x: torch.softmax(x, dim=-1))

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """Softmax over the last axis of a square image or flat vector maps to a row; other
        axes are left to the fallback (None)."""
        x = ctx.layer.x
        params = plane_params(x)
        if params is None or not last_axis_only(ctx.layer.config.get("axis", -1), len(x) + 1):
            return None
        return [ctx.known(self.name, params)]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        return NetLayer(name, "Softmax", [x], x, {"axis": -1})

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        return keras.layers.Softmax(axis=-1, name=layer.name)
