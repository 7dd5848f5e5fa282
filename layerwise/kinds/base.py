"""The layer-kind contract: everything one benchmarkable layer kind declares in one class.

A row is a dict (or pandas row) in the published Justus et al. (2018) layout plus ``layer``.
Conventions shared by all kinds:

* tensors are NHWC with square spatial sides ``matsize`` (input side);
* ``flops(row)`` = forward FLOPs for one batch, a multiply-add counting 2 FLOPs; element-wise
  work (bias, activation, pooling window, batch-norm) is one FLOP per element and operation;
* ``bytes_in``/``bytes_out`` = input/output activations of one batch, ``weights`` = parameter
  count (not bytes); element size = ``precision`` bits / 8;
* impossible configurations get an output side of 0 (costs 0); ``check(row)`` says why.

Networks reach kinds as :class:`NetLayer` occurrences; a kind's ``from_keras`` turns one into
rows through a :class:`RowContext`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fleet.precision import bytes_per_element, parse_precision
from layerwise.errors import LayerwiseError
from layerwise.kinds.mapping import ACTIVATION_COST, NetworkSpecError, shape_text
from layerwise.kinds.space import (
    ACTIVATIONS,
    PADDINGS,
    FeatureSpace,
    draw_optimizer,
    get_space,
)

if TYPE_CHECKING:  # annotations only: a forecast needs no pandas
    import pandas as pd

Row = Mapping[str, Any]

# Values of the smallest configuration of a kind (its per-call floor); other columns get 1.
FLOOR_DEFAULTS: Mapping[str, Any] = {"padding": "same", "use_bias": False, "activation": "none"}


class InvalidLayerConfig(LayerwiseError, ValueError):
    """A layer configuration that cannot be built (e.g. kernel larger than a valid-padded input)."""

    kind: ClassVar[str] = "layer_config"


def elem_bytes(row: Row) -> float:
    """Bytes per element of the row's ``precision`` (bits such as 32 or a name such as fp16;
    fp32 when missing), see :func:`fleet.precision.bytes_per_element`."""
    return float(bytes_per_element(parse_precision(row.get("precision", 32))))


def act_flops(row: Row, elements: float) -> float:
    """One FLOP per element for a fused activation, none for ``none``."""
    return 0.0 if str(row.get("activation", "none")) == "none" else elements


def elements(row: Row, shape: tuple[int, ...]) -> float:
    """Number of elements of ``shape`` as a float."""
    return float(np.prod(shape, dtype=float))


def act_check(row: Row) -> list[str]:
    """The row's ``activation`` (default ``none``) must be one of ``ACTIVATIONS``."""
    act = str(row.get("activation", "none"))
    return [] if act in ACTIVATIONS else [f"activation {act!r} not in {ACTIVATIONS}"]


@dataclass
class NetLayer:
    """Framework-neutral description of one layer occurrence (shapes without batch)."""

    name: str
    cls: str  # Keras class name
    in_shapes: list[tuple]
    out_shape: tuple
    config: dict
    params: int = 0
    first: bool = False

    @property
    def x(self) -> tuple:
        """The first input shape (the output shape for a layer without inputs)."""
        return self.in_shapes[0] if self.in_shapes else self.out_shape


class LayerKind:
    """One benchmarkable layer kind. Subclass, set the class attributes, implement the hooks.

    Rules:

    * ``columns``: hyper-parameter columns besides ``optimizer`` and ``precision`` (every
      kind has those two); a new column joins the benchmark CSV layout by being listed here.
    * ``flags``: boolean columns (feature 1.0 when the column is absent);
      ``categories``: categorical columns and their options (one-hot features).
    * ``keras_classes``: Keras class names :meth:`from_keras` maps (one kind per class);
      ``spec_types``: JSON network-spec ``type`` values :meth:`spec_layer` parses.
    * ``input_gradient``: the kind has weights, so a network forecast on data that did not
      time the input gradient adds one forward pass for it.
    * ``floor_values``: column values of the smallest configuration (over ``FLOOR_DEFAULTS``).
    * ``torch_layout``: how :meth:`build_torch` modules take their input (``nchw``, ``nhwc``
      or ``flat``; see :mod:`layerwise.kinds.torch_ops`).
    """

    name: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]
    description: ClassVar[str] = ""
    n_inputs: ClassVar[int] = 1
    flags: ClassVar[tuple[str, ...]] = ()
    categories: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "activation": ACTIVATIONS, "padding": PADDINGS,
    }
    floor_values: ClassVar[Mapping[str, Any]] = {}
    input_gradient: ClassVar[bool] = False
    keras_classes: ClassVar[tuple[str, ...]] = ()
    spec_types: ClassVar[tuple[str, ...]] = ()
    torch_layout: ClassVar[str] = "nchw"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, columns={self.columns!r})"

    # ------------------------------------------------------------------ hooks: shapes, costs
    def draw(self, rng: np.random.Generator, space: FeatureSpace) -> dict[str, Any]:
        """Draw the kind's columns (not ``layer``/``optimizer``/``precision``) from ``space``."""
        raise NotImplementedError

    def problems(self, row: Row) -> list[str]:
        """Kind-specific reasons the row cannot be built (``check`` adds the output test)."""
        return []

    def input_shape(self, row: Row) -> tuple[int, ...]:
        """Shape of one input tensor including the batch dimension."""
        raise NotImplementedError

    def output_shape(self, row: Row) -> tuple[int, ...]:
        """Shape of the output including the batch dimension (a side of 0 if impossible)."""
        raise NotImplementedError

    def forward_flops(self, row: Row, shape: tuple[int, ...]) -> float:
        """Forward FLOPs of one batch given a valid output ``shape``."""
        raise NotImplementedError

    def forward_macs(self, row: Row, shape: tuple[int, ...]) -> float:
        """Multiply-accumulates of one batch given a valid output ``shape`` (0 by default)."""
        return 0.0

    def weights(self, row: Row) -> int:
        """Number of parameters (trainable and not); 0 by default."""
        return 0

    def gemm_shape(self, row: Row) -> tuple[int, int, int] | None:
        """(M, N, K) of the matrix product the kind runs as, if any (None: not a GEMM)."""
        return None

    # ------------------------------------------------------------------ hooks: TensorFlow
    def build(self, keras: Any, row: Row) -> Any:
        """The Keras layer that the benchmark times for ``row``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks: PyTorch
    def build_torch(self, torch: Any, row: Row) -> Any:
        """The ``torch.nn.Module`` that the PyTorch benchmark times for ``row``."""
        raise NotImplementedError(f"layer kind {self.name!r} has no PyTorch builder")

    def torch_input_shape(self, row: Row) -> tuple[int, ...]:
        """Shape of one torch input: :meth:`input_shape` in the kind's ``torch_layout``."""
        shape = tuple(self.input_shape(row))
        if self.torch_layout == "nchw" and len(shape) == 4:
            return (shape[0], shape[3], shape[1], shape[2])
        return shape

    # ------------------------------------------------------------------ hooks: networks
    def read_keras_config(self, layer: Any, config: dict[str, Any]) -> dict[str, Any]:
        """Extra config a Keras layer instance holds outside ``get_config()``; none by default."""
        return config

    def from_keras(self, ctx: RowContext) -> list[dict] | None:
        """Rows of one layer occurrence of a ``keras_classes`` class; None = not this kind."""
        return None

    def spec_layer(self, entry: Mapping[str, Any], name: str, x: tuple, at: str) -> NetLayer:
        """The layer occurrence a JSON spec entry of a ``spec_types`` type describes."""
        raise NotImplementedError(f"{self.name} has no JSON spec type")

    def keras_layer(self, keras: Any, layer: NetLayer) -> Any:
        """The Keras layer of an occurrence made by :meth:`spec_layer` (for ``spec_to_keras``)."""
        raise NotImplementedError(f"{self.name} has no JSON spec type")

    # ------------------------------------------------------------------ hooks: features
    def engineered_features(self, rows: pd.DataFrame,
                            feats: Mapping[str, pd.Series]) -> dict[str, pd.Series]:
        """Kind-specific model features, given the hyper-parameter features ``feats``."""
        return {}

    # ------------------------------------------------------------------ common behaviour
    def sample(self, rng: np.random.Generator, space: str | FeatureSpace = "paper") -> dict:
        """Draw one valid configuration (a row dict with ``layer``) from ``space``."""
        sp = get_space(space)
        for _ in range(10000):
            row = self.draw(rng, sp)
            row["optimizer"] = draw_optimizer(rng, sp)
            row["precision"] = 32
            row = {"layer": self.name, **row}
            if self.check(row):
                continue
            size = self.bytes_in(row) + self.bytes_out(row) + 4.0 * self.weights(row)
            if self.flops(row) <= sp.max_flops and size <= sp.max_bytes:
                return row
        raise RuntimeError(f"feature space {sp.name!r} too tight for layer {self.name!r}")

    def check(self, row: Row) -> list[str]:
        """Reasons the configuration cannot be built; empty when it is valid."""
        problems = list(self.problems(row))
        if not problems and min(self.output_shape(row)) <= 0:
            problems.append(f"output shape {self.output_shape(row)} has a side <= 0")
        return problems

    def validate(self, row: Row) -> None:
        """Raise ``InvalidLayerConfig`` with the reasons when ``check`` finds any."""
        problems = self.check(row)
        if problems:
            raise InvalidLayerConfig(f"{self.name}: " + "; ".join(problems))

    def flops(self, row: Row) -> float:
        """Forward FLOPs of one batch (multiply-add = 2); 0 for an impossible output."""
        shape = self.output_shape(row)
        if min(shape) <= 0:
            return 0.0
        return float(self.forward_flops(row, shape))

    def macs(self, row: Row) -> float:
        """Forward multiply-accumulates of one batch; 0 for an impossible output."""
        shape = self.output_shape(row)
        if min(shape) <= 0:
            return 0.0
        return float(self.forward_macs(row, shape))

    def bytes_in(self, row: Row) -> float:
        """Bytes of the input activations of one batch (all inputs)."""
        return float(np.prod(self.input_shape(row), dtype=float)) * elem_bytes(row) * self.n_inputs

    def bytes_out(self, row: Row) -> float:
        """Bytes of the output activations of one batch."""
        return float(np.prod(self.output_shape(row), dtype=float)) * elem_bytes(row)

    def features(self, row: Row) -> dict[str, float]:
        """Derived cost features of a row: flops, bytes in/out/weights, output size."""
        return {
            "flops": self.flops(row),
            "bytes_in": self.bytes_in(row),
            "bytes_out": self.bytes_out(row),
            "bytes_weights": float(self.weights(row)) * elem_bytes(row),
            "output_size": float(np.prod(self.output_shape(row), dtype=float)),
        }

    def minimal_row(self, optimizer: str) -> dict[str, Any]:
        """The smallest configuration (its per-call floor): ``floor_values``, else 1."""
        values = {**FLOOR_DEFAULTS, **self.floor_values}
        row: dict[str, Any] = {"layer": self.name, "optimizer": optimizer, "precision": 32}
        for col in self.columns:
            row[col] = values.get(col, 1)
        return row


@dataclass
class RowContext:
    """One layer occurrence being mapped to rows, with its batch, optimizer and notes.

    A kind's ``from_keras`` returns rows made with ``known`` (a row of a registered kind),
    ``view`` (no computation) or ``unknown`` (a rough FLOPs estimate with a reason), or None
    to leave the layer to the generic fallback.
    """

    layer: NetLayer
    batch: int
    optimizer: str
    training: bool
    kinds: Mapping[str, LayerKind]  # the registry (``known`` looks kinds up here)
    note: list[str] = field(default_factory=list)

    def activation(self, name: str | None) -> str:
        """The benchmarked activation a Keras activation is costed as (noted when it differs)."""
        name = (name or "linear").lower()
        cost = ACTIVATION_COST.get(name)
        if cost is None:
            self.note.append(f"activation {name!r} unknown, not costed")
            return "none"
        if cost != name and name not in ("linear", "none"):
            self.note.append(f"activation {name} costed as {cost}")
        return cost

    def known(self, kind: str, params: Mapping[str, Any], in_shape: tuple | None = None,
              out_shape: tuple | None = None) -> dict:
        """A row of a registered kind; an output shape it approximates is noted."""
        in_shape = self.layer.x if in_shape is None else in_shape
        out_shape = self.layer.out_shape if out_shape is None else out_shape
        row = {"layer": kind, **params, "batchsize": self.batch, "optimizer": self.optimizer,
               "precision": 32}
        spec = self.kinds[kind]
        problems = spec.check(row)
        if problems:
            raise NetworkSpecError(f"layer {self.layer.name!r}: " + "; ".join(problems))
        expected = spec.output_shape(row)[1:]
        if tuple(expected) != tuple(out_shape):
            self.note.append(f"output {tuple(out_shape)} approximated by {tuple(expected)}")
        return {
            "name": self.layer.name, "keras_class": self.layer.cls, **row,
            "input_shape": shape_text(in_shape), "output_shape": shape_text(out_shape),
            "params": spec.weights(row), "macs": spec.macs(row), "flops": spec.flops(row),
            "bytes_in": spec.bytes_in(row), "bytes_out": spec.bytes_out(row),
            "note": "; ".join(self.note), "grad_input": not self.layer.first,
        }

    def other(self, layer: str, note: str, macs: float = 0.0, flops: float = 0.0,
              params: int = 0) -> list[dict]:
        """One ``view`` or ``unknown`` row with the given costs."""
        ins, out, batch = self.layer.in_shapes, self.layer.out_shape, self.batch
        elems_in = sum(float(np.prod(s, dtype=float)) for s in ins) * batch
        elems_out = float(np.prod(out, dtype=float)) * batch
        return [{
            "name": self.layer.name, "keras_class": self.layer.cls, "layer": layer,
            "batchsize": batch, "optimizer": self.optimizer, "precision": 32,
            "input_shape": ";".join(shape_text(s) for s in ins),
            "output_shape": shape_text(out), "params": int(params), "macs": float(macs),
            "flops": float(flops), "bytes_in": 4.0 * elems_in, "bytes_out": 4.0 * elems_out,
            "note": note,
        }]

    def view(self, note: str) -> list[dict]:
        """A ``view`` row: no computation."""
        return self.other("view", note)

    def unknown(self, reason: str, macs: float = 0.0, flops: float | None = None) -> list[dict]:
        """An ``unknown`` row; without ``flops``: 2 x params / output channels per output."""
        out, params = self.layer.out_shape, self.layer.params
        if flops is None:
            per_out = 2.0 * params / max(1, out[-1]) if params and out else 1.0
            flops = float(np.prod(out, dtype=float)) * self.batch * per_out
        return self.other("unknown", reason, macs=macs, flops=flops, params=params)
