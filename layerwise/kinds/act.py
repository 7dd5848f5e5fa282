"""Kind ``act``: a stand-alone activation (relu, tanh, sigmoid; other Keras activations are
costed as the closest of these, see ``ACTIVATION_COST``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import NetLayer, Row, RowContext, act_check, elements
from layerwise.kinds.mapping import ACTIVATION_COST, NetworkSpecError, plane_params
from layerwise.kinds.plane import PlaneKind
from layerwise.kinds.space import ACTIVATIONS, FeatureSpace, draw_choice

# Keras activation layer classes -> the activation they apply (others: their ``activation``).
# The ``Softmax`` layer is kind ``softmax``; ``Activation("softmax")`` stays here.
CLASS_ACTIVATIONS = {"ReLU": "relu", "LeakyReLU": "leaky_relu", "ELU": "elu"}


class Activation(PlaneKind):
    """Activation; FLOPs = one per element."""

    name = "act"
    columns = ("batchsize", "matsize", "channels_in", "activation")
    description = "Stand-alone activation (relu, tanh, sigmoid)"
    floor_values = {"activation": "relu"}
    keras_classes = ("Activation", *CLASS_ACTIVATIONS)
    spec_types = ("act",)

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        return {**super().draw(rng, space), "activation": draw_choice(rng, ACTIVATIONS[1:])}

    @override
    def problems(self, row: Row) -> list[str]:
        return super().problems(row) + act_check(row)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return elements(row, shape)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.Activation(str(row["activation"]))


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.activation(torch, str(row["activation"]))

    def read_keras_config(self, layer: Any, config: dict[str, Any]) -> dict[str, Any]:
        """ReLU keeps ``max_value`` (relu6) on the instance."""
        if layer.__class__.__name__ == "ReLU":
            config["max_value"] = getattr(layer, "max_value", None)
        return config

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """A costed activation on a square image or flat vector maps to a row; linear is a view."""
        cfg, cls = ctx.layer.config, ctx.layer.cls
        if cls == "ReLU" and cfg.get("max_value"):
            name = "relu6"
        else:
            name = CLASS_ACTIVATIONS.get(cls, str(cfg.get("activation")))
        act = ctx.activation(name)
        params = plane_params(ctx.layer.x)
        if act != "none" and params is not None:
            return [ctx.known(self.name, {**params, "activation": act})]
        if name in ("linear", "none"):
            return ctx.view("linear activation: no computation")
        return None

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        act = str(entry.get("activation", "relu"))
        if act not in ACTIVATION_COST:
            raise NetworkSpecError(f"{at}: activation {act!r} unknown; known: "
                                   f"{', '.join(ACTIVATION_COST)}")
        return NetLayer(name, "Activation", [x], x, {"activation": act})

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        return keras.layers.Activation(layer.config.get("activation", "linear"), name=layer.name)
