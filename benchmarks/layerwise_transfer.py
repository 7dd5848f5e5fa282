"""Whole networks on GPUs and GPU generations left out, on every whole-network set (issue 36).

Targets (every whole-network set in ``../shared/data``):

* Lambda tf_cnn_benchmarks (TensorFlow 1.15; V100, GTX 1080 Ti, RTX 2080 Ti, Quadro RTX 8000;
  fp32 and fp16; :func:`layerwise.corpora.network_fit.lambda_targets`);
* PROFET (TensorFlow 2.5; V100, T4, M60, K80; fp32; five input sides, five batches;
  :func:`layerwise.corpora.profet.profet_targets`);
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

A last section tries the memory-bound kinds (batch norm, pooling, activations, adds) priced
from PROFET's op times by :mod:`layerwise.membound` (held out: its model refitted without the
GPU or generation predicted, :func:`held_out_membound`); not shipped (see the reading).

Run (about 7 minutes on two cores)::

    .venv/bin/python benchmarks/layerwise_transfer.py [--no-doc]

Writes ``docs/layerwise-transfer.md`` (the sections this script owns; text written after
seeing the figures is in :data:`READING`).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from layerwise_networks_v3 import md  # noqa: E402  (this folder, sys.path[0] of a script)

from layerwise import membound  # noqa: E402
from layerwise.corpora.network_fit import (  # noqa: E402
    SHIPPED_FORMS,
    decomposable,
    lambda_targets,
    leave_one_out,
    network_sums,
    reprice_memory_bound,
)
from layerwise.corpora.profet import decomposable_sizes, profet_targets  # noqa: E402
from layerwise.corpora.tables import shared_data_dir  # noqa: E402
from layerwise.corpora.torchvision_bench import pytorch_targets  # noqa: E402
from layerwise.efficiency import chip_of  # noqa: E402

DOC = ROOT / "docs" / "layerwise-transfer.md"
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


def priced(targets: dict[str, pd.DataFrame], predictor) -> dict[str, pd.DataFrame]:
    """network_sums per framework, with generation and family columns."""
    out = {}
    for fw, frame in targets.items():
        sums = network_sums(frame, predictor, framework=fw)
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
        parts.append(leave_one_out(reprice_memory_bound(fw_sums, model), by=by, form=form,
                                   groups=others))
    for g in mine:
        model = membound.fit(frame[frame[col] != g], *candidate)
        parts.append(leave_one_out(reprice_memory_bound(fw_sums, model), by=by, form=form,
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
    """The report's tables."""
    return {
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
    parts = [HEAD.format(seconds=seconds, skipped=", ".join(skipped) or "none")]
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
# MAPE of both splits (one GPU out, one generation out), never by the in-sample fit
TF_CANDIDATES = {
    "year": {**BEFORE_TF, "year_kernel": True},
    "pytorch-form": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": True,
                     "residual_alpha": 1000.0, "residual_shrink": 1.0},
    "year-a1000": {**BEFORE_TF, "year_kernel": True, "residual_alpha": 1000.0},
}


def variants() -> dict[str, dict[str, dict]]:
    """The rule sets scored: name -> forms per framework (before, then the shipped ones)."""
    return {"Before issue 36 (TensorFlow form of then)": {**SHIPPED_FORMS, "tensorflow": BEFORE_TF},
            "Shipped after issue 36": SHIPPED_FORMS}


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
    sums = priced(targets, default_predictor())
    print(f"priced {sum(len(s) for s in sums.values())} rows in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    results, rows = {}, pd.DataFrame()
    for name, forms in variants().items():
        rows = scored(sums, forms)
        results[name] = tables(rows)
        for title, table in results[name].items():
            print(f"\n{name}: {title}\n{table.round(2).to_string(index=False)}", flush=True)
    bad = worst(rows)
    print(bad.round(2).to_string(index=False))
    cands = candidates(sums)
    print(cands.round(2).to_string(index=False))
    results["TensorFlow forms tried (both splits pooled)"] = {"Candidates": cands}
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
transfers). Left out (no zoo network at that size): {skipped}.

Columns: MAPE and median APE in %, coverage of the 90 % interval, bias_pct = mean signed error
(predicted / measured - 1) in %. Families: plain conv (VGG, VGG-BN, AlexNet, SqueezeNet),
BN-residual (ResNet, ResNeXt, Wide ResNet, DenseNet, Inception, GoogLeNet), depthwise
(MobileNet, MNASNet, ShuffleNet).
"""

READING = """## Reading (written 2026-12-03 after seeing the figures above)

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
