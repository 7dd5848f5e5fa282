"""Whole networks from layer predictions, across GPUs and frameworks (issue 23).

Prices every whole-network target with the shipped layer predictor (called, never changed),
then fits the per-framework composition (:class:`layerwise.compose.Composition`) and scores
it leaving one GPU out and one network out, beside two naive rules, on:

* Lambda tf_cnn_benchmarks (TensorFlow 1.15, four GPUs, fp32 and fp16; 1 GPU, synthetic);
* PyTorch: ``torchvision_bench`` (32 networks, four GPUs, fp32 and pure fp16, batch 12, no
  optimizer step), this project's H100 steps (the same definition; users' training steps at
  fp32 as PyTorch runs it, tf32, AMP fp16/bf16; the first session's 84 steps).

Run (about 5 minutes on the loaded 2-core machine)::

    .venv/bin/python benchmarks/layerwise_networks_v3.py [--write-shipped]

Prints the tables and writes ``docs/layerwise-pytorch.md``; ``--write-shipped`` also writes the
chosen compositions to ``layerwise/data/default_predictor/composition*.json``.
"""

from __future__ import annotations

import argparse
import json
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
    fit_shipped_compositions,
    lambda_targets,
    leave_one_out,
    naive_nearest_gpu,
    naive_roofline,
    network_sums,
)
from layerwise.corpora.tables import shared_data_dir  # noqa: E402
from layerwise.corpora.torchvision_bench import measured_detection, pytorch_targets  # noqa: E402

FORMS = {  # the grid, declared before any figure was seen
    "additive": {"overlap_p": 0.0, "subtract_floor": False},
    "additive-floor": {"overlap_p": 0.0, "subtract_floor": True},
    "overlap": {"overlap_p": 4.0, "subtract_floor": False},
    "overlap-floor": {"overlap_p": 4.0, "subtract_floor": True},
    # added 2026-11-26 after seeing benchmarks/layerwise_networks_v4.py (section 7): launch
    # cost per kernel by the GPU's release year (v4's `year-floor`)
    "overlap-floor-year": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": True},
}
HALF = ("fp16", "bf16", "fp16-pure")
DOC = ROOT / "docs" / "layerwise-pytorch.md"
SHIPPED = ROOT / "layerwise" / "data" / "default_predictor"


def score(frame: pd.DataFrame, pred: np.ndarray, covered: np.ndarray | None = None) -> dict:
    """MAPE (all, fp32, half), coverage and rows of predictions ``pred``."""
    ok = ~np.isnan(pred)
    ape = np.abs(pred - frame["step_ms"].to_numpy(float)) / frame["step_ms"].to_numpy(float) * 100
    half = frame["precision"].isin(HALF).to_numpy()
    out = {"rows": int(ok.sum()), "mape": np.nanmean(ape[ok]),
           "fp32": np.nanmean(ape[ok & ~half]) if (ok & ~half).any() else np.nan,
           "half": np.nanmean(ape[ok & half]) if (ok & half).any() else np.nan}
    if covered is not None:
        out["coverage"] = float(np.mean(covered[ok]))
        out["cov_fp32"] = float(np.mean(covered[ok & ~half])) if (ok & ~half).any() else np.nan
        out["cov_half"] = float(np.mean(covered[ok & half])) if (ok & half).any() else np.nan
    return out


def evaluate(sums: pd.DataFrame, name: str) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Every form and naive rule, leaving one GPU (chip) and one network out."""
    records, loos = [], {}
    for by, split in (("chip", "one GPU out"), ("network", "one network out")):
        for form, params in FORMS.items():
            loo = leave_one_out(sums, by=by, form=params)
            loos[(form, by)] = loo
            records.append({"data": name, "split": split, "rule": f"composition: {form}",
                            **score(sums, loo["pred_ms"].to_numpy(), loo["covered"].to_numpy())})
        records.append({"data": name, "split": split, "rule": "naive: roofline x 1 fitted eff.",
                        **score(sums, naive_roofline(sums, by))})
        if by == "chip":
            records.append({"data": name, "split": split,
                            "rule": "naive: nearest GPU x peak ratio",
                            **score(sums, naive_nearest_gpu(sums, by))})
    return pd.DataFrame(records), loos


TIE = 0.05  # MAPE points: forms this close to the best tie (set 2026-11-26, after seeing)


def choose(table: pd.DataFrame) -> str:
    """The form of lowest mean MAPE over the two splits; forms within :data:`TIE` of it tie,
    and a tie goes to the simplest, the first in :data:`FORMS` (e.g. a launch term that
    fits to nothing, as for TensorFlow 1.15's graph mode, is not shipped)."""
    comp = table[table["rule"].str.startswith("composition: ")]
    mean = comp.assign(form=comp["rule"].str.split(": ").str[1]).groupby("form")["mape"].mean()
    return next(f for f in FORMS if f in mean.index and mean[f] <= mean.min() + TIE)


def precision_check(targets: pd.DataFrame, predictor, params: dict) -> pd.DataFrame:
    """PyTorch fp32 rows priced as run (TF32 convolutions where the framework does) against
    priced as strict fp32, leaving one network out (the rest of the data as run)."""
    rows = []
    tf32 = targets["precision"].eq("fp32") & targets["gpu"].isin(["A100 SXM4 40GB", "H100 SXM5"])
    for how in ("as run", "strict"):
        t = targets.copy()
        if how == "strict":
            t.loc[tf32, "precision"] = "fp32-strict"
        sums = network_sums(t, predictor, framework="pytorch")
        loo = leave_one_out(sums, by="network", form=params)
        for (suite, gpu), grp in loo[tf32.to_numpy()].groupby(["suite", "gpu"]):
            rows.append({"fp32 priced": how, "suite": suite, "gpu": gpu, "rows": len(grp),
                         "mape": grp["ape"].mean(), "bias_%": 100 * np.expm1(
                             np.median(np.log(grp["pred_ms"] / grp["step_ms"]))),
                         "coverage": grp["covered"].mean()})
    return pd.DataFrame(rows)


def md(frame: pd.DataFrame) -> str:
    """A markdown table: MAPE-like columns to 0.1, coverage to 0.01, constants to 4 digits."""
    out = frame.copy()
    for col in out.columns:
        name = str(col)
        if out[col].dtype.kind != "f":
            continue
        if name.startswith("scale") or name in ("kernel_ms", "year_coef"):
            out[col] = out[col].map(lambda v: float(f"{v:.4g}"))
        else:
            out[col] = out[col].round(2 if "cov" in name or name.startswith("log_") else 1)
    return out.to_markdown(index=False, floatfmt="g")


def main() -> None:
    from layerwise.shipped import default_predictor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-shipped", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    predictor = default_predictor()
    shared = shared_data_dir()
    lam = lambda_targets(shared / "lambda")
    lam = lam.assign(suite="lambda", framework="tensorflow", optimizer="momentum")
    torch_targets, skipped = decomposable(pytorch_targets(shared))
    lam_sums = network_sums(lam, predictor)
    pt_sums = network_sums(torch_targets, predictor, framework="pytorch")
    tables, loos = {}, {}
    for name, sums in (("Lambda (TensorFlow)", lam_sums), ("PyTorch", pt_sums)):
        tables[name], loos[name] = evaluate(sums, name)
        print(tables[name].round(3).to_string(), flush=True)
    choice = {}
    for name in tables:  # chosen after seeing the figures: lowest mean of the two splits
        choice[name] = choose(tables[name])
    print("chosen:", choice, flush=True)
    pt_form = FORMS[choice["PyTorch"]]
    precision = precision_check(torch_targets, predictor, pt_form)
    print(precision.round(3).to_string(), flush=True)
    for fw, name in (("tensorflow", "Lambda (TensorFlow)"), ("pytorch", "PyTorch")):
        if SHIPPED_FORMS[fw] != FORMS[choice[name]]:
            print(f"note: {fw}: this run prefers {choice[name]}; SHIPPED_FORMS says "
                  f"{SHIPPED_FORMS[fw]}", flush=True)
    shipped = fit_shipped_compositions(predictor, shared)
    tf_comp, pt_comp = shipped["tensorflow"], shipped["pytorch"]
    det = network_sums(measured_detection(), predictor, framework="pytorch")
    det["pred_ms"] = [pt_comp.step(r.sum_ms, r.low_ms, r.high_ms, int(r.kernels),
                                   r.precision_class, r.floor_ms, r.year)[0]
                      for r in det.itertuples()]
    det["ape"] = (det["pred_ms"] - det["step_ms"]).abs() / det["step_ms"] * 100
    if args.write_shipped:
        tf_comp.save(SHIPPED)
        (SHIPPED / "composition-pytorch.json").write_text(
            json.dumps(pt_comp.to_dict(), indent=1, sort_keys=True))
    per_gpu = loos["PyTorch"][(choice["PyTorch"], "chip")].groupby(["chip", "suite", "precision"]) \
        .agg(rows=("ape", "size"), mape=("ape", "mean"), coverage=("covered", "mean")).reset_index()
    per_net = loos["PyTorch"][(choice["PyTorch"], "network")].groupby("network") \
        .agg(rows=("ape", "size"), mape=("ape", "mean"), coverage=("covered", "mean")) \
        .reset_index().sort_values("mape", ascending=False)
    write_doc(tables, choice, precision, tf_comp, pt_comp, det, per_gpu, per_net, skipped,
              len(lam_sums), len(pt_sums), time.perf_counter() - started)
    print(f"wrote {DOC} in {time.perf_counter() - started:.0f} s")


def write_doc(tables, choice, precision, tf_comp, pt_comp, det, per_gpu, per_net, skipped,
              n_lam, n_pt, seconds) -> None:
    """``docs/layerwise-pytorch.md``: the figures above, with the reading of them."""
    both = pd.concat(tables.values(), ignore_index=True)
    both = both[[c for c in ("data", "split", "rule", "rows", "mape", "fp32", "half",
                             "coverage", "cov_fp32", "cov_half") if c in both.columns]]
    comps = pd.DataFrame([{"framework": fw, **{
        k: v for k, v in c.to_dict().items() if k not in ("scale",)},
        **{f"scale_{k}": v for k, v in c.scale_.items()}}
        for fw, c in (("tensorflow", tf_comp), ("pytorch", pt_comp))])
    text = [HEAD.format(n_lam=n_lam, n_pt=n_pt, skipped=", ".join(skipped) or "none"),
            "## 1. Whole networks: one GPU out, one network out\n",
            "MAPE % (all rows, fp32-class rows, half-precision rows) and 90 % interval "
            "coverage; naive rules have no interval.\n", md(both), "",
            f"Chosen forms (lowest mean MAPE of the two splits, ties within {TIE} points "
            f"to the simplest): {choice}.\n",
            "## 2. PyTorch, one GPU out, per GPU, suite and precision (chosen form)\n",
            md(per_gpu), "", "## 3. PyTorch, one network out: the ten worst networks\n",
            md(per_net.head(10)), "", "## 4. fp32 as PyTorch runs it\n", PRECISION_TEXT,
            md(precision), "", "## 5. The shipped compositions\n", md(comps), "",
            "## 6. Detection steps on the H100 (never fitted)\n",
            md(det[["network", "precision", "batch_per_gpu", "step_ms", "pred_ms", "ape"]]),
            "", READING, f"\nRun time {seconds:.0f} s.\n"]
    old = DOC.read_text() if DOC.is_file() else ""
    keep = old.find(V4_SECTION)  # section 7 is benchmarks/layerwise_networks_v4.py's: kept
    DOC.write_text("\n".join(text) + ("\n" + old[keep:] if keep >= 0 else ""))


V4_SECTION = "## 7. Composition with catalog features"


HEAD = """# Layerwise for PyTorch: precision as run, composition across GPUs (issue 23)

`.venv/bin/python benchmarks/layerwise_networks_v3.py --write-shipped`

Layer times come from the shipped predictor (`layerwise/data/default_predictor`, called as
shipped, not retrained): a leave-one-GPU-out split below leaves the GPU out of the
*composition* fit only. The layer model has seen layer rows of the H100 (this project), A100
(NeuSight, forward fp32), V100 and GTX 1080 Ti (Justus), never of the Titan RTX, Titan Xp,
RTX 2080 Ti or Quadro RTX 8000.

Targets: {n_lam} Lambda steps (tf_cnn_benchmarks, TensorFlow 1.15, 1 GPU, synthetic,
GTX 1080 Ti, RTX 2080 Ti, Quadro RTX 8000, V100; fp32 and fp16) and {n_pt} PyTorch steps:
`torchvision_bench` (32 networks x RTX 2080 Ti, Titan RTX, Titan Xp, A100-SXM4-40GB, fp32 and
pure fp16, batch 12, forward + loss + backward without an optimizer step), and the H100
(`layerwise/data/measured`: the same definition on 32 networks, users' SGD-momentum steps of
40 networks at batch 64 as run in PyTorch 2.11 at fp32, tf32, AMP fp16 and 9 at AMP bf16,
and the first session's 84 steps). Networks the zoo cannot decompose without PyTorch were
left out: {skipped}.

Intervals: each fold's composition takes its 90 % band from residuals of groups left out
*inside* its training part (five folds of groups), so coverage is measured on unseen groups.
"""

PRECISION_TEXT = """PyTorch fp32 rows on TF32 GPUs, one network out with the chosen form: priced as
run (PyTorch >= 1.12 on the H100: TF32 convolutions, FP32 matmuls; PyTorch 1.7 in the A100's
NGC 20.10 container: TF32 for both) against priced as strict FP32 (everything else in the
fit unchanged).
"""

READING = """## Reading (written after seeing the figures above)

Choices made after seeing a figure, so none of the splits above is clean for them: the form
of each framework's composition (the lowest mean of the two splits; forms within 0.05
points tie and the tie goes to the simplest: TensorFlow `additive-floor`, PyTorch
`overlap-floor-year`, added to the grid after section 7's experiments), the half rule
(section 7), the half-precision rules of section 8 and the pricing of `none`-optimizer steps
as `sgd`. Every row here is priced with the shipped half rules (`layerwise.as_run.resolve`: a
half request on a GPU without FP16 tensor cores whose native FP16 is slower than FP32, i.e.
Pascal GP10x, is priced as FP32, TensorFlow's memory-bound layers at half the bytes; in
releases before TensorFlow 2.4 / PyTorch 1.8 a half convolution whose input channels are not
a multiple of 8 is priced as FP32; the answer says so); section 7 has the figures without
the first rule, section 8 those before the last two (2026-11-26).

- **PyTorch: 18.3 % one GPU out, 16.5 % one network out** (fp32 15.9 / 15.0 %, half 21.1 /
  18.1 %), coverage 0.89 / 0.95, against 28-33 % / 20-22 % for the four forms without the
  launch term and 66-75 % for the naive rules; the 10 % goal is not met. The launch cost
  per kernel by the GPU's release year is what gained: fitted `year_coef` about -0.15 per
  year, i.e. 0.11 ms per priced kernel on a 2017 GPU's host, 0.05 ms on a 2022 one (the
  H100 in PyTorch 2.11). What is left, one GPU out: the H100's AMP training steps (fp16
  33 %, bf16 35 %, priced too slow; section 8), pure fp16 on the H100 and the RTX 2080 Ti
  (21-22 %), the 2080 Ti's fp32 (18 %, a host faster than its year says).
- **fp32 as the framework runs it** (section 4): the H100's PyTorch fp32 training steps, one
  network out, 37.5 % priced as strict FP32, 15.9 % priced as run (TF32 convolutions, FP32
  matmuls); the A100 (PyTorch 1.7, TF32 for both) 26.7 % -> 10.5 %. A PyTorch fp32 forecast
  says which it priced (`precision_as_run`, a warning on Ampere and newer); `--precision
  fp32-strict` and `--precision tf32` ask the other two ways.
- **TensorFlow (Lambda): 12.8 % one GPU out, 14.4 % one network out** (fp32 7.8 / 9.1 %,
  fp16 17.8 / 19.8 %), coverage 0.96 / 0.96, against 17.8 / 19.9 % for the additive form and
  39-55 % for the naive rules. Subtracting the layers' per-call floors before scaling is what
  gained; the launch term fits to nothing in TensorFlow 1.15's graph mode (same figures to
  0.001 points), so the simpler form ships.
- **Intervals**: the shipped bands come from GPUs left out inside the fit (PyTorch -0.44 ...
  +0.30, TensorFlow -0.24 ... +0.28 in log time).
- **Detection (never fitted)**: RetinaNet and Faster R-CNN 39-109 % too slow, SSD300 3.4-3.9x:
  their losses and box coders are hundreds of small ops with no layer kind, each priced as
  a roofline plus three kernels at the fitted launch cost. A kind for them (or a cheaper
  launch cost for ops with no weights) is left for the per-op work.
- **Half precision** (where its error came from, the rules shipped and one measured but not
  shipped): section 8 (`benchmarks/layerwise_networks_v6.py`).
- **Large per-GPU batch under AMP** (MLPerf ResNet-50 steps as upper bounds, the H100's
  batch scaling, the step per layer kind): `docs/layerwise-large-batch.md`
  (`benchmarks/layerwise_networks_v5.py`).
"""


if __name__ == "__main__":
    main()
