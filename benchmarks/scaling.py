"""Data-parallel scaling per framework, leave one GPU model out: N-GPU steps from 1-GPU steps.

**TensorFlow** (Lambda logs). Targets: tf_cnn_benchmarks training, synthetic data, replicated
variables, no XLA, 2/4/8 GPUs; the step time at a fixed per-GPU batch. For each GPU model,
:class:`models.replicated.DataParallelScaling` is fitted on the other models' runs and predicts
this one's N-GPU steps:

* ``history``: from the same system's measured 1-GPU step (the end-to-end case);
* ``layerwise``: from the layerwise 1-GPU forecast (no history; the shipped predictor), the
  scaling fitted as above;
* ``naive``: the 1-GPU step unchanged.

Gradients: the network's parameters (zoo spec) x bytes of the precision (tf_cnn_benchmarks
sends fp16 gradients in fp16); links from the system name (NVLink) or the catalog defaults.

**PyTorch** (``../shared/data/torchvision_bench``: 32 torchvision networks, batch 12 per GPU,
fp32, 1-4 GPUs on four GPU models, ``nn.DataParallel``). For each GPU model,
:class:`models.torch_parallel.DataParallelFit` is fitted on the other three models' runs and
predicts this one's N-GPU steps from its measured 1-GPU step (``dp``); ``ddp`` is the
DistributedDataParallel rule (physics, nothing fitted) on the same runs, to show how far
DataParallel's step is from DDP's; ``naive`` the 1-GPU step unchanged.

**MLPerf** ResNet-50 (``benchmarks/scaling_mlperf.py``, from the store ``--store``): no 1-GPU
runs, so mechanisms are scored by ratios to the layerwise 1-GPU step and by moving a measured
step to another GPU count of the same submission. Last, the must-show table: N-GPU steps by
each source's mechanism beside "same step as on one GPU".

    .venv/bin/python benchmarks/scaling.py [--out docs/lab/scaling.md]
        [--store sqlite:////work/stores/prior3.db | --store none]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from lib import REPO as ROOT

from fleet.deployment import Deployment
from jobcast.service.features.shipped_build import (
    lambda_scaling_targets,
    torch_leave_one_out,
    torch_scaling_targets,
)
from layerwise.corpora.tables import shared_data_dir
from layerwise.forecast import forecast_network
from models.replicated import fit_all_runs, held_out_steps
from models.scaling import data_parallel_step
from models.torch_parallel import DataParallelFit


def leave_one_model_out(data: pd.DataFrame, step1: str) -> pd.Series:
    """N-GPU step from the ``step1`` column, by a model fitted (on measured 1-GPU steps) on the
    other GPU models' runs (:func:`models.replicated.held_out_steps`)."""
    return held_out_steps(data, step1)


def torch_section(root: Path) -> tuple[list[str], DataParallelFit]:
    data = torch_scaling_targets(root)
    data["pred_dp"], full = torch_leave_one_out(data)
    for name, col in (("dp", "pred_dp"), ("ddp", "pred_ddp"), ("naive", "step1_ms")):
        data[f"ape_{name}"] = (data[col] - data["step_ms"]).abs() / data["step_ms"] * 100
    table = data.groupby(["gpu", "gpus"]).agg(
        runs=("step_ms", "size"), measured_ratio=("step_ms", "median"),
        dp=("ape_dp", "mean"), ddp=("ape_ddp", "mean"), naive=("ape_naive", "mean"))
    table["measured_ratio"] = data.assign(r=data["step_ms"] / data["step1_ms"]).groupby(
        ["gpu", "gpus"])["r"].median()
    overall = data[["ape_dp", "ape_ddp", "ape_naive"]].mean().round(1)
    _TORCH_SUMMARY[:] = [("PyTorch nn.DataParallel (dp)", "torchvision_bench",
                          "dp fit, GPU model left out, from the measured 1-GPU step",
                          len(data), overall["ape_dp"], overall["ape_naive"])]
    cover = ((data["step_ms"] >= data["pred_dp"] * np.exp(full.log_low))
             & (data["step_ms"] <= data["pred_dp"] * np.exp(full.log_high))).mean() * 100
    doc = ["\n## PyTorch: torchvision_bench (nn.DataParallel), leave one GPU model out\n\n",
           f"{len(data)} multi-GPU targets (2/3/4 GPUs, fp32, 32 networks, batch 12 per GPU). "
           "MAPE %; `measured_ratio` = median N-GPU step / 1-GPU step:\n\n",
           table.round(2).to_markdown(), "\n\n",
           f"Overall: dp (fitted, GPU model left out) {overall['ape_dp']} %, ddp rule "
           f"{overall['ape_ddp']} %, naive (same step as 1 GPU) {overall['ape_naive']} %; "
           f"coverage of the dp interval {cover:.0f} % (in-sample interval of held-out "
           "residuals).\n\n",
           f"Fitted on all runs: {full.layer_ms:.4f} ms per layer and extra GPU, "
           f"{full.allreduce_factor:.2f} x the ring all-reduce of the fp32 gradients.\n\n",
           DP_NOTE]
    return doc, full


DP_NOTE = """What these runs can and cannot tell. `nn.DataParallel` drives every GPU from one Python
process: each step it copies the module to every GPU, splits the batch, gathers the outputs
on GPU 0 and sums the gradients there. Its extra time grows with the layers (launches
serialised by one interpreter) and the gradient bytes, so a small-batch step takes 1.8-2.9x
the 1-GPU step on 2-4 GPUs here, and that is what the `dp` fit learns (13 % MAPE with the GPU
model left out, against 54 % for the same step as on one GPU). PyTorch jobs today run
`DistributedDataParallel` (one process per GPU, gradients all-reduced in 25 MB buckets while
the backward pass goes on), which has none of DataParallel's per-step copies: these runs
cannot check the `ddp` rule (its 48 % column only shows how far DataParallel is from it), nor
give its constants. The `ddp` rule therefore fits nothing: bucket caps and gradient dtype are
PyTorch's defaults, bandwidth and latency the interconnect catalog's, the backward pass 2/3 of
the 1-GPU step shaped by the layerwise per-layer times. It leaves out what it cannot know
(NCCL kernels taking SMs from the backward pass, stragglers, input pipelines), so it can only
under-predict a measured DDP step; the MLPerf section below is where DDP-like runs check it.

The mechanism is what the user says (`--data-parallel`, request field `data_parallel`):
`auto` (the default) is `ddp` for PyTorch, `allreduce` (TensorFlow 2 MirroredStrategy: one
all-reduce after the backward pass) for TensorFlow, and `replicated` only when `--stack` names
TensorFlow 1.x (`models.scaling.auto_strategy`); `dp` only when asked for. The answer names it
(`details["scaling"]`: `strategy`, `mechanism`, `chosen`; the text's `data parallel:` line).

Call (`jobcast/service/engine/routes.py::_data_parallel`):

```python
from models.scaling import data_parallel_step, resolve_strategy
strategy = resolve_strategy(req.data_parallel, req.framework, req.stack)
step = data_parallel_step(req.framework, result["batch_seconds"] * 1000.0, deployment,
                          req.precision, result["layers"], strategy)
# step.ms, step.low_ms, step.high_ms (ms of one step), step.strategy,
# step.allreduce_ms, step.details (buckets, exposed_ms, ... or the fitted constants)
```

and `models.scaling.rescale_parallel_step(framework, step_ms, source, target, precision,
layers)` for a step measured on one deployment moved to another. (`other_counts.py` moves
history between GPU counts with the replicated fit, `DataParallelScaling.rescale`, unchanged.)
"""


AUTO_NOTE = """## Which mechanism a forecast assumes

The user says it: `--data-parallel auto|ddp|allreduce|replicated|dp` (request field
`data_parallel`; `fleet/data_parallel.py` parses it, `models/scaling.py` holds the rules).
`auto`, the default, is the framework's modern mechanism: PyTorch -> `ddp` (bucketed
all-reduce behind the backward pass), TensorFlow -> `allreduce` (one all-reduce of the fp32
gradients after the backward pass, as Keras' MirroredStrategy does), and TensorFlow 1.x
`replicated` variables only when `--stack` names TensorFlow 1.x (`tensorflow-1.15`, `TF 1.14`,
an NGC `-tf1-` tag) or the user asks for it. The answer says which: `details["scaling"]`
(`strategy`, `mechanism`, `chosen`) and the text's `data parallel:` line.

Before, a request that named no framework got TensorFlow, and TensorFlow got the replicated
fit (Lambda tf_cnn_benchmarks, TF 1.x): about +90 % on an 8-GPU fp16 ResNet-50 step. The MLPerf
section below shows that the runs people make today do not grow like that: within a GPU
model, the per-GPU step changes by about 0-2 % per doubling of the GPUs where `replicated`
predicts about 23 %, and moving a measured step to another GPU count of the same submission is
several times worse with `replicated` than with the same step. Choices made after seeing
those figures: `auto` is not `replicated` for TensorFlow; TensorFlow's `auto` is `allreduce`
rather than `ddp` (the MLPerf runs, MXNet/Horovod, cannot tell the two apart: ResNet-50's
gradients take about 1 ms on NVLink; `allreduce` is what TensorFlow 2 does and the
conservative of the two); the TF 1.x stack words. What `auto` costs: a TensorFlow 1.x user of
tf_cnn_benchmarks who names no stack gets `allreduce` where `replicated` fits better (the
Lambda table's `layerwise_auto` column against `layerwise`).

"""

_TORCH_SUMMARY: list[tuple] = []  # filled by torch_section


def backtest_section(path: Path) -> list[str]:
    """The layerwise/hybrid multi-GPU bias before (TensorFlow -> replicated) and after (auto),
    from ``benchmarks/scaling_backtest.py``'s CSV."""
    t = pd.read_csv(path)
    t["setting"] = t["setting"].str.split(":").str[0]
    wide = t.pivot_table(index=["source", "kind", "devices", "precision"], columns="setting",
                         values=["n", "actual_over_forecast", "mape"])
    wide.columns = [f"{value} {setting}" for value, setting in wide.columns]
    keep = ["n before", "actual_over_forecast before", "actual_over_forecast after",
            "mape before", "mape after"]
    return ["\n## Backtest: layerwise and hybrid on multi-GPU runs, before and after\n\n",
            "Command: `.venv/bin/python benchmarks/scaling_backtest.py --out X.csv` then "
            "`benchmarks/scaling.py --backtest X.csv`. Every system's next runs asked as a "
            "user asks (no framework named: tensorflow; never the stack), once with "
            "TensorFlow's old silent default (`replicated`) and once with `auto`. Median "
            "actual / forecast (1.0 is right) and MAPE %; `precision` = whether the ask "
            "stated the run's precision:\n\n",
            wide[keep].round(3).to_markdown(), "\n"]


def must_show(rows: list[tuple]) -> list[str]:
    """Issue 23, must-show 3: N-GPU from 1-GPU (or another count), each source's mechanism
    beside "same step as on one GPU"."""
    lines = ["\n## Must-show 3: N-GPU steps, held out, beside \"same step\"\n\n",
             "Command: `.venv/bin/python benchmarks/scaling.py` (MLPerf rows from "
             "`--store sqlite:////work/stores/prior3.db`). MAPE %:\n\n",
             "| framework (mechanism) | runs | how | targets | mechanism | same step |\n",
             "|---|---|---|---|---|---|\n"]
    for fw, runs, how, n, mech, same in rows:
        lines.append(f"| {fw} | {runs} | {how} | {n} | {mech:.1f} | {same:.1f} |\n")
    return lines + [MUST_SHOW_NOTE]


MUST_SHOW_NOTE = """
Verdict. TensorFlow 1.x (replicated) and PyTorch DataParallel: below "same step" with the GPU
model left out. DDP-like runs (MLPerf; there is no 1-GPU run, so the step is moved from
another GPU count of the same submission): the `ddp` rule ties "same step" (within 0.2
points) and cannot go below it: it only ever adds exposed communication, and those runs' per-GPU
step hardly changes with the GPU count. What matters there is not to add what they do not
have: `replicated` is several times worse on the same pairs. No PyTorch DDP timings with a
1-GPU run of the same system exist here; a device session could measure them
(`torch.distributed` on one node) and fit the rule's exposed share.
"""


def rule_examples() -> list[str]:
    """What each mechanism adds to an 8-GPU step (layerwise 1-GPU forecasts)."""
    lines = ["\n## What each mechanism adds to an 8-GPU step (no measurements: forecasts)\n\n",
             "Layerwise 1-GPU training step (SGD momentum, 256 images per GPU, fp16 mixed "
             "precision) and the 8-GPU step each mechanism gives, ms:\n\n",
             "| network | GPU | framework (mechanism) | 1 GPU | 8 GPUs | added | "
             "exposed all-reduce |\n", "|---|---|---|---|---|---|---|\n"]
    for gpu in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB"):
        for network in ("resnet50", "vgg16"):
            for fw, strategy in (("pytorch", "ddp"), ("tensorflow", "allreduce"),
                                 ("tensorflow", "replicated")):
                one = forecast_network(network, device=gpu, batch_size=256,
                                       optimizer="momentum", precision="fp16", framework=fw)
                s1 = one["batch_seconds"] * 1000.0
                step = data_parallel_step(fw, s1, Deployment(gpu, 8), "fp16", one["layers"],
                                          strategy)
                exposed = step.details.get("exposed_ms")
                lines.append(f"| {network} | {gpu} | {fw} ({step.strategy}) | {s1:.1f} | "
                             f"{step.ms:.1f} | {100 * (step.ms / s1 - 1):.1f} % | "
                             + (f"{exposed:.2f}" if exposed is not None else "–") + " |\n")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "docs" / "lab" / "scaling.md"))
    ap.add_argument("--store", default="sqlite:////work/stores/prior3.db",
                    help="store with the MLPerf ResNet runs ('none': skip that section)")
    ap.add_argument("--backtest", default=None,
                    help="CSV of benchmarks/scaling_backtest.py: the before/after section")
    args = ap.parse_args()
    data = lambda_scaling_targets(shared_data_dir() / "lambda")
    lw = {}
    for key in data[["gpu", "network", "precision", "batch_per_gpu"]].drop_duplicates() \
            .itertuples(index=False):
        out = forecast_network(key.network, device=str(key.gpu), batch_size=int(key.batch_per_gpu),
                               optimizer="momentum", precision=str(key.precision))
        lw[tuple(key)] = (out["batch_seconds"] * 1000.0, out["layers"])
    data["layerwise1_ms"] = [lw[(r.gpu, r.network, r.precision, r.batch_per_gpu)][0]
                             for r in data.itertuples(index=False)]
    data["pred_auto"] = [  # what a user who names no stack now gets: auto = allreduce
        data_parallel_step("tensorflow", r.layerwise1_ms,
                           Deployment(str(r.gpu), int(r.gpu_count), 1,
                                      "nvlink" if r.nvlink else ""),
                           str(r.precision), lw[(r.gpu, r.network, r.precision,
                                                 r.batch_per_gpu)][1], "auto").ms
        for r in data.itertuples(index=False)]
    data["pred_history"] = leave_one_model_out(data, "step1_ms")
    data["pred_layerwise"] = leave_one_model_out(data, "layerwise1_ms")
    for name, col in (("history", "pred_history"), ("layerwise", "pred_layerwise"),
                      ("layerwise_auto", "pred_auto"), ("naive", "step1_ms")):
        data[f"ape_{name}"] = (data[col] - data["step_ms"]).abs() / data["step_ms"] * 100
    # naive for the layerwise columns: the layerwise 1-GPU step unchanged
    data["ape_layerwise_naive"] = ((data["layerwise1_ms"] - data["step_ms"]).abs()
                                   / data["step_ms"] * 100)
    table = data.groupby(["gpu", "precision"]).agg(
        runs=("step_ms", "size"), history=("ape_history", "mean"),
        naive=("ape_naive", "mean"), layerwise=("ape_layerwise", "mean"),
        layerwise_auto=("ape_layerwise_auto", "mean"),
        layerwise_naive=("ape_layerwise_naive", "mean")).round(1)
    overall = data[["ape_history", "ape_layerwise", "ape_layerwise_auto", "ape_naive",
                    "ape_layerwise_naive"]].mean().round(1)
    full = fit_all_runs(data)  # the shipped fit (jobcast build-shipped scaling)
    doc = ["# Data-parallel scaling per framework, leave one GPU model out\n\n",
           "Command: `.venv/bin/python benchmarks/scaling.py`\n\n", AUTO_NOTE,
           "## TensorFlow: Lambda tf_cnn_benchmarks (replicated variables)\n\n",
           f"{len(data)} multi-GPU targets (2/4/8 GPUs, fp16/fp32, six networks). MAPE %; "
           "`history`: from the measured 1-GPU step, `naive` that step unchanged; "
           "`layerwise`: from the layerwise 1-GPU forecast by the replicated fit, "
           "`layerwise_auto` by `auto` for a TensorFlow user who names no stack (allreduce), "
           "`layerwise_naive` the layerwise 1-GPU step unchanged:\n\n",
           table.to_markdown(), "\n\n",
           f"Overall: history {overall['ape_history']} % vs naive {overall['ape_naive']} %; "
           f"layerwise {overall['ape_layerwise']} % (replicated), "
           f"{overall['ape_layerwise_auto']} % (auto: allreduce) vs layerwise naive "
           f"{overall['ape_layerwise_naive']} %.\n\n",
           f"Fitted on all runs: overlap {full.overlap_:.2f}; per doubling of the GPUs: sync "
           f"{full.sync_['full']:.3f} / {full.sync_['half']:.3f} of the step and "
           f"{full.tensor_ms_['full']:.3f} / {full.tensor_ms_['half']:.3f} ms per weight "
           "tensor (fp32 / fp16).\n"]
    torch_doc, _ = torch_section(shared_data_dir() / "torchvision_bench")
    doc += torch_doc + rule_examples()
    summary = [("TensorFlow 1.x (replicated)", "Lambda tf_cnn_benchmarks", "replicated fit, "
                "GPU model left out, from the measured 1-GPU step", len(data),
                overall["ape_history"], overall["ape_naive"])]
    summary.append(_TORCH_SUMMARY[0])
    if args.store != "none":
        from scaling_mlperf import ask, load_runs, mlperf_section

        mlperf = ask(load_runs(args.store))
        mlperf_doc, pairs = mlperf_section(mlperf, args.store)
        doc += mlperf_doc
        for label, part in pairs:
            summary.append(("MXNet/Horovod, PyTorch DDP (ddp)", f"MLPerf ResNet-50, {label}",
                            "ddp rule, from the measured step at another GPU count of the "
                            "same submission", int(part["pairs"]), part["ddp"],
                            part["same"]))
    doc += must_show(summary)
    if args.backtest:
        doc += backtest_section(Path(args.backtest))
    Path(args.out).write_text("".join(doc))
    print("".join(doc))


if __name__ == "__main__":
    main()
