"""Per-op accuracy of the roofline-efficiency predictor on GPUs it did not see.

1. **NeuSight, leave one GPU out**: for each NeuSight GPU (P100, P4, T4, V100, A100), fit on
   every other GPU's rows (Justus and NeuSight; the held-out chip leaves both tables, so the
   Justus V100/P100 go too) and predict that GPU's conv, linear, element-wise, LayerNorm and
   softmax rows. Baselines on the same rows: the plain roofline bound (no learning) and the
   roofline with one efficiency per op fitted on the training GPUs (median ratio).
2. **Justus, leave one GPU out** (conv and dense per GPU, same protocol).
3. **Justus split**: 80/20 random split of every GPU's rows (NeuSight rows all in training);
   test MAPE per GPU and layer — the paper's protocol.

    .venv/bin/python benchmarks/layerwise_ops.py [--justus-rows 120000] \
        [--out docs/layerwise-ops.md]

Figures: MAPE and median absolute percentage error (%), coverage of the 90 % interval (%).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from layerwise.corpora.tables import load_justus, load_neusight
from layerwise.efficiency import EfficiencyPredictor, chip_of
from layerwise.roofline import physics_frame

ROOT = Path(__file__).resolve().parents[1]
NEUSIGHT_ANCHORS = {"linear": "13.9 % (roofline 27.8 %)", "elementwise": "19.3 % (26.1 %)",
                    "softmax": "13.9 % (32.4 %)"}


def op_group(rows: pd.DataFrame) -> pd.Series:
    """conv / linear / elementwise / ln / softmax for NeuSight rows; the kind otherwise."""
    op = rows.get("op", pd.Series("", index=rows.index)).astype(str)
    layer = rows["layer"].astype(str)
    out = layer.copy()
    out[op.isin(["add", "mul", "div", "pow", "relu", "gelu", "tanh"])] = "elementwise"
    out[layer.eq("dense") & op.eq("linear")] = "linear"
    return out


def scores(true: np.ndarray, pred: np.ndarray, low: np.ndarray | None = None,
           high: np.ndarray | None = None) -> dict[str, float]:
    ape = np.abs(pred - true) / true * 100.0
    out = {"mape": float(np.mean(ape)), "median_ape": float(np.median(ape)), "n": len(true)}
    if low is not None and high is not None:
        out["coverage"] = float(np.mean((true >= low) & (true <= high)) * 100.0)
    return out


def leave_one_out(rows: pd.DataFrame, ms: pd.Series, test_sel: pd.Series, chips: pd.Series,
                  held: list[str], params: dict) -> list[dict]:
    records = []
    for chip in held:
        start = time.perf_counter()
        train = chips != chip
        test = test_sel & (chips == chip)
        model = EfficiencyPredictor(**params).fit(rows.loc[train], ms.loc[train])
        out = model.predict(rows.loc[test])
        bound = physics_frame(rows.loc[test])["bound_ms"]
        groups = op_group(rows.loc[test])
        tr_bound = physics_frame(rows.loc[train])["bound_ms"]
        tr_ratio = np.log(ms.loc[train] / tr_bound)
        tr_groups = op_group(rows.loc[train])
        for group in sorted(groups.unique()):
            g = (groups == group).to_numpy()
            true = ms.loc[test].to_numpy()[g]
            eff = (float(np.exp(np.median(tr_ratio[tr_groups == group])))
                   if (tr_groups == group).any() else 1.0)
            records.append({
                "gpu_chip": chip, "op": group,
                **scores(true, out["predicted_ms"].to_numpy()[g], out["low_ms"].to_numpy()[g],
                         out["high_ms"].to_numpy()[g]),
                "roofline_mape": scores(true, bound.to_numpy()[g])["mape"],
                "fitted_roofline_mape": scores(true, bound.to_numpy()[g] * eff)["mape"],
            })
        print(f"  {chip}: {time.perf_counter() - start:.0f} s", flush=True)
    return records


def table(records: list[dict], cols: list[str]) -> str:
    frame = pd.DataFrame(records)
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    lines = []
    for _, r in frame.iterrows():
        lines.append("| " + " | ".join(
            f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--justus-rows", type=int, default=120000,
                    help="Justus rows used (random subsample; 0 = all 325k)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "layerwise-ops.md"))
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--parts", default="neusight,justus,split")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    j_rows, j_ms = load_justus()
    if args.justus_rows and len(j_rows) > args.justus_rows:
        pick = np.sort(rng.choice(len(j_rows), args.justus_rows, replace=False))
        j_rows, j_ms = j_rows.iloc[pick], j_ms.iloc[pick]
    n_rows, n_ms = load_neusight()
    rows = pd.concat([j_rows, n_rows])
    ms = pd.concat([j_ms, n_ms])
    chips = rows["gpu"].astype(str).map(chip_of)
    is_neusight = rows["framework"].eq("pytorch")
    params = {"max_iter": args.max_iter, "calibration_rows": 15000}
    parts = set(args.parts.split(","))
    doc = ["# Layer predictor v2: per-op accuracy on unseen GPUs\n",
           f"Command: `.venv/bin/python benchmarks/layerwise_ops.py --justus-rows "
           f"{args.justus_rows} --max-iter {args.max_iter}`\n",
           f"Rows: {len(j_rows)} Justus (subsample), {len(n_rows)} NeuSight.\n"]
    if "neusight" in parts:
        print("NeuSight leave-one-GPU-out", flush=True)
        held = sorted(chips[is_neusight].unique())
        rec = leave_one_out(rows, ms, is_neusight, chips, held, params)
        frame = pd.DataFrame(rec)
        summary = frame.groupby("op").apply(
            lambda g: pd.Series({c: np.average(g[c], weights=g["n"]) for c in
                                 ("mape", "median_ape", "coverage", "roofline_mape",
                                  "fitted_roofline_mape")}), include_groups=False).reset_index()
        doc.append("\n## 1. NeuSight GPUs, leave one GPU out (per op)\n\n")
        doc.append(table(summary.to_dict("records"), ["op", "mape", "median_ape", "coverage",
                                                      "roofline_mape", "fitted_roofline_mape"]))
        doc.append("\nNeuSight (ASPLOS'25) on its own unseen GPUs: " + "; ".join(
            f"{k} {v}" for k, v in NEUSIGHT_ANCHORS.items()) + ".\n\nPer GPU:\n\n")
        doc.append(table(rec, ["gpu_chip", "op", "mape", "median_ape", "coverage",
                               "roofline_mape", "n"]))
    if "justus" in parts:
        print("Justus leave-one-GPU-out", flush=True)
        held = sorted(chips[~is_neusight].unique())
        rec = leave_one_out(rows, ms, ~is_neusight, chips, held, params)
        doc.append("\n## 2. Justus GPUs, leave one GPU out (conv, dense)\n\n")
        doc.append(table(rec, ["gpu_chip", "op", "mape", "median_ape", "coverage",
                               "roofline_mape", "n"]))
    if "split" in parts:
        print("Justus 80/20 split", flush=True)
        test = (~is_neusight) & pd.Series(rng.random(len(rows)) < 0.2, index=rows.index)
        model = EfficiencyPredictor(**{**params, "max_iter": args.max_iter * 2}).fit(
            rows.loc[~test], ms.loc[~test])
        out = model.predict(rows.loc[test])
        rec = []
        for (gpu, layer), idx in rows.loc[test].groupby(["gpu", "layer"]).groups.items():
            rec.append({"gpu": gpu, "layer": layer, **scores(
                ms.loc[idx].to_numpy(), out.loc[idx, "predicted_ms"].to_numpy(),
                out.loc[idx, "low_ms"].to_numpy(), out.loc[idx, "high_ms"].to_numpy())})
        doc.append("\n## 3. Justus 80/20 split (seen GPUs)\n\n")
        doc.append(table(rec, ["gpu", "layer", "mape", "median_ape", "coverage", "n"]))
    Path(args.out).write_text("".join(doc))
    print("".join(doc))


if __name__ == "__main__":
    main()
