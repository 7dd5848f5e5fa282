"""End-to-end accuracy on the real logs, measured on runs the model did not train on.

1. MLPerf: per system, fit on ``result_0`` and ``result_1``, predict the total time (train +
   evaluation phases) of ``result_2..4`` from their iteration counts; compare with the naive
   baseline "mean seconds per iteration of the training runs x iterations".
2. Caffe CaffeNet-128: fit on the batch-512 log, predict the batch-128 log's training time,
   and the other way round.

    .venv/bin/python benchmarks/e2e_accuracy.py [--logs ../shared/data/logs] \
        [--out docs/e2e-accuracy.md]
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ingest.pipeline import Overrides, ingest_paths
from ingest.store import Store
from models.dataset import progress_points
from models.phase_model import PhaseTimeModel

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOGS = ROOT.parent / "shared" / "data" / "logs"
UNKNOWN_GPU = "unknown-gpu-x1"


def run_number(source: str) -> int | None:
    m = re.search(r"result_(\d+)\.txt$", source)
    return int(m.group(1)) if m else None


def fit(points: pd.DataFrame, weighting: str = "absolute") -> PhaseTimeModel:
    return PhaseTimeModel(weighting=weighting).fit(
        points[["iterations", "batch_size"]], points["seconds"], points["run_id"]
    )


def finals(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["final"]]


def mlperf_table(points: pd.DataFrame, weighting: str = "absolute") -> pd.DataFrame:
    rows = []
    mlperf = points[points["source"].str.contains("mlperf")].copy()
    mlperf["n"] = mlperf["source"].map(run_number)
    for (deployment, stack), sys_pts in mlperf.groupby(["deployment", "stack"]):
        train_runs = sys_pts[sys_pts["n"].isin([0, 1])]
        test_runs = sys_pts[~sys_pts["n"].isin([0, 1])]
        if train_runs.empty or test_runs.empty:
            continue
        models = {
            ph: fit(train_runs[train_runs["phase"] == ph], weighting)
            for ph in ("train", "test")
            if (train_runs["phase"] == ph).any()
        }
        tr_final = finals(train_runs)
        naive_rate = (
            tr_final.groupby("run_id")["seconds"].sum()
            / tr_final[tr_final["phase"] == "train"].groupby("run_id")["iterations"].sum()
        ).mean()
        for _, run_pts in test_runs.groupby("run_id"):
            fin = finals(run_pts).set_index("phase")
            actual = float(fin["seconds"].sum())
            pred = low = high = 0.0
            for ph, row in fin.iterrows():
                if ph not in models:
                    continue
                x = pd.DataFrame(
                    {"iterations": [row["iterations"]], "batch_size": [row["batch_size"]]}
                )
                out = models[ph].predict_interval(x).iloc[0]
                pred += float(out["seconds"])
                low += float(out["low"])
                high += float(out["high"])
            naive = naive_rate * float(fin.loc["train", "iterations"])
            rows.append(
                {
                    "system": f"{deployment} ({stack or 'stack n/a'})",
                    "run": int(run_pts["n"].iloc[0]),
                    "actual_s": actual,
                    "model_s": pred,
                    "naive_s": naive,
                    "model_ape_%": 100 * abs(pred - actual) / actual,
                    "naive_ape_%": 100 * abs(naive - actual) / actual,
                    "in_90%_interval": bool(low <= actual <= high),
                }
            )
    return pd.DataFrame(rows)


def caffe_table(points: pd.DataFrame) -> pd.DataFrame:
    caffenet = points[(points["network"] == "caffenet") & (points["phase"] == "train")]
    rows = []
    batches = sorted(caffenet["batch_size"].unique())
    for train_b in batches:
        for test_b in batches:
            if train_b == test_b:
                continue
            model = fit(caffenet[caffenet["batch_size"] == train_b])
            tr_final = finals(caffenet[caffenet["batch_size"] == train_b])
            rate = (tr_final["seconds"] / tr_final["iterations"]).mean()
            for _, row in finals(caffenet[caffenet["batch_size"] == test_b]).iterrows():
                x = pd.DataFrame({"iterations": [row["iterations"]], "batch_size": [test_b]})
                out = model.predict_interval(x).iloc[0]
                actual = float(row["seconds"])
                rows.append(
                    {
                        "fit on batch": int(train_b),
                        "predict batch": int(test_b),
                        "iterations": int(row["iterations"]),
                        "actual_s": actual,
                        "model_s": float(out["seconds"]),
                        "interval": f"{out['low']:.0f}–{out['high']:.0f}",
                        "model_ape_%": 100 * abs(out["seconds"] - actual) / actual,
                        "naive_per_iteration_ape_%": 100
                        * abs(rate * row["iterations"] - actual)
                        / actual,
                        "form": model.form_,
                    }
                )
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/acc.db")
        report = ingest_paths(store, [str(args.logs)])
        # The CaffeNet logs name no GPU: ingest them on a placeholder deployment (one GPU).
        caffe = [e.source for e in report.rejected if "accelerators" in e.reason]
        retry = ingest_paths(store, caffe, Overrides(deployment=UNKNOWN_GPU))
        report.rejected = [e for e in report.rejected if e.source not in caffe] + retry.rejected
        report.added += retry.added
        points = progress_points(store)
    ml = mlperf_table(points)
    if not ml.empty:
        ml.insert(5, "model_relw_s", mlperf_table(points, "relative")["model_s"])
        ml.insert(
            7,
            "model_relw_ape_%",
            100 * (ml["model_relw_s"] - ml["actual_s"]).abs() / ml["actual_s"],
        )
    cf = caffe_table(points)
    lines = [
        f"Ingested {len(report.added)} files ({len(report.duplicates)} duplicates by content, "
        f"{len(report.rejected)} rejected).",
        "",
        "## MLPerf: fit on result_0-1 of a system, predict result_2-4 (total train + eval seconds)",
        "",
        "model = default fit (absolute weighting); model_relw = rows weighted 1/t; naive = mean "
        "seconds per training iteration of result_0-1 x iterations.",
        "",
        ml.to_markdown(index=False, floatfmt=".1f") if not ml.empty else "(no MLPerf systems)",
        "",
    ]
    if not ml.empty:
        per_sys = ml.groupby("system")[["model_ape_%", "model_relw_ape_%", "naive_ape_%"]].mean()
        lines += [
            per_sys.to_markdown(floatfmt=".2f"),
            "",
            f"**Overall MAPE: model {ml['model_ape_%'].mean():.2f} % (relative weighting "
            f"{ml['model_relw_ape_%'].mean():.2f} %), naive mean "
            f"seconds/iteration {ml['naive_ape_%'].mean():.2f} %** "
            f"({len(ml)} held-out runs, {ml['system'].nunique()} systems; median APE model "
            f"{np.median(ml['model_ape_%']):.2f} %, naive {np.median(ml['naive_ape_%']):.2f} %); "
            f"{ml['in_90%_interval'].mean():.0%} of held-out totals inside the 90 % interval",
            "",
        ]
    lines += [
        "## Caffe CaffeNet-128: fit on one batch size, predict the other (train phase)",
        "",
        cf.to_markdown(index=False, floatfmt=".1f") if not cf.empty else "(no CaffeNet logs)",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(
            "# End-to-end accuracy (generated by benchmarks/e2e_accuracy.py)\n\n" + text + "\n"
        )


if __name__ == "__main__":
    main()
