"""Build the shipped PyTorch specs: ``python -m layerwise.zoo.build_torch [--out DIR] [names]``.

For each torchvision network of :data:`layerwise.zoo.torch_zoo.CATALOG` (all by default, or the
names given): build it on the meta device (``weights=None``, ``weights_backbone=None``), trace
it in training mode at the catalogue's image size (:mod:`layerwise.torch_graph`) and write
``<name>.json.gz`` into ``layerwise/zoo/data/torchvision``. Rules:

* a spec is written only when its parameter count equals PyTorch's
  (``sum(p.numel() for p in model.parameters())``) and its rows, re-read from the JSON, equal
  the rows of the traced occurrences (forward at batch 1, sgd step at batch 4);
* ``fx`` cross-check: where ``torch.fx.symbolic_trace`` can trace a classification model,
  its ``Conv2d`` module calls must equal the trace's conv2d ops and its ``Linear`` calls may
  not exceed the trace's linear ops (``nn.MultiheadAttention`` runs its projections as
  functions, which fx does not list as modules); detection and segmentation: ``n/a``;
* a network that fails is skipped with its reason (exit status 1).

Needs torch and torchvision (not the project's CPU torch: torchvision's wheels want the CUDA
build; see ``README.md``). Only this command imports this module.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layerwise import network, torch_graph, zoo
from layerwise.zoo import torch_zoo
from layerwise.zoo.build import _plain

CHECKS = (("none", 1), ("sgd", 4))


def _rows(layers: list, batch: int, optimizer: str) -> list[dict]:
    training = optimizer != "none"
    return [row for layer in layers
            for row in network._rows_for(layer, batch, optimizer, training)]


def fx_counts(model: Any) -> dict[str, int] | None:
    """Conv2d and Linear module calls in the fx graph of ``model``; None if fx cannot trace."""
    import torch

    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # noqa: BLE001 - data-dependent control flow: fx cannot trace
        return None
    modules = dict(model.named_modules())
    found: Counter = Counter()
    for node in graph.nodes:
        if node.op == "call_module":
            cls = type(modules.get(str(node.target))).__name__
            if cls in ("Conv2d", "Linear"):
                found[cls] += 1
    return dict(found)


def _trace_counts(layers: list) -> dict[str, int]:
    ops = Counter(layer.config.get("op") for layer in layers)
    return {"Conv2d": ops.get("conv2d", 0), "Linear": ops.get("linear", 0)}


def build_spec(name: str) -> dict[str, Any]:
    """The checked spec dict of one catalogued torchvision network."""
    import torch
    import torchvision

    entry = torch_zoo.entry(name)
    if entry is None:
        raise KeyError(f"{name!r} is not in the PyTorch zoo catalogue")
    ref = torch_graph.TorchRef(entry.module, entry.name)
    model = torch_graph.build_model(ref)
    layers, info = torch_graph.module_layers(model, entry.image_size)
    expected = int(sum(p.numel() for p in model.parameters()))
    params = int(sum(layer.params for layer in layers))
    if params != expected:
        raise ValueError(f"params {params} != PyTorch's {expected}")
    fx = fx_counts(model) if entry.task == torch_zoo.CLASSIFICATION else None
    ours = _trace_counts(layers)
    if fx is not None and (fx.get("Conv2d", 0) != ours["Conv2d"]
                           or fx.get("Linear", 0) > ours["Linear"]):
        raise ValueError(f"fx finds {fx}, the trace {ours}")
    forward = _rows(layers, 1, "none")
    totals = {
        "layers": dict(sorted(Counter(layer.cls for layer in layers).items())),
        "params": params, "trainable_params": info["trainable_params"],
        "macs": float(sum(r["macs"] for r in forward)),
        "flops": float(sum(r["flops"] for r in forward)), "rows": len(forward),
        "flagged": info["flagged"], "views": info["views"], "scalar_ops": info["scalar_ops"],
        "scale": dict(sorted(Counter(layer.config.get("scale", "batch")
                                     for layer in layers).items())),
        "fx": fx if fx is not None else "n/a",
    }
    spec = {"format": zoo.FORMAT, "name": entry.name, "model_name": entry.name,
            "framework": "pytorch", "task": entry.task,
            "source": f"{entry.module}.{entry.name} (torchvision {torchvision.__version__}, "
                      f"torch {torch.__version__}; meta-device trace, training mode)",
            "image_size": entry.image_size, "input_shape": [entry.image_size] * 2 + [3],
            "totals": totals, "layers": [_plain(zoo.layer_to_json(layer)) for layer in layers]}
    reread = [zoo.layer_from_json(d) for d in json.loads(json.dumps(spec))["layers"]]
    for optimizer, batch in CHECKS:
        if _rows(reread, batch, optimizer) != _rows(layers, batch, optimizer):
            raise ValueError(f"{optimizer}/batch {batch}: rows differ after the JSON round trip")
    return spec


def write_packed(spec: dict[str, Any], out_dir: str) -> Path:
    """Write ``<name>.json.gz`` (always gzipped, no timestamp), removing a ``.json`` of it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(spec, separators=(",", ":")).encode()
    path = out / f"{spec['name']}.json.gz"
    path.write_bytes(gzip.compress(text, 9, mtime=0))
    (out / f"{spec['name']}.json").unlink(missing_ok=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Build and write the specs; report each network; 1 if any was skipped."""
    parser = argparse.ArgumentParser(prog="python -m layerwise.zoo.build_torch",
                                     description="Regenerate the shipped PyTorch specs.")
    parser.add_argument("names", nargs="*", help="networks to build (default: all catalogued)")
    parser.add_argument("--out", default=str(torch_zoo.TORCH_DIR), help="output folder")
    args = parser.parse_args(argv)
    skipped = 0
    for name in args.names or [e.name for e in torch_zoo.CATALOG.values()]:
        start = time.perf_counter()
        try:
            spec = build_spec(name)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next network
            skipped += 1
            print(f"SKIP {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        path = write_packed(spec, args.out)
        t = spec["totals"]
        print(f"{spec['name']:<26} {spec['image_size']:>3}px {len(spec['layers']):>5} layers "
              f"{t['params']:>11,} params {t['flops'] / 1e9:8.2f} GFLOPs "
              f"{sum(t['flagged'].values()):>4} flagged  {path.stat().st_size / 1024:6.1f} KiB "
              f"{time.perf_counter() - start:5.1f} s", flush=True)
    return 1 if skipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
