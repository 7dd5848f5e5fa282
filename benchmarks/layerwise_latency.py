"""Latency of a layerwise forecast of a known network at a batch size never asked before.

* ``cli``: wall time of ``jobcast predict --network resnet50 --device A100 --batch-size B
  --json`` in a fresh process (imports, predictor load, zoo spec, pricing), B new each time;
* ``in-process``: ``Forecaster.forecast`` of the same request in this process (what a served
  model does per request), B new each time, after one warm-up.

Variants are interleaved; medians and p90 are reported (the machine drifts between processes).

    .venv/bin/python benchmarks/layerwise_latency.py [--reps 7] [--out docs/layerwise-latency.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def cli_once(batch: int, store: str, network: str, device: str) -> float:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jobcast", "predict", "--network", network, "--device", device,
         "--batch-size", str(batch), "--store", store, "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"jobcast predict failed: {done.stderr[-2000:]}")
    json.loads(done.stdout)
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--network", default="resnet50")
    ap.add_argument("--device", default="A100")
    ap.add_argument("--out", default=str(ROOT / "docs" / "layerwise-latency.md"))
    args = ap.parse_args()
    from ingest.store import Store
    from jobcast.service.forecaster import Forecaster
    from jobcast.service.request import JobRequest

    rng = np.random.default_rng(0)
    batches = rng.permutation(np.arange(17, 513))[: 2 * args.reps + 1].tolist()
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/store.db"
        fc = Forecaster(Store(store))
        fc.forecast(JobRequest(network=args.network, batch_size=batches.pop(), device=args.device))
        cli, inproc = [], []
        for _ in range(args.reps):
            cli.append(cli_once(batches.pop(), store, args.network, args.device))
            start = time.perf_counter()
            out = fc.forecast(JobRequest(network=args.network, batch_size=batches.pop(),
                                         device=args.device))
            inproc.append(time.perf_counter() - start)
            assert out.ok, out
    rows = [("cli (fresh process, wall)", cli), ("in-process (served path)", inproc)]
    doc = ["# Layerwise forecast latency (known network, new batch size)\n\n",
           f"Command: `.venv/bin/python benchmarks/layerwise_latency.py --reps {args.reps}` "
           f"({args.network} on {args.device}; 2 shared CPU cores).\n\n",
           "| variant | median ms | p90 ms | n |\n|---|---|---|---|\n"]
    for name, values in rows:
        ms = np.asarray(values) * 1000
        doc.append(f"| {name} | {np.median(ms):.0f} | {np.quantile(ms, 0.9):.0f} | {len(ms)} |\n")
    Path(args.out).write_text("".join(doc))
    print("".join(doc))


if __name__ == "__main__":
    main()
