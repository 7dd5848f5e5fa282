"""Record the tensor ops of one training-mode forward of a ``torch.nn.Module`` on meta tensors.

:func:`record` runs the model once on ``device="meta"`` tensors (shapes and dtypes, no data, no
GPU, no weights allocated) under two modes and returns one :class:`Op` per device op:

* a ``TorchFunctionMode`` sees every ``torch.*`` / ``torch.nn.functional.*`` call and tensor
  method at the Python API level (``conv2d`` with its stride, padding, groups; ``linear``;
  ``batch_norm``; ``cat``; ``+``; ``torchvision::roi_align``, …). Calls made *inside* a recorded
  call are not seen (the mode is off while it runs), so an op is counted once;
* a ``TorchDispatchMode`` gives data-dependent ops an answer meta tensors cannot give
  (:data:`SELECTION_RULES`): ``nonzero`` (``torch.where(mask)``, boolean indexing) selects every
  element unless a rule for its call site knows the count (torchvision's detection samplers:
  512 sampled RoIs per image, a positive fraction of 0.25, RoIs split over the pyramid
  levels), ``.item()`` / ``bool(t)`` of a meta tensor is 0 / False, ``torchvision::nms`` keeps
  every box (the callers cap it: ``post_nms_top_n``), ``unique`` finds one value.

Rules of the record:

* ops whose tensors are all on the CPU are host work (shape arithmetic) and are skipped;
  ops on 0-d tensors only (BatchNorm's ``num_batches_tracked += 1``) are counted in ``scalars``;
* an op whose output is a view of an input (reshape of a contiguous tensor, slicing,
  ``permute``, ``expand``, …) or a fresh ``empty`` tensor costs nothing and is counted in
  ``views``; in-place ops (``relu_``, ``add_``, ``x[i] = y``) are computations;
* a parameter belongs to the first op that uses it (``params``); shared weights (RetinaNet's
  heads over five pyramid levels) are counted once, as ``model.parameters()`` counts them;
* ``grad_input``: an activation input requires a gradient; ``frozen``: neither an input nor a
  parameter does (torchvision detection's frozen stem runs forward only);
* ``site`` = the innermost Python frame outside torch and this package, with the module path
  (``module``): two records of one model at two batch sizes are matched on it;
* ``nn.MultiheadAttention`` is recorded as its three parts (input projection ``linear``,
  ``scaled_dot_product_attention``, output projection ``linear``); ``FrozenBatchNorm2d``
  (``ATOMIC_MODULES``) as one ``batch_norm``.

Only :mod:`layerwise.torch_graph` imports this module (it imports torch).
"""

from __future__ import annotations

import linecache
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_")
ATOMIC_MODULES = {"FrozenBatchNorm2d": "batch_norm"}


@dataclass
class Op:
    """One device op: its normalised name, where it ran, its tensors and scalar arguments."""

    op: str
    module: str
    site: tuple  # (file, line, function) of the model code that ran it
    inputs: list[tuple]  # shapes of the tensor inputs, in argument order
    output: tuple  # shape of the first tensor output
    in_bytes: float
    out_bytes: float
    args: dict = field(default_factory=dict)
    params: int = 0
    grad_input: bool = False
    frozen: bool = False


@dataclass
class Record:
    """The ops of one forward, plus the counts of skipped views and scalar ops."""

    ops: list[Op] = field(default_factory=list)
    views: int = 0
    scalars: int = 0


# --------------------------------------------------------------------------- data-dependent ops


def _sampler(frame: Any) -> Any:
    """The torchvision ``BalancedPositiveNegativeSampler`` of the RoI heads / RPN running here."""
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "fg_bg_sampler"):
            return owner.fg_bg_sampler
        frame = frame.f_back
    return None


def _positive(frame: Any, n: int, shape: tuple) -> int:
    sampler = _sampler(frame)
    fraction = float(getattr(sampler, "positive_fraction", 0.25))
    return max(1, math.ceil(n * fraction))


def _sampled(frame: Any, n: int, shape: tuple) -> int:
    sampler = _sampler(frame)
    return min(n, int(getattr(sampler, "batch_size_per_image", n)))


def _rpn_sampled(frame: Any, n: int, shape: tuple) -> int:
    sampler = _sampler(frame)
    images = len(frame.f_locals.get("labels", [None]))
    per_image = int(getattr(sampler, "batch_size_per_image", 256))
    pos = int(per_image * float(getattr(sampler, "positive_fraction", 0.5)))
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return min(n, images * (pos if line.startswith("sampled_pos") else per_image - pos))


def _per_level(frame: Any, n: int, shape: tuple) -> int:
    return max(1, math.ceil(n / max(1, int(frame.f_locals.get("num_levels", 1)))))


def _per_row(frame: Any, n: int, shape: tuple) -> int:
    return int(shape[0]) if shape else n


# (file suffix, function) of the call site -> count of a ``nonzero`` there. Every other site
# selects all elements (an upper bound; e.g. the matcher's masks, SSD's foreground anchors).
SELECTION_RULES: dict[tuple[str, str], Callable[[Any, int, tuple], int]] = {
    ("detection/roi_heads.py", "subsample"): _sampled,  # 512 sampled RoIs per image
    ("detection/roi_heads.py", "fastrcnn_loss"): _positive,  # positive RoIs of those
    ("detection/roi_heads.py", "forward"): _positive,  # mask / keypoint heads: positives
    ("detection/rpn.py", "compute_loss"): _rpn_sampled,  # 256 anchors per image, half positive
    ("ops/poolers.py", "_multiscale_roi_align"): _per_level,  # RoIs split over the levels
    ("detection/_utils.py", "set_low_quality_matches_"): _per_row,  # one anchor per box
}


def call_site() -> Any:
    """The innermost frame outside torch and this package (the model's own code)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(TORCH_DIR) and not path.startswith(HERE):
            return frame
        frame = frame.f_back
    return None


def selection_count(n: int, shape: tuple) -> int:
    """How many elements a ``nonzero`` on the meta tensor of ``shape`` selects here."""
    frame = call_site()
    if frame is not None:
        path = frame.f_code.co_filename.replace(os.sep, "/")
        for (suffix, func), rule in SELECTION_RULES.items():
            if path.endswith(suffix) and frame.f_code.co_name == func:
                return max(0, min(n, int(rule(frame, n, shape))))
    return n


class MetaAnswers(TorchDispatchMode):
    """Answers for data-dependent ops on meta tensors (module docstring); others run as is."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = func.name()
        x = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if x is None or x.device.type != "meta":
            return func(*args, **kwargs)
        if name == "aten::nonzero":
            count = selection_count(x.numel(), tuple(x.shape))
            return torch.empty((count, x.dim()), dtype=torch.long, device="meta")
        if name == "aten::_local_scalar_dense":
            return False if x.dtype == torch.bool else (0.0 if x.is_floating_point() else 0)
        if name == "torchvision::nms":
            return torch.empty((x.shape[0],), dtype=torch.long, device="meta")
        if name in ("aten::_unique2", "aten::unique_dim", "aten::unique_consecutive"):
            one = torch.empty((1,), dtype=x.dtype, device="meta")
            inverse = torch.empty(tuple(x.shape), dtype=torch.long, device="meta")
            return one, inverse, torch.empty((1,), dtype=torch.long, device="meta")
        if name == "aten::masked_select":
            return torch.empty((x.numel(),), dtype=x.dtype, device="meta")
        return func(*args, **kwargs)


# --------------------------------------------------------------------------- the recorder

RENAME = {"iadd": "add", "radd": "add", "isub": "sub", "rsub": "sub", "imul": "mul",
          "rmul": "mul", "truediv": "div", "itruediv": "div", "rtruediv": "div",
          "setitem": "index_put", "getitem": "index", "ipow": "pow", "rpow": "pow",
          "rmatmul": "matmul", "hardtanh": "relu6"}
FACTORY_VIEWS = {"empty", "empty_like", "new_empty", "empty_strided"}
# ops that may return their input unchanged (then no computation)
SELF_NOOPS = {"to", "contiguous", "type", "type_as", "float", "double", "half", "bfloat16",
              "long", "int", "bool", "byte", "requires_grad", "retain_grad", "cuda", "cpu",
              "detach"}
MHA_ARGS = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight",
            "in_proj_bias", "bias_k", "bias_v", "add_zero_attn", "dropout_p",
            "out_proj_weight", "out_proj_bias")


def op_name(func: Any) -> str:
    """``__iadd__`` -> ``add``, ``relu_`` -> ``relu``, ``conv2d`` -> ``conv2d``."""
    name = getattr(func, "__name__", None) or str(func).rsplit(".", 1)[-1]
    name = name.strip("_")
    return RENAME.get(name, name)


def _tensors(value: Any) -> list[torch.Tensor]:
    """Tensors in an argument (lists, tuples and dicts searched one level deep)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, torch.Tensor)]
    return []


def _nbytes(t: torch.Tensor) -> float:
    return float(t.numel()) * t.element_size()


def _scalar_args(args: tuple, kwargs: dict) -> dict:
    """Non-tensor arguments by position (``"0"``, ``"1"``, …) and name, JSON-ready."""
    out: dict[str, Any] = {}
    for key, value in [*((str(i), a) for i, a in enumerate(args)), *kwargs.items()]:
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float))
                                                      for v in value):
            out[key] = [v for v in value]
        elif isinstance(value, torch.dtype):
            out[key] = str(value).replace("torch.", "")
    return out


class Recorder(TorchFunctionMode):
    """Records ops (module docstring) into ``record``; ``names`` maps modules to their paths."""

    def __init__(self, names: dict[int, str]):
        super().__init__()
        self.record = Record()
        self.names = names
        self.stack: list[str] = []
        self.atomic = 0
        self.seen: set[int] = set()

    # -- module hooks -----------------------------------------------------------------
    def enter(self, module: Any, args: Any) -> None:
        """Forward pre-hook: push the module's name; count nesting in an atomic module."""
        self.stack.append(self.names.get(id(module), type(module).__name__))
        if type(module).__name__ in ATOMIC_MODULES:
            self.atomic += 1

    def leave(self, module: Any, args: Any, output: Any) -> None:
        """Forward hook: record an atomic module as one row when leaving the outermost;
        pop its name."""
        name = type(module).__name__
        if name in ATOMIC_MODULES:
            self.atomic -= 1
            if self.atomic == 0:
                self.add(ATOMIC_MODULES[name], list(args), output, {},
                         list(module.parameters(recurse=False)))
        if self.stack:
            self.stack.pop()

    # -- ops ----------------------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = op_name(func)
        if name == "multi_head_attention_forward":
            return self.attention(func, args, kwargs)
        out = func(*args, **kwargs)
        if self.atomic:
            return out
        flat = [t for a in (*args, *kwargs.values()) for t in _tensors(a)]
        result = args[0] if name == "index_put" else out  # ``x[i] = y`` returns None
        self.add(name, flat, result, _scalar_args(args, kwargs), None)
        return out

    def add(self, name: str, inputs: list, out: Any, scalars: dict,
            params: list | None) -> None:
        """Record one op (the rules of the module docstring decide whether and how)."""
        outs = _tensors(out)
        if not outs:
            return
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        if not any(t.device.type == "meta" for t in [*tensors, *outs]):
            return
        if all(t.dim() == 0 for t in [*tensors, *outs]):
            self.record.scalars += 1
            return
        first = outs[0]
        in_place = any(first is t for t in tensors)
        if (in_place and name in SELF_NOOPS) or (not in_place and (
                name in FACTORY_VIEWS or _is_view_of(first, tensors))):
            self.record.views += 1
            return
        if params is None:
            params = [t for t in tensors if isinstance(t, torch.nn.Parameter)]
        fresh = [p for p in params if id(p) not in self.seen]
        self.seen.update(id(p) for p in fresh)
        acts = [t for t in tensors if not isinstance(t, torch.nn.Parameter)]
        grad_input = any(t.requires_grad for t in acts)
        frame = call_site()
        site = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name) \
            if frame is not None else ("", 0, "")
        self.record.ops.append(Op(
            op=name, module=self.stack[-1] if self.stack else "", site=site,
            inputs=[tuple(t.shape) for t in tensors], output=tuple(first.shape),
            in_bytes=sum(_nbytes(t) for t in acts), out_bytes=sum(_nbytes(t) for t in outs),
            args=scalars, params=int(sum(p.numel() for p in fresh)), grad_input=grad_input,
            frozen=not grad_input and not any(p.requires_grad for p in params),
        ))

    def attention(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """``F.multi_head_attention_forward`` as input projection, attention, output projection."""
        out = func(*args, **kwargs)
        if self.atomic:
            return out
        given = dict(zip(MHA_ARGS, args, strict=False))
        given.update({k: v for k, v in kwargs.items() if k in MHA_ARGS})
        q, heads = given["query"], int(given["num_heads"])
        w_in, b_in = given.get("in_proj_weight"), given.get("in_proj_bias")
        w_out, b_out = given.get("out_proj_weight"), given.get("out_proj_bias")
        result = out[0]
        embed = int(q.shape[-1])
        proj = torch.empty((*q.shape[:-1], 3 * embed), device="meta")
        self.add("linear", [q, w_in, b_in], proj, {}, [p for p in (w_in, b_in)
                                                     if isinstance(p, torch.nn.Parameter)])
        self.add("scaled_dot_product_attention", [q, q, q], result, {"num_heads": heads}, [])
        self.add("linear", [result, w_out, b_out], result.detach().clone(), {},
                 [p for p in (w_out, b_out) if isinstance(p, torch.nn.Parameter)])
        return out


def _is_view_of(out: torch.Tensor, inputs: list) -> bool:
    """The output shares its storage base with an input (no computation)."""
    if not out._is_view():
        return False
    base = out._base
    return any(t is base or (t._is_view() and t._base is base) for t in inputs)


def record(model: Any, example: tuple, names: dict[int, str] | None = None) -> Record:
    """The ops of ``model(*example)`` on meta tensors (module docstring)."""
    import torch.fx.experimental._config as fx_config

    names = names if names is not None else {id(m): n for n, m in model.named_modules()}
    recorder = Recorder(names)
    pre = torch.nn.modules.module.register_module_forward_pre_hook(recorder.enter)
    post = torch.nn.modules.module.register_module_forward_hook(recorder.leave,
                                                                always_call=True)
    before = fx_config.meta_nonzero_assume_all_nonzero
    fx_config.meta_nonzero_assume_all_nonzero = True  # nested boolean indexing: all selected
    try:
        with MetaAnswers(), recorder:
            model(*example)
    finally:
        fx_config.meta_nonzero_assume_all_nonzero = before
        pre.remove()
        post.remove()
    return recorder.record


__all__ = ["ATOMIC_MODULES", "MetaAnswers", "Op", "Record", "Recorder", "SELECTION_RULES",
           "op_name", "record", "selection_count"]
