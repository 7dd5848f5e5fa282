"""TensorFlow vs PyTorch timing backends on the same layer shapes, on this CPU.

The shapes are one campaign's (``campaign_configs``: every kind in turn); each shape is timed
with both backends in this one process, interleaved (the backend that goes first alternates
per shape), with the same ``TimingPlan``. Each row is formatted as the bench CSV formats it
(device columns from the backend's ``detect``), and the script asserts that both rows of a
shape carry the same columns: the same ``CSV_COLUMNS`` layout, nothing a backend adds that the
layout would drop, and the same columns filled apart from the ``sw_*`` versions.

    .venv/bin/python benchmarks/backend_compare.py [--per-kind 5] [--space small|cpu] \
        [--threads 1] [--json benchmarks/results/backend_compare.json]

Both frameworks get ``--threads`` intra-op threads (default 1, what a Ray CPU slot gives a
task): on a shared, oversubscribed VM PyTorch's OpenMP pool with 2 threads inflated its times
20-100x here (a descheduled thread stalls every parallel region), which is the machine, not
the layer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from fleet.quiet_tf import quiet_import
from layerwise.backends import get_backend
from layerwise.bench import (
    CSV_COLUMNS,
    TimingPlan,
    bench_row,
    campaign_configs,
    format_row,
)
from layerwise.layers import KINDS, FeatureSpace

# A row takes ~0.1-20 ms per call here: big enough to time, small enough for 2 shared cores.
SMALL = FeatureSpace(name="compare-small", batchsize=(1, 32), matsize=(1, 64), log_matsize=True,
                     kernelsize=(1, 5), pool_kernelsize=(1, 3), strides=(1, 2),
                     channels=(1, 256), dense_dim=(1, 2048), log_dense_dim=True,
                     max_flops=5e7, max_bytes=1e8)
PLAN = TimingPlan(warmup=3, reps=5, runs=0, target_rep_ms=20.0)
BACKENDS = ("tensorflow", "torch")
SHORT = (("batchsize", "b"), ("matsize", "m"), ("kernelsize", "k"), ("channels_in", "ci"),
         ("channels_out", "co"), ("dim_input", "di"), ("dim_output", "do"), ("strides", "s"),
         ("pool_type", ""), ("n_inputs", "n"), ("padding_px", "p"))


def summary(row: dict) -> str:
    """``b33 m25 k2 ci1 co493 s1 train:rmsprop``: the shape of a row in a few characters."""
    parts = [f"{short}{row[key]}" for key, short in SHORT if row.get(key) not in (None, "")]
    opt = str(row.get("optimizer", "none"))
    return " ".join(parts + ["fwd" if opt == "none" else f"train:{opt}"])


def filled(fields: list[str]) -> set[str]:
    return {col for col, value in zip(CSV_COLUMNS, fields, strict=True) if value != ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--per-kind", type=int, default=5, help="shapes per layer kind")
    ap.add_argument("--space", default="small", help="small (this script's) or a named space")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads for both frameworks (1: as in a Ray CPU slot)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    tf = quiet_import("tensorflow")
    import torch

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    torch.set_num_threads(args.threads)
    space = SMALL if args.space == "small" else args.space
    kinds = list(KINDS)
    shapes = list(campaign_configs(kinds, args.per_kind * len(kinds), args.seed, space))
    detected = {b: get_backend(b).detect("cpu") for b in BACKENDS}
    for name in BACKENDS:  # first-call costs (imports, thread pools) out of the timings
        bench_row(shapes[1], "cpu", PLAN, name)

    results = []
    started = time.perf_counter()
    for i, shape in enumerate(shapes):
        times, rows = {}, {}
        for name in (BACKENDS if i % 2 == 0 else BACKENDS[::-1]):
            record = bench_row(dict(shape), "cpu", PLAN, name)
            record.update(detected[name], run_id="compare")
            lost = set(record) - set(CSV_COLUMNS)
            assert not lost, f"{name} row has columns the layout drops: {sorted(lost)}"
            rows[name] = format_row(record)
            times[name] = record["time_ms_median"] if record["status"] == "ok" else math.nan
            if record["status"] != "ok":
                print(f"  {shape['layer']} {summary(shape)}: {name} failed: {record['error']}")
        tf_row, pt_row = rows["tensorflow"], rows["torch"]
        assert len(tf_row) == len(pt_row) == len(CSV_COLUMNS)
        same = {c for c in filled(tf_row) ^ filled(pt_row) if not c.startswith("sw_")}
        if all(math.isfinite(t) for t in times.values()):  # a failed row leaves times empty
            assert not same, f"{shape['layer']}: columns filled by one backend only: {same}"
        results.append({"kind": shape["layer"], "shape": summary(shape),
                        "tf_ms": times["tensorflow"], "torch_ms": times["torch"],
                        "ratio": times["torch"] / times["tensorflow"]})
    seconds = time.perf_counter() - started

    print(f"{len(shapes)} shapes x {len(BACKENDS)} backends on {detected['torch']['gpu']}, "
          f"{args.threads} thread(s), {seconds:.0f} s; TF {detected['tensorflow']['sw_tensorflow']}"
          f", torch {detected['torch']['sw_torch']}\n")
    print("| kind | shape | TF ms | torch ms | torch/TF |\n|---|---|---:|---:|---:|")
    for r in results:
        print(f"| {r['kind']} | {r['shape']} | {r['tf_ms']:.3f} | {r['torch_ms']:.3f} | "
              f"{r['ratio']:.2f} |")
    print("\n| kind | shapes | median TF ms | median torch ms | median torch/TF |\n"
          "|---|---:|---:|---:|---:|")
    per_kind = {}
    for kind in kinds + ["all"]:
        sel = [r for r in results if (kind == "all" or r["kind"] == kind)
               and math.isfinite(r["ratio"])]
        if not sel:
            continue
        med = {k: statistics.median(r[k] for r in sel) for k in ("tf_ms", "torch_ms", "ratio")}
        per_kind[kind] = {"n": len(sel), **med}
        print(f"| {kind} | {len(sel)} | {med['tf_ms']:.3f} | {med['torch_ms']:.3f} | "
              f"{med['ratio']:.2f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": results, "per_kind": per_kind,
                                         "threads": args.threads, "seconds": seconds,
                                         "device": detected["torch"]["gpu"]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
