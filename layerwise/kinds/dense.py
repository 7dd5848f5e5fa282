"""Kind ``dense``: a fully connected layer on a flat input (the published dense layout)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import LayerKind, NetLayer, Row, RowContext, act_check, act_flops
from layerwise.kinds.conv import bias_flops, keras_activation
from layerwise.kinds.mapping import NetworkSpecError
from layerwise.kinds.space import ACTIVATIONS, FeatureSpace, as_bool, draw_choice, draw_int


class Dense(LayerKind):
    """Dense; FLOPs = 2 x outputs x inputs (+ bias, + activation)."""

    name = "dense"
    torch_layout = "flat"
    columns = ("batchsize", "dim_input", "dim_output", "activation")
    description = "Dense (fully connected, with bias)"
    input_gradient = True
    keras_classes = ("Dense",)
    spec_types = ("dense",)

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        return {
            "batchsize": draw_int(rng, space.batchsize),
            "dim_input": draw_int(rng, space.dense_dim, space.log_dense_dim),
            "dim_output": draw_int(rng, space.dense_dim, space.log_dense_dim),
            "activation": draw_choice(rng, ACTIVATIONS),
        }

    @override
    def problems(self, row: Row) -> list[str]:
        problems = act_check(row)
        for col in ("batchsize", "dim_input", "dim_output"):
            if int(row[col]) < 1:
                problems.append(f"{col} {row[col]} < 1")
        return problems

    @override
    def input_shape(self, row: Row) -> tuple[int, ...]:
        return (int(row["batchsize"]), int(row["dim_input"]))

    @override
    def output_shape(self, row: Row) -> tuple[int, ...]:
        return (int(row["batchsize"]), int(row["dim_output"]))

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        out = float(np.prod(shape, dtype=float))
        return 2.0 * out * int(row["dim_input"]) + bias_flops(row, out) + act_flops(row, out)

    @override
    def forward_macs(self, row: Row, shape: tuple[int, ...]) -> float:
        return float(int(row["batchsize"]) * int(row["dim_input"]) * int(row["dim_output"]))

    def gemm_shape(self, row: Row) -> tuple[int, int, int] | None:
        """M = batch, N = outputs, K = inputs."""
        return int(row["batchsize"]), int(row["dim_output"]), int(row["dim_input"])

    @override
    def weights(self, row: Row) -> int:
        din, dout = int(row["dim_input"]), int(row["dim_output"])
        return din * dout + (dout if as_bool(row.get("use_bias", True)) else 0)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return keras.layers.Dense(
            int(row["dim_output"]), activation=keras_activation(row),
            use_bias=as_bool(row.get("use_bias", True)),
        )


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.dense_module(torch, row)

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """A rank-2 input maps to a row; a higher rank gets a rough estimate."""
        cfg, x, out = ctx.layer.config, ctx.layer.x, ctx.layer.out_shape
        act = ctx.activation(str(cfg.get("activation", "linear")))
        if len(x) != 1:
            macs = float(np.prod(out, dtype=float)) * ctx.batch * x[-1]
            return ctx.unknown(f"Dense on a rank-{len(x) + 1} input: rough FLOPs estimate", macs,
                               2.0 * macs)
        return [ctx.known(self.name, {"dim_input": x[0], "dim_output": out[0],
                                      "activation": act,
                                      "use_bias": bool(cfg.get("use_bias", True))})]

    @override
    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        if len(x) != 1:
            raise NetworkSpecError(f"{at}: dense needs a flat input (add a flatten or "
                                   f"global_pool first), got shape {x}")
        u = int(entry["units"])
        bias = bool(entry.get("use_bias", True))
        return NetLayer(name, "Dense", [x], (u,), {"activation": entry.get("activation", "linear"),
                                                   "use_bias": bias},
                        x[0] * u + (u if bias else 0))

    @override
    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        cfg = layer.config
        return keras.layers.Dense(layer.out_shape[0], activation=cfg.get("activation", "linear"),
                                  use_bias=cfg["use_bias"], name=layer.name)
