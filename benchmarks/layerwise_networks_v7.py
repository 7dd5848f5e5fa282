"""Half layers no slower than the framework's fp32: before and after, in one process (issue 23).

Scores, leaving one GPU out and one network out, the shipped composition forms
(:data:`layerwise.corpora.network_fit.SHIPPED_FORMS`) on the targets of
``benchmarks/layerwise_networks_v3.py`` (Lambda tf_cnn_benchmarks; PyTorch
``torchvision_bench`` and the H100 steps), priced by the shipped layer predictor (called, never
changed), under two rule sets of :mod:`layerwise.as_run`:

1. ``before``: the rules shipped by section 8 (``benchmarks/layerwise_networks_v6.py``);
2. ``+ fp32 ceiling (shipped)``: on GPUs with TF32 tensor cores a half convolution or dense
   layer is priced at most at its price in the framework's fp32 as run there
   (:attr:`layerwise.as_run.RunPrecision.ceiling`).

Every score sits beside the naive roofline rule on the same rows. Run (about 1 minute)::

    .venv/bin/python benchmarks/layerwise_networks_v7.py [--no-doc]

Prints the tables and replaces (or appends) the section :data:`SECTION` of
``docs/layerwise-pytorch.md``; the rest of the document is kept.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import layerwise_networks_v6 as V6  # noqa: E402  (this folder, sys.path[0] of a script)

from layerwise.corpora.network_fit import network_sums  # noqa: E402

DOC = V6.DOC
SECTION_PREFIX = "## 9. Half layers no slower than the framework's fp32"
SECTION = SECTION_PREFIX + " (2026-11-26, shipped)"
SHIPPED = "+ fp32 ceiling (shipped)"
RULES = {"before": {**V6.RULES[V6.SHIPPED], "ceiling": False},
         SHIPPED: {**V6.RULES[V6.SHIPPED], "ceiling": None}}


def main() -> None:
    from layerwise.shipped import default_predictor

    args = V6.cli_args(__doc__.splitlines()[0])
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    predictor = default_predictor()
    frames = V6.targets()
    rows = []
    for name, rules in RULES.items():
        for fw, frame in frames.items():
            sums = network_sums(V6.with_rules(frame, rules), predictor, framework=fw)
            rows.append(V6.scored(sums, fw).assign(rules=name))
        print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    every = pd.concat(rows, ignore_index=True)
    every["suite"] = every["suite"].map(V6.SUITES)
    order = {n: i for i, n in enumerate(RULES)}
    framework = V6.summary(every.assign(data=np.where(every["suite"].eq(V6.SUITES["lambda"]),
                                                      "Lambda (TensorFlow)", "PyTorch")),
                           ["data", "split", "half", "rules"], order)
    suites = V6.summary(every, ["suite", "split", "half", "rules"], order)
    gpu = V6.summary(every[every["half"].eq("half") & ~every["suite"].eq(V6.SUITES["lambda"])],
                     ["split", "suite", "chip", "precision", "rules"], order)
    for t in (framework, suites, gpu):
        print(t.round(2).to_string(), flush=True)
    seconds = time.perf_counter() - started
    if not args.no_doc:
        write_section(V6._md(), framework, suites, gpu, seconds)
        print(f"wrote {DOC} section in {seconds:.0f} s")


def write_section(md, framework: pd.DataFrame, suites: pd.DataFrame, gpu: pd.DataFrame,
                  seconds: float) -> None:
    """Replace (or append) :data:`SECTION` of the doc; everything else is kept."""
    V6.replace_section(SECTION_PREFIX, V6.section_parts(
        SECTION, "layerwise_networks_v7.py", INTRO, md(framework), md(suites),
        "PyTorch half-precision rows per GPU (Lambda has no GPU with TF32: unchanged):",
        md(gpu), READING, seconds))

INTRO = """The rule (`layerwise.as_run.HALF_CEILING`, `RunPrecision.ceiling`, applied per layer by
`layerwise.pricing.price_rows` on both forecast paths): on a GPU with TF32 tensor cores
(Ampere and newer) the FP16/BF16 tensor-core peak is at least twice the TF32 and FP32 ones
and a half tensor moves half the bytes, so a convolution or dense layer priced at fp16/bf16
costs at most its price at the precision the framework's `fp32` runs it on that GPU (TF32
convolutions; PyTorch's matmuls in FP32, TensorFlow >= 2.4's in TF32). It is a bound known
before any run, with no fitted constant; the compositions are refitted by the benchmark's own
folds (the held-out GPU or network excluded). Where it binds: the per-op trees price some
large half convolutions on the H100 above their TF32 price (vgg16 at batch 64: half/TF32 of
the priced convolutions 0.74; measured whole steps 0.62), and the H100's own per-op rows
give a median fp16/TF32 ratio of 0.6-0.8 for convolutions above 10 GFLOP. Only PyTorch's
A100 and H100 rows change; Lambda's GPUs (Pascal to Turing) have no TF32.
"""

READING = """Reading (written after seeing the figures).

- **Shipped against before** (one process, above): PyTorch half 19.39 -> 18.94 % one GPU out
  and 17.32 -> 17.24 % one network out (coverage 0.90 -> 0.91, 0.93 -> 0.94); PyTorch fp32
  15.65 -> 15.61 % and 14.60 -> 14.62 % (+0.02 points, within the 0.3 allowed); Lambda
  unchanged (no GPU with TF32). It passes the ship rule (framework-level half better on
  both splits where the rule applies, no framework-level fp32 figure worse by more than
  0.3 points). Per suite: the H100 users' AMP steps 24.1 -> 22.6 % / 20.9 -> 20.4 % (bias
  +16.7 -> +13.6 % one GPU out), `torchvision_bench` half 16.3 -> 16.0 % / 14.70 -> 14.67 %
  (H100 pure fp16 22.3 -> 21.1 % one GPU out) and its fp32 12.5 -> 12.4 % / 12.0 -> 11.9 %;
  worse: the H100 first session's half steps 25.8 -> 26.0 % / 23.2 -> 23.4 % (their bias
  -0.8 -> -3.5 %: the bound makes them faster, they were not too slow) and the H100 users'
  fp32 steps one network out 18.9 -> 19.2 % (the refit). Sections 1-6
  (`benchmarks/layerwise_networks_v3.py --write-shipped`, re-run with this rule, which
  also refitted `composition-pytorch.json`; TensorFlow's is unchanged): PyTorch whole
  networks one GPU out 17.4 -> 17.2 % (fp32 15.7 -> 15.6, half 19.4 -> 18.9), one network
  out 15.9 % (fp32 14.6, half 17.3 -> 17.2); the H100 detection steps (never fitted) move
  by about one point the wrong way (retinanet fp16 92 -> 93 %).
- **Choices made after seeing figures** (one process, ad-hoc scripts on the same folds, not
  kept): the ceiling on convolutions only left PyTorch half one network out worse
  (17.32 -> 17.34 %); dense layers bounded at TF32 instead of the framework's fp32 gave
  19.01 / 17.28 % against the shipped 18.94 / 17.24 %; a tighter bound, 0.5x the TF32 price
  (the roofline ratio), PyTorch half 18.08 / 17.17 % but fp32 one network out
  14.60 -> 15.62 % (refit), and the geometric mean of the half and 0.5x TF32 prices
  17.61 / 16.57 % but fp32 one network out 15.10 %: both fail the rule below (no fp32
  figure worse by more than 0.3 points).
- **Also tried, did not help** (composition terms fitted in the folds, same rows, with the
  shipped rules before the ceiling; PyTorch half one GPU out / one network out against
  19.39 / 17.32 %): a per-class launch cost (tensor against fp32) 20.80 / 17.10; a
  per-class overlap exponent 20.24 / 17.81; a separate scale for half GEMM layers 19.99 /
  17.21; a fitted multiple of the half layers' floors 19.24 / 17.32; a separate scale for
  memory-bound layers 22.29 / 15.41 (TensorFlow's fitted to zero, as before).
- **What is left**: the 10 % goal is not met for half (PyTorch about 19 / 17 %, Lambda 17.8 /
  19.8 %). The H100's half rows are still priced too slow in conv-heavy networks without
  batch norm (vgg, squeezenet: the trees' half convolutions) and too fast in memory-bound
  ones (densenet, mnasnet): a per-op question (the trees fitted on few large half
  convolutions), best answered by more H100/A100 half rows at network shapes."""


if __name__ == "__main__":
    main()
