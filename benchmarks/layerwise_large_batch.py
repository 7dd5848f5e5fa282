"""The layerwise step at large per-GPU batch under AMP: MLPerf ResNet-50 and the H100 (issue 23).

Three tables, every forecast asked as a user asks (network, GPU as nvidia-smi or MLPerf names
it, per-GPU batch, ``--framework pytorch --precision fp16``, SGD momentum), from the shipped
predictor and compositions (``layerwise.quick.forecast_fast``: the CLI's path):

1. **MLPerf ResNet-50** (v0.7-v4.0 closed division, NVIDIA's MXNet implementation, one node of
   4-16 GPUs, AMP, per-GPU batch 100-816) from the store ``/work/stores/prior3.db`` (the repo's
   MLPerf ingest): per run the median of its training segments' seconds per iteration; per GPU
   model and per-GPU batch the median over runs. The N-GPU step is an **upper bound** of the
   same implementation's 1-GPU step at the same per-GPU batch (data-parallel overlap only adds
   the all-reduce), not the step a PyTorch user's eager NCHW model takes: NVIDIA's MXNet
   ResNet runs NHWC with fused BN-ReLU(-add) kernels and DALI. Where this project measured
   the GPU itself (the H100 SXM5, PyTorch 2.11 eager, NCHW, AMP fp16), the table gives that
   step scaled to the batch (per image at batch 128 x the batch) beside it.
2. **H100 batch scaling** (the first session's 84 steps, batch 32, 64, 128 x fp32 strict,
   tf32, AMP fp16 and bf16; fitted in the shipped composition, so in-sample): forecast /
   measured per precision and batch.
3. **Per layer kind**: the A100 ResNet-50 step at batch 408, fp32 (as PyTorch runs it: TF32
   convolutions) and AMP, each kind's share.

Run (about a minute)::

    .venv/bin/python benchmarks/layerwise_large_batch.py [--store URL] [--no-doc]

Writes ``docs/lab/layerwise-large-batch.md``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import numpy as np
import pandas as pd
from lib import REPO as ROOT

from layerwise.forecast import forecast_network as forecast_fast

STORE = "sqlite:////work/stores/prior3.db"
DOC = ROOT / "docs" / "lab" / "layerwise-large-batch.md"
FIRST = ROOT / "layerwise" / "data" / "measured" / "h100-sxm5_torch2.11_2026-11-23_networks.csv"
FAMILIES = ("V100", "A100", "H100", "H200")
MIN_ITERATIONS = 50  # a segment shorter than this (an epoch's tail) is not a step sample


def _forecast(network: str, device: str, batch: int, precision: str) -> dict:
    return forecast_fast(network, device=device, batch_size=int(batch), optimizer="momentum",
                         precision=precision, framework="pytorch")


def mlperf_steps(url: str = STORE) -> pd.DataFrame:
    """One row per single-node NVIDIA MXNet ResNet-50 run of the store: GPU (catalog name),
    GPUs, per-GPU batch, median step seconds of its training segments (module rules)."""
    import sqlalchemy as sa

    from fleet.catalog import UnknownGpuError, resolve_gpu
    from ingest.store import Store, runs, segments

    store = Store(url)
    query = sa.select(runs.c.id, runs.c.accelerator, runs.c.accelerators_per_node,
                      runs.c.nodes, runs.c.framework, runs.c.batch_size, runs.c.meta) \
        .where(runs.c.network == "resnet50", runs.c.nodes == 1)
    with store.engine.connect() as conn:
        found = conn.execute(query).mappings().all()
        seg = conn.execute(sa.select(segments.c.run_id, segments.c.iterations,
                                     segments.c.seconds)
                           .where(segments.c.phase == "train")).mappings().all()
    per_run = defaultdict(list)
    for s in seg:
        if s["iterations"] >= MIN_ITERATIONS and s["seconds"] > 0:
            per_run[s["run_id"]].append(s["seconds"] / s["iterations"])
    rows = []
    for r in found:
        acc, fw = str(r["accelerator"] or ""), str(r["framework"] or "").lower()
        if not any(f in acc for f in FAMILIES) or "mxnet" not in fw or "pytorch" in fw \
                or not per_run.get(r["id"]) or not r["accelerators_per_node"]:
            continue
        try:
            gpu = resolve_gpu(acc).name
        except UnknownGpuError:
            continue
        n = int(r["accelerators_per_node"])
        rows.append({"gpu": gpu, "name": acc, "gpus": n,
                     "batch_per_gpu": int(r["batch_size"]) // n,
                     "step_s": statistics.median(per_run[r["id"]])})
    return pd.DataFrame(rows)


def h100_per_image(precision: str = "fp16", network: str = "resnet50", batch: int = 128) -> float:
    """ms per image of this project's measured H100 step (first session) at ``batch``."""
    first = pd.read_csv(FIRST)
    row = first[(first["network"] == network) & (first["precision"] == precision)
                & (first["batch_size"] == batch)]
    return float(row["step_ms"].iloc[0]) / batch


def mlperf_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Forecast / MLPerf step per GPU model and per-GPU batch (module rules)."""
    h100 = h100_per_image()
    rows = []
    for (gpu, batch), grp in steps.groupby(["gpu", "batch_per_gpu"]):
        name = grp["name"].iloc[0]
        amp = _forecast("resnet50", name, batch, "fp16")
        fp32 = _forecast("resnet50", name, batch, "fp32")
        step = 1000 * grp["step_s"].median()
        rows.append({"gpu": gpu, "per-GPU batch": int(batch), "runs": len(grp),
                     "GPUs": "/".join(str(g) for g in sorted(set(grp["gpus"]))),
                     "MLPerf step ms (bound)": step,
                     "forecast AMP ms": 1000 * amp["batch_seconds"],
                     "low": 1000 * amp["low"], "high": 1000 * amp["high"],
                     "forecast / MLPerf": amp["batch_seconds"] * 1000 / step,
                     "forecast fp32 ms": 1000 * fp32["batch_seconds"],
                     "measured eager ms": h100 * batch if gpu == "H100 SXM5" else np.nan})
    return pd.DataFrame(rows).sort_values(["gpu", "per-GPU batch"]).reset_index(drop=True)


def h100_table() -> pd.DataFrame:
    """Forecast / measured of the H100's first-session steps per precision and batch."""
    first = pd.read_csv(FIRST)
    rows = []
    for r in first.itertuples():
        precision = "fp32-strict" if r.precision == "fp32" else r.precision
        network = "inception_v3" if r.network == "inception3" else r.network
        pred = _forecast(network, "NVIDIA H100 80GB HBM3", r.batch_size, precision)
        rows.append({"network": network, "precision": precision, "batch": r.batch_size,
                     "ratio": 1000 * pred["batch_seconds"] / r.step_ms})
    frame = pd.DataFrame(rows)
    frame["ape"] = (frame["ratio"] - 1).abs() * 100
    return (frame.groupby(["precision", "batch"])
            .agg(rows=("ratio", "size"), mape=("ape", "mean"),
                 median_ratio=("ratio", "median"))
            .reset_index())


def kinds_table(device: str = "NVIDIA A100-SXM4-80GB", batch: int = 408) -> pd.DataFrame:
    """ms per layer kind of a ResNet-50 step, fp32 (as run) and AMP, after the composition."""
    out = {}
    for precision in ("fp32", "fp16"):
        result = _forecast("resnet50", device, batch, precision)
        by = defaultdict(float)
        for e in result["layers"]:
            by[e["layer"]] += e["ms"]
        by["(launches, step)"] = result["step_overhead_ms"]
        by["step"] = 1000 * result["batch_seconds"]
        out[precision] = by
    frame = pd.DataFrame(out).fillna(0.0)
    frame["AMP / fp32"] = frame["fp16"] / frame["fp32"].where(frame["fp32"] > 0)
    return frame.rename_axis("kind").reset_index()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=STORE)
    parser.add_argument("--no-doc", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    steps = mlperf_steps(args.store)
    tables = {"mlperf": mlperf_table(steps), "h100": h100_table(), "kinds": kinds_table()}
    for name, frame in tables.items():
        print(name, "\n", frame.round(3).to_string(), flush=True)
    if not args.no_doc:
        write_doc(tables, len(steps), time.perf_counter() - started)
        print(f"wrote {DOC}")


def md(frame: pd.DataFrame) -> str:
    """A markdown table: ratios to 0.01, other floats to 0.1, missing values blank."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype.kind == "f":
            digits = 2 if "ratio" in str(col) or "/" in str(col) else 1
            out[col] = out[col].map(lambda v, d=digits: "" if pd.isna(v) else f"{v:.{d}f}")
    return out.to_markdown(index=False, disable_numparse=True)


def write_doc(tables: dict[str, pd.DataFrame], n_runs: int, seconds: float) -> None:
    """``docs/lab/layerwise-large-batch.md``: the three tables and the reading."""
    text = [HEAD.format(n_runs=n_runs), "## 1. MLPerf ResNet-50 steps (upper bounds)\n",
            MLPERF_TEXT, md(tables["mlperf"]), "",
            "## 2. H100, PyTorch 2.11 eager: forecast / measured by batch (in-sample)\n",
            H100_TEXT, md(tables["h100"]), "",
            "## 3. A100 SXM4 80GB, ResNet-50 at batch 408: ms per layer kind\n",
            md(tables["kinds"]), "", READING, f"\nRun time {seconds:.0f} s.\n"]
    DOC.write_text("\n".join(text))


H100_TEXT = """This project's first H100 session (`layerwise/data/measured/h100-sxm5_torch2.11_
2026-11-23_networks.csv`: AlexNet, DenseNet-121, Inception-v3, MobileNetV2, ResNet-50,
ResNet-101, VGG16 x batch 32, 64, 128; SGD momentum, NCHW, `fp32` there ran with TF32 off,
asked as `fp32-strict`). These rows are in the shipped PyTorch composition's fit.
"""


HEAD = """# The layerwise step at large per-GPU batch under AMP (issue 23)

`.venv/bin/python benchmarks/layerwise_large_batch.py` ({n_runs} single-node MLPerf runs
of NVIDIA's MXNet ResNet-50 on V100, A100, H100 and H200 GPUs)

Every forecast is asked as a user asks: `jobcast predict --network resnet50 --device
"<GPU>" --batch-size <per-GPU batch> --framework pytorch --precision fp16|fp32` (SGD
momentum), the shipped predictor and compositions (`layerwise.quick.forecast_fast`).
"""

MLPERF_TEXT = """MLPerf Training ResNet-50 v0.7-v4.0 (closed division, NVIDIA's MXNet
implementation, one node, AMP; `/work/corpora/mlperf` through the store
`/work/stores/prior3.db`). The MLPerf step is the median over runs of each run's median
seconds per training iteration.
**It is an upper bound of the same implementation's 1-GPU step** at that per-GPU batch (data
parallelism only adds the all-reduce, mostly overlapped), **not** a PyTorch eager step:
NVIDIA's MXNet ResNet runs NHWC with fused BN-ReLU(-add) kernels and DALI.
`measured eager ms`: this project's H100 SXM5 step (PyTorch 2.11 eager, NCHW, AMP fp16,
batch 128: 47.8 ms) scaled per image to the batch. `low`/`high`: the forecast's 90 % band.
"""

READING = """## Reading (written after seeing the figures)

- **The AMP forecast at large batch is not 2x too slow for the step a PyTorch user runs; it
  is 1.7-3.2x the step of NVIDIA's MLPerf implementation (table 1), which no request
  describes.** On the one GPU where both were measured, the H100 SXM5, MLPerf's step (MXNet,
  NHWC, fused BN-ReLU, DALI; batch 400 per GPU on 4-8 GPUs) takes 0.14 ms per image;
  PyTorch 2.11 eager ResNet-50 under autocast, NCHW, measured by this project, takes 0.37 ms
  per image at batch 128 (0.40 at batch 64): the implementation alone is 2.6x. The forecast
  of that eager step at batch 400 is 1.2x the measured per-image time scaled up (179 against
  149 ms), and at batch 128, where it was measured, 0.94x in the median over seven networks
  (table 2; in-sample). The forecast / MLPerf ratio grows with the GPU's generation (V100
  1.7-2.2, A100 1.7-2.3, H100 2.6-3.2, H200 2.6): the unfused memory-bound layers and
  NCHW<->NHWC transposes of an eager step weigh more as compute outgrows memory bandwidth.
  An eager step on the A100 at batch 408 between 2x and 2.6x the MLPerf bound (240-312 ms)
  is what the two measured ends suggest; the forecast is 259 ms. Nothing measured here says
  the A100's AMP layers are priced too slow for eager PyTorch, and the MLPerf bound cannot
  say it: the one 1-GPU MLPerf run (A100 PCIe 80GB, batch 1000: 334 ms) is no PyTorch step
  either (forecast 615 ms).
- **Per layer kind** (table 3): convolutions are 83-84 % of the A100 step at batch 408 in
  both precisions; AMP prices them at 0.58x their TF32 time and the memory-bound layers
  (BN, ReLU, add, pooling) at 0.47-0.56x (half the bytes); launches, weight casts and the
  step constant are under 1 % of the step at this batch. So the AMP rule of
  `layerwise/as_run.py` (casts, half bytes, the loss scaler's kernels) cannot be what a 2x
  gap at large batch comes from; only the convolutions could, and their half-precision
  efficiency on the A100 comes from the per-op trees (its own layer rows, NeuSight's, are
  forward fp32 only): a question for the per-op predictor, with no A100 AMP step to settle
  it.
- **The H100's AMP fp16 steps at batch 64 are priced 1.3x too slow** (table 2; bf16 1.09x;
  at 128 both 0.93-0.94x): VGG16's GPU part (1.46x), and ResNet-50/101 where launches and
  GPU work are about equal (ResNet-50: 509 priced kernels, 108 of them weight casts, 26 ms
  of launches at the fitted cost, overlapped with about as much GPU time into a 34 ms
  forecast against a measured 25 ms step); the per-op trees price fp16 and bf16 alike
  where the H100 measured fp16 faster.
- **Tried, not shipped: a split bound** (each layer priced at the least of its direct
  prediction and ceil(b/x) times its time at each power of two x from 8 below its batch b:
  a batch can always run as smaller calls). The layer trees' efficiency is piecewise
  constant in shape, so without it a step's per-image time rises in 34 of 150 batch
  doublings (128 -> 256 -> 512; ResNet-50, VGG16, MobileNetV2, DenseNet-121,
  EfficientNet-B0 x A100, H100, V100, RTX 3090, L4 x fp32, AMP), by up to 12 %; with it, 4
  of 150, by at most 3.3 %. But it lowered the large-batch fp16 convolutions 9-16 %
  (VGG16, AlexNet at batch 384-4096), and Lambda's TensorFlow fp16 steps, already priced
  too fast there, say the direct prediction is the better one: Lambda one GPU out 15.0 ->
  16.3 %, one network out 16.4 -> 17.8 %; PyTorch 18.6 -> 18.5 %, 16.6 -> 16.6 %; a served
  forecast 25 % slower (more layer queries, with a per-process cache). The relation it
  guaranteed (per-image time not rising with batch) holds in the shipped forecasts for AMP
  steps between batch 64 and 512, not for fp32 ResNet-50 on the A100 and H100 (TF32
  convolutions' efficiency falls at the largest shapes in the trees; an xfail test,
  `tests/layerwise/test_large_batch.py`, records it for the per-op predictor).
- Not changed, for lack of data saying so: the AMP rule and the composition's tensor-core
  scale. Fitting the PyTorch composition to the MLPerf steps would price every eager PyTorch
  AMP step 2-3x too fast on the H100 that was measured.
"""


if __name__ == "__main__":
    main()
