"""Build the shipped selector prior (``models/data/selector_prior.json``) from a backtest of
the reference corpora, and print what each candidate kind scored.

The corpora (issue 35): MLPerf Training v0.6-v3.1, its CNN benchmarks (ResNet, SSD/RetinaNet,
Mask R-CNN, UNet3D), each system's first eight result files, with ``../shared`` logs and
Lambda; rounds v4.0 on are kept out for ``benchmarks/e2e_wallclock.py``. Export the rounds
from the mlcommons/training_results_vX.Y snapshots (``e2e_wallclock.export_round``, into
``/tmp/corpora-prior``), keep ``result_0`` .. ``result_7`` of each system (4,373 files,
``/tmp/corpora-trim``), then ingest into one store:

    S=sqlite:////tmp/prior.db
    .venv/bin/jobcast ingest /tmp/corpora-trim ../shared/data/logs ../shared/data/lambda \
        --store $S --workers 2
    nice .venv/bin/python benchmarks/selector_prior.py --store $S \
        [--rows /tmp/rows.csv] [--out models/data/selector_prior.json]

(Issue 22's prior held MLPerf ResNet v0.5-v4.0 only.) The 2026-12-03 fit: 74,143 candidate
forecasts in 240-640 s (load-dependent), 5,189 cells.

The backtest is ``jobcast.service.backtest`` with every system and history sizes 1, 2 and 3.
``--rows`` reuses a backtest already written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from ingest.store import Store
from jobcast.service.backtest import backtest, fit_selector
from models.dataset import collect_points
from models.history import run_table
from models.selector import PRIOR_PATH, RELATION_FIELDS


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    ape = 100 * np.abs(np.expm1(-rows["error"]))
    return (rows.assign(ape=ape).groupby(["kind", "system", "batch"])["ape"]
            .agg(forecasts="size", mape="mean", median="median").reset_index())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=False)
    ap.add_argument("--rows", type=Path, default=None, help="backtest rows CSV (read if it "
                    "exists, else written)")
    ap.add_argument("--out", type=Path, default=PRIOR_PATH)
    args = ap.parse_args()
    if args.rows and args.rows.exists():
        rows = pd.read_csv(args.rows, keep_default_na=False, na_values=[""])
    else:
        if not args.store:
            ap.error("give --store (or --rows with an existing backtest)")
        store = Store(args.store)
        started = time.perf_counter()
        points, _ = collect_points(store)
        rows = backtest(points, run_table(store),
                        progress=lambda d, t: print(f"\r{d}/{t} systems", end="", flush=True))
        print(f"\nbacktest: {len(rows)} candidate forecasts in "
              f"{time.perf_counter() - started:.0f} s")
        if args.rows:
            rows.to_csv(args.rows, index=False)
    for col in RELATION_FIELDS:
        rows[col] = rows[col].fillna("").astype(str)
    selector = fit_selector(rows)
    args.out.write_text(json.dumps(selector.to_dict(), separators=(",", ":"), allow_nan=False))
    print(f"selector prior: {selector.n_} errors, {sum(len(c) for c in selector.cells_.values())}"
          f" cells -> {args.out}")
    print(summary(rows).to_markdown(index=False, floatfmt=".2f"))


if __name__ == "__main__":
    main()
