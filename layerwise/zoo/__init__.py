"""Pre-decomposed networks: known CNNs as shipped layer specs, loaded without TensorFlow.

Each ``data/<name>.json`` (or ``.json.gz``) holds the :class:`~layerwise.kinds.base.NetLayer`
occurrences that :func:`layerwise.network.decompose` reads from the Keras model (name, class,
shapes, mapping config, parameters), its image size and totals. It is regenerated with
``python -m layerwise.zoo.build`` (see ``README.md``). Rules:

* names are matched case- and punctuation-insensitively (``InceptionV3`` = ``inception_v3``
  = ``inceptionv3``); ``ALIASES`` maps other spellings (tf_cnn_benchmarks' ``inception3``, …)
  to the canonical name, which is the file name;
* a canonical name is a ``keras.applications`` model (built with ``weights=None`` at its
  default image size) or a tf_cnn_benchmarks network built by :mod:`layerwise.zoo.tf_cnn`;
  a Caffe network decomposed by hand from its prototxt (:mod:`layerwise.zoo.caffe`:
  ``caffenet128``) is shipped too but has no Keras build, so it is not in ``CATALOG``;
* ``known_networks()`` lists the names shipped in ``data/``; ``CATALOG`` lists how every name
  is built (also the ones the build skipped);
* importing this package or loading a spec imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import difflib
import gzip
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from layerwise.kinds.base import NetLayer
from layerwise.kinds.mapping import NetworkSpecError, UnknownNetworkError

DATA_DIR = Path(__file__).parent / "data"
FORMAT = 1  # version of the spec file layout


@dataclass(frozen=True)
class Entry:
    """How a zoo network is built: ``source`` ``keras`` (``builder`` = a ``keras.applications``
    constructor) or ``tf_cnn`` (``builder`` = a key of ``layerwise.zoo.tf_cnn.BUILDERS``)."""

    name: str
    source: str
    builder: str
    image_size: int


def _keras(builder: str, size: int = 224) -> Entry:
    return Entry(_normalize(builder), "keras", builder, size)


def _tf_cnn(name: str, size: int) -> Entry:
    return Entry(name, "tf_cnn", name, size)


def _normalize(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


CATALOG: dict[str, Entry] = {e.name: e for e in (
    _keras("ResNet50"), _keras("ResNet101"), _keras("ResNet152"),
    _keras("ResNet50V2"), _keras("ResNet101V2"), _keras("ResNet152V2"),
    _keras("VGG16"), _keras("VGG19"),
    _keras("InceptionV3", 299), _keras("InceptionResNetV2", 299), _keras("Xception", 299),
    _keras("MobileNet"), _keras("MobileNetV2"),
    _keras("DenseNet121"), _keras("DenseNet169"), _keras("DenseNet201"),
    _keras("EfficientNetB0"), _keras("NASNetMobile"),
    _tf_cnn("alexnet", 227), _tf_cnn("overfeat", 231), _tf_cnn("googlenet", 224),
    _tf_cnn("inception4", 299), _tf_cnn("vgg11", 224),
)}

# Other spellings (normalised) -> canonical name. tf_cnn_benchmarks' resnet50/101/152 (v1),
# vgg16/19 and inception3 are the Keras models; its ``mobilenet`` is MobileNet v2, but the name
# ``mobilenet`` stays Keras' MobileNet (v1), as ``decompose`` always read it.
ALIASES: dict[str, str] = {
    "inception3": "inceptionv3", "inceptionv4": "inception4", "inceptionv1": "googlenet",
    "resnet50v1": "resnet50", "resnet101v1": "resnet101", "resnet152v1": "resnet152",
    "mobilenetv1": "mobilenet", "nasnet": "nasnetmobile", "overfeatfast": "overfeat",
}


# keras.applications constructors (Keras 3, normalised): a name here is a Keras model for a
# TensorFlow request even when the zoo ships no spec of it (it is then built with TensorFlow);
# other names may be answered by a shipped PyTorch spec (``layerwise.zoo.torch_zoo``).
KERAS_APPLICATIONS = frozenset({
    "convnextbase", "convnextlarge", "convnextsmall", "convnexttiny", "convnextxlarge",
    "densenet121", "densenet169", "densenet201", "efficientnetb0", "efficientnetb1",
    "efficientnetb2", "efficientnetb3", "efficientnetb4", "efficientnetb5", "efficientnetb6",
    "efficientnetb7", "efficientnetv2b0", "efficientnetv2b1", "efficientnetv2b2",
    "efficientnetv2b3", "efficientnetv2l", "efficientnetv2m", "efficientnetv2s",
    "inceptionresnetv2", "inceptionv3", "mobilenet", "mobilenetv2", "mobilenetv3large",
    "mobilenetv3small", "nasnetlarge", "nasnetmobile", "resnet101", "resnet101v2", "resnet152",
    "resnet152v2", "resnet50", "resnet50v2", "vgg16", "vgg19", "xception",
})


def is_keras_name(name: str) -> bool:
    """``name`` (any spelling or alias) is a zoo network or a keras.applications model."""
    key = _normalize(str(name))
    return ALIASES.get(key, key) in CATALOG or key in KERAS_APPLICATIONS


@dataclass
class ZooSpec:
    """A shipped network: its layer occurrences (shapes without batch) and totals at batch 1.

    ``model_name`` is the Keras model's name (what ``decompose`` reports); ``totals`` holds
    ``layers`` (count per Keras class), ``params``, ``trainable_params``, ``macs`` and
    ``flops`` (forward, one image).
    """

    name: str
    model_name: str
    source: str
    image_size: int
    input_shape: tuple[int, ...]
    totals: dict[str, Any]
    layers: list[NetLayer] = field(default_factory=list)


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples Keras configs hold (recursively)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def layer_from_json(d: dict[str, Any]) -> NetLayer:
    """A NetLayer from its spec entry (absent ``config``/``params``/``first``: empty/0/False)."""
    return NetLayer(name=d["name"], cls=d["cls"],
                    in_shapes=[tuple(int(v) for v in s) for s in d.get("in_shapes", [])],
                    out_shape=tuple(int(v) for v in d["out_shape"]),
                    config=_tuples(d.get("config", {})), params=int(d.get("params", 0)),
                    first=bool(d.get("first", False)))


def layer_to_json(layer: NetLayer) -> dict[str, Any]:
    """The spec entry of a NetLayer (defaults left out)."""
    d: dict[str, Any] = {"name": layer.name, "cls": layer.cls,
                         "in_shapes": [list(s) for s in layer.in_shapes],
                         "out_shape": list(layer.out_shape)}
    if layer.config:
        d["config"] = layer.config
    if layer.params:
        d["params"] = int(layer.params)
    if layer.first:
        d["first"] = True
    return d


def _data_files(data_dir: Path = DATA_DIR) -> dict[str, Path]:
    files = {}
    for path in sorted(data_dir.glob("*.json*")):
        if path.name.endswith((".json", ".json.gz")):
            files[path.name.split(".", 1)[0]] = path
    return files


def known_networks() -> list[str]:
    """Canonical names of the shipped specs, sorted."""
    return sorted(_data_files())


def aliases() -> dict[str, str]:
    """Alias -> canonical name, for aliases of shipped networks."""
    known = set(known_networks())
    return {a: n for a, n in sorted(ALIASES.items()) if n in known}


def lookup(name: str, shipped: bool = True) -> str | None:
    """The canonical name of ``name`` (an alias or any spelling), else None.

    ``shipped`` False also finds catalogued networks without a shipped spec.
    """
    key = _normalize(str(name))
    if not key:
        return None
    key = ALIASES.get(key, key)
    names = known_networks() if shipped else list(CATALOG)
    return key if key in names else None


def suggestions(name: str, n: int = 4) -> list[str]:
    """Known names and aliases close to ``name``."""
    pool = [*known_networks(), *aliases()]
    return difflib.get_close_matches(_normalize(str(name)), pool, n=n, cutoff=0.6)


def resolve_name(name: str) -> str:
    """The canonical name of a shipped network; :class:`UnknownNetworkError` (a
    NetworkSpecError and a ValueError) naming close names otherwise."""
    found = lookup(name)
    if found is not None:
        return found
    close = suggestions(name)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownNetworkError(f"unknown zoo network {name!r}{hint} (known: "
                              f"{', '.join(known_networks())}; aliases: {', '.join(aliases())})")


@lru_cache(maxsize=64)
def _read(path: Path) -> dict[str, Any]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw)


def read_spec(path: str | Path) -> ZooSpec:
    """A spec from a ``.json`` or ``.json.gz`` file."""
    path = Path(path)
    data = _read(path)
    if data.get("format") != FORMAT:
        raise NetworkSpecError(f"{path}: zoo spec format {data.get('format')!r}, expected "
                               f"{FORMAT}: rebuild it with python -m layerwise.zoo.build")
    return ZooSpec(name=data["name"], model_name=data["model_name"], source=data["source"],
                   image_size=int(data["image_size"]),
                   input_shape=tuple(int(v) for v in data["input_shape"]),
                   totals={k: dict(v) if isinstance(v, dict) else v
                           for k, v in data["totals"].items()},
                   layers=[layer_from_json(d) for d in data["layers"]])


def load(name: str) -> ZooSpec:
    """The shipped spec of a network (any spelling or alias; see ``resolve_name``)."""
    return read_spec(_data_files()[resolve_name(name)])


__all__ = ["ALIASES", "CATALOG", "DATA_DIR", "KERAS_APPLICATIONS", "Entry", "ZooSpec", "aliases",
           "is_keras_name", "known_networks",
           "layer_from_json", "layer_to_json", "load", "lookup", "read_spec", "resolve_name",
           "suggestions"]
