"""Whole networks on the shared Lambda logs, leave one GPU out, fp32 and fp16, 1 GPU.

For each GPU chip (V100, GTX 1080 Ti, RTX 2080 Ti, Quadro RTX 8000): the layer predictor is
one trained without that chip (the 2080 Ti and RTX 8000 are in no layer table, V100 and 1080 Ti
are, so two extra predictors are fitted without them), and the composition (scale per
precision class, per-kernel and per-step overheads) is fitted on the other three GPUs' networks.
Targets: tf_cnn_benchmarks, synthetic data, training, no XLA, median over systems.

    .venv/bin/python benchmarks/layerwise_networks.py [--justus-rows 120000] \
        [--out docs/layerwise-networks.md]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from layerwise.corpora.network_fit import lambda_targets, leave_one_gpu_out, network_sums
from layerwise.corpora.tables import load_justus, load_measured, load_neusight, shared_data_dir
from layerwise.efficiency import EfficiencyPredictor, chip_of

ROOT = Path(__file__).resolve().parents[1]


def training_rows(justus_rows: int, seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """Justus (subsampled to ``justus_rows``; 0 = all), NeuSight and this project's measured
    (H100) rows with their ms."""
    j_rows, j_ms = load_justus(max_rows=justus_rows, seed=seed)
    n_rows, n_ms = load_neusight()
    m_rows, m_ms = load_measured()
    return pd.concat([j_rows, n_rows, m_rows]), pd.concat([j_ms, n_ms, m_ms])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--justus-rows", type=int, default=120000)
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--framework", default="tensorflow")
    ap.add_argument("--out", default=str(ROOT / "docs" / "layerwise-networks.md"))
    args = ap.parse_args()
    rows, ms = training_rows(args.justus_rows)
    chips = rows["gpu"].astype(str).map(chip_of)
    targets = lambda_targets(shared_data_dir() / "lambda")
    params = {"max_iter": args.max_iter, "unseen_interval_refits": False}
    predictors = {}
    start = time.perf_counter()
    predictors["*"] = EfficiencyPredictor(**params).fit(rows, ms)
    for chip in sorted(set(targets["chip"]) & set(chips)):
        keep = chips != chip
        predictors[chip] = EfficiencyPredictor(**params).fit(rows.loc[keep], ms.loc[keep])
    print(f"fitted {len(predictors)} layer predictors in {time.perf_counter() - start:.0f} s")
    sums = network_sums(targets, predictors, framework=args.framework)
    loo = leave_one_gpu_out(sums)
    cols = ["gpu", "network", "precision", "batch_per_gpu", "step_ms", "pred_ms", "ape",
            "covered"]
    per = loo[cols].sort_values(["precision", "network", "gpu"])
    summary = loo.groupby(["precision"]).agg(mape=("ape", "mean"), median_ape=("ape", "median"),
                                             coverage=("covered", "mean"), n=("ape", "size"))
    by_gpu = loo.groupby(["precision", "gpu"]).agg(mape=("ape", "mean"),
                                                   coverage=("covered", "mean"))
    by_net = loo.groupby(["precision", "network"]).agg(mape=("ape", "mean"),
                                                       coverage=("covered", "mean"))
    doc = ["# Layerwise v2: whole networks, leave one GPU out (Lambda tf_cnn_benchmarks)\n\n",
           f"Command: `.venv/bin/python benchmarks/layerwise_networks.py --justus-rows "
           f"{args.justus_rows} --max-iter {args.max_iter} --framework {args.framework}`\n\n",
           "## Summary (MAPE %, median APE %, coverage of the 90 % interval)\n\n",
           summary.round(3).to_markdown(), "\n\n## Per GPU\n\n", by_gpu.round(3).to_markdown(),
           "\n\n## Per network\n\n", by_net.round(3).to_markdown(),
           "\n\n## Every target\n\n", per.round(1).to_markdown(index=False), "\n"]
    Path(args.out).write_text("".join(doc))
    print("".join(doc[:8]))


if __name__ == "__main__":
    main()
