"""PyTorch models as layer occurrences: ``module:callable`` references, meta-device tracing.

``parse_reference("pkg.mod:make_net(num_classes=10)")`` reads a reference (keyword and
positional arguments are Python literals, read with ``ast.literal_eval``: nothing is
evaluated). :func:`reference_layers` imports the module, calls the callable under
``torch.device("meta")`` (no weights allocated; a builder that reads tensor values while
building, like RegNet's, runs on the CPU with each parameter moved to meta as it is
registered) and :func:`module_layers` turns the model into
:class:`~layerwise.kinds.base.NetLayer` occurrences. Nothing is downloaded: torchvision
builders get ``weights=None`` unless given; pretrained weights a builder loads by default
(torchvision detection's ImageNet backbone, ``weights_backbone``) are not fetched but the
model keeps the layers of that configuration (FrozenBatchNorm2d, conv1 and layer1 frozen), as
it is trained; any other download raises. Rules:

* **Tracing**: the model runs in training mode on meta tensors (:mod:`layerwise.torch_trace`):
  once to settle its state, then recorded at ``RECORD_IMAGES`` (2: batch norm in training
  needs two values per channel) and twice as many ``image_size`` x ``image_size`` RGB
  images (a model whose
  ``forward`` takes ``targets`` — torchvision detection — gets a list of images and
  ``TARGET_BOXES`` boxes per image, with labels, masks or keypoints as its heads need).
  torch.fx symbolic tracing is not used: it gives no shapes by itself and stops at the
  data-dependent Python control flow of detection models; one recorder serves every model.
* **Batch scaling** (``config["scale"]``), from the two records matched on (module, call
  site, op): ``batch`` — the op's tensors grow with the batch (one row at the request's batch,
  the batch axis removed from the shapes, ``fold`` = its size per image, e.g. 512 sampled
  RoIs); ``image`` — the op runs once per image (a Python loop over images: one row per
  image); ``fixed`` — once per step whatever the batch (anchor grids).
* **Mapping** to kinds (Keras class names, NHWC shapes without batch): conv2d -> Conv2D
  (grouped: a conv of C_in/g -> C_out/g channels on g x the batch; depthwise ->
  DepthwiseConv2D; dilated: priced as the undilated kernel), linear -> Dense (leading axes
  folded into the batch), batch_norm / FrozenBatchNorm2d -> BatchNormalization, layer_norm ->
  LayerNormalization, activations -> Activation, ``a + b`` of one shape -> Add, channel cat
  -> Concatenate, max/avg/adaptive/global pooling and ``mean`` over H, W -> pools, dropout ->
  Dropout, last-axis softmax -> Softmax, equal zero padding -> ZeroPadding2D. PyTorch's
  symmetric padding p is Keras ``same`` when that gives the same output with an even total
  padding, else a ``valid`` window on the padded side (same output, FLOPs and weights).
* **Flagged ops**: every other op (interpolate, roi_align, nms, losses, index/gather, mul,
  matmul, attention, copies, …) becomes ``torch.<op>`` with its bytes and FLOPs
  (:data:`FLOPS_PER_ELEMENT`, 2 per multiply-add for matmul/attention), priced by the roofline
  and listed in the network's warnings — never dropped.
* Parameters: each op carries the parameters it uses first (PyTorch's count: batch norm has
  2 per channel); parameters no op used get one ``view`` layer, so the spec's total equals
  ``sum(p.numel() for p in model.parameters())``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerwise.kinds.base import NetLayer
from layerwise.kinds.mapping import NetworkSpecError
from layerwise.torch_layers import TORCH_CLS_PREFIX, layer_for

DEFAULT_IMAGE_SIZE = 224
RECORD_IMAGES = 2  # images of the first record (batch norm in training needs 2 per channel)
TARGET_BOXES = 8  # objects per training image (COCO 2017 train: 7.3 on average)
REFERENCE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:\s*([A-Za-z_][\w.]*)\s*(\(.*\))?\s*$", re.S)


@dataclass(frozen=True)
class TorchRef:
    """``module:callable(args)``: ``args``/``kwargs`` hold Python literals (kwargs sorted)."""

    module: str
    attr: str
    args: tuple = ()
    kwargs: tuple = ()
    path: str | None = None  # a Python file the module is loaded from (``file.py:callable``)

    @property
    def short(self) -> str:
        """The callable's own name (``retinanet_resnet50_fpn``)."""
        return self.attr.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        inner = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        where = self.path if self.path is not None else self.module
        return f"{where}:{self.attr}" + (f"({', '.join(inner)})" if inner else "")


def parse_reference(text: Any) -> TorchRef | None:
    """The reference in ``text`` (``pkg.mod:callable`` with optional literal arguments), or
    None when ``text`` is not of that form; NetworkSpecError for bad arguments."""
    if not isinstance(text, str) or "://" in text:
        return None
    found = REFERENCE.match(text)
    if found is None:
        return None
    module, attr, call = found.groups()
    if not call:
        return TorchRef(module, attr)
    try:
        node = ast.parse(f"f{call}", mode="eval").body
        if not isinstance(node, ast.Call):
            raise ValueError("not a call")
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = tuple(sorted((k.arg, ast.literal_eval(k.value)) for k in node.keywords
                              if k.arg is not None))
        if len(kwargs) != len(node.keywords):
            raise ValueError("**kwargs is not supported")
    except (SyntaxError, ValueError) as exc:
        raise NetworkSpecError(f"{text!r}: arguments must be Python literals, e.g. "
                               f"module:callable(num_classes=10) ({exc})") from None
    return TorchRef(module, attr, args, kwargs)


# --------------------------------------------------------------------------- building models


class _NotLoaded(dict):
    """The state dict of pretrained weights that are not downloaded (see ``_no_downloads``)."""


@contextmanager
def _no_downloads() -> Any:
    """Weights are never downloaded: torch.hub downloads raise a NetworkSpecError, and
    torchvision's pretrained weights (``weights_backbone=…``) are "loaded" as an empty state
    that ``load_state_dict`` accepts without change — the layers are those of the trained
    configuration (e.g. FrozenBatchNorm2d and a frozen stem), the values are not needed."""
    import torch.hub

    def refuse(url: str, *args: Any, **kwargs: Any) -> None:
        raise NetworkSpecError(f"the model tries to download {url}: build it without "
                               "pretrained weights (weights=None)")

    def load(module: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(state, _NotLoaded):
            return torch.nn.modules.module._IncompatibleKeys([], [])
        return saved_load(module, state, *args, **kwargs)

    saved_download, saved_load = torch.hub.download_url_to_file, torch.nn.Module.load_state_dict
    torch.hub.download_url_to_file = refuse
    # Deliberate patches of torch for the build, restored in `finally` (mypy cannot type them).
    torch.nn.Module.load_state_dict = load  # type: ignore[method-assign, assignment]
    weights_api = _torchvision_weights()
    saved_state = weights_api.get_state_dict if weights_api is not None else None
    if weights_api is not None:
        weights_api.get_state_dict = lambda self, *a, **k: _NotLoaded()
    try:
        yield
    finally:
        torch.hub.download_url_to_file = saved_download
        torch.nn.Module.load_state_dict = saved_load  # type: ignore[method-assign]
        if weights_api is not None:
            weights_api.get_state_dict = saved_state


def _torchvision_weights() -> Any:
    """torchvision's ``WeightsEnum`` if torchvision is already imported, else None."""
    import sys

    api = sys.modules.get("torchvision.models._api")
    return getattr(api, "WeightsEnum", None)


@contextmanager
def _params_on_meta() -> Any:
    """Parameters and buffers move to the meta device as modules register them (for builders
    that compute sizes from tensors, which the meta device cannot read)."""
    import torch

    nn = torch.nn.Module
    saved_param, saved_buffer = nn.register_parameter, nn.register_buffer

    def param(module: Any, name: str, value: Any) -> None:
        saved_param(module, name, value)
        if value is not None and value.device.type != "meta":
            module._parameters[name] = torch.nn.Parameter(value.to("meta"),
                                                          requires_grad=value.requires_grad)

    def buffer(module: Any, name: str, value: Any, persistent: bool = True) -> None:
        saved_buffer(module, name, value if value is None else value.to("meta"), persistent)

    # Deliberate patches of torch.nn.Module, restored in `finally` (mypy cannot type them).
    nn.register_parameter = param  # type: ignore[method-assign, assignment]
    nn.register_buffer = buffer  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        nn.register_parameter = saved_param  # type: ignore[method-assign]
        nn.register_buffer = saved_buffer  # type: ignore[method-assign]


def _import(ref: TorchRef) -> Any:
    """The module of a reference: loaded from ``ref.path`` (its folder importable while it
    loads, for its siblings), else imported with the working directory importable (a user's
    ``mymodule:build`` in its own folder), as ``python -m`` would; no bytecode is written
    beside the user's files."""
    folder = str(Path(ref.path).resolve().parent) if ref.path is not None else os.getcwd()
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ there
    try:
        if ref.path is None:
            return importlib.import_module(ref.module)
        spec = importlib.util.spec_from_file_location(ref.module, ref.path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{ref.path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[ref.module] = module  # dataclasses and pickling look their module up
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(ref.module, None)
            raise
        return module
    finally:
        sys.dont_write_bytecode = bytecode
        if added and folder in sys.path:
            sys.path.remove(folder)


def build_model(ref: TorchRef) -> Any:
    """The ``torch.nn.Module`` a reference builds, on the meta device (module docstring)."""
    try:
        import torch
    except ImportError:
        raise NetworkSpecError(f"{ref}: tracing a PyTorch model needs torch installed") from None
    where = ref.path or ref.module
    try:
        obj = _import(ref)
    except ImportError as exc:
        raise NetworkSpecError(f"{ref}: cannot import {where} ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to load: say so
        line = f", line {exc.lineno}" if isinstance(exc, SyntaxError) else ""
        raise NetworkSpecError(f"{ref}: loading {where}{line} failed ({type(exc).__name__}: "
                               f"{exc})") from None
    try:
        for part in ref.attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise NetworkSpecError(f"{ref}: {where} has no {ref.attr!r}") from None
    if not callable(obj):
        raise NetworkSpecError(f"{ref}: {ref.attr} is not callable")
    kwargs = dict(ref.kwargs)
    if ref.module.split(".")[0] == "torchvision":
        accepted: Mapping[str, inspect.Parameter]
        try:
            accepted = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            accepted = {}
        if "weights" in accepted:
            kwargs.setdefault("weights", None)
    try:
        try:
            with torch.device("meta"), _no_downloads():
                model = obj(*ref.args, **kwargs)
        except (NotImplementedError, RuntimeError) as exc:
            if "meta" not in str(exc):
                raise
            with _params_on_meta(), _no_downloads():
                model = obj(*ref.args, **kwargs)
    except NetworkSpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's builder failed: say so, no traceback
        raise NetworkSpecError(f"{ref}: building the model failed ({type(exc).__name__}: "
                               f"{exc})") from None
    if not isinstance(model, torch.nn.Module):
        raise NetworkSpecError(f"{ref}: returned {type(model).__name__}, not a torch.nn.Module")
    if any(p.device.type != "meta" for p in model.parameters()):
        model = model.to("meta")
    return model


def is_torch_module(obj: Any) -> bool:
    """``obj`` is a ``torch.nn.Module`` (checked without importing torch)."""
    return any(c.__name__ == "Module" and c.__module__.startswith("torch.nn")
               for c in type(obj).__mro__)


def example_inputs(model: Any, batch: int, side: int) -> tuple:
    """Meta inputs of one training step: an image batch, or images and targets (module rules)."""
    import torch

    meta: dict[str, Any] = {"device": "meta"}
    try:
        wants_targets = "targets" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        wants_targets = False
    if not wants_targets:
        return (torch.empty((batch, 3, side, side), **meta),)
    heads = getattr(model, "roi_heads", None)
    images, targets = [], []
    for _ in range(batch):
        images.append(torch.empty((3, side, side), **meta))
        target = {"boxes": torch.empty((TARGET_BOXES, 4), **meta),
                  "labels": torch.empty((TARGET_BOXES,), dtype=torch.long, **meta)}
        if heads is not None and getattr(heads, "has_mask", lambda: False)():
            target["masks"] = torch.empty((TARGET_BOXES, side, side), dtype=torch.uint8, **meta)
        if heads is not None and getattr(heads, "has_keypoint", lambda: False)():
            target["keypoints"] = torch.empty((TARGET_BOXES, 17, 3), **meta)
        targets.append(target)
    return images, targets


# --------------------------------------------------------------------------- two records -> layers


def _key(op: Any) -> tuple:
    return (op.module, op.site, op.op)


def _scale_of(op1: Any, op2: Any) -> tuple[str, list]:
    """``batch`` (with the per-tensor batch axes) or ``fixed`` for one op seen once per step."""
    axes = []
    for s1, s2 in zip([*op1.inputs, op1.output], [*op2.inputs, op2.output], strict=False):
        axis = next((d for d, (a, b) in enumerate(zip(s1, s2, strict=False)) if a != b), None)
        if len(s1) != len(s2):
            axis = None
        axes.append(axis)
    return ("batch" if any(a is not None for a in axes) else "fixed"), axes


def merge(ops1: list, ops2: list, images: int) -> tuple[list[tuple[Any, str, list]], int]:
    """(op of the record of ``images`` images, scale, batch axes per tensor) in order — of a
    per-image op, the first image's occurrences only — and the number of ops whose counts in
    the records of ``images`` and 2 x ``images`` match neither rule (kept as ``fixed``)."""
    groups2: dict[tuple, list] = defaultdict(list)
    for op in ops2:
        groups2[_key(op)].append(op)
    count1 = Counter(_key(op) for op in ops1)
    seen: Counter = Counter()
    merged, odd = [], 0
    for op in ops1:
        key = _key(op)
        k = seen[key]
        seen[key] += 1
        others = groups2.get(key, [])
        if len(others) == 2 * count1[key]:
            if k < count1[key] // images:
                merged.append((op, "image", [None] * (len(op.inputs) + 1)))
        elif len(others) == count1[key]:
            scale, axes = _scale_of(op, others[k])
            merged.append((op, scale, axes))
        else:
            odd += 1
            merged.append((op, "fixed", [None] * (len(op.inputs) + 1)))
    return merged, odd


def layers_from_records(rec1: Any, rec2: Any, unused_params: int,
                        images: int = RECORD_IMAGES) -> tuple[list[NetLayer], dict]:
    """Layer occurrences of a model from its records of ``images`` and 2 x ``images`` images
    (module rules)."""
    merged, odd = merge(rec1.ops, rec2.ops, images)
    layers: list[NetLayer] = []
    names: Counter = Counter()
    for op, scale, axes in merged:
        layer = layer_for(op, scale, axes, images)
        base = layer.name
        layer.name = base if not names[base] else f"{base}#{names[base]}"
        names[base] += 1
        layers.append(layer)
    if unused_params:
        layers.append(NetLayer("unused_parameters", "Unused", [], (1,),
                               {"framework": "pytorch", "op": "unused", "scale": "fixed"},
                               int(unused_params)))
    info = {"views": rec1.views, "scalar_ops": rec1.scalars, "unmatched_ops": odd,
            "flagged": dict(sorted(Counter(
                layer.cls[len(TORCH_CLS_PREFIX):] for layer in layers
                if layer.cls.startswith(TORCH_CLS_PREFIX)).items()))}
    return layers, info


def module_layers(model: Any, image_size: int | None = None) -> tuple[list[NetLayer], dict]:
    """Layer occurrences of a ``torch.nn.Module`` traced on meta tensors (module rules)."""
    from layerwise import torch_trace

    side = int(image_size or DEFAULT_IMAGE_SIZE)
    model.train()
    names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    n = RECORD_IMAGES
    try:  # a first pass lets the model settle its state (anchors moved to the device, …)
        torch_trace.record(model, example_inputs(model, n, side), names)
        rec1 = torch_trace.record(model, example_inputs(model, n, side), names)
        rec2 = torch_trace.record(model, example_inputs(model, 2 * n, side), names)
    except NetworkSpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - a model that cannot run on meta tensors
        raise NetworkSpecError(f"{type(model).__name__}: tracing on meta tensors at "
                               f"{side}x{side} failed ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    total = int(sum(p.numel() for p in model.parameters()))
    used = sum(op.params for op in rec1.ops)  # per-image copies of image 1 hold none
    layers, info = layers_from_records(rec1, rec2, total - used)
    info.update(params=total, image_size=side,
                trainable_params=int(sum(p.numel() for p in model.parameters()
                                         if p.requires_grad)))
    if not layers:
        raise NetworkSpecError(f"{type(model).__name__}: the forward pass ran no tensor op")
    return layers, info


def reference_layers(ref: TorchRef, image_size: int | None = None
                     ) -> tuple[str, list[NetLayer], dict]:
    """(name, layer occurrences, trace info) of the model a reference builds."""
    model = build_model(ref)
    layers, info = module_layers(model, image_size)
    return ref.short, layers, info


__all__ = ["DEFAULT_IMAGE_SIZE", "TARGET_BOXES", "TorchRef", "build_model", "example_inputs",
           "is_torch_module", "layers_from_records", "merge",
           "module_layers", "parse_reference", "reference_layers"]
