"""Kind ``dropout``: Dropout / SpatialDropout2D inside a training step.

A dropout layer costs nothing in inference: ``layerwise.network`` makes it a view when the
optimizer is ``none`` before any kind is asked, so network rows of this kind are training
rows. FLOPs = 2 per element (a random draw with its keep test, a multiply by the scaled mask).
The benchmarked layer always drops (also in a forward-only timing, which then times the
forward half of a training step). The rate does not change the cost, so it is no column;
SpatialDropout2D (one draw per channel) is costed as element-wise dropout (noted).
"""

from __future__ import annotations

from typing import Any

from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import NetLayer, Row, RowContext, elements
from layerwise.kinds.mapping import plane_params
from layerwise.kinds.plane import PlaneKind

DROPOUT_FLOPS_PER_ELEMENT = 2.0
BENCH_RATE = 0.5


def _always_dropout(keras: Any, rate: float) -> Any:
    """A Keras Dropout layer that drops whatever ``training`` it is called with."""

    class TrainingDropout(keras.layers.Dropout):
        def call(self, inputs: Any, training: Any = None) -> Any:
            return super().call(inputs, training=True)

    return TrainingDropout(rate)


class Dropout(PlaneKind):
    """Training-step dropout; FLOPs = 2 per element, no parameters."""

    name = "dropout"
    description = "Dropout / SpatialDropout2D in a training step"
    keras_classes = ("Dropout", "SpatialDropout2D")

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return DROPOUT_FLOPS_PER_ELEMENT * elements(row, shape)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return _always_dropout(keras, BENCH_RATE)


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.lambda_module(
            torch, lambda x: torch.nn.functional.dropout(x, BENCH_RATE, training=True))

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """In training, a square image or flat vector maps to a row (rate 0 is a view);
        other shapes are left to the fallback (None)."""
        if float(ctx.layer.config.get("rate", 0.5) or 0.0) <= 0.0:
            return ctx.view("dropout rate 0: no computation")
        if not ctx.training:
            return ctx.view("dropout outside training: no computation")
        params = plane_params(ctx.layer.x)
        if params is None:
            return None
        if ctx.layer.cls == "SpatialDropout2D":
            ctx.note.append("SpatialDropout2D costed as element-wise dropout")
        return [ctx.known(self.name, params)]

    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        """The ``Dropout`` of a JSON ``dropout`` entry (the type itself belongs to
        ``layerwise.network``, which also makes the occurrence)."""
        return keras.layers.Dropout(float(layer.config.get("rate", 0.5)), name=layer.name)
