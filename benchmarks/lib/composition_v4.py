"""Composition forms with per-GPU features that generalise (issue 23, benchmark option).

:class:`FeatureComposition` turns the layer sums of :func:`layerwise.corpora.network_fit.
network_sums` into a step time like :class:`layerwise.compose.Composition`, with two
declared additions, both read from the GPU catalog (never from the run being forecast):

* **Launch cost by GPU generation** (``year_kernel``): the host's cost per priced kernel is
  ``kernel_ms x exp(year x (release_year - 2019))``. Eager PyTorch at batch 12 is
  launch-bound on every GPU of ``torchvision_bench`` (step / kernels: 65-95 us on the 2017-2020
  GPUs, 41-60 us on the H100 in PyTorch 2.11); the host and framework that drive a GPU are
  about as new as the GPU, so the release year stands in for them. ``year`` is bounded to
  [-1, 1] per year.
* **Roofline blend** (``roofline_blend``): the GPU part is the geometric mean of the scaled
  layer sum and a roofline priced from the catalog's peaks and bandwidth, ``gemm compute /
  e[class] + gemm bytes / e_gb + memory-bound bytes / e_mem`` (:func:`roofline_split`, x3 for
  training), each efficiency fitted on whole networks (NeuSight's idea of a learned
  efficiency under the roofline, per layer class, at the network level).

* **Half precision without fast FP16**: the half rule of :func:`layerwise.as_run.resolve`
  (shipped; :func:`layerwise.as_run.slow_fp16`); a target column ``half_rule`` = False prices
  such requests as half, for comparison (:func:`layerwise.corpora.network_fit.network_sums`).

The year feature is :func:`layerwise.as_run.year_offset` (``network_sums`` adds it); the
``year-floor`` form equals the shipped :class:`layerwise.compose.Composition` with
``year_kernel`` (one definition of the step there: :func:`layerwise.as_run.step_from_dict`).

Rules shared with :class:`~layerwise.compose.Composition`: classes ``fp32`` / ``tensor``
(``precision_class``); ``subtract_floor`` removes the layers' per-call floors before
scaling; ``overlap_p`` > 0 combines GPU and launch time as ``(gpu^p + cpu^p)^(1/p)``; a
constant ``step_ms`` is added; the fit minimises squared log errors; the interval comes from
log residuals (``residuals`` to ``fit``, e.g. of groups left out inside the training part).
An unseen precision class takes the ``fp32`` scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from layerwise.as_run import (  # noqa: F401  (slow_fp16, YEAR0: one definition, re-exported)
    YEAR0,
    resolve,
    slow_fp16,
    year_offset,
)

ROOF_COLUMNS = ("roof_gemm_c", "roof_gemm_b", "roof_mem")


def roofline_split(rows: list[dict], hw: Mapping, run: Any) -> dict[str, float]:
    """ms of a training step's roofline parts: GEMM FLOPs at the kind's peak as run
    (``roof_gemm_c``), GEMM bytes (``roof_gemm_b``) and the other kinds' bytes (``roof_mem``)
    over the catalog's bandwidth, each x3 (forward, input and weight gradient); half-precision
    kinds move half the bytes."""
    from fleet.catalog import resolve_gpu
    from layerwise.roofline import family_of

    spec = resolve_gpu(str(hw.get("hw_model") or hw["gpu"]))
    bandwidth = spec.bandwidth_bytes_per_s
    out = dict.fromkeys(ROOF_COLUMNS, 0.0)
    for row in rows:
        if row["layer"] == "view":
            continue
        p = run.for_kind(row["layer"])
        half = 0.5 if p in ("fp16", "bf16") else 1.0
        data = 3e3 * half * (float(row.get("bytes_in", 0.0) or 0.0)
                             + float(row.get("bytes_out", 0.0) or 0.0)) / bandwidth
        if family_of(row["layer"]) == "gemm":
            flops = float(row.get("flops", 0.0) or 0.0)
            out["roof_gemm_c"] += 3e3 * flops / (spec.peak_tflops(p) * 1e12)
            out["roof_gemm_b"] += data
        else:
            out["roof_mem"] += data
    return out


def gpu_features(sums: pd.DataFrame) -> pd.DataFrame:
    """``sums`` (targets with ``gpu``, ``network``, ``batch_per_gpu``, ``precision``, optional
    ``framework``, ``fw_version``, ``optimizer``, ``half_rule``) plus ``year``
    (:func:`layerwise.as_run.year_offset`, unless already there) and the
    :data:`ROOF_COLUMNS` (:func:`roofline_split`)."""
    from layerwise.forecast import device_features
    from layerwise.network import decompose

    nets: dict[tuple, Any] = {}
    records = []
    for t in sums.itertuples(index=False):
        fw = str(getattr(t, "framework", "tensorflow") or "tensorflow")
        opt = str(getattr(t, "optimizer", "momentum") or "momentum")
        opt = "sgd" if opt == "none" else opt
        key = (str(t.network), int(t.batch_per_gpu), fw)
        if key not in nets:
            nets[key] = decompose(t.network, batch_size=int(t.batch_per_gpu), optimizer=opt,
                                  framework=fw)
        hw = device_features(str(t.gpu))
        version = getattr(t, "fw_version", None)
        run = resolve(str(t.precision), fw, hw, None if pd.isna(version) else str(version),
                      half_rule=bool(getattr(t, "half_rule", True)))
        records.append({"year": year_offset(hw), **roofline_split(nets[key].rows, hw, run)})
    extra = pd.DataFrame(records)
    if "year" in sums.columns:
        extra = extra.drop(columns="year")
    return pd.concat([sums.reset_index(drop=True), extra], axis=1)


class FeatureComposition(BaseEstimator):
    """The step from layer sums and catalog features (module rules), fitted on whole networks.

    ``fit(X, y, residuals=None)``: X has ``sum_ms``, ``floor_ms``, ``kernels``,
    ``precision_class``, and ``year`` / :data:`ROOF_COLUMNS` when the form uses them
    (:func:`gpu_features`). Fitted: ``theta_`` (name -> log parameter, ``year`` as is),
    ``classes_``, ``log_low_``, ``log_high_``, ``n_fit_``.
    """

    def __init__(self, coverage: float = 0.9, overlap_p: float = 4.0,
                 subtract_floor: bool = True, year_kernel: bool = True,
                 roofline_blend: bool = False):
        self.coverage = coverage
        self.overlap_p = overlap_p
        self.subtract_floor = subtract_floor
        self.year_kernel = year_kernel
        self.roofline_blend = roofline_blend

    def _names(self, classes: list[str]) -> list[str]:
        # blended, one overall scale of the sum is the roofline efficiencies' (s_fp32 = 1)
        scaled = [c for c in classes if not (self.roofline_blend and c == "fp32")]
        names = [f"s_{c}" for c in scaled] + ["kernel", "base"]
        if self.year_kernel:
            names.append("year")
        if self.roofline_blend:
            names += [f"e_{c}" for c in classes] + ["e_gb", "e_mem"]
        return names

    def _per_class(self, prefix: str, theta: Mapping[str, float], pclass: np.ndarray
                   ) -> np.ndarray:
        fallback = theta.get(f"{prefix}_fp32", 0.0)
        return np.exp(np.array([theta.get(f"{prefix}_{c}", fallback) for c in pclass]))

    def _ms(self, theta: Mapping[str, float], X: pd.DataFrame) -> np.ndarray:
        pclass = X["precision_class"].to_numpy()
        cut = X["floor_ms"].to_numpy(float) if self.subtract_floor else 0.0
        gpu = self._per_class("s", theta, pclass) * np.maximum(
            X["sum_ms"].to_numpy(float) - cut, 1e-9)
        if self.roofline_blend:
            roof = (X["roof_gemm_c"].to_numpy(float) * self._per_class("e", theta, pclass)
                    + math.exp(theta["e_gb"]) * X["roof_gemm_b"].to_numpy(float)
                    + math.exp(theta["e_mem"]) * X["roof_mem"].to_numpy(float))
            gpu = np.sqrt(gpu * np.maximum(roof, 1e-9))
        per_kernel = math.exp(theta["kernel"]) * (
            np.exp(theta["year"] * X["year"].to_numpy(float)) if self.year_kernel else 1.0)
        cpu = per_kernel * X["kernels"].to_numpy(float)
        p = float(self.overlap_p)
        if p > 0:
            top = np.maximum(np.maximum(gpu, cpu), 1e-300)
            core = top * ((gpu / top) ** p + (cpu / top) ** p) ** (1.0 / p)
        else:
            core = gpu + cpu
        return core + math.exp(theta["base"])

    def fit(self, X: pd.DataFrame, y: Any, residuals: Any = None) -> FeatureComposition:
        """Fit the composition on whole networks (as :meth:`Composition.fit`); returns
        ``self``."""
        from scipy.optimize import least_squares

        y = np.asarray(y, float)
        self.classes_ = sorted(set(X["precision_class"]))
        names = self._names(self.classes_)
        start = {"kernel": math.log(0.05), "base": 0.0, "year": 0.0, "e_gb": 0.0,
                 "e_mem": 0.0}
        theta0 = np.array([start.get(n, math.log(0.5)) for n in names])
        low = np.array([-1.0 if n == "year" else -25.0 for n in names])
        high = np.array([1.0 if n == "year" else 8.0 for n in names])
        fit = least_squares(
            lambda t: np.log(self._ms(dict(zip(names, t, strict=True)), X)) - np.log(y),
            theta0, bounds=(low, high))
        self.theta_ = {n: float(v) for n, v in zip(names, fit.x, strict=True)}
        resid = (np.asarray(residuals, float) if residuals is not None
                 else np.log(y) - np.log(self._ms(self.theta_, X)))
        alpha = (1.0 - self.coverage) / 2.0
        self.log_low_ = min(float(np.quantile(resid, alpha)), 0.0)
        self.log_high_ = max(float(np.quantile(resid, 1.0 - alpha)), 0.0)
        self.n_fit_ = int(len(y))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Step ms per row of X."""
        return self._ms(self.theta_, X)

    def predict_interval(self, X: pd.DataFrame) -> np.ndarray:
        """(ms, low, high) per row: the fitted band of log residuals around the step."""
        ms = self.predict(X)
        return np.column_stack([ms, ms * math.exp(self.log_low_), ms * math.exp(self.log_high_)])


def inner_residuals(sums: pd.DataFrame, by: str, form: Mapping[str, Any],
                    folds: int = 5) -> np.ndarray:
    """Log residuals of each row from a form fitted without its group (groups of ``by``, at
    most ``folds`` folds of groups assigned in sorted order)."""
    groups = sorted(sums[by].unique())
    fold = sums[by].map({g: i % folds for i, g in enumerate(groups)}).to_numpy()
    resid = np.zeros(len(sums))
    for f in np.unique(fold):
        train = fold != f
        if train.sum() < 8 or (~train).sum() == 0:
            continue
        comp = FeatureComposition(**form).fit(sums.loc[train], sums.loc[train, "step_ms"])
        resid[~train] = (np.log(sums.loc[~train, "step_ms"].to_numpy(float))
                         - np.log(comp.predict(sums.loc[~train])))
    return resid


def leave_one_out(sums: pd.DataFrame, by: str, form: Mapping[str, Any],
                  coverage: float = 0.9) -> pd.DataFrame:
    """Per row: pred_ms, pred_low_ms, pred_high_ms, ape, covered from a form fitted without
    the row's group (``chip``: unseen GPU; ``network``: unseen network); the interval from
    residuals of groups left out inside the training part
    (:func:`layerwise.corpora.network_fit.leave_one_out`'s protocol)."""
    sums = sums.reset_index(drop=True)
    pred = np.full((len(sums), 3), np.nan)
    for group in sorted(sums[by].unique()):
        train = (sums[by] != group).to_numpy()
        part = sums.loc[train].reset_index(drop=True)
        comp = FeatureComposition(coverage=coverage, **form).fit(
            part, part["step_ms"], residuals=inner_residuals(part, by, form))
        pred[~train] = comp.predict_interval(sums.loc[~train])
    out = sums.copy()
    out["pred_ms"], out["pred_low_ms"], out["pred_high_ms"] = pred.T
    out["ape"] = (out["pred_ms"] - out["step_ms"]).abs() / out["step_ms"] * 100.0
    out["covered"] = ((out["step_ms"] >= out["pred_low_ms"])
                      & (out["step_ms"] <= out["pred_high_ms"]))
    return out
