"""Data-parallel scaling on the shared Lambda logs, leave one GPU model out.

Targets: tf_cnn_benchmarks training, synthetic data, replicated variables, no XLA, 2/4/8 GPUs;
the step time at a fixed per-GPU batch. For each GPU model, :class:`models.scaling.
DataParallelScaling` is fitted on the other models' runs and predicts this one's N-GPU steps:

* ``history``: from the same system's measured 1-GPU step (the end-to-end case);
* ``layerwise``: from the layerwise 1-GPU forecast (no history; the shipped predictor), the
  scaling fitted as above;
* ``naive``: the 1-GPU step unchanged.

Gradients: the network's parameters (zoo spec) x bytes of the precision (tf_cnn_benchmarks
sends fp16 gradients in fp16); links from the system name (NVLink) or the catalog defaults.

    .venv/bin/python benchmarks/scaling.py [--out docs/scaling.md] [--save-model]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from fleet.deployment import Deployment
from layerwise.corpora.lambda_runs import read_lambda
from layerwise.corpora.network_fit import synthetic_training
from layerwise.corpora.tables import shared_data_dir
from layerwise.efficiency import chip_of
from layerwise.forecast import forecast_network
from layerwise.network import decompose
from models.scaling import DataParallelScaling, allreduce_ms, weight_tensors

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["system", "gpu", "precision", "network", "batch_per_gpu"]


def targets(root: Path) -> pd.DataFrame:
    frame, _ = read_lambda(root)
    part = frame.loc[synthetic_training(frame)].assign(
        step_ms=lambda f: f["step_seconds"] * 1000.0)
    med = part.groupby([*KEYS, "gpu_count", "nvlink"], as_index=False)["step_ms"].median()
    one = med[med["gpu_count"] == 1][[*KEYS, "step_ms"]].rename(columns={"step_ms": "step1_ms"})
    out = med[med["gpu_count"] > 1].merge(one, on=KEYS)
    nets = {n: decompose(n, batch_size=1) for n in out["network"].unique()}
    params = {n: net.params for n, net in nets.items()}
    out["tensors"] = out["network"].map({n: weight_tensors(net) for n, net in nets.items()})
    ar = []
    for r in out.itertuples(index=False):
        dep = Deployment(str(r.gpu), int(r.gpu_count), 1, "nvlink" if r.nvlink else "")
        ar.append(allreduce_ms(params[r.network], str(r.precision), dep))
    out["allreduce_ms"] = ar
    out["gpus"] = out["gpu_count"]
    out["chip"] = out["gpu"].map(chip_of)
    return out


def leave_one_model_out(data: pd.DataFrame, step1: str) -> pd.Series:
    """N-GPU step from the ``step1`` column, by a model fitted (on measured 1-GPU steps) on the
    other GPU models' runs."""
    pred = pd.Series(np.nan, index=data.index)
    for chip in sorted(data["chip"].unique()):
        train = data["chip"] != chip
        model = DataParallelScaling().fit(data.loc[train], data.loc[train, "step_ms"])
        pred[~train] = model.predict(data.loc[~train].assign(step1_ms=data.loc[~train, step1]))
    return pred


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "docs" / "scaling.md"))
    ap.add_argument("--save-model", action="store_true",
                    help="fit on all runs and write models/data/scaling.json")
    args = ap.parse_args()
    data = targets(shared_data_dir() / "lambda")
    lw = {}
    for key in data[["gpu", "network", "precision", "batch_per_gpu"]].drop_duplicates() \
            .itertuples(index=False):
        out = forecast_network(key.network, device=str(key.gpu), batch_size=int(key.batch_per_gpu),
                               optimizer="momentum", precision=str(key.precision))
        lw[tuple(key)] = out["batch_seconds"] * 1000.0
    data["layerwise1_ms"] = [lw[(r.gpu, r.network, r.precision, r.batch_per_gpu)]
                             for r in data.itertuples(index=False)]
    data["pred_history"] = leave_one_model_out(data, "step1_ms")
    data["pred_layerwise"] = leave_one_model_out(data, "layerwise1_ms")
    for name, col in (("history", "pred_history"), ("layerwise", "pred_layerwise"),
                      ("naive", "step1_ms")):
        data[f"ape_{name}"] = (data[col] - data["step_ms"]).abs() / data["step_ms"] * 100
    table = data.groupby(["gpu", "precision"]).agg(
        runs=("step_ms", "size"), history=("ape_history", "mean"),
        layerwise=("ape_layerwise", "mean"), naive=("ape_naive", "mean")).round(1)
    overall = data[["ape_history", "ape_layerwise", "ape_naive"]].mean().round(1)
    full = DataParallelScaling().fit(data, data["step_ms"], residuals=np.log(
        data["step_ms"] / data["pred_history"]))
    doc = ["# Data-parallel scaling, leave one GPU model out (Lambda tf_cnn_benchmarks)\n\n",
           "Command: `.venv/bin/python benchmarks/scaling.py`\n\n",
           f"{len(data)} multi-GPU targets (2/4/8 GPUs, fp16/fp32, six networks). MAPE %:\n\n",
           table.to_markdown(), "\n\n",
           f"Overall: history {overall['ape_history']} %, layerwise {overall['ape_layerwise']} %,"
           f" naive (same step as 1 GPU) {overall['ape_naive']} %.\n\n",
           f"Fitted on all runs: overlap {full.overlap_:.2f}; per doubling of the GPUs: sync "
           f"{full.sync_['full']:.3f} / {full.sync_['half']:.3f} of the step and "
           f"{full.tensor_ms_['full']:.3f} / {full.tensor_ms_['half']:.3f} ms per weight "
           "tensor (fp32 / fp16).\n"]
    Path(args.out).write_text("".join(doc))
    print("".join(doc))
    if args.save_model:
        print("saved", full.save())


if __name__ == "__main__":
    main()
