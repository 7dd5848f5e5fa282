"""Kind ``concat``: Concatenate ``n_inputs`` tensors of one square side along channels.

``channels_in`` is the total (output) channel count, split over the inputs as evenly as
possible (the first ``channels_in % n_inputs`` inputs get one channel more); a row cannot tell
a real network's split, which changes neither the bytes nor the work. FLOPs = 0 (a copy: its
cost is the bytes read and written); ``bytes_in`` counts all inputs (= the output's bytes).

Benchmark: the timed layer takes the first input and concatenates it with the other inputs,
held as fixed non-trainable tensors, so the forward pass copies exactly what a real
Concatenate does; a training step differentiates the first input only (the other inputs'
gradient slices are not timed). ``input_shape`` is that first input.

No JSON spec type: a spec is sequential and cannot express the branches a concat joins.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from typing_extensions import override

import layerwise.kinds.torch_ops as torch_ops
from layerwise.kinds.base import Row, RowContext, elem_bytes
from layerwise.kinds.ln import last_axis_only
from layerwise.kinds.mapping import plane_params, shape_text
from layerwise.kinds.plane import PlaneKind
from layerwise.kinds.space import FeatureSpace, draw_int

INPUTS_RANGE = (2, 4)  # inputs drawn for sampling (Inception joins 4, DenseNet 2)


def split_channels(total: int, n: int) -> list[int]:
    """``total`` channels over ``n`` inputs, as even as possible, larger parts first."""
    base, extra = divmod(int(total), int(n))
    return [base + (1 if i < extra else 0) for i in range(int(n))]


def _concat_layer(keras: Any, others: list[int]) -> Any:
    """A layer concatenating its input with fixed inputs of ``others`` channels (same side)."""

    class BenchConcatenate(keras.layers.Layer):
        def build(self, input_shape: tuple) -> None:
            self.others = [
                self.add_weight(shape=(*input_shape[:-1], c), initializer="random_normal",
                                trainable=False, name=f"input_{i + 1}")
                for i, c in enumerate(others)
            ]

        def call(self, inputs: Any) -> Any:
            return keras.ops.concatenate([inputs, *self.others], axis=-1)

    return BenchConcatenate()


class Concat(PlaneKind):
    """Channel concatenation of ``n_inputs`` inputs; FLOPs = 0, bytes in = bytes out."""

    name = "concat"
    columns = ("batchsize", "matsize", "channels_in", "n_inputs")
    description = "Concatenate along channels (inputs of one square side)"
    floor_values = {"channels_in": 2, "n_inputs": 2}
    keras_classes = ("Concatenate",)

    @override
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        return {**super().draw(rng, space), "n_inputs": draw_int(rng, INPUTS_RANGE)}

    @override
    def problems(self, row: Row) -> list[str]:
        problems = super().problems(row)
        n = int(row["n_inputs"])
        if n < 2:
            problems.append(f"n_inputs {n} < 2")
        elif int(row["channels_in"]) < n:
            problems.append(f"channels_in {row['channels_in']} < n_inputs {n} (one channel "
                            "per input at least)")
        return problems

    def input_shape(self, row: Row) -> tuple[int, ...]:
        """The first (largest) input: ``ceil(channels_in / n_inputs)`` channels."""
        m = int(row["matsize"])
        first = -(-int(row["channels_in"]) // max(1, int(row["n_inputs"])))
        return (int(row["batchsize"]), m, m, first)

    @override
    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        return 0.0

    def bytes_in(self, row: Row) -> float:
        """All inputs together: the output's element count."""
        return float(np.prod(self.output_shape(row), dtype=float)) * elem_bytes(row)

    @override
    def build(self, keras: Any, row: Row) -> Any:
        return _concat_layer(keras, split_channels(int(row["channels_in"]),
                                                   int(row["n_inputs"]))[1:])


    @override
    def build_torch(self, torch: Any, row: Row) -> Any:
        return torch_ops.concat_module(
            torch, row, split_channels(int(row["channels_in"]), int(row["n_inputs"]))[1:])

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """Two or more inputs of the output's side (square images or flat vectors) joined on
        the last axis map to a row; anything else is left to the fallback (None)."""
        ins, out, cfg = ctx.layer.in_shapes, ctx.layer.out_shape, ctx.layer.config
        params = plane_params(out)
        if params is None or len(ins) < 2 or not last_axis_only(cfg.get("axis", -1),
                                                                 len(out) + 1):
            return None
        if any(len(s) != len(out) or tuple(s[:-1]) != tuple(out[:-1]) for s in ins) or \
                sum(int(s[-1]) for s in ins) != int(out[-1]):
            return None
        row = ctx.known(self.name, {**params, "n_inputs": len(ins)})
        row["input_shape"] = ";".join(shape_text(s) for s in ins)
        return [row]
