"""PyTorch profiler (Kineto) traces as layer rows: a team's own runs teach the layerwise route.

A trace exported by ``torch.profiler.profile(record_shapes=True, ...)`` +
``export_chrome_trace`` (gzipped or not; ``{"deviceProperties": [...], "traceEvents":
[...]}``) becomes rows in this project's bench layout (``layer`` + the kind's columns,
``optimizer``, ``precision``, ``framework``, ``gpu``, ``hw_*``, ``time_ms_median``): what
``jobcast layerwise train --data`` and :func:`layerwise.sources.kind_rows` (format ``bench``)
read. Run as
``python -m layerwise.kineto TRACE.json [...] --out rows.csv``.

Rules
-----
* **Layer ops** are the top-level forward CPU ops (``cat: cpu_op`` with a ``Sequence number``,
  not inside another op on its thread, not inside an ``Optimizer.*`` annotation) named in
  :data:`LAYER_OPS`; their ``Input Dims`` and ``Concrete Inputs`` (stride, padding, groups,
  kernel) give the kind's columns (NCHW inputs, square images and windows only):
  ``aten::conv2d`` -> ``conv`` (``dwconv`` when groups = channels in = channels out; padding
  ``valid`` when there is none, else ``same`` when the output side is ``ceil(side / stride)``),
  ``aten::linear`` -> ``dense``, ``aten::batch_norm`` -> ``bn``, ``aten::relu(_)``/``tanh``/
  ``sigmoid`` -> ``act``, ``aten::max_pool2d``/``avg_pool2d`` -> ``pool``,
  ``aten::adaptive_avg_pool2d`` to 1x1 -> a global ``pool``, ``aten::add(_)`` of two equal
  tensors -> ``add``, ``aten::softmax``/``layer_norm``/``dropout`` -> their kinds. Other ops
  (losses, views, ...) and shapes no kind expresses are counted in :attr:`TraceRows.skipped`.
* **Time** of an op occurrence: on a GPU trace, the sum of the ``kernel`` events whose
  ``External id`` belongs to the op or an op nested in it; on a CPU trace (no kernels), the
  op's own duration. **Training rows**: the backward of a forward op is every
  ``autograd::engine::evaluate_function`` whose ``Sequence number`` lies from the op's up to
  the next top-level forward op's; its time (kernels, or duration on a CPU) is added to the
  forward time and the row's ``optimizer`` is the one the trace names
  (``Optimizer.step#SGD.step`` -> ``sgd``; without one ``sgd``); the optimizer update itself
  is not split per layer and is left out (``note``). Forward rows have optimizer ``none``.
* Occurrences of one configuration (over steps and repeated blocks) are one row:
  ``time_ms_median`` / ``time_ms_min`` / ``time_ms_max`` and ``occurrences``.
* **Device**: the GPU named by the trace's ``deviceProperties`` (the device of its kernels),
  normalised by the GPU catalog (``hw_*`` from it; a GPU the catalog does not know keeps its
  name and gets no ``hw_*``); a CPU trace (no kernels) is this machine's CPU
  (:func:`layerwise.local_device.cpu_features`) unless ``cpu`` features are passed.
* ``precision`` from the first input's ``Input type`` (``float`` fp32, ``c10::Half`` fp16,
  ``c10::BFloat16`` bf16).
* A trace that is not a Kineto JSON object, or has no layer op with a positive time, is a
  :class:`TraceError` naming the file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from fleet.catalog import UnknownGpuError, resolve_gpu
from layerwise.errors import LayerwiseError
from layerwise.local_device import cpu_features, gpu_features

FRAMEWORK = "pytorch"
PRECISIONS = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp64"}
ACTIVATIONS = {"aten::relu": "relu", "aten::relu_": "relu", "aten::tanh": "tanh",
               "aten::tanh_": "tanh", "aten::sigmoid": "sigmoid", "aten::sigmoid_": "sigmoid"}
LAYER_OPS = ("aten::conv2d", "aten::linear", "aten::batch_norm", "aten::max_pool2d",
             "aten::avg_pool2d", "aten::adaptive_avg_pool2d", "aten::add", "aten::add_",
             "aten::softmax", "aten::layer_norm", "aten::dropout", *ACTIVATIONS)
BACKWARD = "autograd::engine::evaluate_function"
MAX_TRACE_BYTES = 2_000_000_000


class TraceError(LayerwiseError, ValueError):
    """A file that is not a usable Kineto trace (message names the file and why)."""

    kind: ClassVar[str] = "trace"


@dataclass
class _Op:
    name: str
    tid: Any
    ts: float
    dur: float
    args: dict
    children: list[_Op] = field(default_factory=list)
    kernel_us: float = 0.0
    top: bool = True

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def seq(self) -> int | None:
        value = self.args.get("Sequence number")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class TraceRows:
    """Rows of one or more traces, and what was left out (op name -> occurrences)."""

    rows: pd.DataFrame
    skipped: Counter = field(default_factory=Counter)
    device: str = ""
    occurrences: int = 0


def load_trace(path: str | Path) -> dict:
    """The trace's JSON object; :class:`TraceError` for anything else."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise TraceError(f"{path}: larger than {MAX_TRACE_BYTES // 10**9} GB")
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        doc = json.loads(data.decode("utf-8", errors="replace"))
    except (OSError, EOFError) as exc:
        raise TraceError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: not JSON ({str(exc)[:80]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path}: not a Kineto trace (no traceEvents list)")
    return doc


def _events(doc: Mapping) -> tuple[list[_Op], list[dict], list[tuple[float, float]], str]:
    """CPU ops, kernels, optimizer spans and the optimizer name of a trace."""
    ops, kernels, spans, optimizer = [], [], [], ""
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not (isinstance(ts, int | float) and isinstance(dur, int | float)
                and math.isfinite(ts) and math.isfinite(dur) and dur >= 0):
            continue
        cat, name = e.get("cat"), str(e.get("name", ""))
        args: dict = e["args"] if isinstance(e.get("args"), dict) else {}
        if cat == "cpu_op":
            ops.append(_Op(name, e.get("tid"), float(ts), float(dur), args))
        elif cat == "kernel":
            kernels.append(e)
        elif cat == "user_annotation" and name.startswith("Optimizer."):
            spans.append((float(ts), float(ts) + float(dur)))
            if name.startswith("Optimizer.step#") and not optimizer:
                optimizer = name.split("#", 1)[1].split(".", 1)[0].lower()
    return ops, kernels, spans, optimizer


def _nest(ops: list[_Op]) -> dict[int, _Op]:
    """Set ``children``/``top`` by time containment per thread; External id -> top-level op."""
    by_thread: dict[Any, list[_Op]] = defaultdict(list)
    for op in ops:
        by_thread[op.tid].append(op)
    owner: dict[int, _Op] = {}
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda o: (o.ts, -o.dur))
        stack: list[_Op] = []
        root: _Op | None = None
        for op in thread_ops:
            while stack and op.ts >= stack[-1].end:
                stack.pop()
            if stack:
                op.top = False
                stack[-1].children.append(op)
            else:
                root = op
            stack.append(op)
            ext = op.args.get("External id")
            if isinstance(ext, int) and root is not None:
                owner[ext] = root
    return owner


def _device(doc: Mapping, kernels: list[dict]) -> tuple[str, dict]:
    """The GPU name and ``hw_*`` features of the kernels' device."""
    devices = Counter(k.get("args", {}).get("device") for k in kernels
                      if isinstance(k.get("args"), dict))
    index = devices.most_common(1)[0][0] if devices else 0
    props = [p for p in doc.get("deviceProperties") or [] if isinstance(p, dict)]
    found = next((p for p in props if p.get("id") == index), props[0] if props else {})
    name = str(found.get("name") or f"GPU {index}")
    try:
        spec = resolve_gpu(name)
    except (UnknownGpuError, KeyError, ValueError):
        return name, {"hw_kind": "gpu", "hw_model": name}
    features = gpu_features(spec.name)
    return str(features.pop("gpu")), features


def _dims(op: _Op) -> list:
    dims = op.args.get("Input Dims")
    return dims if isinstance(dims, list) else []


def _concrete(op: _Op, index: int) -> list[int] | None:
    values = op.args.get("Concrete Inputs")
    if not isinstance(values, list) or index >= len(values):
        return None
    text = str(values[index]).strip()
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        return None
    if isinstance(parsed, bool) or parsed is None:
        return None
    items = parsed if isinstance(parsed, list) else [parsed]
    return [int(v) for v in items if isinstance(v, int | float) and not isinstance(v, bool)]


def _one(values: list[int] | None, default: int) -> int | None:
    """A single value of a (square) list, ``default`` when absent, None when not square."""
    if not values:
        return default
    return values[0] if len(set(values)) == 1 else None


def _image(shape: list) -> tuple[int, int, int] | None:
    """(batch, side, channels) of a square NCHW shape, (batch, 1, features) of a 2-d one."""
    if len(shape) == 4 and shape[2] == shape[3]:
        return int(shape[0]), int(shape[2]), int(shape[1])
    if len(shape) == 2:
        return int(shape[0]), 1, int(shape[1])
    return None


def _padding(side: int, kernel: int, stride: int, pad: int) -> str | None:
    if pad == 0:
        return "valid"
    out = (side + 2 * pad - kernel) // stride + 1
    return "same" if out == math.ceil(side / stride) else None


def _window_row(op: _Op, x: tuple[int, int, int], k: int | None, s: int | None,
                p: int | None) -> dict | None:
    if k is None or s is None or p is None:
        return None
    padding = _padding(x[1], k, s, p)
    if padding is None:
        return None
    return {"batchsize": x[0], "matsize": x[1], "kernelsize": k, "strides": s,
            "padding": padding, "channels_in": x[2]}


def layer_row(op: _Op) -> dict | None:
    """The kind columns of one layer op (module rules), or None when no kind expresses it."""
    dims = _dims(op)
    x = _image(dims[0]) if dims and isinstance(dims[0], list) else None
    if x is None:
        return None
    name = op.name
    if name == "aten::conv2d" and len(dims) > 1 and len(dims[1]) == 4 and dims[1][2] == dims[1][3]:
        cout, k = int(dims[1][0]), int(dims[1][2])
        groups = _one(_concrete(op, 6), 1)
        if _one(_concrete(op, 5), 1) != 1 or groups is None:
            return None
        row = _window_row(op, x, k, _one(_concrete(op, 3), 1), _one(_concrete(op, 4), 0))
        if row is None:
            return None
        row.update(use_bias=len(dims) > 2 and bool(dims[2]), activation="none")
        if groups == 1:
            return {"layer": "conv", **row, "channels_out": cout}
        return {"layer": "dwconv", **row} if groups == x[2] == cout else None
    if name == "aten::linear" and len(dims) > 1 and len(dims[1]) == 2 and x[1] == 1:
        return {"layer": "dense", "batchsize": x[0], "dim_input": x[2],
                "dim_output": int(dims[1][0]), "activation": "none"}
    flat = {"batchsize": x[0], "matsize": x[1], "channels_in": x[2]}
    if name in ("aten::max_pool2d", "aten::avg_pool2d"):
        size = _one(_concrete(op, 1), 0)
        row = _window_row(op, x, size, _one(_concrete(op, 2), size or 1),
                          _one(_concrete(op, 3), 0))
        return None if row is None else {"layer": "pool", **row,
                                         "pool_type": "max" if "max" in name else "avg"}
    if name == "aten::adaptive_avg_pool2d" and _concrete(op, 1) == [1, 1]:
        return {"layer": "pool", **flat, "kernelsize": x[1], "strides": x[1],
                "padding": "valid", "pool_type": "avg"}
    if name in ACTIVATIONS:
        return {"layer": "act", **flat, "activation": ACTIVATIONS[name]}
    if name in ("aten::add", "aten::add_"):
        same = len(dims) > 1 and dims[1] == dims[0]
        return {"layer": "add", **flat} if same else None
    simple = {"aten::batch_norm": "bn", "aten::softmax": "softmax", "aten::layer_norm": "ln",
              "aten::dropout": "dropout"}
    return {"layer": simple[name], **flat} if name in simple else None


def _precision(op: _Op) -> str:
    types = op.args.get("Input type")
    first = str(types[0]) if isinstance(types, list) and types else "float"
    return PRECISIONS.get(first, first)


def _occurrences(ops: list[_Op], spans: list[tuple[float, float]]) -> list[tuple[_Op, list]]:
    """(forward layer op, its backward ops) in sequence order (module rules)."""
    def in_optimizer(op: _Op) -> bool:
        return any(a <= op.ts < b for a, b in spans)

    forward = sorted((o for o in ops if o.top and o.seq is not None and not
                      o.name.startswith(BACKWARD) and not in_optimizer(o)),
                     key=lambda o: o.seq)  # type: ignore[arg-type, return-value]
    backward = sorted((o for o in ops if o.name.startswith(BACKWARD) and o.seq is not None),
                      key=lambda o: o.seq)  # type: ignore[arg-type, return-value]
    out: list[tuple[_Op, list]] = []
    for i, op in enumerate(forward):
        if op.name not in LAYER_OPS:
            out.append((op, []))
            continue
        upper = next((o.seq for o in forward[i + 1:] if o.seq > op.seq), None)  # type: ignore[operator]
        bwd = [b for b in backward if b.seq >= op.seq and (upper is None or b.seq < upper)]  # type: ignore[operator]
        out.append((op, bwd))
    return out


def _time_us(op: _Op, gpu: bool) -> float:
    if gpu:
        return op.kernel_us
    return op.dur


def trace_rows(paths: Iterable[str | Path], cpu: Mapping[str, object] | None = None
               ) -> TraceRows:
    """Layer rows of the traces at ``paths`` (module rules)."""
    samples: dict[tuple, list[float]] = defaultdict(list)
    skipped: Counter = Counter()
    keys: dict[tuple, dict] = {}
    device = ""
    count = 0
    for path in paths:
        doc = load_trace(path)
        ops, kernels, spans, optimizer = _events(doc)
        owner = _nest(ops)
        gpu = bool(kernels)
        for k in kernels:
            ext = k.get("args", {}).get("External id") if isinstance(k.get("args"), dict) else None
            top = owner.get(ext) if isinstance(ext, int) else None
            if top is not None:
                top.kernel_us += float(k["dur"])
        if gpu:
            device, hw = _device(doc, kernels)
        else:
            features = dict(cpu or cpu_features())
            device = str(features.pop("gpu", "cpu"))
            hw = features
        for op, bwd in _occurrences(ops, spans):
            row = layer_row(op) if op.name in LAYER_OPS else None
            if row is None:
                skipped[op.name] += 1
                continue
            forward_ms = _time_us(op, gpu) / 1000.0
            base = {**row, "precision": _precision(op), "framework": FRAMEWORK, "gpu": device,
                    **hw, "op": op.name}
            count += 1
            for optimizer_name, ms in (("none", forward_ms), (optimizer or "sgd", forward_ms + sum(
                    _time_us(b, gpu) for b in bwd) / 1000.0)):
                if optimizer_name != "none" and not bwd:
                    continue
                key = tuple(sorted({**base, "optimizer": optimizer_name}.items(),
                                   key=lambda kv: kv[0]))
                keys[key] = {**base, "optimizer": optimizer_name}
                if ms > 0:
                    samples[key].append(ms)
    records = []
    for key, times in samples.items():
        record = dict(keys[key])
        record.update(time_ms_median=statistics.median(times), time_ms_min=min(times),
                      time_ms_max=max(times), occurrences=len(times), status="ok",
                      source="kineto")
        if record["optimizer"] != "none":
            record["note"] = "forward + backward; the optimizer update is not per layer"
        records.append(record)
    if not records:
        raise TraceError("no layer op with a positive time in the trace(s) (profile with "
                         "record_shapes=True)")
    return TraceRows(pd.DataFrame(records), skipped, device, count)


def main(argv: list[str] | None = None) -> int:
    """``python -m layerwise.kineto TRACE [...] --out rows.csv``: write the rows as CSV."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="Kineto JSON traces (export_chrome_trace)")
    parser.add_argument("--out", required=True, help="CSV of layer rows to write")
    args = parser.parse_args(argv)
    try:
        result = trace_rows(args.traces)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    result.rows.to_csv(args.out, index=False)
    print(json.dumps({"rows": len(result.rows), "occurrences": result.occurrences,
                      "device": result.device, "out": args.out,
                      "skipped_ops": dict(result.skipped.most_common(10))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
