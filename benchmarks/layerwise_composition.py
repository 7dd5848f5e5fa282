"""Whole networks across GPUs: composition forms with catalog features (issue 23, item 1).

Scores, leaving one GPU out and one network out, on the whole-network targets (Lambda
tf_cnn_benchmarks; PyTorch ``torchvision_bench`` and the H100 steps), priced by the shipped
layer predictor (called, never changed):

* the composition forms and naive rules (``lib.whole_networks.evaluate``): the forms shipped before
  2026-11-26 (``additive-floor`` for TensorFlow, ``overlap`` for PyTorch) and since
  (``overlap-floor-year`` for PyTorch: this module's ``year-floor`` as
  :class:`layerwise.compose.Composition` fits it);
* :class:`layerwise.corpora.composition_v4.FeatureComposition` forms: ``year-floor`` (launch
  cost per kernel by the GPU's release year, floors subtracted, overlap p = 4) and
  ``roofmix-year-floor`` (the same, GPU part blended with a roofline of fitted efficiencies).

Each with and without the half rule (:func:`layerwise.as_run.resolve`, shipped). Nothing
shipped is written (``python -m layerwise.corpora.build_default --composition-only`` refits
the shipped compositions). Run (about 3 minutes on the loaded 2-core machine)::

    .venv/bin/python benchmarks/layerwise_composition.py [--no-doc]

Prints the tables and replaces the section ``SECTION`` of ``docs/lab/layerwise-pytorch.md``
(appended the first time; the rest of the document is kept).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pandas as pd
from lib import DOCS, md
from lib import composition_v4 as v4
from lib.whole_networks import evaluate, score

from layerwise.corpora.network_fit import decomposable, lambda_targets, network_sums
from layerwise.corpora.tables import shared_data_dir
from layerwise.corpora.torchvision_bench import pytorch_targets

FORMS = {  # declared after seeing the experiment figures of the doc's section (see there)
    "year-floor": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": True},
    "roofmix-year-floor": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": True,
                           "roofline_blend": True},
    "roofmix-floor": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": False,
                      "roofline_blend": True},
}
SHIPPED_RULE = {"Lambda (TensorFlow)": ("composition: additive-floor",),  # shipped, before/since
                "PyTorch": ("composition: overlap", "composition: overlap-floor-year")}
DOC = DOCS / "lab" / "layerwise-pytorch.md"
SECTION_PREFIX = "## 7. Composition with catalog features"  # the marker in the doc
SECTION = SECTION_PREFIX + " (2026-11-26; shipped for PyTorch with the half rule)"


def targets_sums(predictor, half_rule: bool) -> dict[str, pd.DataFrame]:
    """Both suites' targets with layer sums and catalog features; with ``half_rule`` half
    requests on GPUs without fast FP16 are priced as FP32 (the shipped rule of
    :func:`layerwise.as_run.resolve`), without it as half (the rule before);
    ``precision`` stays the request either way."""
    shared = shared_data_dir()
    lam = lambda_targets(shared / "lambda").assign(suite="lambda", framework="tensorflow",
                                                   optimizer="momentum")
    torch_targets, _ = decomposable(pytorch_targets(shared))
    out = {}
    for name, targets, fw in (("Lambda (TensorFlow)", lam, "tensorflow"),
                              ("PyTorch", torch_targets, "pytorch")):
        targets = targets.assign(half_rule=half_rule)
        out[name] = v4.gpu_features(network_sums(targets, predictor, framework=fw))
    return out


def breakdown(loo: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """rows, MAPE, median log bias (as %) and coverage per group of ``keys``."""
    bias = np.log(loo["pred_ms"] / loo["step_ms"])
    return (loo.assign(bias=bias).groupby(keys)
            .agg(rows=("ape", "size"), mape=("ape", "mean"), bias=("bias", "median"),
                 coverage=("covered", "mean"))
            .assign(bias=lambda f: 100 * np.expm1(f["bias"])).rename(columns={"bias": "bias_%"})
            .reset_index())


def main() -> None:
    from layerwise.shipped import default_predictor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args()
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    predictor = default_predictor()
    records, loos = [], {}
    for half_rule in (False, True):
        tag = " + half rule" if half_rule else ""
        for name, frame in targets_sums(predictor, half_rule).items():
            base, _ = evaluate(frame, name)
            keep = base["rule"].isin(SHIPPED_RULE[name]) | (
                base["rule"].str.startswith("naive") & (not half_rule))
            records.append(base[keep].assign(rule=base["rule"] + tag))
            for by, split in (("chip", "one GPU out"), ("network", "one network out")):
                for form, params in FORMS.items():
                    loo = v4.leave_one_out(frame, by=by, form=params)
                    loos[(name, form + tag, by)] = loo
                    row = {"data": name, "split": split, "rule": f"v4: {form}{tag}",
                           **score(frame, loo["pred_ms"].to_numpy(),
                                      loo["covered"].to_numpy())}
                    records.append(pd.DataFrame([row]))
                    print(pd.DataFrame([row]).round(3).to_string(), flush=True)
    table = pd.concat(records, ignore_index=True).sort_values(["data", "split"], kind="stable")
    table = table.loc[:, [c for c in ("data", "split", "rule", "rows", "mape", "fp32", "half",
                                         "coverage", "cov_fp32", "cov_half")
                             if c in table.columns]]
    print(table.round(3).to_string(), flush=True)
    per = {}
    for name, form in (("PyTorch", "year-floor + half rule"),
                       ("PyTorch", "roofmix-year-floor + half rule"),
                       ("Lambda (TensorFlow)", "roofmix-year-floor + half rule")):
        keys = ["chip", "suite", "precision"] if name == "PyTorch" else ["chip", "precision"]
        per[(name, form)] = breakdown(loos[(name, form, "chip")], keys)
        print(name, form, "\n", per[(name, form)].round(2).to_string(), flush=True)
    worst = breakdown(loos[("PyTorch", "year-floor + half rule", "network")], ["network"]) \
        .sort_values("mape", ascending=False).head(10)
    per[("PyTorch", "year-floor + half rule, one network out: the ten worst")] = worst
    seconds = time.perf_counter() - started
    if not args.no_doc:
        write_section(md, table, per, seconds)
        print(f"wrote {DOC} section in {seconds:.0f} s")


def write_section(md, table: pd.DataFrame, per: dict, seconds: float) -> None:
    """Replace (or append) :data:`SECTION` of the doc; everything else is kept."""
    parts = [SECTION, "", "`.venv/bin/python benchmarks/layerwise_composition.py`", "",
             INTRO, md(table), ""]
    for (name, form), frame in per.items():
        what = "" if "worst" in form else "one GPU out, per GPU, suite and precision, "
        parts += [f"{name}, {what}`{form}`:", "", md(frame), ""]
    parts += [READING, f"\nRun time {seconds:.0f} s.\n"]
    text = DOC.read_text() if DOC.is_file() else ""
    head = text.split(SECTION_PREFIX)[0].rstrip("\n")
    later = text.find(LATER_SECTIONS)  # sections after this one (e.g. the v6 benchmark's): kept
    DOC.write_text(head + "\n\n" + "\n".join(parts)
                   + ("\n" + text[later:] if later >= 0 else ""))


LATER_SECTIONS = "## 8. "


INTRO = """Same targets, layer sums and protocol as sections 1-2 (intervals from groups left out
inside each fold's training part). `composition` rows are the v3 forms (`layerwise.compose.
Composition`): those shipped before 2026-11-26 (`additive-floor` for TensorFlow, `overlap` for
PyTorch) and the one shipped since for PyTorch, `overlap-floor-year` (the `year-floor` form
below as the product fits it: the same step, so the same MAPE; its interval is also widened
to the layer intervals' sum, as every shipped forecast's is, hence the higher coverage).
`v4` rows are `layerwise.corpora.composition_v4.FeatureComposition` forms: launch cost per
kernel x exp(year x (GPU release year - 2019)) (`year`), the layers' per-call floors
subtracted (`floor`), GPU part blended with a roofline of fitted per-class efficiencies
(`roofmix`). `+ half rule`: half requests on GPUs without fast FP16 priced as FP32 (shipped
in `layerwise.as_run.resolve`); without it, as half (the rule before). All inputs come from
the request and the GPU catalog.
"""

READING = """Reading (written after seeing the figures). Choices made after seeing a figure,
so these splits are clean only for the fitted constants, not for the choice of form: the three
v4 forms and the half rule were picked among about twenty variants tried on these same
splits (experiment log below); the bound of `year` ([-1, 1]) and p = 4 were set before.

- **Where the error was** (the forms shipped before, without the half rule): PyTorch one GPU
  out 31.2 % is mostly the H100 left out (its 274 of 530 rows priced 20-60 % too slow: a
  composition fitted on the 2017-2020 GPUs carries their hosts' launch cost, 65-95 us per
  priced kernel at batch 12, where the H100 host in PyTorch 2.11 pays 41-60 us) and the
  Titan Xp's pure fp16 (priced faster than fp32; measured 1.2x slower).
- **Launch cost by GPU generation** (`year`, shipped for PyTorch as `overlap-floor-year`):
  with the half rule, PyTorch one GPU out 29.0 -> 18.6 %, coverage 0.77 -> 0.89; one network
  out 20.1 -> 16.6 %, coverage 0.94 -> 0.95 (shipped forms before -> since). Inert for
  TensorFlow 1.15 (graph mode, not launch-bound: the fitted launch term is ~0). It is a
  proxy: the RTX 2080 Ti and Titan RTX are the same year, yet the 2080 Ti's host launches
  25 % faster, and that 20 % bias stays.
- **Half precision without fast FP16 priced as FP32** (catalog: no FP16 tensor cores and
  native FP16 below FP32, i.e. Pascal GP10x; shipped in `layerwise.as_run.resolve`, the
  answer's `precision_as_run` and a warning say so): Titan Xp fp16-pure one GPU out 31 -> 17 %,
  Lambda GTX 1080 Ti fp16 24 -> 11 %; it helps every form (the shipped PyTorch form 19.4 ->
  18.6 % one GPU out, 17.7 -> 16.6 % one network out; TensorFlow `additive-floor` 16.0 ->
  15.0 %, 17.4 -> 16.4 %).
- **Roofline blend** (`roofmix`): best for TensorFlow (Lambda 12.3 % one GPU out, 8.6 % one
  network out with the half rule, coverage 0.84 / 0.92), worse for PyTorch one GPU out (22.2 %,
  coverage 0.76: the H100's efficiency under its peaks is lower than the older GPUs', so a
  fitted efficiency extrapolates too fast).
- **Best per framework** (after seeing): PyTorch `year-floor + half rule` 18.6 % one GPU
  out, 16.6 % one network out (shipped as `overlap-floor-year`: coverage 0.89 / 0.95; 0.83 /
  0.89 without the widening to the layer intervals); TensorFlow `roofmix-year-floor + half
  rule` 12.3 % (0.84), 8.6 % (0.92). For TensorFlow the half rule alone improves the shipped
  form (15.0 / 16.4 % against 16.0 / 17.4 %); the launch term adds nothing there.
  **The 10 % goal is met only for Lambda one network out.**
  What is left: the H100's AMP steps (+20-30 % too slow when the H100 is left out; they are
  the only AMP rows), the 2080 Ti host (+20 %), Quadro RTX 8000 fp16 under TensorFlow (-29 %),
  one network out, googlenet, shufflenet_v2_x0_5, alexnet and vgg16 (28-46 %).
- **Tried, did not help** (same splits, figures in the helper's report): an H2D copy term for
  `torchvision_bench` (input bytes over PCIe; +-0.2 points); a separate memory-bound scale on
  the layer sum (PyTorch -1.4 points, TensorFlow +1 point); a third precision class (TF32 vs
  half) (mixed); overlap p = 2 or 8 instead of 4 (+-1 point); a per-layer roofline with wave
  quantization on the SM count and fitted efficiencies per layer class x tensor/FP32, a
  per-kernel GPU minimum and the year launch term, without the layer predictor (NeuSight-like,
  network level): PyTorch 30.7 / 17.8 %, TensorFlow 15.9 / 23.9 % (worse one GPU out).
  Small gain, not in the forms: AMP's weight casts (108 of 509 priced kernels for a ResNet-50
  step) counted as free launches instead of full ones: PyTorch `year-floor + half rule`
  18.6 -> 17.7 % one GPU out, 16.6 -> 16.0 % one network out.

Shipped (2026-11-26): the half rule (`layerwise.as_run.resolve`, `slow_fp16`) and the launch
term (`layerwise.as_run.year_offset`, `year_coef` in the composition dict, used by
`step_from_dict` on both forecast paths); `benchmarks/layerwise_networks_v3.py
--write-shipped` refitted both compositions with the half rule, PyTorch's in the
`overlap-floor-year` form (it wins both splits: 18.6 / 16.6 % against 29.0 / 20.1 % for
`overlap`), TensorFlow's still `additive-floor` (the launch term ties it to 0.001 points).
Not shipped: the roofline blend (best for TensorFlow, worse for PyTorch one GPU out; it
would need the roofline parts in the product's step)."""


if __name__ == "__main__":
    main()
