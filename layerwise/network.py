"""Decompose a CNN into benchmarkable layer rows (the published row layout + ``layer`` + ``name``).

Sources: a Keras model instance, a saved ``.keras`` file, a ``keras.applications`` name
(built with ``weights=None`` at ``image_size``), or a JSON network spec (a dict or a ``.json``
file, see ``docs/network-spec.md``). JSON specs are decomposed without TensorFlow.

Every layer of the network becomes one row (``SeparableConv2D`` two: depthwise + 1x1 conv):

* ``layer`` in :data:`layerwise.layers.LAYER_TYPES` (conv, dense, dwconv, pool, bn, act, add):
  the predictor knows it;
* ``layer="view"``: no computation (Flatten, Reshape, Dropout when not training, Input);
* ``layer="unknown"``: anything else (ZeroPadding2D, Concatenate, Multiply, Dropout when
  training, non-square or grouped convolutions, …): kept with a warning and the FLOPs/bytes
  needed for a rough estimate; never dropped.

FLOPs follow :mod:`layerwise.layers` (forward, one batch, multiply-add = 2); ``macs`` counts the
multiply-adds of conv/dense/depthwise layers.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from layerwise.layers import LAYER_TYPES, OPTIMIZERS, PADDINGS, POOL_TYPES, out_side

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Keras activation -> the activation whose cost it is given (the predictor knows four).
ACTIVATION_COST = {
    "linear": "none", "none": "none", "relu": "relu", "relu6": "relu", "leaky_relu": "relu",
    "tanh": "tanh", "gelu": "tanh", "elu": "tanh", "selu": "tanh", "sigmoid": "sigmoid",
    "hard_sigmoid": "sigmoid", "softmax": "sigmoid", "swish": "sigmoid", "silu": "sigmoid",
    "softplus": "sigmoid", "hard_swish": "sigmoid", "hard_silu": "sigmoid",
}

APPLICATION_DEFAULT_SIZE = 224


class NetworkSpecError(ValueError):
    """A network spec, file or name that cannot be decomposed (message says where and why)."""


@dataclass
class Network:
    """A decomposed network: one dict per layer (see module docstring), in execution order."""

    name: str
    input_shape: tuple[int, ...]
    batch_size: int
    optimizer: str
    rows: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_frame(self) -> Any:
        """The rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def count(self, layer: str) -> int:
        """Number of rows of one layer type."""
        return sum(1 for row in self.rows if row["layer"] == layer)

    @property
    def macs(self) -> float:
        """Forward multiply-adds of one batch (conv, dense, depthwise, and unknown convs)."""
        return float(sum(row["macs"] for row in self.rows))

    @property
    def flops(self) -> float:
        """Forward FLOPs of one batch (multiply-add = 2)."""
        return float(sum(row["flops"] for row in self.rows))

    @property
    def params(self) -> int:
        """Parameters of the network."""
        return int(sum(row["params"] for row in self.rows))


# --------------------------------------------------------------------------- row helpers


def _cost_activation(name: str, note: list[str]) -> str:
    name = (name or "linear").lower()
    cost = ACTIVATION_COST.get(name)
    if cost is None:
        note.append(f"activation {name!r} unknown, not costed")
        return "none"
    if cost != name and name not in ("linear", "none"):
        note.append(f"activation {name} costed as {cost}")
    return cost


def _known_row(layer: str, name: str, cls: str, params: dict, *, batch: int, optimizer: str,
               in_shape: tuple, out_shape: tuple, note: list[str]) -> dict:
    row = {"layer": layer, **params, "batchsize": batch, "optimizer": optimizer, "precision": 32}
    spec = LAYER_TYPES[layer]
    problems = spec.check(row)
    if problems:
        raise NetworkSpecError(f"layer {name!r}: " + "; ".join(problems))
    expected = spec.output_shape(row)[1:]
    if tuple(expected) != tuple(out_shape) and layer != "dense":
        note.append(f"output {tuple(out_shape)} approximated by {tuple(expected)}")
    return {
        "name": name, "keras_class": cls, **row,
        "input_shape": _shape_text(in_shape), "output_shape": _shape_text(out_shape),
        "params": spec.weights(row), "macs": spec.macs(row), "flops": spec.flops(row),
        "bytes_in": spec.bytes_in(row), "bytes_out": spec.bytes_out(row),
        "note": "; ".join(note),
    }


def _other_row(layer: str, name: str, cls: str, *, batch: int, optimizer: str,
               in_shapes: list[tuple], out_shape: tuple, params: int, macs: float,
               flops: float, note: str) -> dict:
    elems_in = sum(float(np.prod(s, dtype=float)) for s in in_shapes) * batch
    elems_out = float(np.prod(out_shape, dtype=float)) * batch
    return {
        "name": name, "keras_class": cls, "layer": layer, "batchsize": batch,
        "optimizer": optimizer, "precision": 32,
        "input_shape": ";".join(_shape_text(s) for s in in_shapes),
        "output_shape": _shape_text(out_shape), "params": int(params), "macs": float(macs),
        "flops": float(flops), "bytes_in": 4.0 * elems_in, "bytes_out": 4.0 * elems_out,
        "note": note,
    }


def _shape_text(shape: tuple) -> str:
    return "x".join(str(int(d)) for d in shape)


def _square(shape: tuple) -> bool:
    return len(shape) == 3 and shape[0] == shape[1]


# --------------------------------------------------------------------------- generic layer


@dataclass
class _Layer:
    """Framework-neutral description of one layer occurrence."""

    name: str
    cls: str  # Keras class name
    in_shapes: list[tuple]  # without batch
    out_shape: tuple  # without batch
    config: dict
    params: int = 0
    first: bool = False


def _rows_for(layer: _Layer, batch: int, optimizer: str, training: bool) -> list[dict]:
    """Map one layer occurrence to rows; unknown ones get a FLOPs estimate and a note."""
    cfg, cls = layer.config, layer.cls
    ins, out = layer.in_shapes, layer.out_shape
    x = ins[0] if ins else out
    note: list[str] = []
    common = {"batch": batch, "optimizer": optimizer, "note": note}

    def unknown(reason: str, macs: float = 0.0, flops: float | None = None) -> list[dict]:
        if flops is None:
            per_out = 2.0 * layer.params / max(1, out[-1]) if layer.params and out else 1.0
            flops = float(np.prod(out, dtype=float)) * batch * per_out
        return [_other_row("unknown", layer.name, cls, batch=batch, optimizer=optimizer,
                           in_shapes=ins, out_shape=out, params=layer.params, macs=macs,
                           flops=flops, note=reason)]

    def known(kind: str, params: dict, in_shape: tuple = x, out_shape: tuple = out) -> dict:
        row = _known_row(kind, layer.name, cls, params, in_shape=in_shape, out_shape=out_shape,
                         **common)
        row["grad_input"] = not layer.first
        return row

    if cls in ("InputLayer",):
        return []
    if cls in ("Flatten", "Reshape", "Permute") or (cls in ("Dropout", "SpatialDropout2D")
                                                     and not training):
        return [_other_row("view", layer.name, cls, batch=batch, optimizer=optimizer,
                           in_shapes=ins, out_shape=out, params=0, macs=0.0, flops=0.0,
                           note="no computation")]

    if cls in ("Conv2D", "DepthwiseConv2D", "SeparableConv2D"):
        k = tuple(cfg.get("kernel_size", (1, 1)))
        s = tuple(cfg.get("strides", (1, 1)))
        dil = tuple(cfg.get("dilation_rate", (1, 1)))
        groups = int(cfg.get("groups", 1))
        mult = int(cfg.get("depth_multiplier", 1))
        act = _cost_activation(str(cfg.get("activation", "linear")), note)
        pad = str(cfg.get("padding", "valid"))
        cin, out_elems = x[-1], float(np.prod(out, dtype=float)) * batch
        reasons = []
        if len(k) != 2 or k[0] != k[1]:
            reasons.append(f"non-square kernel {k}")
        if s[0] != s[1]:
            reasons.append(f"non-square strides {s}")
        if dil != (1, 1):
            reasons.append(f"dilation {dil}")
        if groups != 1:
            reasons.append(f"groups={groups}")
        if mult != 1:
            reasons.append(f"depth_multiplier={mult}")
        if not _square(x):
            reasons.append(f"non-square input {x}")
        if pad not in PADDINGS:
            reasons.append(f"padding {pad}")
        if cls == "Conv2D":
            macs = out_elems * math.prod(k) * cin / groups
        elif cls == "DepthwiseConv2D":
            macs = out_elems * math.prod(k)
        else:
            mid = out_elems / out[-1] * cin * mult
            macs = mid * math.prod(k) + out_elems * cin * mult
        if reasons:
            return unknown(f"{cls} with {', '.join(reasons)}: rough FLOPs estimate", macs,
                           2.0 * macs)
        bias = bool(cfg.get("use_bias", True))
        window = {"matsize": x[0], "kernelsize": k[0], "strides": s[0], "padding": pad}
        if cls == "Conv2D":
            return [known("conv", {**window, "channels_in": cin, "channels_out": out[-1],
                                   "use_bias": bias, "activation": act})]
        if cls == "DepthwiseConv2D":
            return [known("dwconv", {**window, "channels_in": cin, "use_bias": bias,
                                     "activation": act})]
        mid_shape = (out[0], out[1], cin)
        dw = known("dwconv", {**window, "channels_in": cin, "use_bias": False,
                              "activation": "none"}, out_shape=mid_shape)
        pw = known("conv", {"matsize": out[0], "kernelsize": 1, "strides": 1,
                            "padding": "valid", "channels_in": cin, "channels_out": out[-1],
                            "use_bias": bias, "activation": act}, in_shape=mid_shape)
        dw["name"], pw["name"] = f"{layer.name}/depthwise", f"{layer.name}/pointwise"
        return [dw, pw]

    if cls == "Dense":
        act = _cost_activation(str(cfg.get("activation", "linear")), note)
        if len(x) != 1:
            macs = float(np.prod(out, dtype=float)) * batch * x[-1]
            return unknown(f"Dense on a rank-{len(x) + 1} input: rough FLOPs estimate", macs,
                           2.0 * macs)
        return [known("dense", {"dim_input": x[0], "dim_output": out[0], "activation": act,
                                "use_bias": bool(cfg.get("use_bias", True))})]

    if cls in ("MaxPooling2D", "AveragePooling2D"):
        pool = tuple(cfg.get("pool_size", (2, 2)))
        s = tuple(cfg.get("strides") or pool)
        pad = str(cfg.get("padding", "valid"))
        if pool[0] != pool[1] or s[0] != s[1] or not _square(x):
            return unknown(f"{cls} with non-square window/strides/input: rough FLOPs estimate",
                           flops=float(np.prod(out, dtype=float)) * batch * math.prod(pool))
        return [known("pool", {"matsize": x[0], "kernelsize": pool[0], "strides": s[0],
                               "padding": pad, "channels_in": x[-1],
                               "pool_type": "max" if cls.startswith("Max") else "avg"})]

    if cls in ("GlobalAveragePooling2D", "GlobalMaxPooling2D") and _square(x):
        row = known("pool", {"matsize": x[0], "kernelsize": x[0], "strides": x[0],
                             "padding": "valid", "channels_in": x[-1],
                             "pool_type": "max" if "Max" in cls else "avg"})
        row["note"] = "global pooling costed as a pool with a window of the whole input"
        return [row]

    if cls == "BatchNormalization":
        if len(x) == 3 and _square(x):
            return [known("bn", {"matsize": x[0], "channels_in": x[-1]})]
        if len(x) == 1:
            return [known("bn", {"matsize": 1, "channels_in": x[0]})]

    if cls in ("Activation", "ReLU", "Softmax", "LeakyReLU", "ELU"):
        name = {"ReLU": "relu6" if cfg.get("max_value") else "relu", "Softmax": "softmax",
                "LeakyReLU": "leaky_relu", "ELU": "elu"}.get(cls, str(cfg.get("activation")))
        act = _cost_activation(name, note)
        if act != "none":
            if len(x) == 3 and _square(x):
                return [known("act", {"matsize": x[0], "channels_in": x[-1], "activation": act})]
            if len(x) == 1:
                return [known("act", {"matsize": 1, "channels_in": x[0], "activation": act})]
        if name in ("linear", "none"):
            return [_other_row("view", layer.name, cls, batch=batch, optimizer=optimizer,
                               in_shapes=ins, out_shape=out, params=0, macs=0.0, flops=0.0,
                               note="linear activation: no computation")]

    if cls in ("Add", "Subtract") and len(ins) == 2 and all(s == out for s in ins):
        if len(out) == 3 and _square(out):
            return [known("add", {"matsize": out[0], "channels_in": out[-1]}, in_shape=out)]
        if len(out) == 1:
            return [known("add", {"matsize": 1, "channels_in": out[0]}, in_shape=out)]

    elems = float(np.prod(out, dtype=float)) * batch
    flops = None if layer.params else elems * max(1, len(ins) - 1)
    return unknown(f"{cls} is not a benchmarked layer type: rough estimate from its size",
                   flops=flops)


# --------------------------------------------------------------------------- Keras models


def _keras_shape(tensor: Any) -> tuple:
    return tuple(tensor.shape[1:])


def _keras_layers(model: Any) -> list[_Layer]:
    """Flatten a (possibly nested) Keras model into layer occurrences in topological order."""
    import keras

    inputs = {id(t) for t in getattr(model, "inputs", None) or []}
    found: list[_Layer] = []
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            found.extend(_keras_layers(layer))
            continue
        ins = layer.input if isinstance(layer.input, (list, tuple)) else [layer.input]
        ins = [t for t in ins if t is not None]
        in_shapes = [_keras_shape(t) for t in ins]
        out = layer.output
        out_shape = _keras_shape(out[0] if isinstance(out, (list, tuple)) else out)
        for shape in [*in_shapes, out_shape]:
            if any(d is None for d in shape):
                raise NetworkSpecError(
                    f"layer {layer.name!r} has an undefined size {shape}: build the model with a "
                    "fixed input shape (e.g. input_shape=(224, 224, 3))"
                )
        found.append(_Layer(
            name=layer.name, cls=layer.__class__.__name__, in_shapes=in_shapes,
            out_shape=out_shape, config=_keras_config(layer), params=int(layer.count_params()),
            first=bool(ins) and all(id(t) in inputs for t in ins),
        ))
    return found


def _keras_config(layer: Any) -> dict:
    cfg = dict(layer.get_config())
    act = getattr(layer, "activation", None)
    if callable(act):
        cfg["activation"] = getattr(act, "__name__", str(act))
    if layer.__class__.__name__ == "ReLU":
        cfg["max_value"] = getattr(layer, "max_value", None)
    return cfg


def keras_application_names() -> dict[str, str]:
    """Normalised name -> ``keras.applications`` constructor name (imports Keras)."""
    import keras

    names = {}
    for attr in dir(keras.applications):
        obj = getattr(keras.applications, attr)
        if attr[:1].isupper() and callable(obj):
            names[_norm(attr)] = attr
    return names


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def build_application(name: str, image_size: int | None = None) -> Any:
    """A ``keras.applications`` model by (case/punctuation-insensitive) name, ``weights=None``."""
    import keras

    names = keras_application_names()
    key = _norm(name)
    if key not in names:
        close = difflib.get_close_matches(key, list(names), n=4)
        hint = f"; did you mean {', '.join(names[c] for c in close)}?" if close else ""
        raise NetworkSpecError(f"unknown network {name!r}: not a keras.applications model, "
                               f"a .keras file or a .json spec{hint}")
    side = int(image_size or APPLICATION_DEFAULT_SIZE)
    try:
        return getattr(keras.applications, names[key])(weights=None,
                                                        input_shape=(side, side, 3))
    except ValueError as exc:
        raise NetworkSpecError(f"cannot build {names[key]} at {side}x{side}: {exc}") from None


def load_model(source: Any, image_size: int | None = None) -> Any:
    """A Keras model from an instance, a ``.keras`` file or an application name."""
    if hasattr(source, "layers"):
        return source
    text = str(source)
    if text.endswith((".keras", ".h5")):
        if not Path(text).exists():
            raise NetworkSpecError(f"{text}: no such model file")
        import keras

        try:
            return keras.models.load_model(text, compile=False)
        except Exception as exc:  # noqa: BLE001 - any load failure is a user error here
            raise NetworkSpecError(f"{text}: cannot load Keras model ({exc})") from None
    return build_application(text, image_size)


# --------------------------------------------------------------------------- JSON specs

SPEC_TYPES = ("conv", "dwconv", "dense", "pool", "global_pool", "bn", "act", "add", "flatten",
              "dropout")


def load_spec(source: str | Path | dict) -> dict:
    """Read a JSON network spec (dict, path or JSON text) with errors naming file and line."""
    if isinstance(source, dict):
        return source
    text, where = str(source), "<spec>"
    if not text.lstrip().startswith("{"):
        where = text
        try:
            text = Path(text).read_text(encoding="utf-8")
        except OSError as exc:
            raise NetworkSpecError(f"{where}: cannot read network spec ({exc.strerror})") from None
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NetworkSpecError(f"{where}:{exc.lineno}:{exc.colno}: invalid JSON ({exc.msg})") \
            from None
    if not isinstance(spec, dict):
        raise NetworkSpecError(f"{where}: a network spec is a JSON object with 'layers'")
    spec.setdefault("_source", where)
    return spec


def _spec_layers(spec: dict, image_size: int | None) -> list[_Layer]:
    where = spec.get("_source", "<spec>")
    try:
        shape = tuple(int(v) for v in spec["input_shape"])
    except (KeyError, TypeError, ValueError):
        raise NetworkSpecError(f"{where}: 'input_shape' must be [height, width, channels] or "
                               "[features]") from None
    if image_size and len(shape) == 3:
        shape = (int(image_size), int(image_size), shape[2])
    entries = spec.get("layers")
    if not isinstance(entries, list) or not entries:
        raise NetworkSpecError(f"{where}: 'layers' must be a non-empty list")
    found: list[_Layer] = []
    for i, entry in enumerate(entries):
        at = f"{where}: layers[{i}]"
        if not isinstance(entry, dict) or entry.get("type") not in SPEC_TYPES:
            got = entry.get("type") if isinstance(entry, dict) else entry
            raise NetworkSpecError(f"{at}: type {got!r} unknown; known: {', '.join(SPEC_TYPES)}")
        for r in range(int(entry.get("repeat", 1))):
            name = entry.get("name", f"{entry['type']}_{i}") + (f"_{r}" if r else "")
            layer = _spec_layer(entry, name, shape, at)
            layer.first = not found
            found.append(layer)
            shape = layer.out_shape
    return found


def _spec_layer(e: dict, name: str, x: tuple, at: str) -> _Layer:
    kind = e["type"]

    def need_image() -> None:
        if len(x) != 3:
            raise NetworkSpecError(f"{at}: {kind} needs an image input, got shape {x}")

    try:
        if kind in ("conv", "dwconv", "pool"):
            need_image()
            k = int(e.get("kernel", e.get("size", 2 if kind == "pool" else 3)))
            s = int(e.get("strides", k if kind == "pool" else 1))
            pad = str(e.get("padding", "valid" if kind == "pool" else "same"))
            if pad not in PADDINGS:
                raise NetworkSpecError(f"{at}: padding {pad!r} not in {PADDINGS}")
            side = out_side(x[0], k, s, pad)
            if side <= 0:
                raise NetworkSpecError(f"{at}: kernel {k} stride {s} {pad} on side {x[0]} "
                                       "gives no output")
            cfg = {"kernel_size": (k, k), "strides": (s, s), "padding": pad,
                   "activation": e.get("activation", "linear"),
                   "use_bias": bool(e.get("use_bias", True))}
            if kind == "conv":
                f = int(e["filters"])
                return _Layer(name, "Conv2D", [x], (side, side, f), cfg,
                              k * k * x[2] * f + (f if cfg["use_bias"] else 0))
            if kind == "dwconv":
                return _Layer(name, "DepthwiseConv2D", [x], (side, side, x[2]), cfg,
                              k * k * x[2] + (x[2] if cfg["use_bias"] else 0))
            ptype = str(e.get("pool", "max"))
            if ptype not in POOL_TYPES:
                raise NetworkSpecError(f"{at}: pool {ptype!r} not in {POOL_TYPES}")
            cls = "MaxPooling2D" if ptype == "max" else "AveragePooling2D"
            return _Layer(name, cls, [x], (side, side, x[2]),
                          {"pool_size": (k, k), "strides": (s, s), "padding": pad})
        if kind == "global_pool":
            need_image()
            cls = "GlobalMaxPooling2D" if e.get("pool", "avg") == "max" else \
                "GlobalAveragePooling2D"
            return _Layer(name, cls, [x], (x[2],), {})
        if kind == "dense":
            if len(x) != 1:
                raise NetworkSpecError(f"{at}: dense needs a flat input (add a flatten or "
                                       f"global_pool first), got shape {x}")
            u = int(e["units"])
            bias = bool(e.get("use_bias", True))
            return _Layer(name, "Dense", [x], (u,), {"activation": e.get("activation", "linear"),
                                                     "use_bias": bias},
                          x[0] * u + (u if bias else 0))
        if kind == "bn":
            return _Layer(name, "BatchNormalization", [x], x, {}, 4 * x[-1])
        if kind == "act":
            act = str(e.get("activation", "relu"))
            if act not in ACTIVATION_COST:
                raise NetworkSpecError(f"{at}: activation {act!r} unknown; known: "
                                       f"{', '.join(ACTIVATION_COST)}")
            return _Layer(name, "Activation", [x], x, {"activation": act})
        if kind == "add":
            return _Layer(name, "Add", [x, x], x, {})
        if kind == "flatten":
            return _Layer(name, "Flatten", [x], (int(np.prod(x)),), {})
        return _Layer(name, "Dropout", [x], x, {"rate": float(e.get("rate", 0.5))})
    except KeyError as exc:
        raise NetworkSpecError(f"{at}: {kind} needs {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, NetworkSpecError):
            raise
        raise NetworkSpecError(f"{at}: bad value ({exc})") from None


def spec_to_keras(spec: str | Path | dict, image_size: int | None = None) -> Any:
    """Build the Keras model a JSON spec describes (for measuring it; imports Keras)."""
    import keras

    spec = load_spec(spec)
    layers = _spec_layers(spec, image_size)
    inp = keras.Input(shape=layers[0].in_shapes[0])
    x = inp
    for layer in layers:
        cfg = layer.config
        act = cfg.get("activation", "linear")
        if layer.cls == "Conv2D":
            x = keras.layers.Conv2D(layer.out_shape[-1], cfg["kernel_size"], cfg["strides"],
                                    cfg["padding"], activation=act, use_bias=cfg["use_bias"],
                                    name=layer.name)(x)
        elif layer.cls == "DepthwiseConv2D":
            x = keras.layers.DepthwiseConv2D(cfg["kernel_size"], cfg["strides"], cfg["padding"],
                                             activation=act, use_bias=cfg["use_bias"],
                                             name=layer.name)(x)
        elif layer.cls in ("MaxPooling2D", "AveragePooling2D"):
            x = getattr(keras.layers, layer.cls)(cfg["pool_size"], cfg["strides"],
                                                 cfg["padding"], name=layer.name)(x)
        elif layer.cls.startswith("Global"):
            x = getattr(keras.layers, layer.cls)(name=layer.name)(x)
        elif layer.cls == "Dense":
            x = keras.layers.Dense(layer.out_shape[0], activation=act, use_bias=cfg["use_bias"],
                                   name=layer.name)(x)
        elif layer.cls == "BatchNormalization":
            x = keras.layers.BatchNormalization(name=layer.name)(x)
        elif layer.cls == "Activation":
            x = keras.layers.Activation(act, name=layer.name)(x)
        elif layer.cls == "Add":
            x = keras.layers.Add(name=layer.name)([x, x])
        elif layer.cls == "Flatten":
            x = keras.layers.Flatten(name=layer.name)(x)
        else:
            x = keras.layers.Dropout(cfg["rate"], name=layer.name)(x)
    return keras.Model(inp, x, name=str(spec.get("name", "network")))


# --------------------------------------------------------------------------- entry point


def _is_spec(source: Any) -> bool:
    if isinstance(source, dict):
        return True
    text = str(source)
    return text.lstrip().startswith("{") or text.lower().endswith(".json")


def decompose(source: Any, *, batch_size: int = 1, optimizer: str = "none",
              image_size: int | None = None) -> Network:
    """Decompose a network (see module docstring) for one batch of ``batch_size``.

    ``optimizer`` ``none`` = forward only (inference: dropout is a view), else a training step.
    ``image_size`` sets the input side of an application or JSON spec (ignored for a model
    instance or a saved model, whose input shape is fixed).
    """
    if optimizer not in OPTIMIZERS:
        raise NetworkSpecError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if int(batch_size) < 1:
        raise NetworkSpecError(f"batch size must be >= 1, got {batch_size}")
    if _is_spec(source):
        spec = load_spec(source)
        layers = _spec_layers(spec, image_size)
        name = str(spec.get("name", "network"))
    else:
        model = load_model(source, image_size)
        layers = _keras_layers(model)
        name = str(getattr(model, "name", "network"))
    if not layers:
        raise NetworkSpecError(f"network {name!r} has no layers")
    training = optimizer != "none"
    net = Network(name=name, input_shape=tuple(layers[0].in_shapes[0]) if layers[0].in_shapes
                  else tuple(layers[0].out_shape), batch_size=int(batch_size),
                  optimizer=optimizer)
    for layer in layers:
        net.rows.extend(_rows_for(layer, int(batch_size), optimizer, training))
    unknown = [row for row in net.rows if row["layer"] == "unknown"]
    if unknown:
        classes = sorted({row["keras_class"] for row in unknown})
        net.warnings.append(
            f"{len(unknown)} layer(s) not benchmarked ({', '.join(classes)}): "
            "their time is a rough FLOPs/bytes estimate"
        )
    return net
