"""Half-precision whole-network steps: where the error was and the rules that fix it (issue 23).

Scores, leaving one GPU out and one network out, the shipped composition forms
(:data:`layerwise.corpora.network_fit.SHIPPED_FORMS`) on the targets of
``benchmarks/layerwise_networks_v3.py`` (Lambda tf_cnn_benchmarks; PyTorch
``torchvision_bench`` and the H100 steps), priced by the shipped layer predictor (called, never
changed), under the precision rules of :mod:`layerwise.as_run`, added one at a time:

1. ``before``: the rules of 2026-11-26 (half on slow-FP16 GPUs priced as FP32 in every
   framework; AMP's weight casts added as launches; no channel rule);
2. ``+ TensorFlow half storage``: half on slow-FP16 GPUs under TensorFlow keeps FP16 tensors
   (memory-bound layers at half the bytes);
3. ``+ channel alignment`` (shipped): a half convolution with input channels not a
   multiple of 8 runs without tensor cores in releases before TensorFlow 2.4 / PyTorch 1.8;
4. ``+ casts in layer prices`` (= shipped, by the lead after seeing the figures): AMP's
   weight casts not launched a second time (:func:`layerwise.as_run.cast_launches`).

Every score sits beside the
naive roofline rule on the same rows. Run (about 3 minutes on the loaded 2-core machine)::

    .venv/bin/python benchmarks/layerwise_networks_v6.py [--no-doc]

Prints the tables and replaces (or appends) the section :data:`SECTION` of
``docs/layerwise-pytorch.md``; the rest of the document is kept.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from layerwise.corpora.network_fit import (  # noqa: E402
    SHIPPED_FORMS,
    decomposable,
    lambda_targets,
    leave_one_out,
    naive_roofline,
    network_sums,
)
from layerwise.corpora.tables import shared_data_dir  # noqa: E402
from layerwise.corpora.torchvision_bench import pytorch_targets  # noqa: E402

DOC = ROOT / "docs" / "layerwise-pytorch.md"
SECTION_PREFIX = "## 8. Half precision as run"
SECTION = SECTION_PREFIX + " (2026-11-26, shipped)"
HALF = ("fp16", "bf16", "fp16-pure")
# rule set -> target columns read by network_sums (declared before any figure of this module;
# ceiling False: section 9's rule, benchmarks/layerwise_networks_v7.py, stays off here)
_OFF = {"ceiling": False}
RULES = {
    "before": {"half_rule": "fp32", "casts_in_layers": False, "align8": False, **_OFF},
    "+ TensorFlow half storage": {"half_rule": True, "casts_in_layers": False, "align8": False,
                                  **_OFF},
    "+ channel alignment": {"half_rule": True, "casts_in_layers": False, "align8": None, **_OFF},
    "+ casts in layer prices (shipped)": {"half_rule": True, "casts_in_layers": True,
                                          "align8": None, **_OFF},
}
SHIPPED = "+ casts in layer prices (shipped)"
NOT_SHIPPED = "+ channel alignment"
SUITES = {"lambda": "Lambda (TensorFlow 1.15)", "tvbench": "torchvision_bench",
          "train": "H100 users' steps", "train-nobench": "H100 first session"}


def _md():
    spec = importlib.util.spec_from_file_location(
        "layerwise_networks_v3", ROOT / "benchmarks" / "layerwise_networks_v3.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.md


def targets() -> dict[str, pd.DataFrame]:
    """Both frameworks' targets (those of the v3 benchmark)."""
    shared = shared_data_dir()
    lam = lambda_targets(shared / "lambda").assign(suite="lambda", framework="tensorflow",
                                                   optimizer="momentum")
    torch_targets, _ = decomposable(pytorch_targets(shared))
    return {"tensorflow": lam, "pytorch": torch_targets}


def with_rules(frame: pd.DataFrame, rules: dict) -> pd.DataFrame:
    """``frame`` with the rule columns of ``rules`` (None = by version: an object column)."""
    out = frame.copy()
    for key, value in rules.items():
        out[key] = pd.Series([value] * len(out), index=out.index, dtype=object)
    return out


TWO_SPLITS = (("chip", "one GPU out"), ("network", "one network out"))


def scored(sums: pd.DataFrame, fw: str, splits: tuple = TWO_SPLITS) -> pd.DataFrame:
    """Per row and split (``splits``: (column left out, name) pairs): pred, ape, covered, log
    bias, and the naive roofline's ape, with ``fw``'s shipped composition form."""
    parts = []
    for by, split in splits:
        loo = leave_one_out(sums, by=by, form=SHIPPED_FORMS[fw])
        naive = naive_roofline(sums, by)
        loo["naive_ape"] = np.abs(naive - loo["step_ms"]) / loo["step_ms"] * 100.0
        loo["bias"] = np.log(loo["pred_ms"] / loo["step_ms"])
        loo["split"] = split
        loo["half"] = np.where(loo["precision"].isin(HALF), "half", "fp32")
        parts.append(loo)
    return pd.concat(parts, ignore_index=True)


def summary(rows: pd.DataFrame, keys: list[str],
            order: dict[str, int] | None = None) -> pd.DataFrame:
    """rows, MAPE, median bias (%), coverage and the naive rule's MAPE per group; with
    ``order`` (rule set -> rank) sorted by ``keys``, the ``rules`` column in that order."""
    out = (rows.groupby(keys)
           .agg(rows=("ape", "size"), mape=("ape", "mean"), bias=("bias", "median"),
                coverage=("covered", "mean"), naive_mape=("naive_ape", "mean"))
           .assign(bias=lambda f: 100 * np.expm1(f["bias"])).rename(columns={"bias": "bias_%"})
           .reset_index())
    if order is None:
        return out
    return out.sort_values(keys, key=lambda c: c.map(order) if c.name == "rules" else c)


def main() -> None:
    from layerwise.shipped import default_predictor

    args = cli_args(__doc__.splitlines()[0])
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    predictor = default_predictor()
    frames = targets()
    rows = []
    for name, rules in RULES.items():
        for fw, frame in frames.items():
            sums = network_sums(with_rules(frame, rules), predictor, framework=fw)
            rows.append(scored(sums, fw).assign(rules=name))
        print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    every = pd.concat(rows, ignore_index=True)
    every["suite"] = every["suite"].map(SUITES)
    order = {n: i for i, n in enumerate(RULES)}
    table = summary(every, ["suite", "split", "half", "rules"], order)
    print(table.round(2).to_string(), flush=True)
    framework = summary(every.assign(data=np.where(every["suite"].eq(SUITES["lambda"]),
                                                   "Lambda (TensorFlow)", "PyTorch")),
                        ["data", "split", "half", "rules"], order)
    print(framework.round(2).to_string(), flush=True)
    gpu = summary(every[every["half"].eq("half") & every["split"].eq("one GPU out")
                        & every["rules"].isin(["before", SHIPPED, NOT_SHIPPED])],
                  ["suite", "chip", "precision", "rules"], order)
    print(gpu.round(2).to_string(), flush=True)
    seconds = time.perf_counter() - started
    if not args.no_doc:
        write_section(_md(), framework, table, gpu, seconds)
        print(f"wrote {DOC} section in {seconds:.0f} s")


def write_section(md, framework: pd.DataFrame, table: pd.DataFrame, gpu: pd.DataFrame,
                  seconds: float) -> None:
    """Replace (or append) :data:`SECTION` of the doc; everything else is kept."""
    replace_section(SECTION_PREFIX, section_parts(
        SECTION, "layerwise_networks_v6.py", INTRO, md(framework), md(table),
        "Half-precision rows, one GPU out, per GPU (before, channel alignment, shipped):",
        md(gpu), READING, seconds))


def section_parts(section: str, script: str, intro: str, framework_md: str, suites_md: str,
                  gpu_title: str, gpu_md: str, reading: str, seconds: float) -> list[str]:
    """The lines of one rule-set section: its command, intro, the per-framework, per-suite
    and per-GPU tables, the reading and the run time."""
    return [section, "", f"`.venv/bin/python benchmarks/{script}`", "", intro,
            "Per framework (MAPE %, median bias %, 90 % interval coverage; the naive rule is "
            "the roofline x one fitted efficiency on the same rows):", "", framework_md, "",
            "Per suite:", "", suites_md, "", gpu_title, "", gpu_md, "", reading,
            f"\nRun time {seconds:.0f} s.\n"]


def replace_section(prefix: str, parts: list[str]) -> None:
    """Replace the doc's section that starts with ``prefix`` (up to the next ``## ``) by
    ``parts`` joined by newlines, or append it; everything else is kept."""
    text = DOC.read_text() if DOC.is_file() else ""
    head, _, rest = text.partition(prefix)
    tail = ""
    if rest:
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1:] if nxt >= 0 else ""
    DOC.write_text(head.rstrip("\n") + "\n\n" + "\n".join(parts)
                   + ("\n" + tail if tail else ""))


def cli_args(description: str) -> argparse.Namespace:
    """``--no-doc`` (print only), the one option of the section benchmarks."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--no-doc", action="store_true", help="print only")
    return parser.parse_args()

INTRO = """Where the half-precision error came from and what was done, on the rows and splits of
sections 1-2 (composition forms as shipped: TensorFlow `additive-floor`, PyTorch
`overlap-floor-year`; intervals from groups left out inside each fold's training part). Rule
sets, each adding one rule to the one above (`layerwise.as_run`):

* `before`: the rules shipped before this section (half on slow-FP16 GPUs priced as FP32 in
  every framework; AMP's weight casts added as launches, two per weight layer and step; every
  half convolution on tensor cores).
* `+ TensorFlow half storage`: on GPUs without fast FP16 (Pascal GP10x), TensorFlow's fp16
  keeps the tensors in FP16 (memory-bound layers at half the bytes) while cuDNN computes with
  FP32 math; PyTorch's stays priced as FP32 throughout.
* `+ channel alignment`: in framework releases before TensorFlow 2.4 / PyTorch 1.8
  (cuDNN 7 or the first cuDNN 8) a half convolution whose input channels are not a multiple
  of 8 (the image's first convolution, 3 channels) runs without tensor cores: priced as FP32.
  Requests without a version (current frameworks) and PyTorch 2.11 (the H100 rows) price it
  in half.
* `+ casts in layer prices (shipped)`: the per-op fp16/bf16 rows were timed under
  `torch.autocast` with FP32 parameters (`layerwise/backends/torch_timing.py`), so every
  priced half weight layer already holds its weight cast and the cast of its gradient; the
  step does not launch them a second time (`layerwise.as_run.CASTS_IN_LAYER_PRICES`).

Sections 1-6 (`benchmarks/layerwise_networks_v3.py --write-shipped`, re-run after this
section, which also refitted the shipped compositions) are priced with the shipped rules;
section 7's figures were computed before them and are kept as they were.
"""

READING = """Reading (written after seeing the figures).

- **Where the error was** (`before`, one GPU out): PyTorch's half rows priced too slow on
  the H100 (users' AMP steps +30 % median, coverage 0.62; pure fp16 +12 %) and on the RTX
  2080 Ti (+18 %, as its fp32: a host faster than its year), too fast on the Titan RTX and
  A100 (-6 to -7 %, as their fp32) and the Titan Xp (-10 %: priced as FP32, ran 1.2x slower
  than its fp32). Lambda's half rows: V100 +24 %, GTX 1080 Ti +14 %, RTX 2080 Ti +9 %, Quadro
  RTX 8000 -12 % (its fp32 -12 % too). The half/fp32 ratio of the layer sums against the
  measured ratio (same GPU, network, batch) has no single sign across GPUs: the A100 and
  Titan RTX gain less from half than the layer prices say, the H100 more (most in
  squeezenet, shufflenet_v2, vgg: the H100's half convolutions inside networks run faster
  than its per-op rows price them, the per-op predictor's part). Networks with depthwise or
  grouped convolutions (mobilenet, mnasnet, shufflenet_v2, resnext) follow the same
  GPU-dependent sign as the others, so no rule by convolution type fits all GPUs.
- **TensorFlow half storage** (shipped): GTX 1080 Ti fp16 +14 % -> +9 %. Applied to PyTorch
  it made the Titan Xp's pure fp16 worse (17.4 -> 20.1 % one GPU out), so it is
  TensorFlow's only: a choice made after seeing both.
- **Channel alignment** (shipped): in Lambda's networks the image's convolution is the only
  unaligned one; priced as FP32 it takes Lambda's half rows from 19.9 to 17.8 % one GPU out
  and 22.7 to 19.8 % one network out, fp32 8.4 -> 7.8 % and 9.4 -> 9.1 % (the refit). Applied
  to every release (PyTorch 2.11 on the H100 too) it made PyTorch's half worse (one GPU out
  19.8 -> 20.5 %, the H100's AMP steps 25.5 -> 26.7 %; measured with the cast rule below
  on): cuDNN 9 has tensor-core kernels for any channel count. The cut by release
  (TensorFlow < 2.4, PyTorch < 1.8: `torchvision_bench`'s PyTorch 1.4 and 1.7 rows get it,
  the H100's 2.11 rows do not) was chosen after seeing that. Testing output channels as well
  as input channels gave the same figures (shufflenet_v2's 58/116/232-channel convolutions
  have unaligned inputs too).
- **Shipped against before**: every suite's half MAPE falls on both splits (Lambda 21.3 ->
  17.8 % / 23.6 -> 19.8 %; `torchvision_bench` 16.7 -> 16.3 % / 14.5 -> 14.3 %; H100 users'
  AMP 33.9 -> 33.4 % / 27.1 -> 27.0 %; H100 first session 25.7 -> 25.0 % / 22.8 -> 22.6 %) and
  no suite's fp32 MAPE rises by more than 0.01 points. The naive roofline rule (one fitted
  efficiency) is 30-124 % on the same rows, but it beats the composition on the H100 users'
  AMP steps one GPU out (32.5 % against 33.4 %; only the cast rule below wins there, 24.1 %).
- **Casts counted twice** (shipped by the lead after seeing these figures; the helper who
  built it held it back by the rule below): the AMP step added two launches per weight
  layer that the autocast-timed layer prices already hold. Counted once, the H100's AMP
  steps go from +30 % to +17 % median one GPU out (MAPE 33.4 -> 24.1 %, coverage 0.62 ->
  0.81; one network out 27.0 -> 20.9 %), PyTorch half 21.1 -> 19.4 % / 18.1 -> 17.3 %; but
  the refitted composition (one tensor-core scale shared by TF32 and half, one launch cost)
  is worse on the H100 users' fp32 steps one network out (17.7 -> 18.9 %, coverage 0.94 ->
  0.87) and on the H100 first session's half steps (25.0 -> 25.8 %, 22.6 -> 23.2 %), and
  `torchvision_bench` half one network out 14.3 -> 14.7 %: it fails the ship rule (no fp32
  suite worse by more than 0.3 points). Shipped all the same
  (`layerwise.as_run.CASTS_IN_LAYER_PRICES` True): it removes a double count the timing
  backend shows (not a fitted term), and at the framework level every PyTorch figure
  improves (fp32 15.9 -> 15.7 / 15.0 -> 14.6 %, half 21.1 -> 19.4 / 18.1 -> 17.3 %); the
  suite that gets worse is the H100 users' fp32 one network out (39 rows).
- **Tried, did not help** (same splits): a third composition class (half apart from TF32):
  PyTorch half one GPU out 21.5 -> 22.3 %; cast launches at weights 0.25 and 0.5 (between
  the two above).
- **What is left**: the 10 % goal is not met for half in any suite (Lambda is nearest: 17.8
  / 19.8 %). The H100's half rows (users' AMP +30 %, pure fp16 +11 % one GPU out) need the
  per-op predictor's H100 half convolutions priced as they run inside networks; the 2080 Ti's
  host (+18 %, fp32 and half alike); Lambda's V100 fp16 (+21 %, its fp16 resnets run 1.3-1.7x
  faster than priced while its vgg16 and alexnet run slower) and Quadro RTX 8000 (-13 %)."""


if __name__ == "__main__":
    main()
