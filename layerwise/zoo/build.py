"""Build the zoo's specs with TensorFlow: ``python -m layerwise.zoo.build [--out DIR] [names]``.

For each catalogued network (all by default, or the names/aliases given): build the Keras model
(``layerwise.network.build_application`` at the catalogue's image size), read its layer
occurrences exactly as ``decompose`` does, keep the config keys the row mapping may read, and
write ``<name>.json`` (compact; ``.json.gz`` when larger than ``GZIP_OVER``). Rules:

* a spec is written only after its rows, re-read from the JSON, equal the rows of the Keras
  model for a forward pass (batch 1) and a training step (batch 32, sgd);
* a network that fails to build or check is skipped with its reason (exit status 1);
* each model is built in a cleared Keras session, so automatic layer names do not depend on
  the order of the build; gzip output has no timestamp: unchanged networks, unchanged files.

Only this command and the tests import this module (it imports Keras and TensorFlow).
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

import numpy as np

from fleet.quiet_tf import quiet_import
from layerwise import network, zoo
from layerwise.kinds.base import NetLayer

GZIP_OVER = 48 * 1024  # bytes of compact JSON above which a spec is gzipped
DROP_KEYS = frozenset({"name", "trainable", "dtype", "seed"})
DROP_SUFFIXES = ("_initializer", "_regularizer", "_constraint")
CHECKS = (("none", 1), ("sgd", 32))  # (optimizer, batch) whose rows must match Keras'


def _plain(value: Any) -> Any:
    """JSON-ready value: numpy scalars/arrays to Python, tuples to lists (recursively)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def slim_config(config: dict[str, Any]) -> dict[str, Any]:
    """The layer config without what no row mapping reads (names, dtypes, initialisers, …)."""
    return {k: v for k, v in config.items()
            if k not in DROP_KEYS and not k.endswith(DROP_SUFFIXES)}


def _rows(layers: Sequence[NetLayer], batch: int, optimizer: str) -> list[dict]:
    training = optimizer != "none"
    return [row for layer in layers
            for row in network._rows_for(layer, batch, optimizer, training)]


def spec_from_model(model: Any, name: str, source: str, image_size: int) -> dict[str, Any]:
    """The spec dict of a built Keras model (layers as ``decompose`` reads them, plus totals)."""
    layers = network._keras_layers(model)
    entries = []
    for layer in layers:
        layer.config = slim_config(layer.config)
        entries.append(_plain(zoo.layer_to_json(layer)))
    forward = _rows(layers, 1, "none")
    totals = {
        "layers": dict(sorted(Counter(layer.cls for layer in layers).items())),
        "params": int(sum(layer.params for layer in layers)),
        "trainable_params": int(sum(int(np.prod(w.shape)) for w in model.trainable_weights)),
        "macs": float(sum(row["macs"] for row in forward)),
        "flops": float(sum(row["flops"] for row in forward)),
        "rows": len(forward),
    }
    first = layers[0]
    return {"format": zoo.FORMAT, "name": name, "model_name": str(model.name), "source": source,
            "image_size": int(image_size),
            "input_shape": list(first.in_shapes[0] if first.in_shapes else first.out_shape),
            "totals": totals, "layers": entries}


def check_spec(spec: dict[str, Any], model: Any) -> list[str]:
    """Differences between the spec's rows (after a JSON round trip) and the Keras model's."""
    data = json.loads(json.dumps(spec))
    layers = [zoo.layer_from_json(d) for d in data["layers"]]
    problems = []
    for optimizer, batch in CHECKS:
        ours = _rows(layers, batch, optimizer)
        theirs = network.decompose(model, batch_size=batch, optimizer=optimizer).rows
        if ours != theirs:
            diff = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False))
                         if a != b), min(len(ours), len(theirs)))
            problems.append(f"{optimizer}/batch {batch}: rows differ from Keras' at row {diff} "
                            f"({len(ours)} vs {len(theirs)} rows)")
    if spec["totals"]["params"] != model.count_params():
        problems.append(f"params {spec['totals']['params']} != Keras {model.count_params()}")
    return problems


def build_spec(name: str) -> tuple[dict[str, Any], Any]:
    """The checked spec of a catalogued network (any spelling or alias) and its Keras model."""
    canonical = zoo.lookup(name, shipped=False)
    if canonical is None:
        raise KeyError(f"{name!r} is not in the zoo catalogue; known: {', '.join(zoo.CATALOG)}")
    entry = zoo.CATALOG[canonical]
    keras = quiet_import("keras")

    keras.backend.clear_session()  # fresh automatic names ("input_layer", not "input_layer_6")
    model = network.build_application(canonical, entry.image_size)
    source = (f"keras.applications.{entry.builder}" if entry.source == "keras"
              else f"tf_cnn_benchmarks {entry.builder} (layerwise.zoo.tf_cnn)")
    spec = spec_from_model(model, canonical, source, entry.image_size)
    problems = check_spec(spec, model)
    if problems:
        raise ValueError("; ".join(problems))
    return spec, model


def write_spec(spec: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``<name>.json`` (or ``.json.gz`` above ``GZIP_OVER``), removing the other form."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(spec, separators=(",", ":")).encode()
    plain, packed = out_dir / f"{spec['name']}.json", out_dir / f"{spec['name']}.json.gz"
    path, stale = (packed, plain) if len(text) > GZIP_OVER else (plain, packed)
    path.write_bytes(gzip.compress(text, 9, mtime=0) if path is packed else text)
    stale.unlink(missing_ok=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Build and write the specs; report each network; 1 if any was skipped."""
    parser = argparse.ArgumentParser(prog="python -m layerwise.zoo.build",
                                     description="Regenerate the zoo's layer specs (TensorFlow).")
    parser.add_argument("names", nargs="*", help="networks to build (default: all catalogued)")
    parser.add_argument("--out", default=str(zoo.DATA_DIR), help="output folder")
    args = parser.parse_args(argv)
    skipped = 0
    for name in args.names or list(zoo.CATALOG):
        start = time.perf_counter()
        try:
            spec, _ = build_spec(name)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next network
            skipped += 1
            print(f"SKIP {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        path = write_spec(spec, args.out)
        t = spec["totals"]
        print(f"{spec['name']:<18} {spec['image_size']:>3}px {len(spec['layers']):>4} layers "
              f"{t['params'] / 1e6:8.2f} M params {t['flops'] / 1e9:7.2f} GFLOPs  "
              f"{path.stat().st_size / 1024:7.1f} KiB  {time.perf_counter() - start:5.1f} s")
    return 1 if skipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
