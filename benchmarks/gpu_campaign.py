"""A PyTorch layer campaign on this machine's GPU: every kind, four precisions, both passes.

Run on a lent GPU (``device`` tool) from the repository root, with only PyTorch, numpy and
pandas installed::

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_campaign.py --out $OUT/gpu.csv --minutes 8

Appends to ``--out`` (resumed when it exists: configurations already there are not re-run)
and prints a line per 250 rows and a summary per kind and precision at the end.
"""

from __future__ import annotations

import argparse
import time

import lib  # noqa: F401  (sys.path: the repository, tests/)

from layerwise.backends import TimingPlan
from layerwise.bench import run_campaign
from layerwise.layers import KINDS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--minutes", type=float, default=8.0)
    parser.add_argument("--samples", type=int, default=40000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--space", default="gpu")
    parser.add_argument("--precisions", default="fp32,tf32,fp16,bf16")
    parser.add_argument("--target-ms", type=float, default=10.0)
    args = parser.parse_args()
    plan = TimingPlan(warmup=3, reps=5, target_rep_ms=args.target_ms, max_runs=50)
    started = time.perf_counter()

    def progress(done: int, total: int, row: dict | None) -> None:
        if row is not None and done % 250 == 0:
            print(f"{done}/{total} rows, {time.perf_counter() - started:.0f} s, last "
                  f"{row['layer']} {row['precision']} {row['status']} "
                  f"{row.get('time_ms_median', '')}", flush=True)

    result = run_campaign(args.out, list(KINDS), args.samples, seed=args.seed,
                          space=args.space, device=args.device, plan=plan,
                          max_seconds=60.0 * args.minutes, progress=progress,
                          backend="torch", precisions=args.precisions.split(","))
    print({k: v for k, v in result.as_dict().items() if k != "device"})
    print({k: v for k, v in result.device.items()})
    import pandas as pd

    table = pd.read_csv(args.out)
    summary = table.groupby(["layer", "precision", "status"]).size().unstack(fill_value=0)
    print(summary.to_string())
    failed = table[table["status"] != "ok"]["error"].astype(str).str[:80].value_counts().head(10)
    print(failed.to_string())


if __name__ == "__main__":
    main()
