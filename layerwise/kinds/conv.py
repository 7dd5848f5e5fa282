"""Kind ``conv``: Conv2D, NHWC, square input and kernel (the published conv layout)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import NetLayer, Row, RowContext, act_check, act_flops
from layerwise.kinds.mapping import need_image, spec_window
from layerwise.kinds.space import ACTIVATIONS, FeatureSpace, as_bool, draw_choice, draw_int
from layerwise.kinds.window import (
    WindowKind,
    conv_reasons,
    conv_unknown_reason,
    conv_window,
    draw_window,
    kernel_elements,
    window_check,
)

if TYPE_CHECKING:  # annotations only: a forecast needs no pandas
    import pandas as pd


def keras_activation(row: Row) -> str | None:
    """Keras ``activation`` argument of a row (None for ``none``)."""
    act = str(row.get("activation", "none"))
    return None if act == "none" else act


def bias_flops(row: Row, out: float) -> float:
    """One FLOP per output element with a bias (``use_bias`` defaults to True)."""
    return out if as_bool(row.get("use_bias", True)) else 0.0


def draw_conv(rng: np.random.Generator, sp: FeatureSpace) -> dict:
    """Window, channels in/out (log-uniform), bias and activation, drawn in that order."""
    row = draw_window(rng, sp, sp.kernelsize)
    return {
        "batchsize": row["batchsize"],
        "matsize": row["matsize"],
        "kernelsize": row["kernelsize"],
        "channels_in": draw_int(rng, sp.channels, log=True),
        "channels_out": draw_int(rng, sp.channels, log=True),
        "strides": row["strides"],
        "padding": row["padding"],
        "use_bias": bool(rng.integers(2)),
        "activation": draw_choice(rng, ACTIVATIONS),
    }


def spec_conv_config(entry: Mapping[str, Any], x: tuple, at: str, kind: str) -> dict[str, Any]:
    """Keras-style config of a JSON conv/dwconv entry (defaults: kernel 3, stride 1, same)."""
    need_image(kind, x, at)
    k, s, pad, side = spec_window(entry, x, at, kernel=3, strides=1, padding="same")
    return {"kernel_size": (k, k), "strides": (s, s), "padding": pad,
            "activation": entry.get("activation", "linear"),
            "use_bias": bool(entry.get("use_bias", True)), "side": side}


class Conv(WindowKind):
    """Conv2D; FLOPs = 2 x outputs x k² x C_in (+ bias, + activation)."""

    name = "conv"
    columns = ("batchsize", "matsize", "kernelsize", "channels_in", "channels_out", "strides",
               "padding", "use_bias", "activation")
    description = "Conv2D (NHWC, square input and kernel)"
    flags = ("use_bias",)
    input_gradient = True
    out_channels_column = "channels_out"
    keras_classes = ("Conv2D",)
    spec_types = ("conv",)

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        return draw_conv(rng, space)

    @override
    def problems(self, row: Row) -> list[str]:
        return window_check(row) + act_check(row)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        out = float(np.prod(shape, dtype=float))
        k, cin = int(row["kernelsize"]), int(row["channels_in"])
        return 2.0 * out * k * k * cin + bias_flops(row, out) + act_flops(row, out)

    @override
    def forward_macs(self, row: Row, shape: tuple[int, ...]) -> float:
        k = int(row["kernelsize"])
        return float(np.prod(shape, dtype=float) * (k * k * int(row["channels_in"])))

    def gemm_shape(self, row: Row) -> tuple[int, int, int] | None:
        """Implicit GEMM: M = batch x output side², N = C_out, K = k² x C_in."""
        _, side, _, cout = self.output_shape(row)
        k = int(row["kernelsize"])
        return int(row["batchsize"]) * side * side, cout, k * k * int(row["channels_in"])

    @override
    def weights(self, row: Row) -> int:
        k, cin, cout = int(row["kernelsize"]), int(row["channels_in"]), int(row["channels_out"])
        return k * k * cin * cout + (cout if as_bool(row.get("use_bias", True)) else 0)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.Conv2D(
            int(row["channels_out"]), int(row["kernelsize"]), strides=int(row["strides"]),
            padding=str(row["padding"]), use_bias=as_bool(row["use_bias"]),
            activation=keras_activation(row),
        )


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.conv_module(torch, row)

    @override
    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        cfg, x, out = ctx.layer.config, ctx.layer.x, ctx.layer.out_shape
        act = ctx.activation(str(cfg.get("activation", "linear")))
        reasons = conv_reasons(cfg, x)
        k = tuple(cfg.get("kernel_size", (1, 1)))
        if (reasons and all(r.startswith("non-square kernel") for r in reasons)
                and str(cfg.get("padding")) == "same"
                and tuple(cfg.get("strides", (1, 1))) == (1, 1)):
            # Rule: an h x w kernel (stride 1, same) runs as the implicit GEMM of the 1 x 1
            # conv with h x w x C_in input channels: same M, N, K, FLOPs and weights.
            ctx.note.append(f"{k[0]}x{k[1]} kernel priced as the 1x1 conv of the same GEMM")
            return [ctx.known(self.name, {"matsize": x[0], "kernelsize": 1, "strides": 1,
                                          "padding": "same", "channels_in": k[0] * k[1] * x[-1],
                                          "channels_out": out[-1],
                                          "use_bias": bool(cfg.get("use_bias", True)),
                                          "activation": act})]
        if reasons:
            macs = float(np.prod(out, dtype=float)) * ctx.batch * kernel_elements(cfg) * x[-1] \
                / int(cfg.get("groups", 1))
            return ctx.unknown(conv_unknown_reason(ctx.layer.cls, reasons), macs, 2.0 * macs)
        return [ctx.known(self.name, {**conv_window(cfg, x), "channels_in": x[-1],
                                      "channels_out": out[-1],
                                      "use_bias": bool(cfg.get("use_bias", True)),
                                      "activation": act})]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        cfg = spec_conv_config(entry, x, at, self.name)
        side, (k, _) = cfg.pop("side"), cfg["kernel_size"]
        f = int(entry["filters"])
        return NetLayer(name, "Conv2D", [x], (side, side, f), cfg,
                        k * k * x[2] * f + (f if cfg["use_bias"] else 0))

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        cfg = layer.config
        return keras.layers.Conv2D(layer.out_shape[-1], cfg["kernel_size"], cfg["strides"],
                                   cfg["padding"], activation=cfg.get("activation", "linear"),
                                   use_bias=cfg["use_bias"], name=layer.name)

    def engineered_features(self, rows: pd.DataFrame,
                            feats: Mapping[str, pd.Series]) -> dict[str, pd.Series]:
        """Window features plus the log GEMM sizes M = batch x side², K = k² x C_in, N = C_out."""
        extra = super().engineered_features(rows, feats)
        side = extra["out_side"]
        extra["log_gemm_m"] = np.log(np.maximum(feats["batchsize"] * side * side, 1.0))
        extra["log_gemm_k"] = np.log(np.maximum(
            feats["kernelsize"] ** 2 * feats["channels_in"], 1.0))
        extra["log_gemm_n"] = np.log(np.maximum(feats["channels_out"], 1.0))
        return extra
