"""Decompose a CNN into benchmarkable layer rows (the published row layout + ``layer`` + ``name``).

Sources: a Keras model instance, a saved ``.keras`` file, a network name, or a JSON network
spec (a dict or a ``.json`` file, see ``docs/network-spec.md``). A name known to the zoo
(:mod:`layerwise.zoo`: keras.applications CNNs, tf_cnn_benchmarks networks, their aliases) at
its default image size (``image_size`` None or equal) is read from the shipped spec; any other
name or size builds the model with TensorFlow (``weights=None``). JSON specs and zoo networks
are decomposed without TensorFlow. PyTorch: a ``torch.nn.Module``, a ``module:callable`` or
``file.py:callable`` reference (:mod:`layerwise.network_source`: traced on the meta device by
:mod:`layerwise.torch_graph`, the trace cached by the file's content) or a torchvision name (the
shipped PyTorch spec, :mod:`layerwise.zoo.torch_zoo`, read without torch); which zoo a name
comes from depends on ``framework`` (see :func:`decompose`).

Every layer of the network becomes one row (``SeparableConv2D`` two: depthwise + 1x1 conv):

* ``layer`` a registered kind (:mod:`layerwise.kinds`: conv, dense, dwconv, pool, bn, act, add):
  the kind whose ``keras_classes`` holds the Keras class maps it (``from_keras``);
* ``layer="view"``: no computation (Flatten, Reshape, Dropout when not training, Input);
* ``layer="unknown"``: anything else (ZeroPadding2D, Concatenate, Multiply, Dropout when
  training, non-square or grouped convolutions, …): kept with a warning and the FLOPs/bytes
  needed for a rough estimate; never dropped.

FLOPs follow :mod:`layerwise.kinds.base` (forward, one batch, multiply-add = 2); ``macs`` counts
the multiply-adds of conv/dense/depthwise layers. JSON spec types belong to kinds too
(``spec_types``), except ``flatten`` and ``dropout``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fleet.quiet_tf import quiet_import
from layerwise import network_source, zoo
from layerwise.kinds import KINDS, kind_for_keras, kind_for_spec, spec_types
from layerwise.kinds.base import NetLayer, RowContext
from layerwise.kinds.mapping import ACTIVATION_COST, NetworkSpecError, UnknownNetworkError
from layerwise.layers import OPTIMIZERS
from layerwise.torch_layers import TORCH_CLS_PREFIX, torch_rows
from layerwise.zoo import torch_zoo

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

APPLICATION_DEFAULT_SIZE = 224
VIEW_CLASSES = ("Flatten", "Reshape", "Permute")  # no computation
DROPOUT_CLASSES = ("Dropout", "SpatialDropout2D")  # no computation when not training
VIEW_SPEC_TYPES = ("flatten", "dropout")  # JSON spec types that are not layer kinds


@dataclass
class Network:
    """A decomposed network: one dict per layer (see module docstring), in execution order."""

    name: str
    input_shape: tuple[int, ...]
    batch_size: int
    optimizer: str
    rows: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    flagged_ops: dict[str, int] = field(default_factory=dict)  # PyTorch op -> rows, see decompose

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


def known_spec_types() -> tuple[str, ...]:
    """JSON spec types: those of the registered kinds, then ``VIEW_SPEC_TYPES``."""
    return (*spec_types(), *VIEW_SPEC_TYPES)


def __getattr__(name: str) -> Any:
    if name == "SPEC_TYPES":  # the former constant, now derived from the registry
        return known_spec_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- layer -> rows


def _rows_for(layer: NetLayer, batch: int, optimizer: str, training: bool) -> list[dict]:
    """Map one layer occurrence to rows: its kind's rows, a view, or an ``unknown`` estimate.

    Rules: InputLayer gives no row; views (and dropout when not training) cost nothing; a
    class no kind maps, or one its kind declines, gets a rough estimate from its size and a note.
    A PyTorch occurrence (``config["framework"] == "pytorch"``) is mapped by
    :func:`layerwise.torch_layers.torch_rows` (batch scaling, flagged ops, PyTorch's parameter
    count), which uses these rules for its Keras-class occurrences.
    """
    if layer.config.get("framework") == "pytorch":
        return torch_rows(layer, batch, optimizer, training, _kind_rows)
    return _kind_rows(layer, batch, optimizer, training)


def _kind_rows(layer: NetLayer, batch: int, optimizer: str, training: bool) -> list[dict]:
    """The rules of :func:`_rows_for` for a Keras-class occurrence."""
    if layer.cls == "InputLayer":
        return []
    ctx = RowContext(layer, batch, optimizer, training, KINDS)
    if layer.cls in VIEW_CLASSES or (layer.cls in DROPOUT_CLASSES and not training):
        return ctx.view("no computation")
    kind = kind_for_keras(layer.cls)
    rows = kind.from_keras(ctx) if kind is not None else None
    if rows is not None:
        return rows
    elems = float(np.prod(layer.out_shape, dtype=float)) * batch
    flops = None if layer.params else elems * max(1, len(layer.in_shapes) - 1)
    return ctx.unknown(f"{layer.cls} is not a benchmarked layer type: rough estimate from its "
                       "size", flops=flops)


# --------------------------------------------------------------------------- Keras models


def _keras_shape(tensor: Any) -> tuple:
    return tuple(tensor.shape[1:])


def _keras_layers(model: Any) -> list[NetLayer]:
    """Flatten a (possibly nested) Keras model into layer occurrences in topological order."""
    keras = quiet_import("keras")

    inputs = {id(t) for t in getattr(model, "inputs", None) or []}
    found: list[NetLayer] = []
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
        found.append(NetLayer(
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
    kind = kind_for_keras(layer.__class__.__name__)
    return cfg if kind is None else kind.read_keras_config(layer, cfg)


def keras_application_names() -> dict[str, str]:
    """Normalised name -> ``keras.applications`` constructor name (imports Keras)."""
    keras = quiet_import("keras")

    names = {}
    for attr in dir(keras.applications):
        obj = getattr(keras.applications, attr)
        if attr[:1].isupper() and callable(obj):
            names[_norm(attr)] = attr
    return names


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def build_application(name: str, image_size: int | None = None) -> Any:
    """A model by (case/punctuation-insensitive) name, ``weights=None``: a zoo network or alias
    (default side: the zoo's), else any ``keras.applications`` model (default side 224)."""
    keras = quiet_import("keras")

    entry = zoo.CATALOG.get(zoo.lookup(name, shipped=False) or "")
    names = keras_application_names()
    key = entry.builder if entry is not None else _norm(name)
    if entry is None and key not in names:
        close = difflib.get_close_matches(key, list(names), n=4)
        shown = [names[c] for c in close] + [z for z in zoo.suggestions(name) if z not in close]
        shown += [t for t in torch_zoo.suggestions(name) if zoo.lookup(t) is None]
        hint = f"; did you mean {', '.join(shown)}?" if shown else ""
        raise UnknownNetworkError(f"unknown network {name!r}: not a keras.applications model, "
                                  f"a zoo network (Keras or torchvision), a module:callable "
                                  f"PyTorch model, a .keras file or a .json spec{hint}")
    side = int(image_size or (entry.image_size if entry else APPLICATION_DEFAULT_SIZE))
    try:
        if entry is not None and entry.source == "tf_cnn":
            from layerwise.zoo import tf_cnn

            return tf_cnn.build(entry.builder, side)
        ctor = entry.builder if entry is not None else names[key]
        return getattr(keras.applications, ctor)(weights=None, input_shape=(side, side, 3))
    except ValueError as exc:
        raise NetworkSpecError(f"cannot build {key} at {side}x{side}: {exc}") from None


def zoo_layers(source: Any, image_size: int | None = None) -> tuple[str, list[NetLayer]] | None:
    """(model name, layer occurrences) of a zoo network name at its default image size, read
    from the shipped spec without TensorFlow; None for anything else."""
    if not isinstance(source, str) or source.endswith((".keras", ".h5")):
        return None
    name = zoo.lookup(source)
    if name is None:
        return None
    spec = zoo.load(name)
    if image_size and int(image_size) != spec.image_size:
        return None
    return spec.model_name, spec.layers


@lru_cache(maxsize=32)
def _named_layers(name: str, image_size: int | None) -> tuple[str, list[NetLayer]]:
    """A named network built with TensorFlow at a non-default size, decomposed once per
    (name, size) in a process: its layers do not depend on the batch."""
    model = load_model(name, image_size)
    return str(getattr(model, "name", "network")), _keras_layers(model)


def load_model(source: Any, image_size: int | None = None) -> Any:
    """A Keras model from an instance, a ``.keras`` file or an application name."""
    if hasattr(source, "layers"):
        return source
    text = str(source)
    if text.endswith((".keras", ".h5")):
        if not Path(text).exists():
            raise NetworkSpecError(f"{text}: no such model file")
        keras = quiet_import("keras")

        try:
            return keras.models.load_model(text, compile=False)
        except Exception as exc:  # noqa: BLE001 - any load failure is a user error here
            raise NetworkSpecError(f"{text}: cannot load Keras model ({exc})") from None
    return build_application(text, image_size)


# --------------------------------------------------------------------------- JSON specs



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


def _spec_layers(spec: dict, image_size: int | None) -> list[NetLayer]:
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
    found: list[NetLayer] = []
    for i, entry in enumerate(entries):
        at = f"{where}: layers[{i}]"
        known = known_spec_types()
        if not isinstance(entry, dict) or entry.get("type") not in known:
            got = entry.get("type") if isinstance(entry, dict) else entry
            raise NetworkSpecError(f"{at}: type {got!r} unknown; known: {', '.join(known)}")
        for r in range(int(entry.get("repeat", 1))):
            name = entry.get("name", f"{entry['type']}_{i}") + (f"_{r}" if r else "")
            layer = _spec_layer(entry, name, shape, at)
            layer.first = not found
            found.append(layer)
            shape = layer.out_shape
    return found


def _spec_layer(e: dict, name: str, x: tuple, at: str) -> NetLayer:
    """The layer occurrence of one JSON entry: its kind's ``spec_layer``, or a view."""
    kind = e["type"]
    try:
        spec = kind_for_spec(kind)
        if spec is not None:
            return spec.spec_layer(e, name, x, at)
        if kind == "flatten":
            return NetLayer(name, "Flatten", [x], (int(np.prod(x)),), {})
        return NetLayer(name, "Dropout", [x], x, {"rate": float(e.get("rate", 0.5))})
    except KeyError as exc:
        raise NetworkSpecError(f"{at}: {kind} needs {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, NetworkSpecError):
            raise
        raise NetworkSpecError(f"{at}: bad value ({exc})") from None


def spec_to_keras(spec: str | Path | dict, image_size: int | None = None) -> Any:
    """Build the Keras model a JSON spec describes (for measuring it; imports Keras)."""
    keras = quiet_import("keras")

    spec = load_spec(spec)
    layers = _spec_layers(spec, image_size)
    inp = keras.Input(shape=layers[0].in_shapes[0])
    x = inp
    for layer in layers:
        kind = kind_for_keras(layer.cls)
        if kind is not None:
            built = kind.keras_layer(keras, layer)
            x = built([x] * kind.n_inputs if kind.n_inputs > 1 else x)
        elif layer.cls == "Flatten":
            x = keras.layers.Flatten(name=layer.name)(x)
        else:
            x = keras.layers.Dropout(layer.config["rate"], name=layer.name)(x)
    return keras.Model(inp, x, name=str(spec.get("name", "network")))


# --------------------------------------------------------------------------- entry point


@dataclass
class _Found:
    """A resolved network source: its name, layer occurrences, image shape and notes."""

    name: str
    layers: list[NetLayer]
    input_shape: tuple | None = None
    warnings: list[str] = field(default_factory=list)


@lru_cache(maxsize=16)
def _traced(text: str, image_size: int | None, cwd: str = "") -> tuple[str, list[NetLayer]]:
    """A ``file.py:callable`` or ``module:callable`` PyTorch model traced once per
    (reference, size, working directory) in a process, and across processes through the
    spec cache (:func:`layerwise.network_source.traced_layers`)."""
    ref = network_source.parse(text)
    if ref is None:
        raise NetworkSpecError(f"{text!r} is not a module:callable reference")
    name, layers, *_ = network_source.traced_layers(ref, image_size)
    return name, layers


def _torch_found(name: str, image_size: int | None) -> _Found | None:
    """A shipped torchvision spec at its side, else the model traced at ``image_size``
    (torch and torchvision needed); None when no spec of ``name`` is shipped."""
    canonical = torch_zoo.lookup(name)
    if canonical is None:
        return None
    return _shipped_found(canonical, image_size)


def _shipped_found(canonical: str, image_size: int | None) -> _Found:
    """The shipped spec of ``canonical`` (a name :func:`torch_zoo.lookup` returned) at its
    side, else the model traced at ``image_size`` (rules in :func:`_torch_found`)."""
    spec = torch_zoo.load(canonical)
    side = int(image_size or spec.image_size)
    if side == spec.image_size:
        return _Found(spec.model_name, spec.layers, (side, side, 3))
    entry = torch_zoo.entry(canonical)
    module = entry.module if entry is not None else "torchvision.models"
    try:
        found, layers = _traced(f"{module}:{canonical}", side)
    except NetworkSpecError as exc:
        raise NetworkSpecError(f"{canonical} at {side}x{side} needs a trace with torch and "
                               f"torchvision (its shipped PyTorch spec is at "
                               f"{spec.image_size}x{spec.image_size}): {exc}") from None
    return _Found(found, layers, (side, side, 3))


def _resolve(source: Any, image_size: int | None, framework: str | None) -> _Found:
    """The layer occurrences of any source (rules in ``decompose``)."""
    from layerwise import torch_graph

    if network_source.is_json_spec(source):
        spec = load_spec(source)
        return _Found(str(spec.get("name", "network")), _spec_layers(spec, image_size))
    if torch_graph.is_torch_module(source):
        layers, info = torch_graph.module_layers(source, image_size)
        side = info["image_size"]
        return _Found(type(source).__name__, layers, (side, side, 3))
    text = source if isinstance(source, str) else ""
    if not text or text.endswith((".keras", ".h5")):
        model = load_model(source, image_size)
        return _Found(str(getattr(model, "name", "network")), _keras_layers(model))
    ref = network_source.parse(text)
    if ref is not None:
        shipped = (torch_zoo.shipped_reference(ref.module, ref.attr, ref.args, ref.kwargs)
                   if ref.path is None else None)
        if shipped is not None:
            return _shipped_found(shipped, image_size)
        name, layers = _traced(text, image_size, os.getcwd())
        side = int(image_size or torch_graph.DEFAULT_IMAGE_SIZE)
        return _Found(name, layers, (side, side, 3))
    if framework == "pytorch" and (found := _torch_found(text, image_size)) is not None:
        return found
    if (keras := zoo_layers(text, image_size)) is not None:
        return _Found(*keras)
    if not zoo.is_keras_name(text) and (found := _torch_found(text, image_size)) is not None:
        if framework not in (None, "pytorch"):
            found.warnings.append(f"{text}: no Keras model of that name; the torchvision "
                                  "(PyTorch) spec is used")
        return found
    return _Found(*_named_layers(text, image_size))


def _flag_warnings(rows: list[dict]) -> tuple[dict[str, int], list[str]]:
    """Flagged PyTorch ops (counts) and the warnings about rows priced roughly."""
    flagged = Counter(row["keras_class"][len(TORCH_CLS_PREFIX):] for row in rows
                      if str(row["keras_class"]).startswith(TORCH_CLS_PREFIX))
    warnings = []
    if flagged:
        listed = ", ".join(f"{op} x{n}" for op, n in flagged.most_common())
        warnings.append(f"{sum(flagged.values())} run(s) per step of PyTorch ops no layer kind "
                        "covers, priced by a roofline of their bytes and FLOPs (flagged): "
                        f"{listed}")
    unknown = [row for row in rows if row["layer"] == "unknown"
               and not str(row["keras_class"]).startswith(TORCH_CLS_PREFIX)]
    if unknown:
        classes = sorted({row["keras_class"] for row in unknown})
        warnings.append(f"{len(unknown)} layer(s) not benchmarked ({', '.join(classes)}): "
                        "their time is a rough FLOPs/bytes estimate")
    return dict(flagged.most_common()), warnings


def layer_occurrences(source: Any, *, image_size: int | None = None,
                      framework: str | None = None) -> tuple[str, list[NetLayer], tuple]:
    """(name, layer occurrences, input shape without batch) of any source, as
    :func:`decompose` resolves it (the memory estimate reads these)."""
    found = _resolve(source, image_size, str(framework).lower() if framework else None)
    if not found.layers:
        raise NetworkSpecError(f"network {found.name!r} has no layers")
    return found.name, found.layers, _input_shape(found)


def _input_shape(found: _Found) -> tuple:
    """The input shape of a resolved source: its own, else its first layer's input."""
    first = found.layers[0]
    return tuple(found.input_shape or (tuple(first.in_shapes[0]) if first.in_shapes
                                       else tuple(first.out_shape)))


def decompose(source: Any, *, batch_size: int = 1, optimizer: str = "none",
              image_size: int | None = None, framework: str | None = None) -> Network:
    """Decompose a network (see module docstring) for one batch of ``batch_size``.

    ``optimizer`` ``none`` = forward only (inference: dropout is a view), else a training step.
    ``image_size`` sets the input side of a named network or JSON spec (ignored for a model
    instance or a saved model, whose input shape is fixed); None = the zoo network's default
    side (224 for other names).

    Sources: a JSON spec; a ``torch.nn.Module`` or a ``module:callable`` reference (traced,
    :mod:`layerwise.torch_graph`; a ``torchvision…:name`` without arguments is read from the
    shipped PyTorch spec); a name: with ``framework`` ``pytorch`` a shipped torchvision spec
    first, then the Keras zoo, then any keras.applications model (TensorFlow), then a shipped
    torchvision spec for names Keras does not have; a Keras model or ``.keras`` file.
    """
    if optimizer not in OPTIMIZERS:
        raise NetworkSpecError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if int(batch_size) < 1:
        raise NetworkSpecError(f"batch size must be >= 1, got {batch_size}")
    found = _resolve(source, image_size, str(framework).lower() if framework else None)
    name, layers = found.name, found.layers
    if not layers:
        raise NetworkSpecError(f"network {name!r} has no layers")
    training = optimizer != "none"
    net = Network(name=name, input_shape=_input_shape(found), batch_size=int(batch_size),
                  optimizer=optimizer, warnings=list(found.warnings))
    for layer in layers:
        net.rows.extend(_rows_for(layer, int(batch_size), optimizer, training))
    net.flagged_ops, warnings = _flag_warnings(net.rows)
    net.warnings.extend(warnings)
    return net


__all__ = ["ACTIVATION_COST", "APPLICATION_DEFAULT_SIZE", "Network", "NetworkSpecError",
           "UnknownNetworkError", "build_application", "decompose", "keras_application_names",
           "layer_occurrences",
           "known_spec_types", "load_model", "load_spec", "spec_to_keras", "zoo_layers"]
