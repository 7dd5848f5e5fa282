"""What measuring a new GPU buys: the H100 campaign folded into the layer predictor.

Four questions, each answered on data the model did not see:

1. **H100, never measured** (leave-H100-out): a predictor trained on Justus + NeuSight only,
   on every H100 row, per kind and precision.
2. **H100, measured** (held-out shapes): trained with 70 % of the H100 shapes (all four
   precisions of a shape stay on one side), error on the other 30 %.
3. **A100, never measured, with and without the H100 rows**: NeuSight's A100-40GB rows left
   out; does the H100 campaign make an unseen modern GPU better?
4. **Whole networks on the H100** (torchvision, PyTorch 2.11, batch 64, four precisions):
   layerwise forecasts (zoo decomposition) without the H100 rows and the TensorFlow composition,
   and with them and a PyTorch composition fitted leaving the network out.

    .venv/bin/python benchmarks/gpu_fold_in.py [--justus-rows 80000] [--out docs/lab/gpu-fold-in.md]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from lib import REPO as ROOT

import layerwise.forecast  # noqa: F401  (load every module now, not mid-run)
from layerwise.compose import Composition
from layerwise.corpora.network_fit import (
    lambda_targets,
    leave_one_gpu_out,
    measured_targets,
    network_sums,
)
from layerwise.corpora.tables import (
    load_justus,
    load_measured,
    load_neusight,
    shared_data_dir,
)
from layerwise.efficiency import EfficiencyPredictor, chip_of

H100 = "H100 SXM5"


def fit(parts: list[tuple[pd.DataFrame, pd.Series]], max_iter: int) -> EfficiencyPredictor:
    rows = pd.concat([p[0] for p in parts])
    ms = pd.concat([p[1] for p in parts])
    return EfficiencyPredictor(max_iter=max_iter, unseen_interval_refits=False).fit(rows, ms)


def errors(model: EfficiencyPredictor, rows: pd.DataFrame, ms: pd.Series) -> pd.DataFrame:
    pred = model.predict(rows)
    out = rows[["layer", "precision", "optimizer"]].copy()
    out["ape"] = (pred["predicted_ms"].to_numpy() / ms.to_numpy() - 1.0).__abs__() * 100.0
    out["covered"] = ((ms.to_numpy() >= pred["low_ms"].to_numpy())
                      & (ms.to_numpy() <= pred["high_ms"].to_numpy()))
    out["pass"] = np.where(out["optimizer"].astype(str).eq("none"), "forward", "training")
    return out


def table(err: pd.DataFrame, by: str) -> pd.DataFrame:
    return err.groupby(by).agg(rows=("ape", "size"), mape=("ape", "mean"),
                               median=("ape", "median"), coverage=("covered", "mean"))


def networks(model: EfficiencyPredictor, own: bool) -> pd.DataFrame:
    """Forecasts of the H100 torchvision networks with ``model``: with the TensorFlow (Lambda)
    composition, or (``own``) a PyTorch composition fitted on the other networks' H100 steps
    (leave one network out)."""
    targets = lambda_targets(shared_data_dir() / "lambda")
    comp = Composition().fit(network_sums(targets, model), targets["step_ms"])
    sums = network_sums(measured_targets(), model, framework="pytorch")
    if own:
        loo = leave_one_gpu_out(sums, by="network")
        sums["pred_ms"] = loo["pred_ms"]
    else:
        sums["pred_ms"] = [comp.step(r.sum_ms, r.low_ms, r.high_ms, int(r.kernels),
                                     r.precision_class)[0] for r in sums.itertuples()]
    sums["ape"] = (sums["pred_ms"] / sums["step_ms"] - 1.0).abs() * 100.0
    return sums


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--justus-rows", type=int, default=80000)
    ap.add_argument("--max-iter", type=int, default=200)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "lab" / "gpu-fold-in.md")
    args = ap.parse_args()
    started = time.perf_counter()
    base = [load_justus(max_rows=args.justus_rows), load_neusight()]
    h_rows, h_ms = load_measured()
    shape = (pd.to_numeric(h_rows["index"]) // 4).to_numpy()
    test_shapes = np.random.default_rng(0).random(shape.max() + 1) < 0.3
    test = test_shapes[shape]
    lines = ["# The H100 campaign folded into the layer predictor", "",
             f"`{' '.join(['.venv/bin/python benchmarks/gpu_fold_in.py', '--justus-rows', str(args.justus_rows), '--max-iter', str(args.max_iter)])}`",  # noqa: E501
             "", f"H100 rows: {len(h_rows)} ({int(test.sum())} in the held-out 30 % of shapes); "
             f"Justus rows: {len(base[0][0])}, NeuSight rows: {len(base[1][0])}.", ""]

    without = fit(base, args.max_iter)
    e1 = errors(without, h_rows, h_ms)
    with_h = fit([*base, (h_rows.loc[~test], h_ms.loc[~test])], args.max_iter)
    e2 = errors(with_h, h_rows.loc[test], h_ms.loc[test])
    e1_test = e1.loc[test]
    lines += ["## 1-2. H100 layers: never measured vs measured (held-out shapes)", "",
              "MAPE % on the same held-out 30 % of shapes; 'never' = trained without any "
              "H100 row, 'measured' = trained with the other 70 %.", ""]
    for by in ("layer", "precision", "pass"):
        t = pd.concat({"never": table(e1_test, by), "measured": table(e2, by)}, axis=1)
        lines += [t.round(3).to_markdown(), ""]
    print("\n".join(lines), flush=True)
    lines += [f"All H100 rows, never measured: MAPE {e1['ape'].mean():.1f} %, median "
              f"{e1['ape'].median():.1f} %, coverage {e1['covered'].mean():.0%}. "
              f"Held-out shapes, measured: MAPE {e2['ape'].mean():.1f} %, median "
              f"{e2['ape'].median():.1f} %, coverage {e2['covered'].mean():.0%}.", ""]

    n_rows, n_ms = base[1]
    a100 = n_rows["gpu"].map(chip_of).eq(chip_of("A100 PCIe 40GB")).to_numpy()
    if a100.any():
        no_a100 = [base[0], (n_rows.loc[~a100], n_ms.loc[~a100])]
        e3 = errors(fit(no_a100, args.max_iter), n_rows.loc[a100], n_ms.loc[a100])
        e4 = errors(fit([*no_a100, (h_rows, h_ms)], args.max_iter), n_rows.loc[a100],
                    n_ms.loc[a100])
        t = pd.concat({"without H100": table(e3, "layer"), "with H100": table(e4, "layer")},
                      axis=1)
        lines += ["## 3. A100 (NeuSight, PyTorch 2.1 forward fp32) never measured", "",
                  t.round(3).to_markdown(), "",
                  f"All A100 rows: MAPE {e3['ape'].mean():.1f} % without the H100 campaign, "
                  f"{e4['ape'].mean():.1f} % with it.", ""]

    n1, n2 = networks(without, own=False), networks(with_h, own=True)
    net = n1[["network", "batch_per_gpu", "precision", "step_ms"]].copy()
    net["never_ms"], net["measured_ms"] = n1["pred_ms"], n2["pred_ms"]
    net["never_ape"], net["measured_ape"] = n1["ape"], n2["ape"]
    lines += ["## 4. Whole networks on the H100 (PyTorch 2.11, torchvision, batch 32/64/128)", "",
              "'never': layer model without H100 rows + the TensorFlow (Lambda) composition, as "
              "before the campaign; 'measured': layer model with 70 % of the H100 shapes + a "
              "PyTorch composition fitted on the other six networks (leave one network out).",
              "",
              net.round(2).to_markdown(index=False), "",
              net.groupby("precision")[["never_ape", "measured_ape"]].mean().round(1)
              .to_markdown(), "",
              f"MAPE over all {len(net)}: never measured {net['never_ape'].mean():.1f} %, "
              f"measured {net['measured_ape'].mean():.1f} %.", "",
              f"Run time {time.perf_counter() - started:.0f} s."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
