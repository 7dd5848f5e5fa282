"""The H100 left out, by network group, and the per-op rows behind it (issue 23).

Part 1 scores the shipped PyTorch composition form leaving the H100 out
(``network_fit.leave_one_out`` by chip, as ``benchmarks/layerwise_networks_v3.py`` does) and
gives the median bias, log(predicted / measured) as a percentage, per network group and
suite x precision: where the H100's 18.6 % one-GPU-out error comes from; then the same with
the H100 in the fit and no whole-network residual.

Part 2 reads the H100's own per-op campaign (``layerwise/data/measured/h100-sxm5_torch2.11_
2026-11-23.csv.gz``): per kind and FLOP band, the median time of each shape at fp32 (TF32
off), fp16 and bf16 (autocast) over its time at TF32, beside the ratio of the tensor-core
peaks (0.5 for half over TF32).

Part 3 tests one suspect: that campaign, and the first session's 84 whole-network steps
(``benchmarks/gpu_networks.py``), ran with ``torch.backends.cudnn.benchmark`` off (PyTorch's
default; neither script sets it), the second session's steps with it on
(``benchmarks/gpu_session2.py``). The same network, batch and precision measured both ways
gives the on / off ratio of a whole training step.

Part 4 asks the shipped forecast path for vgg16, vgg16_bn and resnet50 training steps on the
H100 at batch 64, TF32 and AMP fp16: the priced convolution and batch-norm time beside the
measured step.

Run (about a minute)::

    .venv/bin/python benchmarks/layerwise_networks_v9.py [--no-doc]

Prints the tables and replaces (or appends) the section :data:`SECTION` of
``docs/layerwise-pytorch.md``; the rest of the document is kept.
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import layerwise_networks_v6 as V6  # noqa: E402  (this folder, sys.path[0] of a script)
from layerwise_networks_v3 import md  # noqa: E402

from layerwise.compose import Composition  # noqa: E402
from layerwise.corpora.network_fit import (  # noqa: E402
    SHIPPED_FORMS,
    _predict,
    decomposable,
    leave_one_out,
    network_sums,
)
from layerwise.corpora.tables import shared_data_dir  # noqa: E402
from layerwise.corpora.torchvision_bench import pytorch_targets  # noqa: E402

SECTION_PREFIX = "## 11. The H100 left out, by network group"
SECTION = SECTION_PREFIX + " (2026-12-01; the plan for a lent GPU)"
MEASURED = ROOT / "layerwise" / "data" / "measured"
CAMPAIGN = MEASURED / "h100-sxm5_torch2.11_2026-11-23.csv.gz"
STEPS_OFF = MEASURED / "h100-sxm5_torch2.11_2026-11-23_networks.csv"
STEPS_ON = MEASURED / "h100-sxm5_torch2.11_2026-11-25_networks-as-run.csv"
MODE_OF = {"fp32": "fp32-strict", "tf32": "tf32", "fp16": "amp-fp16", "bf16": "amp-bf16"}
COLUMNS = ("train fp32", "train tf32", "train fp16", "train bf16", "tvbench fp32",
           "tvbench fp16-pure")
BANDS = ([0, 8, 9, 10, 11, 14], ["<1e8", "1e8-1e9", "1e9-1e10", "1e10-1e11", ">1e11"])


def network_group(name: str) -> str:
    """The part 1 group of a zoo network (rules in the names)."""
    if re.fullmatch(r"vgg\d+", name) or name.startswith(("wide_resnet", "resnext")):
        return "a: plain conv stacks (vgg11-19, wide_resnet, resnext)"
    if re.fullmatch(r"vgg\d+_bn", name) or re.fullmatch(r"resnet\d+", name):
        return "b: conv + batch norm (vgg*_bn, resnet18-152)"
    if name.startswith(("mobilenet", "mnasnet", "shufflenet", "efficientnet")):
        return "c: depthwise or grouped (mobilenet, mnasnet, shufflenet, efficientnet)"
    return "d: others (densenet, inception, googlenet, squeezenet, alexnet, convnext, vit)"


def h100_bias() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Part 1: median bias % per network group and suite x precision on the H100, (left out
    of the shipped form's fit, in the fit with no whole-network residual)."""
    from layerwise.shipped import default_predictor

    targets, _ = decomposable(pytorch_targets(shared_data_dir()))
    sums = network_sums(targets, default_predictor(), framework="pytorch").reset_index(drop=True)
    loo = leave_one_out(sums, by="chip", form=SHIPPED_FORMS["pytorch"])
    plain = Composition(**{**SHIPPED_FORMS["pytorch"], "residual_alpha": None})
    plain.fit(sums, sums["step_ms"])
    inside = sums.assign(pred_ms=_predict(plain, sums)[:, 0])
    return by_group(loo), by_group(inside)


def by_group(frame: pd.DataFrame) -> pd.DataFrame:
    """Median log(pred_ms / step_ms) as a percentage, H100 rows, per network group (rows)
    and suite x precision (:data:`COLUMNS`), with each group's network count."""
    h = frame[frame["chip"].eq("h100") & frame["suite"].isin(["train", "tvbench"])]
    h = h.assign(group=h["network"].map(network_group), col=h["suite"] + " " + h["precision"],
                 lr=np.log(h["pred_ms"] / h["step_ms"]))
    table = h.pivot_table(index="group", columns="col", values="lr", aggfunc="median")
    out = np.expm1(table[list(COLUMNS)]) * 100.0
    out.insert(0, "networks", h.groupby("group")["network"].nunique())
    return out.reset_index()


def priced_convolutions() -> pd.DataFrame:
    """Part 4: the shipped path's convolution and batch-norm ms (before the residual) of
    three networks' training steps on the H100 at batch 64, TF32 and AMP fp16, beside the
    measured steps (autotuning on)."""
    from layerwise.quick import forecast_fast

    on = pd.read_csv(STEPS_ON)
    on = on[on["suite"].eq("train") & on["status"].eq("ok") & on["batch_size"].eq(64)]
    rows = []
    for net in ("vgg16", "vgg16_bn", "resnet50"):
        rec: dict = {"network": net}
        for label, request, mode in (("tf32", "tf32", "tf32"), ("amp", "amp", "amp-fp16")):
            out = forecast_fast(net, device="NVIDIA H100 80GB HBM3", batch_size=64,
                                optimizer="momentum", precision=request, framework="pytorch")
            factor = out["network_residual"]["factor"]
            for kind in ("conv", "bn"):
                rec[f"{kind} ms {label}"] = sum(e["ms"] for e in out["layers"]
                                                if e["layer"] == kind) / factor
            rec[f"step ms {label}"] = out["batch_seconds"] * 1000.0 / factor
            rec[f"measured ms {label}"] = float(on.loc[on["network"].eq(net)
                                                       & on["mode"].eq(mode), "step_ms"].iloc[0])
        rec["conv amp / tf32"] = rec["conv ms amp"] / rec["conv ms tf32"]
        rec["measured amp / tf32"] = rec["measured ms amp"] / rec["measured ms tf32"]
        rows.append(rec)
    return pd.DataFrame(rows)


def per_op_ratios(campaign: Path = CAMPAIGN) -> pd.DataFrame:
    """Part 2: median time at each precision over TF32, same shape and pass, per kind and
    FLOP band (the campaign times every shape at its four precisions in turn)."""
    t = pd.read_csv(campaign, low_memory=False)
    t = t[t["status"].eq("ok") & t["layer"].isin(["conv", "dense"])]
    t = t.assign(shape=t["index"] // 4, train=t["optimizer"].ne("none"))
    keys = ["layer", "shape", "train"]
    wide = t.pivot_table(index=keys, columns="precision", values="time_ms_median")
    flops = t[t["precision"].eq("tf32")].set_index(keys)["flops"].rename("flops")
    wide = wide.join(flops).dropna()
    wide["band"] = pd.cut(np.log10(wide["flops"]), BANDS[0], labels=BANDS[1])
    for p in ("fp16", "bf16", "fp32"):
        wide[f"{p} / tf32"] = wide[p] / wide["tf32"]
    grouped = wide.groupby(["layer", "band"], observed=True)
    out = grouped[["fp16 / tf32", "bf16 / tf32", "fp32 / tf32"]].median()
    out["shapes x passes"] = grouped.size()
    return out.reset_index()


def autotune_pairs() -> pd.DataFrame:
    """Part 3: per network and precision, the step with autotuning on over the step with it
    off (same GPU type, network, batch and mode; the first session's ``fp32`` had TF32 off,
    the second's ``fp32-strict``)."""
    off = pd.read_csv(STEPS_OFF).assign(mode=lambda t: t["precision"].map(MODE_OF))
    on = pd.read_csv(STEPS_ON)
    on = on[on["suite"].eq("train") & on["status"].eq("ok")]
    both = off.merge(on, on=["network", "batch_size", "mode"], suffixes=("_off", "_on"))
    both["on / off"] = both["step_ms_on"] / both["step_ms_off"]
    table = both.pivot_table(index="network", columns="mode", values="on / off")
    table.loc["median"] = table.median()
    return table.reset_index()


def main() -> None:
    args = V6.cli_args(__doc__.splitlines()[0])
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    (groups, inside), ratios, pairs = h100_bias(), per_op_ratios(), autotune_pairs()
    priced = priced_convolutions()
    for t in (groups, inside, ratios, pairs, priced):
        print(t.round(2).to_string(), flush=True)
    seconds = time.perf_counter() - started
    if not args.no_doc:
        V6.replace_section(SECTION_PREFIX, [
            SECTION, "", "`.venv/bin/python benchmarks/layerwise_networks_v9.py`", "",
            "Part 1: the H100 left out (shipped form), median bias % (> 0: priced too slow) "
            "per network group:", "", md(groups.round(0)), "",
            "The same with the H100 in the fit and no whole-network residual (the composition "
            "alone):", "", md(inside.round(0)), "",
            "Part 2: the H100's per-op campaign, median time over the same shape's TF32 time "
            "(tensor-core peaks: half / TF32 = 0.5):", "",
            ratios.to_markdown(index=False, floatfmt=".2f"), "",
            "Part 3: whole training steps on the H100 (SGD momentum, batch 64), cuDNN "
            "autotuning on (2026-11-25) over off (2026-11-23):", "",
            pairs.to_markdown(index=False, floatfmt=".2f"), "",
            "Part 4: the shipped pricing of three networks' training steps on the H100 at "
            "batch 64 (ms before the whole-network residual) beside the measured steps:", "",
            priced.to_markdown(index=False, floatfmt=".2f"), "", READING,
            f"\nRun time {seconds:.0f} s.\n"])
        print(f"wrote {V6.DOC} section in {seconds:.0f} s")


READING = """Reading (written after seeing the figures).

- **Where the H100's one-GPU-out error is**: plain convolution stacks under half precision,
  priced 37-47 % too slow in users' AMP steps and 46 % in pure fp16 at batch 12, against
  7-15 % at fp32 and TF32; with batch norm the same networks are 8-17 % too slow, depthwise
  networks about right.
- **Not the per-op rows**: the H100 campaign's AMP convolutions run 0.63-0.75x their TF32
  time above 1e10 FLOPs (against 0.5 for the peaks) and 1.3-1.4x below 1e9, and the whole
  steps agree: vgg16 at batch 64 runs AMP fp16 in 0.63x its TF32 step (33 against 52 ms).
- **Not cuDNN autotuning**: this session's suspect, because the per-op campaign ran with
  it off and most whole-network steps with it on. Part 3 measures it on whole steps: on
  over off has a median of 0.99-1.03 per precision, with outliers in both directions
  (alexnet 0.83 at bf16 and 1.13 at fp16, densenet121 1.18 at bf16; two sessions, so part of
  that is the sessions'). So it does not explain a 37-47 % error, and
  the paired per-op script written first (re-timing the campaign's convolutions both ways
  on a lent GPU) was dropped before it shipped.
- **What is left: batch norm, and the one scale it shares with convolutions.** With the
  H100 in the fit and no residual, plain convolution stacks at half precision are still
  28-46 % too slow while conv + batch-norm networks are within 7 %: no scale fits both.
  Part 4 shows why. Measured, vgg16_bn costs 20 ms more than vgg16 at both TF32 and AMP
  (72.7 against 52.3 ms, 53.1 against 33.2 ms); priced, its batch norms cost 4.8 and 2.9 ms.
  The composition's one scale is fitted over both kinds of network, so networks without
  batch norm come out too slow. Section 10 priced batch norm's training step as the H100's
  bench rows measure it: one network and one family out gained, one GPU out lost, and it
  was not shipped. The half-precision convolutions add the rest. Priced, vgg16's run at
  0.73x their TF32 time under AMP; the measured steps run at 0.64x, and the campaign's
  large convolutions at 0.63-0.75x.
- **The plan for a lent GPU** (15 minutes in all, at most 10 per call, a few of them spent
  starting the machine). One call, with a 540 s limit:
  `PYTHONUNBUFFERED=1 python3 benchmarks/gpu_session2.py --dir $OUT/session3 --minutes 8
  --layer-seconds 60`. It times, in order:
  1. `torchvision_bench`'s 32 networks at fp32 and pure fp16 on the lent GPU. With an H200
     that is a second Hopper GPU, and the first that one GPU out can test: does the
     H100's tensor-core level carry to it?
  2. a minute of batch norm, pooling, activation, add and concat rows at fp32, TF32 and AMP;
  3. users' training steps at fp32 and AMP.

  Afterwards the rows go to `layerwise/data/measured/` with a provenance line, the
  predictor is rebuilt (`layerwise/corpora/`), and `benchmarks/layerwise_networks_v3.py
  --write-shipped` refits and rescores, with the new GPU joining the splits.
"""


if __name__ == "__main__":
    main()
