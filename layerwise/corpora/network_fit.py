"""Whole-network targets from the Lambda logs and the composition fit on them.

Targets (:func:`lambda_targets`): tf_cnn_benchmarks runs on 1 GPU, synthetic data, training,
replicated variables, no XLA, no distortions; the median step time over systems and
repetitions per (GPU, network, precision, batch per GPU). tf_cnn_benchmarks trains with SGD
(momentum in some versions; priced as ``momentum``).

:func:`network_sums` prices every target with a layer predictor (decomposition from the zoo,
no TensorFlow); :func:`leave_one_gpu_out` fits :class:`layerwise.compose.Composition` on all
GPUs but one and predicts that one, for each GPU chip in turn; the layer predictor of a fold
may be one trained without that chip (``predictors`` by chip).

What is priced is what was measured (:func:`as_measured`, issue 36): a target's optional
``classes`` column (the classifier's outputs as run; PROFET trains 10, 100 or 1000 classes by
input side) resizes the network's last dense layer from the zoo's 1000 outputs, and
``aux_heads`` False drops the auxiliary classifiers the zoo's torchvision specs trace in
training mode (:data:`AUX_HEADS`: GoogLeNet's ``aux1``/``aux2``, Inception-v3's
``AuxLogits``), as this project's H100 sessions built those two with ``aux_logits=False``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerwise.as_run import (
    CASTS_IN_LAYER_PRICES,
    cast_launches,
    resolve,
    run_class,
    year_offset,
)
from layerwise.compose import Composition, price_layers
from layerwise.corpora.lambda_runs import read_lambda
from layerwise.efficiency import chip_of
from layerwise.network import decompose
from layerwise.pricing.residual import kind_ms
from layerwise.roofline import family_of

TF_CNN_OPTIMIZER = "momentum"
MEASURED_NETWORKS = (Path(__file__).resolve().parents[1] / "data" / "measured"
                     / "h100-sxm5_torch2.11_2026-11-23_networks.csv")


def synthetic_training(frame: pd.DataFrame) -> pd.Series:
    """Runs of the module's selection (any GPU count): synthetic data, training, replicated
    variables, no XLA, no distortions."""
    sel = ((frame["data"] == "syn") & (frame["mode"] == "training") & ~frame["xla"]
           & ~frame["distortions"])
    if "variable_update" in frame.columns:
        sel &= frame["variable_update"].astype(str).eq("replicated")
    return sel


def measured_targets(path: Path = MEASURED_NETWORKS) -> pd.DataFrame:
    """The first H100 session's whole-network steps (``layerwise/data/measured``), as targets:
    gpu (catalog name), network (zoo name), precision, batch_per_gpu, step_ms, chip. That
    session ran ``fp32`` with TF32 off: its request is ``fp32-strict``."""
    from fleet.catalog import resolve_gpu
    from layerwise.zoo import resolve_name

    table = pd.read_csv(path)
    out = pd.DataFrame({
        "gpu": table["gpu"].map(lambda g: resolve_gpu(str(g)).name),
        "network": table["network"].map(lambda n: resolve_name(str(n))),
        "precision": table["precision"].astype(str).replace({"fp32": "fp32-strict"}),
        "batch_per_gpu": table["batch_size"].astype(int),
        "step_ms": table["step_ms"].astype(float), "runs": 1})
    out["chip"] = out["gpu"].map(chip_of)
    return out


def lambda_targets(root: Path, gpu_count: int = 1) -> pd.DataFrame:
    """Median step ms per (gpu, network, precision, batch_per_gpu) of the selected runs."""
    frame, _ = read_lambda(root)
    part = frame.loc[synthetic_training(frame) & (frame["gpu_count"] == gpu_count)].copy()
    part["step_ms"] = part["step_seconds"] * 1000.0
    out = (part.groupby(["gpu", "network", "precision", "batch_per_gpu"], as_index=False)
           .agg(step_ms=("step_ms", "median"), runs=("step_ms", "size")))
    out["chip"] = out["gpu"].map(chip_of)
    out["fw_version"] = "1.15"  # the Lambda systems ran TF 1.15 / 2.2 on pre-Ampere GPUs
    return out


def network_sums(targets: pd.DataFrame, predictors: Mapping[str, Any] | Any,
                 framework: str = "tensorflow", extra: Any = None) -> pd.DataFrame:
    """Targets plus sum_ms, low_ms, high_ms, floor_ms, memory_ms, kind_ms (a dict: priced ms
    per layer kind), kernels, precision_class,
    roofline_ms, assumed (the precision as run) and year (the GPU's release year - 2019,
    :func:`layerwise.as_run.year_offset`) per row.

    ``predictors``: one predictor, or a mapping chip -> predictor with a ``"*"`` default.
    Optional target columns: ``framework`` (else the argument), ``image_size`` (the input
    side, else the network's default), ``fw_version`` (what the
    framework makes of fp32, :func:`layerwise.as_run.resolve`), ``optimizer`` (else
    momentum; ``none`` = forward and backward without an update, priced as ``sgd``),
    ``half_rule`` (False: half requests priced as half on GPUs without fast FP16, the rule
    before the half rule of :func:`layerwise.as_run.resolve`; ``"fp32"``: the half rule before
    TensorFlow's half storage; for comparisons), ``casts_in_layers`` (True: AMP's weight casts
    not added as launches, :func:`layerwise.as_run.cast_launches`; comparisons),
    ``classes`` and ``aux_heads`` (what was run, :func:`as_measured`),
    ``align8`` (False: no channel alignment rule for half convolutions; comparisons),
    ``ceiling`` (False: half layers without the fp32 price ceiling of
    :func:`layerwise.as_run.resolve`; comparisons). ``extra``: a function of (rows, precision
    as run) returning more columns per row (a benchmark's own, e.g. memory-bound work).
    """
    from layerwise.forecast import device_features

    nets: dict[tuple[str, int, str, int | None, int | None, bool], list[dict]] = {}
    records = []
    for t in targets.itertuples(index=False):
        fw = str(getattr(t, "framework", framework) or framework)
        opt = str(getattr(t, "optimizer", TF_CNN_OPTIMIZER) or TF_CNN_OPTIMIZER)
        opt = "sgd" if opt == "none" else opt
        side = getattr(t, "image_size", None)
        side = None if side is None or pd.isna(side) else int(side)
        classes = getattr(t, "classes", None)
        classes = None if classes is None or pd.isna(classes) else int(classes)
        aux = getattr(t, "aux_heads", True)
        aux = True if aux is None or pd.isna(aux) else bool(aux)
        key = (str(t.network), int(t.batch_per_gpu), fw, side, classes, aux)
        if key not in nets:
            nets[key] = as_measured(decompose(
                t.network, batch_size=int(t.batch_per_gpu), optimizer=opt, framework=fw,
                image_size=side).rows, classes, aux)
        rows = nets[key]
        pred = (predictors.get(t.chip, predictors["*"]) if isinstance(predictors, Mapping)
                else predictors)
        hw = device_features(str(t.gpu))
        version = getattr(t, "fw_version", None)
        run = resolve(str(t.precision), fw, hw, None if pd.isna(version) else str(version),
                      half_rule=getattr(t, "half_rule", True), align8=getattr(t, "align8", None),
                      ceiling=getattr(t, "ceiling", None))
        layers = price_layers(rows, pred, hw, run, True, opt, fw)
        memory = ~layers["layer"].map(family_of).eq("gemm")
        records.append({"sum_ms": layers["ms"].sum(), "low_ms": layers["low_ms"].sum(),
                        "floor_ms": layers["floor_ms"].sum(),
                        "memory_ms": layers.loc[memory, "ms"].sum(),
                        "high_ms": layers["high_ms"].sum(),
                        "kind_ms": kind_ms(layers[["layer", "ms"]].to_dict("records")),
                        "kernels": int(layers["kernels"].sum()) + cast_launches(
                            run, rows, True, bool(getattr(t, "casts_in_layers",
                                                          CASTS_IN_LAYER_PRICES))),
                        "precision_class": run_class(run, hw, rows),
                        "roofline_ms": roofline_ms(rows, hw, run), "assumed": run.assumed,
                        "peak_tflops": peak_tflops(hw, run.conv), "year": year_offset(hw),
                        **(extra(rows, run) if extra is not None else {})})
    return pd.concat([targets.reset_index(drop=True), pd.DataFrame(records)], axis=1)


# auxiliary classifiers of the zoo's torchvision specs (traced in training mode): row-name prefixes
AUX_HEADS = {"googlenet": ("aux1", "aux2"), "inception_v3": ("AuxLogits",)}


def as_measured(rows: list[dict], classes: int | None = None, aux_heads: bool = True
                ) -> list[dict]:
    """The zoo's rows of a network as it was run (module rules): without the auxiliary
    classifiers when ``aux_heads`` is False, the last dense layer resized to ``classes``
    outputs (None: as the zoo has it). The zoo's own rows are never changed."""
    if not aux_heads:
        heads = tuple(p for prefixes in AUX_HEADS.values() for p in prefixes)
        rows = [r for r in rows
                if not any(str(r.get("name", "")) == p or str(r.get("name", "")).startswith(
                    (p + ".", p + "#")) for p in heads)]
    dense = [i for i, r in enumerate(rows) if r.get("layer") == "dense"]
    if classes is None or not dense or int(rows[dense[-1]]["dim_output"]) == classes:
        return list(rows)
    last = dict(rows[dense[-1]])
    ratio = classes / float(last["dim_output"])
    last["params"] = (int(last["dim_input"]) + int(bool(last.get("use_bias")))) * classes
    for col in ("macs", "flops", "bytes_out"):
        last[col] = float(last[col]) * ratio
    last["dim_output"], last["output_shape"] = classes, str(classes)
    return [*rows[:dense[-1]], last, *rows[dense[-1] + 1:]]


def roofline_ms(rows: list[dict], hw: dict, run: Any) -> float:
    """The plain roofline of a training step: per layer max(FLOPs / peak at its precision,
    bytes / bandwidth), x3 (forward, input and weight gradients), summed."""
    from fleet.catalog import resolve_gpu

    spec = resolve_gpu(str(hw.get("hw_model") or hw["gpu"]))
    bandwidth = spec.bandwidth_bytes_per_s
    total = 0.0
    for row in rows:
        if row["layer"] == "view":
            continue
        p = run.for_kind(row["layer"])
        half = 0.5 if p in ("fp16", "bf16") else 1.0
        flops = float(row.get("flops", 0.0) or 0.0) / (spec.peak_tflops(p) * 1e12)
        data = half * (float(row.get("bytes_in", 0.0) or 0.0)
                       + float(row.get("bytes_out", 0.0) or 0.0)) / bandwidth
        total += 3.0 * max(flops, data)
    return 1000.0 * total


def peak_tflops(hw: dict, precision: str) -> float:
    """The catalog's peak TFLOP/s of the GPU at ``precision`` (tensor cores where it has them)."""
    from fleet.catalog import resolve_gpu

    return float(resolve_gpu(str(hw.get("hw_model") or hw["gpu"])).peak_tflops(precision))


def _predict(comp: Composition, part: pd.DataFrame) -> np.ndarray:
    extra = part["extra_ms"].to_numpy(float) if "extra_ms" in part.columns else \
        np.zeros(len(part))
    floor = part["floor_ms"].to_numpy(float) if "floor_ms" in part.columns else \
        np.zeros(len(part))
    year = part["year"].to_numpy(float) if "year" in part.columns else np.zeros(len(part))
    steps = np.array([comp.step(r.sum_ms, r.low_ms, r.high_ms, int(r.kernels),
                                r.precision_class, f, y)
                      for r, f, y in zip(part.itertuples(), floor, year, strict=True)])
    return steps * comp.corrections(part)[0][:, None] + extra[:, None]


def inner_residuals(sums: pd.DataFrame, by: str, form: Mapping[str, Any] | None = None,
                    folds: int = 5) -> np.ndarray:
    """Log residuals of each row predicted by a composition fitted without its group (groups
    of ``by``; at most ``folds`` folds of groups, assigned in sorted order)."""
    groups = sorted(sums[by].unique())
    fold_of = {g: i % folds for i, g in enumerate(groups)}
    fold = sums[by].map(fold_of).to_numpy()
    resid = np.zeros(len(sums))
    for f in np.unique(fold):
        train = fold != f
        if train.sum() < 4 or (~train).sum() == 0:
            continue
        comp = Composition(**(form or {})).fit(sums.loc[train], sums.loc[train, "step_ms"])
        pred = _predict(comp, sums.loc[~train])[:, 0]
        resid[~train] = np.log(sums.loc[~train, "step_ms"].to_numpy(float)) - np.log(pred)
    return resid


def leave_one_out(sums: pd.DataFrame, by: str = "chip", form: Mapping[str, Any] | None = None,
                  coverage: float = 0.9, inner: bool = True,
                  groups: list[Any] | None = None) -> pd.DataFrame:
    """Per row: pred_ms, pred_low_ms, pred_high_ms from a composition fitted without the row's
    group (``by``: ``chip`` for unseen GPUs, ``network`` for unseen networks); ``form``: the
    :class:`Composition` parameters (``overlap_p``, ``subtract_floor``); with ``inner`` the
    interval comes from residuals of groups left out inside the training part; ``groups``:
    predict only these groups (the other rows' predictions are NaN)."""
    sums = sums.reset_index(drop=True)
    out = sums.copy()
    pred = np.full((len(sums), 3), np.nan)
    for group in sorted(sums[by].unique()) if groups is None else groups:
        train = (sums[by] != group).to_numpy()
        part = sums.loc[train]
        resid = inner_residuals(part, by, form) if inner else None
        comp = Composition(coverage=coverage, **(form or {})).fit(
            part, part["step_ms"], residuals=resid)
        pred[~train] = _predict(comp, sums.loc[~train])
    out["pred_ms"], out["pred_low_ms"], out["pred_high_ms"] = pred.T
    out["ape"] = (out["pred_ms"] - out["step_ms"]).abs() / out["step_ms"] * 100.0
    out["covered"] = ((out["step_ms"] >= out["pred_low_ms"])
                      & (out["step_ms"] <= out["pred_high_ms"]))
    return out


def leave_one_gpu_out(sums: pd.DataFrame, coverage: float = 0.9,
                      by: str = "chip") -> pd.DataFrame:
    """Per row: predicted, low, high step ms from a composition fitted without its group
    (``by``: ``chip``, or ``network`` for new networks on measured GPUs); the interval from
    the fit's own residuals (see :func:`leave_one_out` for nested ones)."""
    return leave_one_out(sums, by=by, coverage=coverage, inner=False)


def naive_roofline(sums: pd.DataFrame, by: str = "chip") -> np.ndarray:
    """The plain roofline (``roofline_ms``) times one efficiency fitted without the row's
    group (the geometric mean of measured / roofline)."""
    pred = np.full(len(sums), np.nan)
    ratio = np.log(sums["step_ms"].to_numpy(float) / sums["roofline_ms"].to_numpy(float))
    for group in sums[by].unique():
        test = (sums[by] == group).to_numpy()
        pred[test] = sums.loc[test, "roofline_ms"].to_numpy(float) * math.exp(ratio[~test].mean())
    return pred


NEAREST_KEYS = ("suite", "network", "batch_per_gpu", "precision")


def naive_nearest_gpu(sums: pd.DataFrame, by: str = "chip") -> np.ndarray:
    """A GPU left out: the same job's step on the other GPU with the nearest peak FLOP/s (at
    the precision as run), scaled by the ratio of peaks; NaN when no other GPU ran it."""
    keys = [k for k in NEAREST_KEYS if k in sums.columns]
    pred = np.full(len(sums), np.nan)
    for _, grp in sums.groupby(keys):
        for i, r in grp.iterrows():
            other = grp[grp[by] != r[by]]
            if other.empty:
                continue
            near = other.iloc[int(np.argmin(np.abs(np.log(other["peak_tflops"].to_numpy(float)
                                                          / r["peak_tflops"]))))]
            pred[sums.index.get_loc(i)] = near["step_ms"] * near["peak_tflops"] / r["peak_tflops"]
    return pred


# chosen after seeing the figures of benchmarks/layerwise_networks_v3.py (retired in issue 38,
# last at 7459c99)
# (docs/lab/layerwise-pytorch.md)
# TensorFlow's form changed on 2026-12-03 (issue 36), after seeing the one-GPU-out and
# one-generation-out figures of benchmarks/layerwise_transfer.py (docs/lab/layerwise-transfer.md):
# the launch cost by the GPU's release year and the stiffer ridge (alpha 1000), chosen among
# four forms on those two splits, with PROFET's V100/T4/M60/K80 steps in the fit; kept on
# 2026-12-03 when PROFET's AlexNet (not the zoo's network) left the targets: on them no
# candidate won clearly (pooled MAPE 21.7 year, 21.7 this, 22.2 before, 23.0 pytorch-form)
SHIPPED_FORMS: dict[str, dict[str, Any]] = {
    "tensorflow": {"overlap_p": 0.0, "subtract_floor": True, "year_kernel": True,
                   "residual_alpha": 1000.0, "residual_shrink": 1.0},
    "pytorch": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": True,
                "residual_alpha": 1000.0, "residual_shrink": 1.0},
}


def fit_shipped_compositions(predictor: Any, shared: Path) -> dict[str, Composition]:
    """The shipped compositions: TensorFlow on the Lambda and PROFET steps
    (:func:`layerwise.corpora.profet.profet_targets`, the sides the zoo builds), PyTorch on
    every PyTorch target (:func:`layerwise.corpora.torchvision_bench.pytorch_targets`,
    networks the zoo decomposes), each in its :data:`SHIPPED_FORMS` form, its interval from
    residuals of GPUs left out inside the fit."""
    from layerwise.corpora.profet import decomposable_sizes, profet_targets
    from layerwise.corpora.torchvision_bench import pytorch_targets

    lam = pd.concat([lambda_targets(Path(shared) / "lambda").assign(
        framework="tensorflow", optimizer=TF_CNN_OPTIMIZER),
                     decomposable_sizes(profet_targets(Path(shared) / "profet"))[0]],
                    ignore_index=True)
    torch_targets, _ = decomposable(pytorch_targets(Path(shared)))
    out = {}
    for fw, targets in (("tensorflow", lam), ("pytorch", torch_targets)):
        sums = network_sums(targets, predictor, framework=fw)
        form = SHIPPED_FORMS[fw]
        resid = inner_residuals(sums, "chip", form, folds=int(sums["chip"].nunique()))
        out[fw] = Composition(**form).fit(sums, sums["step_ms"], residuals=resid)
    return out


def decomposable(targets: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Targets whose network the zoo decomposes without PyTorch, and the names left out."""
    from layerwise.network import NetworkSpecError

    bad = set()
    for name, fw in targets[["network", "framework"]].drop_duplicates().itertuples(index=False):
        try:
            decompose(name, batch_size=1, framework=fw)
        except NetworkSpecError:
            bad.add(name)
    return targets[~targets["network"].isin(bad)].reset_index(drop=True), sorted(bad)
