"""A user's own network: ``file.py:callable`` and ``module:callable`` references, their traced
specs cached by content, and the framework a network's source says it runs in.

Rules:

* **References** (:func:`parse`): ``path/to/file.py:callable`` (a path ending in ``.py``,
  relative to the working directory or absolute, ``~`` expanded) loads that file as a module,
  its folder importable while it loads; ``pkg.module:callable`` imports the module with the
  working directory importable (as ``python -m`` does), so ``mymodule:build`` works in the
  module's folder without ``PYTHONPATH``. Both take literal arguments,
  ``file.py:build(num_classes=10)`` (:func:`layerwise.torch_graph.parse_reference`). A path
  to a ``.py`` file that does not exist is a :class:`NetworkSpecError` naming it.
* **Cache** (:func:`traced_layers`): a traced model's layer occurrences are written as a zoo
  spec (JSON, :func:`layerwise.zoo.read_spec`'s format) under
  ``<data directory>/cache/specs`` (:func:`fleet.home.cache_dir`; never the working
  directory), keyed by the SHA-256 of: the content of the file (for ``module:callable``, the
  module's own file, found without importing it, and its distribution's version), the
  callable and its arguments, the image side, and the tracer's own source
  (:data:`TRACER_MODULES`), so a repeat forecast reads the JSON and never imports ``torch``.
  A change to another file the module imports is not seen: edit the module's own file (or
  delete the cache folder). A module whose file cannot be found is traced every time; an
  unreadable or unwritable cache is traced around, never an error.
* **Framework** (:func:`source_framework`): a ``module:callable`` or ``.py`` reference and a
  ``torch.nn.Module`` are PyTorch; a Keras model, a ``.keras``/``.h5`` file, a JSON spec with
  ``"framework": "tensorflow"`` and a name only the Keras zoo knows (no torchvision spec) are
  TensorFlow; anything else says nothing (None).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

from fleet.framework import FrameworkError, parse_framework_choice
from fleet.home import cache_dir
from layerwise import zoo
from layerwise.kinds.base import NetLayer
from layerwise.kinds.mapping import NetworkSpecError
from layerwise.torch_graph import DEFAULT_IMAGE_SIZE, TorchRef, parse_reference
from layerwise.zoo import torch_zoo

CACHE_KIND = "specs"
CACHE_VERSION = 1
# the modules whose source decides what a trace records: a change to them retraces
TRACER_MODULES = ("torch_graph.py", "torch_trace.py", "torch_layers.py")
FILE_REFERENCE = re.compile(r"^\s*(?P<path>[^:(){}]+\.py)\s*:\s*(?P<rest>[A-Za-z_].*)$", re.S)
PYTORCH, TENSORFLOW = "pytorch", "tensorflow"


def parse(text: Any) -> TorchRef | None:
    """The reference in ``text`` (module rules), or None when it is not one."""
    if not isinstance(text, str):
        return None
    found = FILE_REFERENCE.match(text)
    if found is None:
        return parse_reference(text)
    path = Path(found["path"].strip()).expanduser()
    if not path.is_file():
        raise NetworkSpecError(f"{text.strip()!r}: no Python file {str(path)!r} (from "
                               f"{os.getcwd()}); give file.py:callable with the path to the file")
    ref = parse_reference(f"_file:{found['rest']}")
    if ref is None:
        raise NetworkSpecError(f"{text.strip()!r}: after {found['path'].strip()}: comes the "
                               "callable, e.g. mynet.py:build or mynet.py:build(num_classes=10)")
    resolved = path.resolve()
    module = "jobcast_user_" + re.sub(r"\W", "_", resolved.stem)
    return TorchRef(module, ref.attr, ref.args, ref.kwargs, path=str(resolved))


def is_json_spec(source: Any) -> bool:
    """``source`` is a JSON layer spec: a mapping, JSON text (``{...}``) or a ``.json``
    file's path (no file is read)."""
    if isinstance(source, dict):
        return True
    text = str(source)
    return text.lstrip().startswith("{") or text.lower().endswith(".json")


def is_reference(text: Any) -> bool:
    """``text`` looks like a ``file.py:callable`` or ``module:callable`` reference (no file
    is read; bad arguments still make it one)."""
    if not isinstance(text, str):
        return False
    if FILE_REFERENCE.match(text) is not None:
        return True
    try:
        return parse_reference(text) is not None
    except NetworkSpecError:
        return True


# --------------------------------------------------------------------------- the cache


def _module_file(module: str) -> Path | None:
    """The source file of ``module`` found on the working directory and ``sys.path``
    without importing anything (no parent package runs), else None."""
    import sys

    search: list[str] | None = [os.getcwd(), *sys.path]
    spec = None
    parts = module.split(".")
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _version(module: str) -> str:
    try:
        return importlib.metadata.version(module.split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return ""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_key(ref: TorchRef, side: int) -> str | None:
    """The cache key of a reference traced at ``side`` (module rules); None when its file
    cannot be read (then it is traced every time)."""
    source = Path(ref.path) if ref.path is not None else _module_file(ref.module)
    if source is None:
        return None
    here = Path(__file__).parent
    try:
        parts = {"v": CACHE_VERSION, "content": _digest(source),
                 "version": "" if ref.path is not None else _version(ref.module),
                 "module": "" if ref.path is not None else ref.module,
                 "callable": ref.attr, "args": repr(ref.args), "kwargs": repr(ref.kwargs),
                 "side": int(side), "tracer": [_digest(here / m) for m in TRACER_MODULES]}
    except OSError:
        return None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def cache_path(ref: TorchRef, key: str) -> Path:
    """Where the spec of ``ref`` under ``key`` is kept."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", ref.short)[:60]
    return cache_dir(CACHE_KIND) / f"{stem}-{key[:24]}.json"


def _plain(value: Any) -> Any:
    """A JSON value of a traced config (numpy scalars and tuples made plain)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    return _plain(item()) if callable(item) else str(value)


def _write(path: Path, ref: TorchRef, side: int, layers: list[NetLayer], info: dict) -> None:
    params = int(info.get("params", sum(layer.params for layer in layers)))
    spec = {"format": zoo.FORMAT, "name": ref.short, "model_name": ref.short,
            "framework": PYTORCH, "source": f"{ref} (meta-device trace, training mode)",
            "image_size": side, "input_shape": [side, side, 3],
            "totals": {"params": params,
                       "trainable_params": int(info.get("trainable_params", params))},
            "layers": [_plain(zoo.layer_to_json(layer)) for layer in layers]}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(spec, separators=(",", ":")))
        os.replace(part, path)
    except OSError:
        return  # an unwritable cache: traced again next time


def _read(path: Path) -> zoo.ZooSpec | None:
    if not path.is_file():
        return None
    try:
        return zoo.read_spec(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged cache file: traced again and rewritten


def traced_layers(ref: TorchRef, image_size: int | None
                  ) -> tuple[str, list[NetLayer], int, int, int]:
    """(name, layer occurrences, image side, params, trainable params) of the model a
    reference builds: from the cache where it holds the trace (no ``torch`` import), else
    traced (:func:`layerwise.torch_graph.reference_layers`) and written there."""
    side = int(image_size or DEFAULT_IMAGE_SIZE)
    key = cache_key(ref, side)
    path = cache_path(ref, key) if key is not None else None
    spec = _read(path) if path is not None else None
    if spec is not None:
        params = int(spec.totals.get("params", 0))
        return (spec.name, spec.layers, side, params,
                int(spec.totals.get("trainable_params", params)))
    from layerwise import torch_graph

    name, layers, info = torch_graph.reference_layers(ref, side)
    if path is not None:
        _write(path, ref, side, layers, info)
    params = int(info.get("params", 0))
    return name, layers, side, params, int(info.get("trainable_params", params))


# --------------------------------------------------------------------------- the framework


def source_framework(source: Any) -> tuple[str, str] | None:
    """(framework, why) a network's source says it runs in, else None (module rules)."""
    if isinstance(source, dict):
        return _spec_framework(source, "the JSON spec")
    if not isinstance(source, str):
        mro = [f"{c.__module__}.{c.__name__}" for c in type(source).__mro__]
        if any(m.startswith("torch.nn") for m in mro):
            return PYTORCH, "a torch.nn.Module"
        if any(m.startswith(("keras", "tf_keras", "tensorflow")) for m in mro):
            return TENSORFLOW, "a Keras model"
        return None
    text = source.strip()
    if text.lower().endswith((".keras", ".h5")):
        return TENSORFLOW, f"a saved Keras model ({text})"
    if is_json_spec(text):
        return _json_framework(text)
    if is_reference(text):
        return PYTORCH, f"{text} is a PyTorch module:callable reference"
    if zoo.lookup(text) is not None and torch_zoo.lookup(text) is None:
        return TENSORFLOW, f"{text} is a Keras network with no torchvision spec"
    return None


def torch_trace_missing(name: Any, image_size: int | None) -> str | None:
    """Why a zoo network named ``name`` cannot be specced for PyTorch at ``image_size`` here
    (its shipped spec is at another side and torchvision, which would trace it, is not
    installed) while the Keras zoo builds it at any side; None when nothing is missing."""
    if not isinstance(name, str) or image_size is None or zoo.lookup(name) is None:
        return None
    canonical = torch_zoo.lookup(name)
    entry = torch_zoo.entry(canonical) if canonical is not None else None
    if entry is None or int(image_size) == entry.image_size:
        return None
    if importlib.util.find_spec("torchvision") is not None:
        return None
    return (f"its PyTorch spec is at {entry.image_size}x{entry.image_size} and torchvision, "
            f"which traces it at {image_size}x{image_size}, is not installed")


def _json_framework(text: str) -> tuple[str, str] | None:
    try:
        raw = text if text.startswith("{") else Path(text).read_text(encoding="utf-8")
        spec = json.loads(raw)
    except (OSError, ValueError):
        return None  # the spec's own reader reports it
    where = "the JSON spec" if text.startswith("{") else f"the JSON spec {text}"
    return _spec_framework(spec, where) if isinstance(spec, dict) else None


def _spec_framework(spec: dict, where: str) -> tuple[str, str] | None:
    stated = spec.get("framework")
    try:
        found = parse_framework_choice(stated)
    except FrameworkError:
        return None  # a spelling no framework has: the spec says nothing usable
    return (found.value, f"{where} says framework {stated}") if found is not None else None


__all__ = ["CACHE_KIND", "FILE_REFERENCE", "TRACER_MODULES", "cache_key", "cache_path",
           "is_json_spec", "is_reference", "parse", "source_framework", "traced_layers"]
