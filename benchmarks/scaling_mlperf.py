"""Data-parallel mechanism on the MLPerf ResNet-50 runs: which one the measured steps support.

There is no 1-GPU run of an MLPerf system, so each multi-GPU run is scored by ratios against
the layerwise 1-GPU step at the run's per-GPU batch and precision (``step1``), asked as a user
asks (``LayerwiseRoute``): network, the deployment as stored, the global batch, the precision
the run states, ``--data-parallel`` set to each mechanism in turn; never the stack.
``same`` is the naive rule "same step as on one GPU" (``step1`` itself).

* **Ratio table**: per GPU-count bucket, median ``actual / forecast`` for each mechanism
  (1.0 = right; the layerwise 1-GPU step's own bias is in every column alike).
* **Growth with the GPU count** (free of that bias): within each GPU model, the slope of
  ``ln(actual / step1)`` against ``log2(GPUs)`` (GPU-model fixed effects, least squares) is
  the measured cost per doubling; each mechanism's slope of ``ln(forecast / step1)`` on the
  same runs is what it predicts. Dispersion: the mean absolute log residual after each GPU
  model's median (as a percentage), per mechanism.
* **N GPUs from M GPUs of the same submission** (round, submitter, GPU model; the other
  deployment's measured step moved by each mechanism, batch change by the layerwise 1-GPU
  ratio): MAPE beside ``same`` (multiplier 1 on both sides).

Runs: the store's MLPerf ResNet runs (``source`` under ``/mlperf/``) on NVIDIA GPUs the
catalog knows, 2 or more GPUs, stating a precision. The actual step is ``train_seconds /
train_iterations``.

    .venv/bin/python benchmarks/scaling_mlperf.py [--store sqlite:////work/stores/prior3.db]
        [--out /tmp/scaling_mlperf.md]   (docs/lab/scaling.md holds it via benchmarks/scaling.py)
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from fleet.deployment import Deployment
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.routes import LayerwiseRoute, RouteMiss
from models.variant import variant_dict

MECHS = ("replicated", "allreduce", "ddp")

BUCKETS = [(2, 4, "2-4"), (5, 8, "8"), (9, 64, "9-64"), (65, 10**6, "65+")]


def load_runs(store_url: str) -> pd.DataFrame:
    """MLPerf ResNet multi-GPU runs with a stated precision (module rules)."""
    from ingest.store import Store
    from models.history import run_table

    runs = run_table(Store(store_url))
    runs = runs[runs["source"].str.contains("/mlperf/") & (runs["network"] == "resnet50")
                & (runs["train_iterations"] > 0) & (runs["train_seconds"] > 0)].copy()
    runs["precision"] = [variant_dict(v).get("precision") for v in runs["variant"]]
    runs = runs[runs["precision"].notna()]
    runs["round"] = runs["source"].str.extract(r"/mlperf/(v[\d.]+)/")[0]
    runs["submitter"] = runs["source"].str.extract(r"/mlperf/v[\d.]+/([^/]+)/")[0]
    runs["gpus"] = [Deployment.parse(d).count for d in runs["deployment"]]
    runs["actual_ms"] = runs["train_seconds"] / runs["train_iterations"] * 1000.0
    return runs[runs["gpus"] >= 2].reset_index(drop=True)


def ask(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's layerwise 1-GPU step and the N-GPU step under each mechanism (ms)."""
    route = LayerwiseRoute()
    rows = []
    for r in runs.itertuples(index=False):
        out = {"step1_ms": math.nan}
        for mech in MECHS:
            req = JobRequest(network="resnet50", deployment=r.deployment,
                             batch_size=int(r.batch_size), iterations=1, phase="train",
                             precision=str(r.precision), data_parallel=mech)
            try:
                d = route.forecast(req, "benchmark").details
            except (RouteMiss, LookupError, ValueError):
                break
            out[mech] = d["batch_seconds"] * 1000.0
            out["step1_ms"] = d["single_device_batch_seconds"] * 1000.0
            out["gpu"] = d["device"]
            out["per_gpu_batch"] = d["batch_size"]
        rows.append(out)
    got = pd.concat([runs, pd.DataFrame(rows)], axis=1)
    got = got[got["step1_ms"].notna()].copy()
    got["same"] = got["step1_ms"]
    return got.reset_index(drop=True)


def bucket(n: int) -> str:
    return next(name for lo, hi, name in BUCKETS if lo <= n <= hi)


def ratio_table(d: pd.DataFrame) -> pd.DataFrame:
    cols = ("same", *MECHS)
    d = d.assign(bucket=d["gpus"].map(bucket))
    agg = {"runs": ("actual_ms", "size")}
    for c in cols:
        d[f"r_{c}"] = d["actual_ms"] / d[c]
        agg[c] = (f"r_{c}", "median")
    table = d.groupby("bucket").agg(**agg)
    table.loc["all"] = [len(d), *(d[f"r_{c}"].median() for c in cols)]
    order = [b for _, _, b in BUCKETS if b in table.index] + ["all"]
    return table.loc[order].round(3)


def _fe_slope(y: np.ndarray, x: np.ndarray, group: pd.Series) -> float:
    """Least-squares slope of y on x with one intercept per group."""
    yd = y - pd.Series(y).groupby(group.to_numpy()).transform("mean").to_numpy()
    xd = x - pd.Series(x).groupby(group.to_numpy()).transform("mean").to_numpy()
    return float((xd * yd).sum() / (xd * xd).sum())


def growth_table(d: pd.DataFrame) -> pd.DataFrame:
    """Measured and predicted growth per doubling of the GPUs; dispersion after the GPU
    model's median (module rules)."""
    x = np.log2(d["gpus"].to_numpy(float))
    g = d["gpu"].astype(str) + "/" + d["precision"].astype(str)
    rows = {"measured": {"per doubling %": 100 * (math.exp(_fe_slope(
        np.log(d["actual_ms"] / d["step1_ms"]).to_numpy(), x, g)) - 1)}}
    for c in ("same", *MECHS):
        pred = np.log(d[c] / d["step1_ms"]).to_numpy()
        resid = pd.Series(np.log(d["actual_ms"] / d[c]).to_numpy())
        resid = resid - resid.groupby(g.to_numpy()).transform("median")
        rows[c] = {"per doubling %": 100 * (math.exp(_fe_slope(pred, x, g)) - 1),
                   "dispersion %": 100 * float(np.mean(np.expm1(resid.abs())))}
    return pd.DataFrame(rows).T.round(1).astype(object).fillna("–")


def pair_table(d: pd.DataFrame) -> pd.DataFrame:
    """N-GPU steps from another GPU count of the same round, submitter and GPU model: one row
    per ordered pair, the absolute % error of each mechanism."""
    recs = []
    keys = ["round", "submitter", "gpu", "precision"]
    med = d.groupby([*keys, "deployment", "gpus", "per_gpu_batch"], as_index=False)[
        ["actual_ms", "step1_ms", "same", *MECHS]].median()
    for _, grp in med.groupby(keys):
        for a in grp.itertuples(index=False):
            for b in grp.itertuples(index=False):
                if a.gpus == b.gpus:
                    continue
                rec = {"from": a.gpus, "to": b.gpus,
                       "same_batch": a.per_gpu_batch == b.per_gpu_batch}
                for c in ("same", *MECHS):
                    mult_a, mult_b = getattr(a, c) / a.step1_ms, getattr(b, c) / b.step1_ms
                    pred = a.actual_ms * (b.step1_ms / a.step1_ms) * (mult_b / mult_a)
                    rec[c] = 100 * abs(pred - b.actual_ms) / b.actual_ms
                recs.append(rec)
    return pd.DataFrame(recs)


def pair_summary(p: pd.DataFrame) -> pd.DataFrame:
    """MAPE per subset of the pairs: all, both on one node (<= 8 GPUs), same per-GPU batch."""
    parts = {"all pairs": p, "one node (2-8 GPUs)": p[(p["from"] <= 8) & (p["to"] <= 8)],
             "same per-GPU batch": p[p["same_batch"]],
             "to more GPUs": p[p["to"] > p["from"]]}
    rows = {k: {"pairs": len(v), **v[["same", *MECHS]].mean().to_dict()}
            for k, v in parts.items() if len(v)}
    return pd.DataFrame(rows).T.round(1)


def mlperf_section(d: pd.DataFrame, store: str) -> tuple[list[str], list[tuple[str, dict]]]:
    """The markdown section and the pair summaries (label, row) for the must-show table."""
    pairs = pair_summary(pair_table(d))
    doc = ["\n## MLPerf ResNet-50 (MXNet+Horovod/NCCL mostly; no 1-GPU runs)\n\n",
           "Command: `.venv/bin/python benchmarks/scaling_mlperf.py --store "
           f"{store}` (also run by `benchmarks/scaling.py`)\n\n",
           f"{len(d)} runs on {d['gpu'].nunique()} NVIDIA GPU models, 2-"
           f"{int(d['gpus'].max())} GPUs, {d['submitter'].nunique()} submitters, "
           f"rounds {', '.join(sorted(d['round'].unique()))}; asked as a user asks (network, "
           "deployment, global batch, the precision the run states: "
           f"{', '.join(sorted(d['precision'].unique()))}; never the stack).\n\n",
           "Median actual / forecast per GPU-count bucket. `same` = the layerwise 1-GPU "
           "step at the run's per-GPU batch unchanged; 1.0 is right. The layerwise 1-GPU "
           "step's own bias (large-batch AMP) is in every column alike:\n\n",
           ratio_table(d).to_markdown(), "\n\n",
           "Growth of the per-GPU step with the GPU count, free of that bias: slope per "
           "doubling of the GPUs within GPU model x precision (fixed effects), measured and "
           "as each mechanism predicts; dispersion = mean |log residual| after each GPU "
           "model's median, %:\n\n",
           growth_table(d).to_markdown(), "\n\n",
           "The step at N GPUs from the measured step at M GPUs of the same submission "
           "(round, submitter, GPU model; batch change by the layerwise 1-GPU ratio), every "
           "ordered pair; MAPE % beside `same` (no change):\n\n",
           pairs.to_markdown(), "\n"]
    return doc, [(k, row.to_dict()) for k, row in pairs.iterrows()
                 if k in ("all pairs", "one node (2-8 GPUs)")]


def main() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="sqlite:////work/stores/prior3.db")
    ap.add_argument("--out", default="/tmp/scaling_mlperf.md")
    args = ap.parse_args()
    d = ask(load_runs(args.store))
    doc, _ = mlperf_section(d, args.store)
    doc[0] = doc[0].replace("\n## ", "# ", 1)
    Path(args.out).write_text("".join(doc))
    print("".join(doc))

if __name__ == "__main__":
    main()
