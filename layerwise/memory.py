"""Will it fit? Per-GPU memory of one data-parallel training step, from a network's layer specs.

The estimate is linear in the per-GPU batch ``B``: ``total(B) = fixed + B * per_sample``
(plus the optimizer step's temporaries when they outweigh the activations). Rules:

* **weights**: every parameter in FP32 (4 B; under mixed precision, ``fp16``/``bf16``, these are
  the FP32 master weights) plus, under mixed precision, the half-precision working copy the
  framework casts once per step and keeps for backward (2 B per parameter: PyTorch autocast's
  weight-cast cache, Keras ``mixed_float16`` casts). Keras specs count BatchNorm moving
  statistics in their parameters (non-trainable); gradients and optimizer state count the
  trainable parameters only.
* **gradients**: one FP32 gradient per trainable parameter.
* **optimizer state** (FP32, per trainable parameter, :data:`OPTIMIZER_STATES`): sgd 0,
  momentum 1, rmsprop 1, adagrad 1, adadelta 2, adam 2. The step's own temporaries (Adam's
  foreach ``sqrt`` of the second moment: 1x params) live after backward, when activations are
  freed: the total is the larger of the two phases.
* **activations kept for backward** (per image, at the precision's storage width,
  :func:`fleet.precision.bytes_per_element`), from the layer sequence: every layer's output is
  one tensor; a tensor is counted once however many layers keep it. What each kind keeps
  (PyTorch's autograd formulas; TensorFlow's gradients keep the same tensors except where
  noted):

  - conv, depthwise conv, dense, batch norm, layer norm, average/global pooling: their input;
  - max pooling: its input and, in PyTorch, the int64 argmax indices (8 B per output element;
    TensorFlow keeps the pooled output instead, at the activation width);
  - ReLU/ReLU6/sigmoid/tanh/softmax (also fused into a conv/dense): their output. An in-place
    ReLU (torchvision) keeps the same single tensor: its result shares the input's storage,
    which no other layer keeps (BatchNorm keeps its *input*). SiLU/GELU/hardswish/other
    activations keep their input, and so does PyTorch's ReLU6 (``hardtanh``: its in-place form
    keeps a copy of the input, measured), so its output is a second tensor when the next
    layer keeps it;
  - dropout in training: its mask (PyTorch bool, 1 B per element; TensorFlow a mask at the
    activation width); multiply: both inputs;
  - add, concatenate, zero padding, flatten/reshape, input layers: nothing (views or
    gradients that need only shapes);
  - anything else (flagged PyTorch ops, unknown Keras classes): its inputs (conservative), named
    in ``notes``.

  A layer's input is the most recent earlier output of the same shape; a PyTorch trace records
  a padded input (a conv's ``230x230x3``) where the tensor kept is unpadded, so an input that
  matches no output exactly is the most recent output with the same channels and at most
  :data:`PAD_SLACK` pixels smaller per side (the network input included). Under mixed precision
  the network's input is also kept as FP32 images (the batch the loader delivered) beside its
  half-precision copy.
* **transient**: gradients of activations during backward — :data:`TRANSIENT_OUTPUTS` (2) times
  the largest single output (the gradient arriving at a layer and the one it sends on). On a
  CPU the measured peak is at or below the other parts together (docs/memory.md): this is
  the margin left for what only a GPU adds (allocator fragmentation, workspaces).
* **context and workspace** (:data:`CONTEXT_BYTES`, :data:`WORKSPACE_BYTES`): CUDA context and
  library handles, and cuDNN/cuBLAS workspaces: constants, sources in ``docs/memory.md``.
* **capacity**: the catalog's ``memory_gb`` as GiB (``16`` GB = 16 x 2^30 B, the nominal size
  of the board's memory; nvidia-smi shows slightly less where ECC reserves some).
* ``max_batch``: the largest per-GPU batch with ``total <= capacity`` (0 when even the fixed
  part does not fit); ``fits`` is ``total <= capacity``.

A network is a zoo name (:mod:`layerwise.zoo` for TensorFlow/Keras,
:mod:`layerwise.zoo.torch_zoo` for PyTorch, the default framework as
``fleet.framework.parse_framework`` reads it; either as fallback), a ``file.py:callable`` or
``module:callable`` PyTorch model (its cached trace, :mod:`layerwise.network_source`), a JSON
spec, or layer occurrences (:func:`estimate_layers`). At an image side other than the shipped
spec's, activations are scaled by the area ratio (stated in ``notes``); parameters are kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

from fleet.catalog import GpuSpec, resolve_gpu
from fleet.framework import FrameworkError, parse_framework
from fleet.precision import Precision, bytes_per_element, parse_precision
from layerwise import network_source, zoo
from layerwise.errors import LayerwiseError
from layerwise.kinds.base import NetLayer
from layerwise.kinds.mapping import NetworkSpecError, UnknownNetworkError
from layerwise.zoo import torch_zoo

GIB = 2**30
MIB = 2**20
# CUDA context + cuBLAS/cuDNN handles: pytorch/pytorch#34323 shows 781 MB in nvidia-smi right
# after the first CUDA tensor (CUDA 10, all kernels loaded); lazy module loading (CUDA >= 11.7)
# brings it to ~300-500 MB. 512 MiB is the middle of that range.
CONTEXT_BYTES = 512 * MIB
# cuDNN convolution workspaces (algorithm-dependent) and cuBLAS workspace, plus caching-allocator
# rounding: an allowance, not a measurement (docs/memory.md).
WORKSPACE_BYTES = 512 * MIB
MASTER_BYTES = 4  # FP32 weights, gradients and optimizer state
HALF_COPY_BYTES = 2  # the working copy of each weight under mixed precision
INDEX_BYTES = 8  # PyTorch max-pool argmax (int64)
MASK_BYTES = 1  # PyTorch dropout mask (bool)
# activation gradients alive at once during backward, in largest-output sizes; on a CPU the
# measured peak is at or below weights + gradients + state + saved tensors (-8 %..+0.3 % at
# batch 16), so this is an allowance for what a GPU adds (allocator fragmentation,
# workspaces), not a CPU measurement
TRANSIENT_OUTPUTS = 2
PAD_SLACK = 8  # pixels per side a traced (padded) input may exceed the tensor it pads

OPTIMIZER_STATES: dict[str, int] = {
    "none": 0, "sgd": 0, "momentum": 1, "rmsprop": 1, "adagrad": 1, "adadelta": 2, "adam": 2,
}
STEP_TEMPORARIES: dict[str, int] = {"adam": 1, "adadelta": 1, "rmsprop": 1, "adagrad": 1}

OUTPUT_SAVERS = frozenset({"relu", "relu6", "sigmoid", "tanh", "softmax", "elu", "hardsigmoid",
                           "hard_sigmoid"})
INPUT_SAVING_CLASSES = frozenset({
    "Conv2D", "DepthwiseConv2D", "Dense", "BatchNormalization", "LayerNormalization",
    "AveragePooling2D", "GlobalAveragePooling2D", "MaxPooling2D", "SeparableConv2D",
})
NOTHING_SAVED = frozenset({
    "Add", "Concatenate", "ZeroPadding2D", "Cropping2D", "Flatten", "Reshape", "InputLayer",
    "Rescaling", "Normalization", "CustomScaleLayer", "Unused", "Permute",
})
VIEW_CLASSES = frozenset({"Flatten", "Reshape", "InputLayer", "Permute", "Unused"})
NOTHING_SAVED_TORCH_OPS = frozenset({
    "add", "sub", "cat", "stack", "reshape", "flatten", "contiguous", "clone", "copy", "detach",
    "to", "float", "arange", "zeros", "zeros_like", "full", "full_like", "new_full", "tensor",
    "as_tensor", "eq", "ne", "ge", "gt", "le", "lt", "and", "or", "any", "byte", "floor",
    "randperm", "sort", "topk", "nms", "index", "unused",
})
# PyTorch's ReLU6 is hardtanh, whose backward reads its *input*: the in-place form keeps a copy
# of it beside the output the next layer keeps (measured: benchmarks/memory_check.py)
TORCH_INPUT_SAVERS = frozenset({"relu6", "hardtanh"})


class MemoryEstimateError(LayerwiseError, ValueError):
    """A memory estimate that cannot be made (unknown network, GPU without memory, bad input)."""

    kind: ClassVar[str] = "memory"


class UnknownNetworkMemoryError(UnknownNetworkError, MemoryEstimateError):
    """No shipped layer spec of the network to estimate its memory from: an
    :class:`~layerwise.kinds.mapping.UnknownNetworkError` that is also the
    :class:`MemoryEstimateError` the memory callers catch."""


@dataclass(frozen=True)
class ActivationProfile:
    """Per-image bytes a network keeps for backward at one precision (see module rules)."""

    saved_bytes: int  # tensors kept for backward, per image
    largest_bytes: int  # the largest single layer output, per image
    input_bytes: int  # FP32 input images kept beside their half copy (mixed precision), per image
    unknown: tuple[str, ...] = ()  # layer classes kept conservatively (their inputs)


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory of one training step; bytes throughout (``as_dict`` adds GiB)."""

    network: str
    framework: str
    precision: str
    optimizer: str
    batch_size: int  # per GPU
    image_size: int
    params: int
    trainable_params: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    input_bytes: int
    transient_bytes: int
    step_temporary_bytes: int
    context_bytes: int
    workspace_bytes: int
    per_sample_bytes: int
    fixed_bytes: int
    total_bytes: int
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    fits: bool | None = None
    max_batch: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        """Every field, plus ``total_gib`` and ``gpu_memory_gib`` (3 decimals)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        out["total_gib"] = round(self.total_bytes / GIB, 3)
        out["gpu_memory_gib"] = (round(self.gpu_memory_bytes / GIB, 3)
                                 if self.gpu_memory_bytes is not None else None)
        return out

    def summary(self) -> str:
        """One line: total, GPU memory, verdict and the largest batch that fits."""
        text = (f"{self.total_bytes / GIB:.1f} GiB per GPU at batch {self.batch_size} "
                f"({self.network}, {self.precision}, {self.optimizer})")
        if self.gpu_memory_bytes is None:
            return text
        verdict = "fits" if self.fits else "does not fit"
        return (f"{text}: {verdict} in {self.gpu} ({self.gpu_memory_bytes / GIB:.0f} GiB); "
                f"largest batch that fits: {self.max_batch}")


def _elements(shape: Sequence[int]) -> int:
    return int(math.prod(int(v) for v in shape)) if shape else 1


def _activation(layer: NetLayer) -> str:
    """The activation a layer applies (lower-case), '' for none/linear."""
    if layer.cls == "ReLU":
        return "relu6" if layer.config.get("max_value") == 6.0 else "relu"
    name = str(layer.config.get("activation") or "").lower()
    if not name and layer.cls == "Activation":
        name = str(layer.config.get("op") or "").lower()
    return "" if name in ("linear", "none") else name


class _Tensors:
    """Outputs seen so far (shape, id) and the ids kept for backward with their bytes."""

    def __init__(self, input_shape: tuple[int, ...], width: int):
        self.width = width
        self.outputs: list[tuple[tuple[int, ...], int]] = [(tuple(input_shape), 0)]
        self.sizes: dict[int, int] = {0: _elements(input_shape)}
        self.kept: set[int] = set()
        self.extra = 0  # bytes kept that are not layer outputs (indices, masks, intermediates)

    def new(self, shape: tuple[int, ...]) -> int:
        tid = len(self.sizes)
        self.sizes[tid] = _elements(shape)
        self.outputs.append((tuple(shape), tid))
        return tid

    def alias(self, shape: tuple[int, ...], tid: int) -> None:
        self.outputs.append((tuple(shape), tid))

    def find(self, shape: tuple[int, ...]) -> int:
        """The tensor a layer input of ``shape`` is (module rules); a new one when none is."""
        shape = tuple(int(v) for v in shape)
        for seen, tid in reversed(self.outputs):
            if seen == shape:
                return tid
        for seen, tid in reversed(self.outputs):
            if (len(seen) == len(shape) == 3 and seen[-1] == shape[-1]
                    and all(0 <= a - b <= 2 * PAD_SLACK
                            for a, b in zip(shape[:2], seen[:2], strict=True))):
                return tid
        tid = len(self.sizes)
        self.sizes[tid] = _elements(shape)
        return tid

    def keep(self, tid: int) -> None:
        self.kept.add(tid)

    def saved_bytes(self) -> int:
        return sum(self.sizes[t] for t in self.kept) * self.width + self.extra


def _torch_op(layer: NetLayer) -> str:
    return str(layer.config.get("op") or layer.cls.removeprefix("torch.")).lower()


def _visit(layer: NetLayer, t: _Tensors, framework: str, unknown: set[str]) -> None:
    """Record what ``layer`` keeps for backward and the tensor it produces."""
    cls, out = layer.cls, tuple(layer.out_shape)
    inputs = [t.find(s) for s in layer.in_shapes] or [0]
    act = _activation(layer)
    if cls in VIEW_CLASSES:
        t.alias(out, inputs[0])
        return
    if cls in ("Activation", "ReLU"):
        tid = t.new(out)
        output_saver = act in OUTPUT_SAVERS and not (framework == "pytorch"
                                                     and act in TORCH_INPUT_SAVERS)
        t.keep(tid if output_saver else inputs[0])
        return
    if cls == "Dropout":
        t.extra += _elements(out) * (MASK_BYTES if framework == "pytorch" else t.width)
        t.new(out)
        return
    if cls in INPUT_SAVING_CLASSES:
        t.keep(inputs[0])
        if cls == "MaxPooling2D":
            t.extra += _elements(out) * (INDEX_BYTES if framework == "pytorch" else t.width)
        if cls == "SeparableConv2D":  # the depthwise result feeds the pointwise conv
            t.extra += _elements(out[:-1]) * int(layer.x[-1]) * t.width
        tid = t.new(out)
        if act in OUTPUT_SAVERS:  # a fused activation keeps its output ...
            t.keep(tid)
        elif act:  # ... or its pre-activation input, a tensor the layer does not return
            t.extra += _elements(out) * t.width
        return
    if cls == "Multiply":
        for tid in inputs:
            t.keep(tid)
        t.new(out)
        return
    if cls in NOTHING_SAVED or (cls.startswith("torch.") and _torch_op(layer)
                                in NOTHING_SAVED_TORCH_OPS):
        t.new(out)
        return
    unknown.add(cls)
    for tid in inputs:
        t.keep(tid)
    t.new(out)


def activation_profile(layers: Sequence[NetLayer], input_shape: Sequence[int],
                       precision: object = Precision.FP32,
                       framework: str = "pytorch") -> ActivationProfile:
    """Per-image bytes kept for backward by ``layers`` (execution order) at ``precision``."""
    precision = parse_precision(precision)
    width = bytes_per_element(precision)
    t = _Tensors(tuple(int(v) for v in input_shape), width)
    unknown: set[str] = set()
    for layer in layers:
        _visit(layer, t, framework, unknown)
    largest = max((t.sizes[tid] for _, tid in t.outputs), default=0) * width
    mixed = precision in (Precision.FP16, Precision.BF16)
    input_bytes = _elements(input_shape) * MASTER_BYTES if mixed else 0
    return ActivationProfile(saved_bytes=int(t.saved_bytes()), largest_bytes=int(largest),
                             input_bytes=int(input_bytes), unknown=tuple(sorted(unknown)))


@dataclass(frozen=True)
class NetworkLayers:
    """A network's layer occurrences as a memory estimate reads them."""

    name: str
    framework: str
    layers: tuple[NetLayer, ...]
    input_shape: tuple[int, ...]
    params: int
    trainable_params: int


@lru_cache(maxsize=32)
def network_layers(name: str, framework: str | None = None) -> NetworkLayers:
    """The shipped spec of a zoo network: the Keras zoo for TensorFlow, torchvision's for
    PyTorch, the other one as fallback; :class:`MemoryEstimateError` naming close names
    otherwise. Kept per (name, framework) for the process (a served forecast asks it twice
    per request); callers only read it."""
    framework = _framework(framework)
    order = ("pytorch", "tensorflow") if framework == "pytorch" else ("tensorflow", "pytorch")
    for source in order:
        found = torch_zoo.lookup(name) if source == "pytorch" else zoo.lookup(name)
        if found is None:
            continue
        spec = torch_zoo.load(found) if source == "pytorch" else zoo.load(found)
        params = int(spec.totals.get("params") or sum(lay.params for lay in spec.layers))
        trainable = int(spec.totals.get("trainable_params") or params)
        return NetworkLayers(spec.name, source, tuple(spec.layers), tuple(spec.input_shape),
                             params, trainable)
    if network_source.is_reference(name) or network_source.is_json_spec(name):
        return _source_layers(name, framework)
    close = sorted({*zoo.suggestions(name), *torch_zoo.suggestions(name)})
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownNetworkMemoryError(f"unknown network {name!r}: no shipped layer spec to "
                                    f"estimate its memory from{hint}")


def _source_layers(source: str, framework: str) -> NetworkLayers:
    """The layers of a ``file.py:callable``/``module:callable`` reference (its cached or new
    trace) or a JSON spec, as ``layerwise.network.decompose`` reads them."""
    from layerwise.network import layer_occurrences

    try:
        name, layers, shape = layer_occurrences(source, framework=framework)
    except NetworkSpecError as exc:
        raise MemoryEstimateError(str(exc)) from None
    params = int(sum(layer.params for layer in layers))
    traced = network_source.is_reference(source)
    return NetworkLayers(name, "pytorch" if traced else framework, tuple(layers), tuple(shape),
                         params, params)


def _framework(framework: str | None) -> str:
    """``fleet.framework.parse_framework``'s value (None: its default, pytorch), the error
    this module's callers catch otherwise."""
    try:
        return parse_framework(framework).value
    except FrameworkError as exc:
        raise MemoryEstimateError(str(exc)) from None


def gpu_memory_bytes(gpu: str | GpuSpec) -> tuple[str, int]:
    """(catalog name, memory in bytes) of a GPU; :class:`MemoryEstimateError` without a figure
    (the catalog's :class:`~fleet.catalog.UnknownGpuError` for names it does not know)."""
    spec = gpu if isinstance(gpu, GpuSpec) else resolve_gpu(str(gpu))
    memory = spec.memory_gb
    if memory is None or not math.isfinite(float(memory)) or float(memory) <= 0:
        raise MemoryEstimateError(f"GPU {spec.name!r} has no memory figure in the catalog")
    return spec.name, int(round(float(memory) * GIB))


def _optimizer(optimizer: str | None) -> str:
    text = str(optimizer or "sgd").lower()
    if text not in OPTIMIZER_STATES:
        raise MemoryEstimateError(f"unknown optimizer {optimizer!r}; known: "
                                  f"{', '.join(OPTIMIZER_STATES)}")
    return text


def estimate_layers(net: NetworkLayers, *, batch_size: int, precision: object = "fp32",
                    optimizer: str = "sgd", gpu: str | GpuSpec | None = None,
                    image_size: int | None = None) -> MemoryEstimate:
    """The memory of one training step of ``net`` at a per-GPU ``batch_size`` (module rules)."""
    if int(batch_size) < 1:
        raise MemoryEstimateError(f"batch size must be >= 1, got {batch_size}")
    try:
        prec = parse_precision(precision)
    except ValueError as exc:
        raise MemoryEstimateError(str(exc)) from None
    opt = _optimizer(optimizer)
    notes: list[str] = []
    profile = activation_profile(net.layers, net.input_shape, prec, net.framework)
    side = int(net.input_shape[0]) if net.input_shape else 0
    scale = 1.0
    if image_size and side and int(image_size) != side:
        scale = (int(image_size) / side) ** 2
        notes.append(f"activations scaled from the shipped {side}x{side} spec by the area ratio "
                     f"{scale:.3f} (image size {image_size})")
        side = int(image_size)
    if profile.unknown:
        notes.append(f"kept their inputs (conservative): {', '.join(profile.unknown)}")
    mixed = prec in (Precision.FP16, Precision.BF16)
    weights = net.params * MASTER_BYTES + (net.trainable_params * HALF_COPY_BYTES if mixed else 0)
    grads = net.trainable_params * MASTER_BYTES
    states = net.trainable_params * MASTER_BYTES * OPTIMIZER_STATES[opt]
    step_temp = net.trainable_params * MASTER_BYTES * STEP_TEMPORARIES.get(opt, 0)
    per_act = int(round(profile.saved_bytes * scale))
    per_in = int(round(profile.input_bytes * scale))
    per_tr = int(round(TRANSIENT_OUTPUTS * profile.largest_bytes * scale))
    per_sample = per_act + per_in + per_tr
    fixed = weights + grads + states + CONTEXT_BYTES + WORKSPACE_BYTES
    b = int(batch_size)
    total = fixed + max(b * per_sample, step_temp)
    est: dict[str, Any] = dict(
               network=net.name, framework=net.framework, precision=prec.value, optimizer=opt,
               batch_size=b, image_size=side, params=net.params,
               trainable_params=net.trainable_params, weights_bytes=weights,
               gradients_bytes=grads, optimizer_bytes=states, activations_bytes=b * per_act,
               input_bytes=b * per_in, transient_bytes=b * per_tr,
               step_temporary_bytes=step_temp, context_bytes=CONTEXT_BYTES,
               workspace_bytes=WORKSPACE_BYTES, per_sample_bytes=per_sample, fixed_bytes=fixed,
               total_bytes=total)
    if gpu is not None:
        name, capacity = gpu_memory_bytes(gpu)
        est.update(gpu=name, gpu_memory_bytes=capacity, fits=total <= capacity,
                   max_batch=max_batch(fixed, per_sample, step_temp, capacity))
    return MemoryEstimate(**est, notes=tuple(notes))


def max_batch(fixed: int, per_sample: int, step_temp: int, capacity: int) -> int:
    """The largest batch ``B`` with ``fixed + max(B * per_sample, step_temp) <= capacity``."""
    if fixed + step_temp > capacity or per_sample <= 0:
        return 0 if fixed + step_temp > capacity else 2**31 - 1
    return max(0, (capacity - fixed) // per_sample)


def estimate_memory(network: str, *, batch_size: int, precision: object = "fp32",
                    optimizer: str = "sgd", gpu: str | GpuSpec | None = None,
                    framework: str | None = None,
                    image_size: int | None = None) -> MemoryEstimate:
    """The memory of one training step of a zoo network at a per-GPU ``batch_size``; with
    ``gpu`` also ``fits`` and ``max_batch`` (see module rules)."""
    try:
        net = network_layers(network, _framework(framework))
    except NetworkSpecError as exc:
        if isinstance(exc, MemoryEstimateError):
            raise
        raise MemoryEstimateError(str(exc)) from None
    return estimate_layers(net, batch_size=batch_size, precision=precision, optimizer=optimizer,
                           gpu=gpu, image_size=image_size)


__all__ = ["CONTEXT_BYTES", "GIB", "OPTIMIZER_STATES", "WORKSPACE_BYTES", "ActivationProfile",
           "MemoryEstimate", "MemoryEstimateError", "NetworkLayers", "UnknownNetworkMemoryError",
           "activation_profile", "estimate_layers", "estimate_memory", "gpu_memory_bytes",
           "max_batch", "network_layers"]
