"""Kind ``ln``: LayerNormalization over the last (channel) axis of a square image or a flat
vector.

FLOPs = 8 per element, the two-pass count: mean (1 add), variance (subtract the mean, square,
add: 3), output (subtract the mean, multiply by 1/sigma, scale by gamma, shift by beta: 4); the
per-position square root is not counted. Weights = gamma and beta, 2 per channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import override

from layerwise.kinds.base import NetLayer, Row, RowContext, elements
from layerwise.kinds.mapping import plane_params
from layerwise.kinds.plane import PlaneKind

LN_FLOPS_PER_ELEMENT = 8.0


def last_axis_only(axis: Any, rank: int) -> bool:
    """Keras ``axis`` (an int or a list of ints) names only the last axis of a tensor of
    ``rank`` dimensions including the batch (``-1`` or ``rank - 1``)."""
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    try:
        return len(axes) == 1 and int(axes[0]) in (-1, rank - 1)
    except (TypeError, ValueError):
        return False


class LayerNorm(PlaneKind):
    """LayerNormalization over channels; FLOPs = 8 per element, 2 parameters per channel."""

    name = "ln"
    torch_layout = "nhwc"
    description = "LayerNormalization over the last (channel) axis"
    keras_classes = ("LayerNormalization",)
    spec_types = ("ln",)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return LN_FLOPS_PER_ELEMENT * elements(row, shape)

    @override
    def weights(self, row: Row) -> int:
        return 2 * int(row["channels_in"])

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.LayerNormalization(axis=-1)


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch.nn.LayerNorm(int(row["channels_in"]))

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """Normalisation over the last axis of a square image or flat vector maps to a row;
        other axes are left to the fallback (None). Without ``center``/``scale`` the row keeps
        the layer's own parameter count (costs are those of the full layer, noted)."""
        x, cfg = ctx.layer.x, ctx.layer.config
        params = plane_params(x)
        if params is None or not last_axis_only(cfg.get("axis", -1), len(x) + 1):
            return None
        center, scale = bool(cfg.get("center", True)), bool(cfg.get("scale", True))
        if not (center and scale):
            ctx.note.append("LayerNormalization without center/scale costed as the full layer")
        row = ctx.known(self.name, params)
        if not (center and scale):
            row["params"] = int(ctx.layer.params)
        return [row]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        return NetLayer(name, "LayerNormalization", [x], x, {"axis": -1}, 2 * x[-1])

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        return keras.layers.LayerNormalization(axis=-1, name=layer.name)
