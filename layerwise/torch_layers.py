"""Recorded PyTorch ops as layer occurrences, and those occurrences as rows (no torch import).

:func:`layer_for` maps one recorded op (:class:`layerwise.torch_trace.Op`) to a
:class:`~layerwise.kinds.base.NetLayer` (rules in :mod:`layerwise.torch_graph`);
:func:`torch_rows` turns such an occurrence into rows at a batch size. The occurrence's
``config`` holds, besides the Keras-style keys its kind reads:

* ``framework`` ``pytorch`` (how :func:`layerwise.network.decompose` recognises it), ``op``;
* ``scale`` ``batch`` | ``image`` | ``fixed`` and ``fold`` (rows at batch x fold; ``image``:
  one row per image at fold; ``fixed``: one row at fold);
* flagged ops (class ``torch.<op>``): ``flops``, ``macs`` and ``bytes`` ([in, out]) of one
  image (``batch``/``image``) or of the op (``fixed``);
* ``note`` (an approximation, e.g. a grouped convolution), ``frozen`` (no gradient).

Rows carry the occurrence's own parameter count (PyTorch's: batch norm 2 per channel, shared
weights once), on the first row of the occurrence.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from layerwise.kinds.base import NetLayer, RowContext
from layerwise.kinds.space import out_side

TORCH_CLS_PREFIX = "torch."
ACTIVATIONS = {"relu": "relu", "relu6": "relu6", "silu": "silu", "sigmoid": "sigmoid",
               "tanh": "tanh", "gelu": "gelu", "hardswish": "hard_swish",
               "hardsigmoid": "hard_sigmoid", "leaky_relu": "leaky_relu", "elu": "elu",
               "selu": "selu", "softplus": "softplus", "mish": "swish", "celu": "elu"}
COPIES = {"cat", "stack", "copy", "clone", "contiguous", "index", "index_put", "gather",
          "scatter", "index_select", "repeat", "pad", "zeros", "ones", "full", "zeros_like",
          "ones_like", "full_like", "new_full", "new_zeros", "new_ones", "arange", "fill",
          "zero", "to", "float", "masked_fill", "where", "tensor", "as_tensor", "randperm",
          "flip", "roll", "tile", "meshgrid", "reshape", "flatten", "view", "permute",
          "transpose", "expand", "split", "unbind", "type_as", "long", "byte", "int",
          "bool", "half", "double", "masked_scatter", "index_add", "index_copy", "select",
          "narrow", "bernoulli", "uniform", "normal", "randn", "rand"}
REDUCTIONS = {"sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "topk", "sort",
              "argsort", "norm", "std", "var", "logsumexp", "prod", "cumsum", "all", "any",
              "count_nonzero", "nll_loss", "kthvalue", "median"}
LOSSES = {"cross_entropy", "binary_cross_entropy_with_logits", "binary_cross_entropy",
          "smooth_l1_loss", "l1_loss", "mse_loss", "huber_loss", "kl_div"}
# FLOPs per output element of flagged ops (not listed: 1, an element-wise op)
FLOPS_PER_ELEMENT = {"roi_align": 36.0, "roi_pool": 4.0, "ps_roi_align": 36.0,
                     "interpolate_bilinear": 8.0, "interpolate_bicubic": 32.0,
                     "interpolate_nearest": 0.0, "interpolate_linear": 4.0}
LOSS_FLOPS = 5.0  # per input element (log-sum-exp / sigmoid / difference and sum)
NMS_FLOPS = 15.0  # per pair of boxes (IoU)


def _arg(op: Any, pos: int, name: str, default: Any) -> Any:
    args = op.args
    value = args.get(name, args.get(str(pos), default))
    return default if value is None else value


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, (list, tuple)):
        return (int(value[0]), int(value[-1])) if value else (1, 1)
    return int(value), int(value)


def _prod(shape: tuple) -> float:
    return float(np.prod(shape, dtype=float)) if shape else 1.0


def _item(shape: tuple, axis: int | None, images: int) -> tuple[tuple, int]:
    """(shape without its batch axis, that axis' size per image in a record of ``images``
    images); 4-d tensors of an op that does not scale with the batch lose their first axis."""
    shape = tuple(int(d) for d in shape)
    if axis is None:
        return (shape[1:], shape[0]) if len(shape) == 4 else (shape, 1)
    return shape[:axis] + shape[axis + 1:], max(1, shape[axis] // images)


def plane(item: tuple, fold: int, channels_first: bool = True) -> tuple[tuple, int]:
    """An element-wise tensor as a square NHWC image (C, H, W -> H, W, C) or flat vectors
    (leading axes folded into the batch)."""
    if len(item) == 3 and channels_first and item[1] == item[2]:
        return (item[1], item[2], item[0]), fold
    if len(item) == 3 and item[0] == item[1]:
        return item, fold
    if len(item) <= 1:
        return (item or (1,)), fold
    if channels_first and len(item) == 3:  # non-square C, H, W: per-channel vectors
        return (item[0],), fold * item[1] * item[2]
    return (item[-1],), fold * int(_prod(item[:-1]))


def _window_axis(n: int, k: int, s: int, p: int, d: int, o: int) -> tuple[bool, int]:
    """(Keras ``same`` on side n fits, ``valid`` input side) of one spatial axis."""
    same = o == math.ceil(n / s) and max((o - 1) * s + k - n, 0) % 2 == 0
    m = n + 2 * p - (d - 1) * (k - 1)
    if out_side(m, k, s, "valid") != o:
        m = (o - 1) * s + k
    return same, m


def window(x: tuple, out: tuple, k: tuple, s: tuple, p: tuple, d: tuple = (1, 1)
           ) -> tuple[str, tuple[int, int]]:
    """Keras padding and input (height, width) of a PyTorch window op (module rules)."""
    ah = _window_axis(x[0], k[0], s[0], p[0], d[0], out[0])
    aw = _window_axis(x[1], k[1], s[1], p[1], d[1], out[1])
    if ah[0] and aw[0]:
        return "same", (x[0], x[1])
    return "valid", (ah[1], aw[1])


# --------------------------------------------------------------------------- op -> layer


def _conv(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    if len(x) != 3 or len(out) != 3 or len(op.inputs) < 2 or len(op.inputs[1]) != 4:
        return None
    cout, _, kh, kw = op.inputs[1]
    cin, groups = x[0], int(_arg(op, 6, "groups", 1))
    stride, dil = _pair(_arg(op, 3, "stride", 1)), _pair(_arg(op, 5, "dilation", 1))
    pad = _arg(op, 4, "padding", 0)
    if isinstance(pad, str):
        pad = (0, 0) if pad == "valid" else (dil[0] * (kh - 1) // 2, dil[1] * (kw - 1) // 2)
    mode, (mh, mw) = window((x[1], x[2]), (out[1], out[2]), (kh, kw), stride, _pair(pad), dil)
    notes = [f"dilation {dil} priced as the undilated kernel"] if dil != (1, 1) else []
    cfg = {"kernel_size": (kh, kw), "strides": stride, "padding": mode,
           "use_bias": len(op.inputs) > 2, "activation": "linear"}
    if groups > 1 and groups == cin == cout:
        return "DepthwiseConv2D", [(mh, mw, cin)], (out[1], out[2], cin), cfg, fold, notes
    if groups > 1:
        notes.append(f"grouped convolution ({groups} groups) priced as a conv of "
                     f"{cin // groups} -> {cout // groups} channels on {groups}x the batch")
        cin, cout, fold = cin // groups, cout // groups, fold * groups
    return "Conv2D", [(mh, mw, cin)], (out[1], out[2], cout), cfg, fold, notes


def _pool(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    if len(x) != 3 or len(out) != 3:
        return None
    k = _pair(_arg(op, 1, "kernel_size", 1))
    s = _arg(op, 2, "stride", None)
    s = k if s in (None, [], ()) else _pair(s)
    dil = _pair(_arg(op, 4, "dilation", 1)) if op.op.startswith("max") else (1, 1)
    mode, (mh, mw) = window((x[1], x[2]), (out[1], out[2]), k, s,
                            _pair(_arg(op, 3, "padding", 0)), dil)
    cls = "MaxPooling2D" if op.op.startswith("max") else "AveragePooling2D"
    cfg = {"pool_size": k, "strides": s, "padding": mode}
    return cls, [(mh, mw, x[0])], (out[1], out[2], x[0]), cfg, fold, []


def _adaptive(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    if len(x) != 3 or len(out) != 3:
        return None
    c, n, o = x[0], (x[1], x[2]), (out[1], out[2])
    kind = "Max" if "max" in op.op else "Average"
    if o == (1, 1):
        return f"Global{kind}Pooling2D", [(n[0], n[1], c)], (1, 1, c), {}, fold, []
    if n[0] % o[0] or n[1] % o[1]:
        return None
    k = (n[0] // o[0], n[1] // o[1])
    return (f"{kind}Pooling2D", [(n[0], n[1], c)], (o[0], o[1], c),
            {"pool_size": k, "strides": k, "padding": "valid"}, fold, [])


def _mean(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    dims = _arg(op, 1, "dim", None)
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if len(x) == 3 and sorted(d % 4 for d in dims) == [2, 3]:
        return "GlobalAveragePooling2D", [(x[1], x[2], x[0])], (1, 1, x[0]), {}, fold, []
    return None


def _linear(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    if not x or not out:
        return None
    lead = int(_prod(x[:-1]))
    cfg = {"activation": "linear", "use_bias": len(op.inputs) > 2}
    return "Dense", [(x[-1],)], (out[-1],), cfg, fold * lead, []


def _batch_norm(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    shape, fold = plane(x, fold)
    return "BatchNormalization", [shape], shape, {}, fold, []


def _layer_norm(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    normalized = _arg(op, 1, "normalized_shape", [])
    if len(list(normalized) if isinstance(normalized, (list, tuple)) else [normalized]) != 1:
        return None
    shape, fold = plane(x, fold, channels_first=False)
    return "LayerNormalization", [shape], shape, {"axis": -1}, fold, []


def _softmax(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    dim = _arg(op, 1, "dim", -1)
    if not x or int(dim) not in (-1, len(x)):
        return None
    shape, fold = plane(x, fold, channels_first=False)
    notes = ["log-softmax priced as softmax"] if op.op == "log_softmax" else []
    return "Softmax", [shape], shape, {"axis": -1}, fold, notes


def _act(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    shape, fold = plane(x, fold)
    notes = ["mish priced as swish"] if op.op == "mish" else []
    return "Activation", [shape], shape, {"activation": ACTIVATIONS[op.op]}, fold, notes


def _add(op: Any, x: tuple, out: tuple, fold: int, items: list) -> tuple | None:
    if len(items) != 2 or items[0] != items[1] or items[0] != out:
        return None
    shape, fold = plane(out, fold)
    return "Add", [shape, shape], shape, {}, fold, []


def _cat(op: Any, x: tuple, out: tuple, fold: int, items: list) -> tuple | None:
    dim = int(_arg(op, 1, "dim", 0))
    if len(items) < 2 or any(len(s) != len(out) for s in items):
        return None
    if len(out) == 3 and dim in (1, -3) and all(s[1:] == out[1:] for s in items) \
            and out[1] == out[2]:
        return ("Concatenate", [(s[1], s[2], s[0]) for s in items], (out[1], out[2], out[0]),
                {"axis": -1}, fold, [])
    if len(out) == 1 and dim in (1, -1):
        return "Concatenate", [tuple(s) for s in items], tuple(out), {"axis": -1}, fold, []
    return None


def _dropout(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    rate = float(_arg(op, 1, "p", 0.5)) if bool(_arg(op, 2, "training", True)) else 0.0
    shape, fold = plane(x, fold)
    return "Dropout", [shape], shape, {"rate": rate}, fold, []


def _pad(op: Any, x: tuple, out: tuple, fold: int) -> tuple | None:
    pads = list(_arg(op, 1, "pad", []))
    if len(x) != 3 or len(pads) != 4 or len(set(pads)) != 1 or \
            _arg(op, 2, "mode", "constant") != "constant" or x[1] != x[2] or pads[0] < 0:
        return None
    p = int(pads[0])
    return ("ZeroPadding2D", [(x[1], x[2], x[0])], (out[1], out[2], out[0]),
            {"padding": ((p, p), (p, p))}, fold, [])


MAPPERS: dict[str, Callable[..., tuple | None]] = {
    "conv2d": _conv, "max_pool2d": _pool, "max_pool2d_with_indices": _pool,
    "avg_pool2d": _pool, "adaptive_avg_pool2d": _adaptive, "adaptive_max_pool2d": _adaptive,
    "mean": _mean, "linear": _linear, "batch_norm": _batch_norm, "layer_norm": _layer_norm,
    "softmax": _softmax, "log_softmax": _softmax, "dropout": _dropout, "dropout2d": _dropout,
    "pad": _pad, **{name: _act for name in ACTIVATIONS},
}
MULTI_INPUT = {"add": _add, "sub": _add, "cat": _cat}


def flagged_costs(op: Any) -> tuple[float, float]:
    """(FLOPs, multiply-adds) of a flagged op as recorded (module rules)."""
    out = _prod(op.output)
    ins = [_prod(s) for s in op.inputs] or [0.0]
    name = op.op
    if name == "interpolate":
        name = f"interpolate_{_arg(op, 3, 'mode', 'nearest')}"
    if name in ("matmul", "bmm", "mm", "addmm", "baddbmm") and op.inputs:
        k = float(op.inputs[0][-1]) if op.inputs[0] else 1.0
        return 2.0 * out * k, out * k
    if name == "scaled_dot_product_attention" and op.inputs:
        q = op.inputs[0]
        keys = op.inputs[1][-2] if len(op.inputs) > 1 and len(op.inputs[1]) > 1 else q[-2]
        macs = 2.0 * _prod(q) * float(keys)
        heads = float(_arg(op, 99, "num_heads", 1))
        return 2.0 * macs + 5.0 * _prod(q[:-1]) * float(keys) * heads, macs
    if name == "conv_transpose2d" and len(op.inputs) > 1:
        w = op.inputs[1]
        macs = ins[0] * float(w[1]) * float(w[2]) * float(w[3])
        return 2.0 * macs, macs
    if name == "nms" and op.inputs:
        n = float(op.inputs[0][0]) if op.inputs[0] else 0.0
        return NMS_FLOPS * n * n, 0.0
    if name in LOSSES:
        return LOSS_FLOPS * ins[0], 0.0
    if name in REDUCTIONS:
        return (out if len(op.inputs) > 1 else ins[0]), 0.0  # max(a, b) is element-wise
    if name in COPIES:
        return 0.0, 0.0
    return FLOPS_PER_ELEMENT.get(name, 1.0) * out, 0.0


def layer_for(op: Any, scale: str, axes: list, images: int = 1) -> NetLayer:
    """The layer occurrence of one op recorded with ``images`` images (module docstring;
    rules in torch_graph): ``batch`` ops are brought to one image."""
    n_in = len(op.inputs)
    per = images if scale == "batch" else 1
    items = [_item(s, axes[i] if i < len(axes) else None, per) for i, s in enumerate(op.inputs)]
    out, fold = _item(op.output, axes[n_in] if n_in < len(axes) else None, per)
    x, x_fold = items[0] if items else (out, fold)
    fold = x_fold if items and scale == "batch" and axes[0] is not None else fold
    owner = op.module or (op.site[2] if len(op.site) > 2 else "") or "model"
    name = owner + ("" if op.module and op.op in MAPPERS and op.op != "mean" else f"/{op.op}")
    cfg: dict[str, Any] = {"framework": "pytorch", "op": op.op, "scale": scale}
    mapped = None
    if op.op in MAPPERS:
        mapped = MAPPERS[op.op](op, x, out, fold)
    elif op.op in MULTI_INPUT:
        mapped = MULTI_INPUT[op.op](op, x, out, fold, [s for s, _ in items if s])
    if mapped is not None:
        cls, in_shapes, out_shape, kind_cfg, fold, notes = mapped
        cfg.update(kind_cfg)
    else:
        cls, in_shapes, out_shape, notes = TORCH_CLS_PREFIX + op.op, list(op.inputs), \
            op.output, []
        flops, macs = flagged_costs(op)
        cfg.update(flops=flops / per, macs=macs / per,
                   bytes=[op.in_bytes / per, op.out_bytes / per])
    if fold != 1:
        cfg["fold"] = int(fold)
    if notes:
        cfg["note"] = "; ".join(notes)
    if op.frozen:
        cfg["frozen"] = True
    return NetLayer(name=name, cls=cls, in_shapes=[tuple(s) for s in in_shapes],
                    out_shape=tuple(out_shape), config=cfg, params=int(op.params),
                    first=not op.grad_input)


# --------------------------------------------------------------------------- layer -> rows


def _flagged_rows(layer: NetLayer, per: int, optimizer: str, training: bool) -> list[dict]:
    from layerwise.kinds import KINDS

    cfg = layer.config
    ctx = RowContext(layer, per, optimizer, training, KINDS)
    if cfg.get("op") == "unused":
        return ctx.other("view", "parameters no traced op used (e.g. a head that training "
                         "does not run): counted, no computation", params=layer.params)
    op = cfg.get("op", layer.cls)
    rows = ctx.other("unknown", f"PyTorch op {op}: no layer kind covers it, priced by a "
                     "roofline of its bytes and FLOPs (flagged)",
                     macs=float(cfg.get("macs", 0.0)) * per,
                     flops=float(cfg.get("flops", 0.0)) * per, params=layer.params)
    b_in, b_out = cfg.get("bytes", (0.0, 0.0))
    rows[0].update(bytes_in=float(b_in) * per, bytes_out=float(b_out) * per,
                   grad_input=not layer.first)
    return rows


def torch_rows(layer: NetLayer, batch: int, optimizer: str, training: bool,
               kind_rows: Callable[[NetLayer, int, str, bool], list[dict]]) -> list[dict]:
    """Rows of a PyTorch occurrence at ``batch`` (module rules); ``kind_rows`` maps a Keras-
    class occurrence at a batch size (``layerwise.network``'s generic mapping)."""
    cfg = layer.config
    scale = cfg.get("scale", "batch")
    per = int(batch) if scale == "batch" else 1
    copies = int(batch) if scale == "image" else 1
    if layer.cls.startswith(TORCH_CLS_PREFIX) or cfg.get("op") == "unused":
        rows = _flagged_rows(layer, per, optimizer, training)
    else:
        rows = kind_rows(layer, per * int(cfg.get("fold", 1)), optimizer, training)
    extra = [text for text in (cfg.get("note"),
                               "frozen: no gradient (priced as a trained layer)"
                               if cfg.get("frozen") and training else None) if text]
    for i, row in enumerate(rows):
        row["params"] = int(layer.params) if i == 0 else 0
        if extra:
            row["note"] = "; ".join([row["note"], *extra] if row.get("note") else extra)
        if cfg.get("frozen"):
            row["frozen"] = True
    if copies == 1:
        return rows
    out = []
    for k in range(copies):
        for row in rows:
            out.append({**row, "name": f"{row['name']}@{k}", "params": row["params"] if k == 0
                        else 0})
    return out


__all__ = ["ACTIVATIONS", "FLOPS_PER_ELEMENT", "TORCH_CLS_PREFIX", "flagged_costs", "layer_for",
           "plane", "torch_rows", "window"]
