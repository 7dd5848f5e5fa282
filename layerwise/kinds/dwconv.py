"""Kind ``dwconv``: DepthwiseConv2D with depth multiplier 1 (also the depthwise half of
SeparableConv2D, whose pointwise half is a 1x1 ``conv`` row).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import NetLayer, Row, RowContext, act_check, act_flops
from layerwise.kinds.conv import bias_flops, draw_conv, keras_activation, spec_conv_config
from layerwise.kinds.space import FeatureSpace, as_bool
from layerwise.kinds.window import (
    WindowKind,
    conv_reasons,
    conv_unknown_reason,
    conv_window,
    kernel_elements,
    window_check,
)


class DepthwiseConv(WindowKind):
    """DepthwiseConv2D; FLOPs = 2 x outputs x k² (+ bias, + activation)."""

    name = "dwconv"
    columns = ("batchsize", "matsize", "kernelsize", "channels_in", "strides", "padding",
               "use_bias", "activation")
    description = "DepthwiseConv2D with depth multiplier 1 (channels_out = channels_in)"
    flags = ("use_bias",)
    input_gradient = True
    keras_classes = ("DepthwiseConv2D", "SeparableConv2D")
    spec_types = ("dwconv",)

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        row = draw_conv(rng, space)  # same draws as conv, so configurations stay comparable
        del row["channels_out"]
        return row

    @override
    def problems(self, row: Row) -> list[str]:
        return window_check(row) + act_check(row)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        out = float(np.prod(shape, dtype=float))
        k = int(row["kernelsize"])
        return 2.0 * out * k * k + bias_flops(row, out) + act_flops(row, out)

    @override
    def forward_macs(self, row: Row, shape: tuple[int, ...]) -> float:
        k = int(row["kernelsize"])
        return float(np.prod(shape, dtype=float) * (k * k))

    @override
    def weights(self, row: Row) -> int:
        k, c = int(row["kernelsize"]), int(row["channels_in"])
        return k * k * c + (c if as_bool(row.get("use_bias", True)) else 0)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.DepthwiseConv2D(
            int(row["kernelsize"]), strides=int(row["strides"]), padding=str(row["padding"]),
            use_bias=as_bool(row["use_bias"]), activation=keras_activation(row),
        )


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.conv_module(torch, row, groups=True)

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """DepthwiseConv2D -> one row; SeparableConv2D -> depthwise row + pointwise conv row."""
        cfg, x, out, cls = ctx.layer.config, ctx.layer.x, ctx.layer.out_shape, ctx.layer.cls
        act = ctx.activation(str(cfg.get("activation", "linear")))
        reasons = conv_reasons(cfg, x)
        cin, out_elems = x[-1], float(np.prod(out, dtype=float)) * ctx.batch
        if reasons:
            if cls == "DepthwiseConv2D":
                macs = out_elems * kernel_elements(cfg)
            else:
                mult = int(cfg.get("depth_multiplier", 1))
                mid = out_elems / out[-1] * cin * mult
                macs = mid * kernel_elements(cfg) + out_elems * cin * mult
            return ctx.unknown(conv_unknown_reason(cls, reasons), macs, 2.0 * macs)
        bias = bool(cfg.get("use_bias", True))
        window = conv_window(cfg, x)
        if cls == "DepthwiseConv2D":
            return [ctx.known(self.name, {**window, "channels_in": cin, "use_bias": bias,
                                          "activation": act})]
        mid_shape = (out[0], out[1], cin)
        dw = ctx.known(self.name, {**window, "channels_in": cin, "use_bias": False,
                                   "activation": "none"}, out_shape=mid_shape)
        pw = ctx.known("conv", {"matsize": out[0], "kernelsize": 1, "strides": 1,
                                "padding": "valid", "channels_in": cin, "channels_out": out[-1],
                                "use_bias": bias, "activation": act}, in_shape=mid_shape)
        dw["name"], pw["name"] = f"{ctx.layer.name}/depthwise", f"{ctx.layer.name}/pointwise"
        return [dw, pw]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        cfg = spec_conv_config(entry, x, at, self.name)
        side, (k, _) = cfg.pop("side"), cfg["kernel_size"]
        return NetLayer(name, "DepthwiseConv2D", [x], (side, side, x[2]), cfg,
                        k * k * x[2] + (x[2] if cfg["use_bias"] else 0))

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        cfg = layer.config
        return keras.layers.DepthwiseConv2D(cfg["kernel_size"], cfg["strides"], cfg["padding"],
                                            activation=cfg.get("activation", "linear"),
                                            use_bias=cfg["use_bias"], name=layer.name)
