"""Kind ``bn``: BatchNormalization over the channel axis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import override

from layerwise.kinds.base import NetLayer, Row, RowContext, elements
from layerwise.kinds.mapping import plane_params
from layerwise.kinds.plane import PlaneKind


class BatchNorm(PlaneKind):
    """BatchNormalization; FLOPs = 2 per element, 4 parameters per channel."""

    name = "bn"
    description = "BatchNormalization over the channel axis (training mode when training)"
    keras_classes = ("BatchNormalization",)
    spec_types = ("bn",)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return 2.0 * elements(row, shape)

    @override
    def weights(self, row: Row) -> int:
        return 4 * int(row["channels_in"])

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.BatchNormalization()


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch.nn.BatchNorm2d(int(row["channels_in"]))

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """A square image or a flat vector maps to a row."""
        params = plane_params(ctx.layer.x)
        return None if params is None else [ctx.known(self.name, params)]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        return NetLayer(name, "BatchNormalization", [x], x, {}, 4 * x[-1])

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        return keras.layers.BatchNormalization(name=layer.name)
