"""Whole-network targets from the Lambda logs and the composition fit on them.

Targets (:func:`lambda_targets`): tf_cnn_benchmarks runs on 1 GPU, synthetic data, training,
replicated variables, no XLA, no distortions; the median step time over systems and
repetitions per (GPU, network, precision, batch per GPU). tf_cnn_benchmarks trains with SGD
(momentum in some versions; priced as ``momentum``).

:func:`network_sums` prices every target with a layer predictor (decomposition from the zoo,
no TensorFlow); :func:`leave_one_gpu_out` fits :class:`layerwise.compose.Composition` on all
GPUs but one and predicts that one, for each GPU chip in turn; the layer predictor of a fold
may be one trained without that chip (``predictors`` by chip).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerwise.compose import Composition, precision_class, price_layers
from layerwise.corpora.lambda_runs import read_lambda
from layerwise.efficiency import chip_of
from layerwise.network import decompose
from layerwise.roofline import family_of

TF_CNN_OPTIMIZER = "momentum"
MEASURED_NETWORKS = (Path(__file__).resolve().parents[1] / "data" / "measured"
                     / "h100-sxm5_torch2.11_2026-11-23_networks.csv")


def synthetic_training(frame: pd.DataFrame) -> pd.Series:
    """Runs of the module's selection (any GPU count): synthetic data, training, replicated
    variables, no XLA, no distortions."""
    sel = ((frame["data"] == "syn") & (frame["mode"] == "training") & ~frame["xla"]
           & ~frame["distortions"])
    if "variable_update" in frame.columns:
        sel &= frame["variable_update"].astype(str).eq("replicated")
    return sel


def measured_targets(path: Path = MEASURED_NETWORKS) -> pd.DataFrame:
    """This project's measured whole-network steps (``layerwise/data/measured``), as targets:
    gpu (catalog name), network (zoo name), precision, batch_per_gpu, step_ms, chip."""
    from fleet.catalog import resolve_gpu
    from layerwise.zoo import resolve_name

    table = pd.read_csv(path)
    out = pd.DataFrame({
        "gpu": table["gpu"].map(lambda g: resolve_gpu(str(g)).name),
        "network": table["network"].map(lambda n: resolve_name(str(n))),
        "precision": table["precision"].astype(str),
        "batch_per_gpu": table["batch_size"].astype(int),
        "step_ms": table["step_ms"].astype(float), "runs": 1})
    out["chip"] = out["gpu"].map(chip_of)
    return out


def lambda_targets(root: Path, gpu_count: int = 1) -> pd.DataFrame:
    """Median step ms per (gpu, network, precision, batch_per_gpu) of the selected runs."""
    frame, _ = read_lambda(root)
    part = frame.loc[synthetic_training(frame) & (frame["gpu_count"] == gpu_count)].copy()
    part["step_ms"] = part["step_seconds"] * 1000.0
    out = (part.groupby(["gpu", "network", "precision", "batch_per_gpu"], as_index=False)
           .agg(step_ms=("step_ms", "median"), runs=("step_ms", "size")))
    out["chip"] = out["gpu"].map(chip_of)
    return out


def network_sums(targets: pd.DataFrame, predictors: Mapping[str, Any] | Any,
                 framework: str = "tensorflow") -> pd.DataFrame:
    """Targets plus sum_ms, low_ms, high_ms, kernels, precision_class per row.

    ``predictors``: one predictor, or a mapping chip -> predictor with a ``"*"`` default.
    """
    from layerwise.forecast import device_features

    nets: dict[tuple[str, int], Any] = {}
    records = []
    for t in targets.itertuples(index=False):
        key = (str(t.network), int(t.batch_per_gpu))
        if key not in nets:
            nets[key] = decompose(t.network, batch_size=int(t.batch_per_gpu),
                                  optimizer=TF_CNN_OPTIMIZER)
        pred = (predictors.get(t.chip, predictors["*"]) if isinstance(predictors, Mapping)
                else predictors)
        hw = device_features(str(t.gpu))
        layers = price_layers(nets[key].rows, pred, hw, str(t.precision), True,
                              TF_CNN_OPTIMIZER, framework)
        memory = ~layers["layer"].map(family_of).eq("gemm")
        records.append({"sum_ms": layers["ms"].sum(), "low_ms": layers["low_ms"].sum(),
                        "memory_ms": layers.loc[memory, "ms"].sum(),
                        "high_ms": layers["high_ms"].sum(), "kernels": int(layers["kernels"].sum()),
                        "precision_class": precision_class(str(t.precision), hw)})
    return pd.concat([targets.reset_index(drop=True), pd.DataFrame(records)], axis=1)


def leave_one_gpu_out(sums: pd.DataFrame, coverage: float = 0.9,
                      by: str = "chip") -> pd.DataFrame:
    """Per row: predicted, low, high step ms from a composition fitted without its group
    (``by``: ``chip``, or ``network`` for new networks on measured GPUs)."""
    out = sums.copy()
    for col in ("pred_ms", "pred_low_ms", "pred_high_ms"):
        out[col] = np.nan
    for chip in sorted(sums[by].unique()):
        train = sums[by] != chip
        comp = Composition(coverage=coverage).fit(sums.loc[train], sums.loc[train, "step_ms"])
        for i in sums.index[~train]:
            r = sums.loc[i]
            out.loc[i, ["pred_ms", "pred_low_ms", "pred_high_ms"]] = comp.step(
                r["sum_ms"], r["low_ms"], r["high_ms"], int(r["kernels"]), r["precision_class"])
    out["ape"] = (out["pred_ms"] - out["step_ms"]).abs() / out["step_ms"] * 100.0
    out["covered"] = ((out["step_ms"] >= out["pred_low_ms"])
                      & (out["step_ms"] <= out["pred_high_ms"]))
    return out
