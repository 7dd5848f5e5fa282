"""Profiler traces -> layer rows -> ``jobcast layerwise train`` -> held-out rows, beside a
naive rule.

Reads Kineto traces (``benchmarks/kineto_capture.py`` writes them; ``--capture`` runs it here
on the CPU first), turns them into layer rows (:func:`layerwise.kineto.trace_rows`), holds out
every row of the configurations with image side ``--held-out-image`` (the network at an input
size the predictor never saw), trains the layer predictor on the rest with the real command
(``jobcast layerwise train --models gbt,linear``) and predicts the held-out rows with
``jobcast layerwise predict``. The naive rule: a row's time = its work in FLOPs (the kind's
forward FLOPs, x3 for a training row) x the median milliseconds per FLOP of the training rows of
its layer kind and optimizer. Prints MAPE of both (and per kind) as JSON.

    python benchmarks/kineto_layer_predictor.py --traces DIR [--capture] [--batches 2,4,8]
        [--images 48,64,96] [--held-out-image 64] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from lib import REPO

from layerwise.kineto import trace_rows
from layerwise.layers import KINDS

TRAIN_WORK = 3.0  # a training row: forward + input and weight gradients
MIN_ROWS = 20  # LayerPredictor(min_rows=20): fewer rows of a layer type cannot be fitted


def work_flops(rows: pd.DataFrame) -> pd.Series:
    """FLOPs of each row's work (forward FLOPs of its kind, x3 for training rows)."""
    flops = [KINDS[r["layer"]].flops(r) for r in rows.to_dict("records")]
    factor = np.where(rows["optimizer"].astype(str) == "none", 1.0, TRAIN_WORK)
    return pd.Series(np.asarray(flops, float) * factor, index=rows.index)


def naive(train: pd.DataFrame, test: pd.DataFrame) -> pd.Series:
    """Median ms per FLOP of the training rows of the same kind and optimizer (all rows where
    a kind has none)."""
    rate = train["time_ms_median"] / work_flops(train).clip(lower=1.0)
    by = rate.groupby([train["layer"], train["optimizer"]]).median()
    overall = float(rate.median())
    per = [by.get((r["layer"], r["optimizer"]), overall) for r in test.to_dict("records")]
    return work_flops(test) * np.asarray(per, float)


def mape(true: pd.Series, pred: pd.Series) -> float:
    return float(np.mean(np.abs(pred.to_numpy() - true.to_numpy()) / true.to_numpy()) * 100)


def rows_by_image(traces: list[Path]) -> tuple[pd.DataFrame, str, int, dict]:
    """Rows of each trace with the network's input side (``image``, from the file name
    ``resnet18_b<B>_i<S>``), the device, the layer occurrences and the skipped ops."""
    frames, device, count, skipped = [], "", 0, {}
    for path in traces:
        result = trace_rows([path])
        side = int(path.name.split("_i")[1].split(".")[0])
        frames.append(result.rows.assign(image=side))
        device, count = result.device, count + result.occurrences
        for op, n in result.skipped.items():
            skipped[op] = skipped.get(op, 0) + n
    return pd.concat(frames, ignore_index=True), device, count, skipped


KEY = ["layer", "batchsize", "matsize", "kernelsize", "channels_in", "channels_out", "strides",
       "padding", "dim_input", "dim_output", "pool_type", "activation", "optimizer"]


def evaluate(traces: list[Path], work: Path, held_out_image: int, gbt_iter: int = 300) -> dict:
    """Train on all rows but the held-out image side, predict those (module doc); held-out
    rows whose configuration also occurs at another side (the classifier head) are dropped."""
    rows, device, occurrences, skipped = rows_by_image(traces)
    key = rows.reindex(columns=KEY).map(str).agg("|".join, axis=1)
    test_mask = rows["image"] == held_out_image
    train, test = rows[~test_mask], rows[test_mask & ~key.isin(set(key[~test_mask]))]
    counts = train["layer"].value_counts()
    kept = set(counts[counts >= MIN_ROWS].index)  # the predictor's minimum per layer type
    left_out = sorted(set(rows["layer"]) - kept)
    train, test = train[train["layer"].isin(kept)], test[test["layer"].isin(kept)]
    work.mkdir(parents=True, exist_ok=True)
    train.to_csv(work / "train.csv", index=False)
    test.to_csv(work / "heldout.csv", index=False)
    jobcast = [sys.executable, "-m", "jobcast"]
    subprocess.run([*jobcast, "layerwise", "train", "--data", str(work / "train.csv"),
                    "--out", str(work / "model"), "--models", "gbt,linear",
                    "--gbt-iter", str(gbt_iter), "--threads", "1", "--json"],
                   check=True, capture_output=True, cwd=REPO)
    subprocess.run([*jobcast, "layerwise", "predict", "--model", str(work / "model"),
                    "--data", str(work / "heldout.csv"), "--out", str(work / "pred.csv"),
                    "--json"], check=True, capture_output=True, cwd=REPO)
    pred = pd.read_csv(work / "pred.csv")
    true = test["time_ms_median"].reset_index(drop=True)
    model = pred["predicted_ms"]
    rule = naive(train, test).reset_index(drop=True)
    kinds = {}
    for kind, idx in test.reset_index(drop=True).groupby("layer").groups.items():
        kinds[kind] = {"rows": len(idx), "predictor_mape": mape(true[idx], model[idx]),
                       "naive_mape": mape(true[idx], rule[idx])}
    return {"device": device, "rows": len(rows), "train_rows": len(train),
            "heldout_rows": len(test), "held_out_image": held_out_image,
            "kinds_left_out": left_out,
            "occurrences": occurrences, "skipped_ops": skipped,
            "predictor_mape": mape(true, model), "naive_mape": mape(true, rule),
            "winner": "predictor" if mape(true, model) < mape(true, rule) else "naive",
            "per_kind": kinds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", required=True, type=Path)
    parser.add_argument("--capture", action="store_true", help="capture CPU traces first")
    parser.add_argument("--batches", default="2,4,8")
    parser.add_argument("--images", default="48,64,96")
    parser.add_argument("--held-out-image", type=int, default=64)
    parser.add_argument("--work", type=Path, default=Path("/tmp/kineto_layer_predictor"))
    parser.add_argument("--gbt-iter", type=int, default=300)
    args = parser.parse_args()
    if args.capture:
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "kineto_capture.py"),
                        "--out", str(args.traces), "--batches", args.batches,
                        "--images", args.images, "--threads", "1"], check=True, cwd=REPO)
    traces = sorted(args.traces.glob("resnet18_*.json*"))
    print(json.dumps(evaluate(traces, args.work, args.held_out_image, args.gbt_iter), indent=1))


if __name__ == "__main__":
    main()
