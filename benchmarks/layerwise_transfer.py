"""Whole networks on GPUs and GPU generations left out, on every whole-network set (issue 36).

Targets (every whole-network set in ``../shared/data``):

* Lambda tf_cnn_benchmarks (TensorFlow 1.15; V100, GTX 1080 Ti, RTX 2080 Ti, Quadro RTX 8000;
  fp32 and fp16; :func:`layerwise.corpora.network_fit.lambda_targets`);
* PROFET (TensorFlow 2.5; V100, T4, M60, K80; fp32; five input sides, five batches;
  :func:`layerwise.corpora.profet.profet_targets`; PROFET's AlexNet is not the zoo's and is
  left out since 2026-12-03; the "AlexNet kept" variants price it as the zoo's ``alexnet``,
  as before, to show the figures of then);
* PyTorch: ``torchvision_bench`` (RTX 2080 Ti, TITAN RTX, A100, TITAN Xp; fp32 and pure fp16)
  and this project's H100 steps (:func:`layerwise.corpora.torchvision_bench.pytorch_targets`).

Each row is priced through the product's layerwise route
(:func:`layerwise.corpora.network_fit.network_sums`: decomposition, shipped layer predictor,
precision as run), then predicted by the framework's composition in its shipped form
(:data:`layerwise.corpora.network_fit.SHIPPED_FORMS`) fitted without the row's group
(:func:`layerwise.corpora.network_fit.leave_one_out`): one GPU chip out, and one GPU
generation out (the catalog's architecture: Kepler, Maxwell, Pascal, Volta, Turing, Ampere,
Hopper). **What is held out**: the composition's constants, its whole-network residual (fixed,
network and GPU parts) and the interval are refitted without the group; the interval from
residuals of groups left out inside the fit. **What is not**: the shipped layer predictor
(``layerwise/data/default_predictor``) is used as is; its per-op training rows include V100,
P100, GTX 1080 Ti, M60, K80, K40 (Justus, conv and dense), P100, P4, T4, V100, A100 (NeuSight,
forward) and H100 (this project), so for those GPUs the per-op part has seen the GPU (refitting
it per fold takes hours on two cores). The RTX 2080 Ti, Quadro RTX 8000, TITAN RTX and TITAN Xp
are in no per-op table: their rows are clean transfers.

Scores per framework, split, suite and precision (fp32 / half): MAPE, median APE, coverage of
the 90 % interval, mean signed error (bias, mean of predicted / measured - 1); bias by family
(:func:`family`: plain conv, BN-residual, depthwise, other) and by GPU.

The composition's precision classes (:data:`CLASS_CANDIDATES`, declared before scoring):
two (fp32 / tensor, shipped), (a) a separate half class, (b) (a) with half requests on GPUs
without FP16 tensor cores in it too; scored by the pooled MAPE of both splits and both
frameworks (:func:`class_candidates`).

A last section tries the memory-bound kinds (batch norm, pooling, activations, adds) priced
from PROFET's op times by :mod:`lib.membound` (held out: its model refitted without the
GPU or generation predicted, :func:`held_out_membound`); not shipped (see the reading).

Run (2-5 minutes on two cores)::

    .venv/bin/python benchmarks/layerwise_transfer.py [--no-doc]

Writes ``docs/lab/layerwise-transfer.md`` (the sections this script owns; text written after
seeing the figures is in :data:`READING`).
"""

from __future__ import annotations

import argparse
import re
import time
import warnings

import numpy as np
import pandas as pd
from lib import REPO as ROOT
from lib import md, membound

from layerwise.corpora.network_fit import (
    SHIPPED_FORMS,
    decomposable,
    lambda_targets,
    leave_one_out,
    network_sums,
)
from layerwise.corpora.profet import (
    NOT_THE_ZOOS,
    decomposable_sizes,
    profet_targets,
)
from layerwise.corpora.tables import shared_data_dir
from layerwise.corpora.torchvision_bench import pytorch_targets
from layerwise.efficiency import chip_of

DOC = ROOT / "docs" / "lab" / "layerwise-transfer.md"
HALF = ("fp16", "bf16", "fp16-pure")
SPLITS = (("chip", "one GPU out"), ("generation", "one generation out"))
FAMILIES = (("plain conv", r"(vgg|alexnet|squeezenet)"),
            ("depthwise", r"(mobilenet|mnasnet|shufflenet|efficientnet|nasnet)"),
            ("BN-residual", r"(resnet|resnext|wide_resnet|densenet|inception|googlenet|xception)"))


def family(name: str) -> str:
    """The issue's family of a network name: plain conv (VGG, AlexNet, SqueezeNet, VGG-BN
    included), depthwise (MobileNet, MNASNet, ShuffleNet, EfficientNet, NASNet), BN-residual
    (ResNet, ResNeXt, DenseNet, Inception, GoogLeNet, Xception), else other."""
    for label, pattern in FAMILIES:
        if re.match(pattern, str(name).lower()):
            return label
    return "other"


def generation(gpu: str) -> str:
    """The GPU's architecture as the catalog gives it."""
    from fleet.catalog import resolve_gpu

    return str(resolve_gpu(str(gpu)).architecture)


def all_targets() -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Targets per framework and what the zoo could not build."""
    shared = shared_data_dir()
    lam = lambda_targets(shared / "lambda").assign(suite="lambda", framework="tensorflow",
                                                   optimizer="momentum")
    prof, bad_sizes = decomposable_sizes(profet_targets(shared / "profet"))
    torch_targets, bad_nets = decomposable(pytorch_targets(shared))
    return ({"tensorflow": pd.concat([lam, prof], ignore_index=True),
             "pytorch": torch_targets}, bad_sizes + bad_nets)


def profet_alexnet() -> pd.DataFrame:
    """PROFET's AlexNet steps priced as the zoo's ``alexnet``, as before issue 36's fix
    (:data:`layerwise.corpora.profet.NOT_THE_ZOOS`): for the "before" variants only."""
    return decomposable_sizes(profet_targets(shared_data_dir() / "profet",
                                             {"AlexNet": "alexnet"}))[0]


def with_alexnet(sums: dict[str, pd.DataFrame], predictor) -> dict[str, pd.DataFrame]:
    """``sums`` with PROFET's AlexNet rows priced and added to the TensorFlow set."""
    extra = priced({"tensorflow": profet_alexnet()}, predictor)["tensorflow"]
    return {**sums, "tensorflow": pd.concat([sums["tensorflow"], extra], ignore_index=True)}


def is_profet_alexnet(rows: pd.DataFrame) -> pd.Series:
    """Rows of PROFET's AlexNet (left out after issue 36's fix)."""
    return (rows["suite"] == "profet") & (rows["network"] == "alexnet")


def priced(targets: dict[str, pd.DataFrame], predictor) -> dict[str, pd.DataFrame]:
    """network_sums per framework, with generation and family columns."""
    out = {}
    for fw, frame in targets.items():
        sums = network_sums(frame, predictor, framework=fw, extra=membound.kind_work_column)
        sums["generation"] = sums["gpu"].map(generation)
        sums["family"] = sums["network"].map(family)
        out[fw] = sums
    return out


def scored(sums: dict[str, pd.DataFrame], forms: dict[str, dict]) -> pd.DataFrame:
    """Every row under every split: pred, interval, ape, covered, signed error."""
    parts = []
    for fw, frame in sums.items():
        for by, split in SPLITS:
            loo = leave_one_out(frame, by=by, form=forms[fw])
            loo["split"], loo["fw"] = split, fw
            parts.append(loo)
    return _finish(pd.concat(parts, ignore_index=True))


def _finish(rows: pd.DataFrame) -> pd.DataFrame:
    rows["signed"] = rows["pred_ms"] / rows["step_ms"] - 1.0
    rows["prec"] = np.where(rows["precision"].isin(HALF), "half", "fp32")
    return rows


def op_frame() -> pd.DataFrame:
    """PROFET's op times joined with the zoo's work (:func:`layerwise.membound.fit_frame`),
    with the chip and generation columns the splits use."""
    frame = membound.fit_frame(shared_data_dir() / "profet")
    frame["chip"] = frame["gpu"].map(chip_of)
    return frame


def held_out_membound(frame: pd.DataFrame, by: str, fw_sums: pd.DataFrame, form: dict,
                      candidate: tuple) -> pd.DataFrame:
    """leave_one_out with the memory-bound kinds priced by :mod:`layerwise.membound`, its
    model fitted without the group predicted (op times of every PROFET GPU for the others)."""
    col = {"chip": "chip", "generation": "generation"}[by]
    mine = [g for g in fw_sums[by].unique() if g in set(frame[col])]
    others = [g for g in sorted(fw_sums[by].unique()) if g not in mine]
    parts = []
    if others:
        model = membound.fit(frame, *candidate)
        parts.append(leave_one_out(membound.reprice_memory_bound(fw_sums, model), by=by, form=form,
                                   groups=others))
    for g in mine:
        model = membound.fit(frame[frame[col] != g], *candidate)
        parts.append(leave_one_out(membound.reprice_memory_bound(fw_sums, model), by=by, form=form,
                                   groups=[g]))
    rows = pd.concat(parts, ignore_index=True)
    return rows[np.isfinite(rows["pred_ms"])]


def scored_membound(sums: dict[str, pd.DataFrame], forms: dict[str, dict], frame: pd.DataFrame,
                    candidate: tuple = membound.CANDIDATES[membound.CHOSEN]) -> pd.DataFrame:
    """:func:`scored` with the memory-bound kinds repriced per fold (held out)."""
    parts = []
    for fw, fw_sums in sums.items():
        for by, split in SPLITS:
            loo = held_out_membound(frame, by, fw_sums, forms[fw], candidate)
            loo["split"], loo["fw"] = split, fw
            parts.append(loo)
    return _finish(pd.concat(parts, ignore_index=True))


def summary(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """rows, MAPE, median APE, coverage and mean signed error (%) per group of ``keys``."""
    return (rows.groupby(keys)
            .agg(rows=("ape", "size"), mape=("ape", "mean"), median_ape=("ape", "median"),
                 coverage=("covered", "mean"), bias_pct=("signed", "mean"))
            .assign(bias_pct=lambda f: 100.0 * f["bias_pct"]).reset_index())


def tables(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The report's tables (with PROFET's AlexNet scored: also the overall figures on the
    rows scored after the fix)."""
    same = {}
    if is_profet_alexnet(rows).any():
        same = {"Overall, rows scored after the fix (PROFET's AlexNet not scored)": summary(
            rows[~is_profet_alexnet(rows)], ["split", "prec"])}
    return {**same,
        "Overall (every set, fp32 and half)": summary(rows, ["split", "prec"]),
        "By set": summary(rows, ["split", "suite", "prec"]),
        "Bias by family": summary(rows, ["split", "family"]),
        "Bias by family and set": summary(rows, ["split", "suite", "family"]),
        "By GPU (one GPU out)": summary(rows[rows["split"] == "one GPU out"],
                                        ["generation", "gpu", "suite"]),
    }


def worst(rows: pd.DataFrame, n: int = 12) -> pd.DataFrame:
    """The rows furthest off, one GPU out."""
    part = rows[rows["split"] == "one GPU out"]
    cols = ["suite", "gpu", "network", "precision", "batch_per_gpu", "step_ms", "pred_ms",
            "ape", "covered"]
    cols += ["image_size"] if "image_size" in part.columns else []
    return part.sort_values("ape", ascending=False)[cols].head(n)


def write_doc(results: dict[str, dict[str, pd.DataFrame]], skipped: list[str],
              bad: pd.DataFrame, seconds: float) -> None:
    """Write the document: head, one block of tables per variant, worst rows, reading."""
    parts = [HEAD.format(seconds=seconds, skipped=", ".join(skipped) or "none",
                         not_zoo="; ".join(f"{k}: {v}" for k, v in NOT_THE_ZOOS.items()))]
    for variant, tabs in results.items():
        parts.append(f"## {variant}\n")
        for title, table in tabs.items():
            parts.append(f"### {title}\n\n{md(table)}\n")
    parts.append("## Furthest off (last variant, one GPU out)\n\n" + md(bad) + "\n")
    parts.append(READING)
    DOC.write_text("\n".join(parts))


# the TensorFlow form shipped before issue 36 (SHIPPED_FORMS now holds the one chosen here)
BEFORE_TF = {"overlap_p": 0.0, "subtract_floor": True, "residual_alpha": 100.0,
             "residual_shrink": 1.0}
# the TensorFlow candidates, declared after seeing the "before" figures (PROFET's V100 priced
# +70 %, K80 -36 %: a per-step and per-kernel cost learned on old hosts); chosen by the mean
# MAPE of both splits (one GPU out, one generation out), never by the in-sample fit; scored
# since 2026-12-03 on the targets without PROFET's AlexNet (none wins clearly there)
TF_CANDIDATES = {
    "year": {**BEFORE_TF, "year_kernel": True},
    "pytorch-form": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": True,
                     "residual_alpha": 1000.0, "residual_shrink": 1.0},
    "year-a1000": {**BEFORE_TF, "year_kernel": True, "residual_alpha": 1000.0},
}


# the composition's precision classes (issue 36, 2026-12-03): the candidates declared after
# seeing the H100's AMP/fp16 steps priced +30-60 % on VGG, ResNeXt and Wide ResNet while its
# TF32 steps sit within +-15 % (one ``tensor`` scale serves TF32 and half), before any was
# scored; chosen by the pooled MAPE of both splits, both frameworks, never by in-sample fit:
# "two" = fp32 / tensor (as shipped before), "half" = (a) fp32 / tensor (TF32) / half (FP16,
# BF16 on tensor cores), "half-any" = (b) as (a), and a half request on a GPU without FP16
# tensor cores (Pascal: FP32 math, half storage) in the half class too
CLASS_CANDIDATES = ("two", "half", "half-any")


def classed(frame: pd.DataFrame, rule: str) -> pd.DataFrame:
    """``frame`` (network_sums) with ``precision_class`` under a :data:`CLASS_CANDIDATES`
    rule, from the class as priced and the request."""
    half = frame["precision"].isin(HALF)
    old = frame["precision_class"].replace({"half": "tensor"})
    new = {"two": old, "half": old.mask(half & old.eq("tensor"), "half"),
           "half-any": old.mask(half, "half")}[rule]
    return frame.assign(precision_class=new)


def class_candidates(sums: dict[str, pd.DataFrame], forms: dict[str, dict]) -> pd.DataFrame:
    """One column per :data:`CLASS_CANDIDATES` rule: MAPE (both splits and frameworks
    pooled, then per split, then per split, set and precision), coverage and bias (%)."""
    out = {}
    for rule in CLASS_CANDIDATES:
        rows = scored({fw: classed(f, rule) for fw, f in sums.items()}, forms)
        fig = {"MAPE, pooled": rows["ape"].mean(), "coverage, pooled": rows["covered"].mean(),
               "bias %, pooled": 100.0 * rows["signed"].mean()}
        fig.update({f"MAPE, {k}": v for k, v in rows.groupby("split")["ape"].mean().items()})
        for (split, suite, prec), part in rows.groupby(["split", "suite", "prec"]):
            fig[f"MAPE, {split}, {suite} {prec}"] = part["ape"].mean()
            fig[f"bias %, {split}, {suite} {prec}"] = 100.0 * part["signed"].mean()
        out[rule] = fig
    frame = pd.DataFrame(out)
    return frame.rename_axis("figure").reset_index()


def variants() -> dict[str, tuple[bool, dict[str, dict]]]:
    """The rule sets scored: name -> (PROFET's AlexNet in the fit and the scores, forms per
    framework): before, the shipped form before the AlexNet fix, then the shipped ones."""
    return {"Before issue 36 (TensorFlow form of then, PROFET's AlexNet kept)":
            (True, {**SHIPPED_FORMS, "tensorflow": BEFORE_TF}),
            "Shipped form, PROFET's AlexNet kept (before the fix of 2026-12-03)":
            (True, SHIPPED_FORMS),
            "Shipped after issue 36 (PROFET's AlexNet left out)": (False, SHIPPED_FORMS)}


def candidates(sums: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Each TensorFlow candidate form's MAPE, coverage and family bias on both splits."""
    out = []
    for name, form in {"before": BEFORE_TF, **TF_CANDIDATES}.items():
        rows = scored({"tensorflow": sums["tensorflow"]}, {"tensorflow": form})
        fam = rows.groupby("family")["signed"].mean() * 100.0
        out.append({"form": name, "mape": rows["ape"].mean(), "coverage": rows["covered"].mean(),
                    **{f"bias_{k}": v for k, v in fam.items()}})
    return pd.DataFrame(out)


def op_candidates(frame: pd.DataFrame) -> pd.DataFrame:
    """Each :data:`layerwise.membound.CANDIDATES` feature set's error on PROFET's per-step
    op times, each GPU (= each generation) predicted by a model fitted without it."""
    out = []
    ms = frame["op_ms"].to_numpy(float)
    for name, cand in membound.CANDIDATES.items():
        ratio = np.exp(membound.held_out_errors(frame, cand))
        ape = np.abs(ratio - 1.0) * 100.0
        by_gpu = pd.Series(ratio - 1.0).groupby(frame["gpu"]).mean() * 100.0
        out.append({"candidate": name, "mape": ape.mean(), "median_ape": float(np.median(ape)),
                    "time_weighted_ape": float(np.average(ape, weights=ms)),
                    **{f"bias_{g.split()[1]}": v for g, v in by_gpu.items()}})
    return pd.DataFrame(out)


def main() -> None:
    from layerwise.shipped import default_predictor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    targets, skipped = all_targets()
    predictor = default_predictor()
    sums = priced(targets, predictor)
    kept = with_alexnet(sums, predictor)
    print(f"priced {sum(len(s) for s in kept.values())} rows in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    results, rows = {}, pd.DataFrame()
    for name, (alexnet, forms) in variants().items():
        rows = scored(kept if alexnet else sums, forms)
        results[name] = tables(rows)
        for title, table in results[name].items():
            print(f"\n{name}: {title}\n{table.round(2).to_string(index=False)}", flush=True)
    bad = worst(rows)
    print(bad.round(2).to_string(index=False))
    cands = candidates(sums)
    print(cands.round(2).to_string(index=False))
    results["TensorFlow forms tried (both splits pooled)"] = {"Candidates": cands}
    classes = class_candidates(sums, SHIPPED_FORMS)
    print(classes.round(2).to_string(index=False), flush=True)
    results["Precision classes tried (both splits and frameworks pooled)"] = {
        "Class candidates": classes}
    frame = op_frame()
    ops = op_candidates(frame)
    print(ops.round(1).to_string(index=False), flush=True)
    rows = scored_membound(sums, SHIPPED_FORMS, frame)
    results[MEMBOUND] = {"Held-out op-time error per feature set (PROFET ops, "
                         f"{len(frame)} kind x workload x GPU rows)": ops, **tables(rows)}
    for title, table in results[MEMBOUND].items():
        print(f"\n{MEMBOUND}: {title}\n{table.round(2).to_string(index=False)}", flush=True)
    if not args.no_doc:
        write_doc(results, skipped, bad, time.perf_counter() - started)
        print(f"wrote {DOC}")


MEMBOUND = "Memory-bound kinds from PROFET op times (tried, not shipped)"
HEAD = """# Layerwise transfer to GPUs and generations left out (issue 36)

Written by `.venv/bin/python benchmarks/layerwise_transfer.py` ({seconds:.0f} s on two cores).
Every whole-network set in `../shared/data`: Lambda tf_cnn_benchmarks (TensorFlow 1.15, four
GPUs, fp32 and fp16), PROFET (TensorFlow 2.5, V100/T4/M60/K80, fp32, input sides 32-256,
batches 16-256) and PyTorch (`torchvision_bench` on four GPUs, fp32 and pure fp16; this
project's H100 steps). Each row is priced by the product's layerwise route
(`network_sums`: decomposition, shipped layer predictor, precision as run) and predicted by its
framework's composition in the shipped form, fitted **without the row's GPU chip** (one GPU
out) or **without its whole generation** (one generation out: the catalog's architecture).

**Held out**: the composition, its whole-network residual (including the per-GPU part) and the
interval. **Not held out**: the shipped per-op layer predictor; its training rows include V100,
P100, GTX 1080 Ti, M60, K80, K40 (Justus conv/dense), P4, T4, A100 (NeuSight, forward) and H100.
The RTX 2080 Ti, Quadro RTX 8000, TITAN RTX and TITAN Xp are in no per-op table (clean
transfers). Left out (no zoo network at that size): {skipped}. Left out after issue 36's fix
(PROFET's network is not the zoo's of that name; scored only in the "AlexNet kept" variants):
{not_zoo}.

Columns: MAPE and median APE in %, coverage of the 90 % interval, bias_pct = mean signed error
(predicted / measured - 1) in %. Families: plain conv (VGG, VGG-BN, AlexNet, SqueezeNet),
BN-residual (ResNet, ResNeXt, Wide ResNet, DenseNet, Inception, GoogLeNet), depthwise
(MobileNet, MNASNet, ShuffleNet).
"""

READING = """## A half-precision scale class: tried, not shipped (written 2026-12-03)

- **Declared** (after seeing, in the pass below, the H100's AMP/fp16 steps of VGG without
  batch norm, ResNeXt and Wide ResNet priced +30-60 % while their TF32 steps sit within
  +-15 %, and before scoring any): two candidates for the composition's precision classes
  (`CLASS_CANDIDATES`, both frameworks, the shipped forms otherwise): **(a)** `half`: fp32 /
  tensor (TF32) / half (FP16 or BF16 on tensor cores), three scales; **(b)** `half-any`: (a)
  with half requests on GPUs without FP16 tensor cores (Pascal; FP32 math, half storage) in
  the half class too. Rule: ship one only if it wins clearly on the pooled held-out MAPE (both
  splits, both frameworks) without worsening any set by more than 2 points. For TensorFlow
  (a) is the shipped fit renamed (its `tensor` rows are all half); the residual counts a
  half class as on tensor cores (`layerwise.as_run.TENSOR_CLASSES`).
- **Figures** (table "Class candidates"; `.venv/bin/python benchmarks/layerwise_transfer.py`):
  pooled MAPE two classes 18.87 %, (a) 18.82 %, (b) 18.89 % (coverage 0.87 each); one GPU out
  18.78 / 18.74 / 18.80, one generation out 18.95 / 18.90 / 18.97. (a) moves the H100
  `train` fp32 steps 15.5 -> 14.7 % and its half steps 19.8 -> 20.4 % (bias +14.6 -> +15.6 %),
  `tvbench` half 15.7 -> 15.9 %; (b) moves Lambda half 15.1 -> 14.4 % (one generation out
  19.7 -> 17.7 %) but the H100 `train` half 19.8 -> 21.3 % and `tvbench` half 15.7 -> 16.4 %.
- **Chosen after seeing them**: neither wins clearly (0.05 points either way), so **nothing
  ships**: `run_class` still gives fp32 / tensor and the compositions are unchanged. What
  stays in the product is compatibility only: a composition without a `half` scale prices
  a half class at its `tensor` scale (`CLASS_FALLBACK`), which the shipped files never
  meet. Why a class scale cannot help, read from the rows before scoring: on the H100 the
  median of measured / priced sum is 0.40 for fp16, 0.42 bf16 and 0.41 TF32 (`train`):
  its half steps as a whole are priced like its TF32 steps; the +30-60 % sits on the
  convolution-heavy networks without batch norm (VGG-BN's half steps +4-17 %), i.e. in the
  H100's own per-op half convolution prices against under-priced batch norm, which no
  scale fitted on other GPUs (the H100 left out) can see.

## Priced as measured: PROFET's classes, H100 auxiliary heads (written 2026-12-03)

- **Search** (after seeing the "Shipped after issue 36" figures of the morning: fp32 19.1 %,
  half 17.6 %): the worst rows per set and GPU, and for each suspicious group what was run
  (the benchmarks' own scripts: PROFET's `profile_workload.py`/`dataset_info.py`/
  `model_info.py`, `torchvision_bench`'s `benchmark_models.py`, this project's
  `gpu_networks.py`/`gpu_session2.py`) against what is priced. Two mismatches found, both
  fixed at the reader: (1) PROFET's synthetic data sets train **10 classes at 32 px, 100 at
  64 and 128 px** (1000 at 224/256); the zoo priced a 1000-way classifier everywhere
  (`CLASSES_BY_SIDE`, `as_measured`); (2) both H100 sessions built GoogLeNet and
  Inception-v3 with `aux_logits=False`, but the zoo's torchvision specs (traced in training
  mode) hold the auxiliary classifiers (GoogLeNet: 16 rows, 6 % of its priced sum, 8 % of
  its kernels; Inception-v3: 2 %) (`aux_heads`, `AUX_HEADS`). Compositions refitted by
  `python -m layerwise.corpora.build_default --composition-only` (both files change a
  little). Checked and found as priced: batch per GPU, image sides (Inception-v3 299 px),
  optimizers (PROFET plain SGD, H100 momentum, `torchvision_bench` none), precision as run
  (TF32 flags per H100 row, PyTorch 1.7 on the A100, pure fp16), step definitions (PROFET:
  median of the second epoch's Keras batch times; `torchvision_bench`: forward + backward with
  the input copy, no optimizer), units.
- **Figures** (one GPU out, before -> after): fp32 19.1 -> 19.1 % (coverage 0.85), half
  17.6 -> 17.6 % (0.90); H100 `train` fp32 15.6 -> 15.5 % (coverage 0.83 -> 0.86), half
  20.1 -> 19.8 % (0.85 -> 0.88, bias +15.1 -> +14.6 %); PROFET 22.5 -> 22.6 %; other sets
  within 0.2; family bias plain conv +6.6 % (unchanged), BN-residual -2.6 %, depthwise -0.3 %.
  **Both fixes are real but small**: neither was a cause of the remaining error. No modelling
  candidate was tried in this pass.
- **Left (what the search found that is not a reader bug)**: PROFET's K80 is priced 25 % fast
  at every side and network (likely the p2.xlarge's default application clocks, 562 of
  875 MHz with auto-boost; not in the data), the M60 9-68 % slow (MobileNetV2, Inception:
  launch-bound); PROFET's ResNet18/34/50 are its own pre-activation blocks with an L2 penalty
  on every convolution (extra small ops per step; ResNet50 priced -41 % on the K80, -15 % on
  the T4), not the zoo's; H100 AMP fp16 steps of plain and grouped convolutions are priced
  +30-60 % (VGG without batch norm, ResNeXt, Wide ResNet) while their TF32 steps are within
  +-15 %: the one `tensor` scale of the composition serves TF32 and FP16 alike; VGG-BN's
  batch norm costs about 20 ms of a 74 ms H100 step but is priced at about a quarter of that.

## Why PROFET's small inputs on the V100 were priced 5x too slow (written 2026-12-03)

- **Diagnosis** (before the fix; shipped form fitted without the V100 chip, as the one-GPU-out
  split does): vgg11, side 32, batch 16 measured 5.8 ms, predicted 34.6 ms = layers 4.7 ms
  (sum 16.2 ms less floors 6.8 ms, x scale 0.50; PROFET's profiler counts 4.6 ms of device
  time for that step: the per-op prices and the decomposition are right there) + kernels
  0.2 ms + **per-step constant 31.3 ms** (residual factor 0.96). The constant was set by
  PROFET's AlexNet: its Keras definition (`model_info.py.txt`: 11x11 conv at stride 1, 96
  channels on the full input, 256-512-1024-1024, batch norm everywhere) is not the zoo's
  `alexnet` (tf_cnn_benchmarks', stride 4, 64-192-384-384-256); its steps measure 10-15x the
  zoo network's priced work (profiler device time / priced layers: AlexNet 9.8-15.6, every
  other network 0.3-1.4) and the log fit made up the gap with the one per-step constant,
  which every small step then paid (and the network residual of `alexnet` hit its 2x bound,
  spilling onto Lambda's AlexNet). The per-op floors, the VGG classifier (Flatten scales with
  the side as in PROFET's Keras) and the residual (0.8-1.1 on these rows) were not the cause.
- **Fix** (chosen after seeing the diagnosis above, before any new held-out figure):
  PROFET's AlexNet is left out of the targets (`layerwise.corpora.profet.NOT_THE_ZOOS`), as
  networks the zoo lacks already were; the compositions were refitted by
  `python -m layerwise.corpora.build_default --composition-only` (TensorFlow: per-step
  constant 21.2 -> 0.0 ms, kernel cost 0.0008 -> 0.016 ms, year coefficient -1.0 (its bound)
  -> -0.46; PyTorch unchanged). The form was not changed: on the fixed targets the four
  declared candidates score 21.7 (year), 21.7 (year-a1000, shipped), 22.2 (before), 23.0
  (pytorch-form) pooled MAPE (table "Candidates"): no candidate wins clearly, so
  `SHIPPED_FORMS` stays. No new candidate was declared.
- **Figures** (one GPU out; the second block is the shipped form before the fix, the third
  after): all sets fp32 29.8 -> 19.1 % MAPE (28.3 -> 19.1 % on the same rows, i.e. without
  scoring PROFET's 29 AlexNet rows), half 17.6 -> 17.6 %; PROFET 37.6 -> 22.5 %, its V100
  68.8 -> 25.3 % (bias +55 -> +8 %; vgg11 32 px batch 16 now 8.9 ms), K80 33.6 -> 25.8 %
  (bias -33 -> -25 %), M60 21.7 -> 27.1 % (bias +14 -> +24 %), T4 23.9 -> 12.5 %; Lambda fp32
  24.2 -> 7.5 %; family bias plain conv +14.7 -> +6.6 %, BN-residual -0.5 -> -2.5 %, depthwise
  +4.2 -> -0.2 %. One generation out is the same within 0.2. **Worse**: fp32 coverage of the
  90 % interval 0.90 -> 0.85 (PROFET 0.80; K80 0.63, V100 0.72): the intervals had been wide
  because of the AlexNet rows.
- **Left**: the target (MAPE <= 12 %, family bias within +-5 %) is still not met. The V100's
  small sides are still priced high (sides 32-64: 36.6 % MAPE, bias +18 %; 128-256: 19.9 %,
  +3 %): the fit without the V100 keeps a 4.6 ms per-step constant from the other hosts. The
  largest errors now are MobileNetV2 at 32-64 px on the M60 (+100-200 %): the launch cost by
  release year cannot tell the K80's host (p2.xlarge, about 87 us per launch on that data)
  from the M60's (g3s.xlarge, about 58 us) and the T4's (about 41 us); a per-host launch cost
  would need the host in the request. The plain-conv bias (+6.6 %) is outside +-5 %.
- The memory-bound section's tables below are now on the fixed targets (one GPU out fp32
  19.1 %, half 16.9 %: no fp32 gain over the shipped 19.1 %); its reading quotes the figures
  of 2026-12-03, with PROFET's AlexNet.

## Reading (written 2026-12-03 after seeing the figures above)

(Its "Before" and "After" are the first two blocks above, PROFET's AlexNet kept.)

- **Before** (the first block): one GPU out, fp32 33.3 % MAPE (median 17.1 %), half 17.8 %,
  coverage 0.89-0.90; one generation out about the same. Family bias: plain conv +19 %,
  depthwise +7 %, BN-residual 0 %. The error sits in PROFET (42.6 %: V100 +70 %, K80 -36 %):
  small inputs (32-64 px) on the V100 are priced at 5-9x their step, because the single
  per-step constant TensorFlow's composition learns comes from the slow hosts of the K80 and
  M60 instances; `torchvision_bench` (10-16 %) and Lambda half are near the target already.
- **Changed after seeing them**: PROFET's steps joined the TensorFlow composition's fit, and
  its form was chosen among four declared candidates by the pooled MAPE of both splits (last
  table): the launch cost by the GPU's release year and the stiffer ridge (`year-a1000`,
  `SHIPPED_FORMS`). The year coefficient fits at its bound (-1): old GPUs' hosts, not their
  GPUs, are slow. The uncovered-op bound (`layerwise.pricing.bound_uncovered`) never binds
  here (uncovered rows are at most 6 % of any step of these sets).
- **After**: TensorFlow one GPU out Lambda 19.4 % (was 23.3 %), PROFET 37.6 % (was 42.6 %);
  PyTorch unchanged; all sets pooled, fp32 29.8 % (was 33.3 %), half 17.6 % (was 17.8 %),
  coverage 0.90; family bias plain conv +14.7 % (was +18.9 %), depthwise +4.2 %,
  BN-residual -0.5 %. **The issue's target (MAPE <= 12 %, family bias within +-5 %) is not
  met**: pricing the memory-bound kinds from PROFET's per-op times (batch norm, pooling,
  activations, adds) was not built in this session; the per-step constant by host remains the
  largest error on PROFET, and the plain-conv bias is still outside +-5 %.
- The per-op layer predictor is not refitted per fold (see the head): figures for V100, M60,
  K80, T4, A100 and H100 are optimistic on the per-op side.

## Memory-bound kinds from PROFET op times: tried, not shipped (written 2026-12-03)

- **What** (`layerwise/membound.py`): batch norm, pooling, activations and adds priced as
  bytes moved / (catalog bandwidth x a fitted efficiency per kind x spec-sheet features) +
  kernels x a launch time per kind, fitted on PROFET's TensorFlow-profiler op times (V100, T4,
  M60, K80; two steps per profiled window, module rules); in the whole-network benchmark these
  kinds' prices replace the shipped per-op predictor's (`reprice_memory_bound`), the model
  refitted **without the GPU (or generation) predicted** (`held_out_membound`; a GPU outside
  PROFET uses the model of all four), then the composition as shipped, held out as above.
- **Choices, in order**: (1) the op-time window (2 steps) was read from the data before any
  fit. (2) The first candidate set had features on the bandwidth term only, one launch time;
  after seeing its held-out op errors (bandwidth only: mean APE 68 %, V100 +109 %: kernels on
  the V100 take less time than the older GPUs' launch floor) the launch time became per kind
  and the launch-term candidates were added (the "Held-out op-time error" table). (3) The
  feature set `launch~clock` (the launch time scaled by the boost clock) was chosen by that
  table's mean and median held-out APE (each PROFET GPU is its own generation, so one GPU out
  is one generation out there), never by in-sample fit; then the whole-network tables above
  were run once with it. `bandwidth` alone was also run (not shown: fp32 29.4 %, half 17.1 %).
- **Result**: pooled fp32 29.8 -> 29.1 %, half 17.6 -> 16.9 % (one GPU out), depthwise bias
  +4.2 -> +2.3 %, PROFET 37.6 -> 36.2 %; but Lambda fp32 24.2 -> 26.8 % and the H100 fp32
  steps 15.6 -> 17.4 %, median APE fp32 16.3 -> 16.8 %, and the plain-conv bias is unchanged
  (+14.9 %: its error is VGG at 32-64 px on the V100, a per-step cost, not memory-bound ops).
  TensorFlow only: fp32 28.9 %, half unchanged. The op-level held-out error (median 25 %,
  time-weighted 31 %) is no better than what the per-op predictor already carries. **Not
  shipped**: the product's pricing and `layerwise/data` are unchanged; the gain is within the
  spread of the sets it makes worse, and shipping would need the compositions refitted on the
  new prices. The targets (MAPE <= 12 %, family bias within +-5 %) remain unmet.
- Known limits of the attempt: ReLU times of networks with fused conv activations (VGG,
  AlexNet) are left out of the fit; InceptionResNetV2's activation bytes from the zoo exceed
  what its ReLU ops can move at the V100's bandwidth (the decomposition counts activations the
  Keras graph does not run), which inflates the `act` errors; only four GPUs (three per fold)
  carry the spec-feature coefficients.
"""


if __name__ == "__main__":
    main()
