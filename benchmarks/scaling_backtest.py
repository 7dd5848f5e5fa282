"""The layerwise and hybrid candidates' bias on multi-GPU runs, with TensorFlow's old silent
data-parallel default (``replicated``) and with ``auto`` (``models.scaling.STRATEGIES``).

Runs the store's backtest (``jobcast.service.engine.backtest``: every system's next runs asked as a
user asks, never the stack; a request names no framework, so ``tensorflow``) twice on the same
tree, once with ``STRATEGIES["tensorflow"]`` set to ``replicated`` (before) and once as shipped
(after), and summarises the multi-GPU rows of the ``layerwise`` and ``hybrid`` kinds per source
(MLPerf systems are ``submitter/system``; the Lambda tf_cnn_benchmarks systems, TensorFlow 1.15
and 2.2 with replicated variables, are the others), GPU count and whether the ask stated the
precision: median actual / forecast (1.0 is right) and MAPE.

    .venv/bin/python benchmarks/scaling_backtest.py [--store URL] [--max-systems N]
        [--out /tmp/scaling_backtest.csv]   (then benchmarks/scaling.py --backtest that CSV)
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd


def summarise(rows: pd.DataFrame, label: str) -> pd.DataFrame:
    rows = rows[rows["kind"].isin(["layerwise", "hybrid"]) & (rows["devices"] != "1")].copy()
    rows["source"] = np.where(rows["target_system"].str.contains("/"), "MLPerf", "Lambda")
    rows["precision"] = np.where(rows["ask"].str.contains("precision"), "stated", "unstated")
    out = rows.groupby(["source", "kind", "devices", "precision"]).agg(
        n=("error", "size"),
        actual_over_forecast=("error", lambda e: float(np.exp(np.median(e)))),
        mape=("error", lambda e: float(np.mean(np.abs(np.expm1(-np.asarray(e)))) * 100)))
    return out.assign(setting=label).reset_index()


def main() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="sqlite:////work/stores/prior3.db")
    ap.add_argument("--max-systems", type=int, default=None)
    ap.add_argument("--out", default="/tmp/scaling_backtest.csv")
    args = ap.parse_args()
    import models.scaling as scaling
    from ingest.store import Store
    from jobcast.service.engine.backtest import backtest
    from models.dataset import collect_points
    from models.history import run_table

    store = Store(args.store)
    points, _ = collect_points(store)
    history = run_table(store)
    shipped = scaling.STRATEGIES["tensorflow"]
    parts = []
    try:
        for label, strategy in (("before", "replicated"), ("after", shipped)):
            scaling.STRATEGIES["tensorflow"] = strategy
            rows = backtest(points, history, max_systems=args.max_systems)
            parts.append(summarise(rows, f"{label}: tensorflow -> {strategy}"))
    finally:
        scaling.STRATEGIES["tensorflow"] = shipped
    table = pd.concat(parts, ignore_index=True)
    table.to_csv(args.out, index=False)
    print(table.round(3).to_markdown(index=False))


if __name__ == "__main__":
    main()
