"""Memory-bound kinds priced from bytes moved / effective bandwidth, fitted on PROFET op times.

PROFET (``../shared/data/profet``, :mod:`layerwise.corpora.profet`) profiled each workload's
TensorFlow ops on four GPUs (V100, T4, M60, K80). Rules:

* **Measured op time** (:func:`op_table`): per (GPU, network, input side, batch) and kind,
  the summed device time of that kind's ops (:data:`KIND_OPS`: batch norm forward and
  gradient, pooling and its gradient, ReLU/ReLU6 and their gradients, adds), divided by
  :data:`STEPS_PER_WINDOW` (the profiled window holds two steps: the busy device time of
  GPU-bound workloads, ResNet-50/VGG/Inception at 224 px and batch >= 128, is 1.8-2.0x the
  step on all four GPUs), the median over repeats; zero or missing times are dropped.
* **Work** (:func:`row_work`): a row of a memory-bound kind moves ``(bytes_in + bytes_out) x
  (1 + BACKWARD_RATIO[kind])`` in a training step (forward only: x 1), half the bytes at a
  half precision, and launches two kernels (an add: one; forward only: one).
* **Model** (:class:`MemoryBoundModel`): ``ms = bytes / (bandwidth x eff_kind x
  prod(f_i / ref_i) ** c_i) + kernels x launch_ms``, bandwidth from the catalog,
  ``eff_kind`` per kind, ``c_i`` per spec-sheet feature of the chosen set; the fit minimises
  squared log errors of the per-step kind times (``scipy.optimize.least_squares``).
* **Features** are chosen among :data:`CANDIDATES` by leave-one-GPU-out error on the op
  times (each PROFET GPU is its own generation, so that is also leave-one-generation-out),
  never by in-sample fit (:func:`held_out_errors`).
* Activations fused into a convolution row (VGG, AlexNet: ``activation`` on the conv row)
  stay in the convolution's price; their ReLU op times are left out of the fit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerwise.pricing.step import BACKWARD_RATIO, DEFAULT_BACKWARD_RATIO

KIND_OPS: dict[str, tuple[str, ...]] = {
    "bn": ("FusedBatchNormV3", "FusedBatchNormGradV3"),
    "pool": ("MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad"),
    "act": ("Relu", "ReluGrad", "Relu6", "Relu6Grad"),
    "add": ("AddV2", "AddN"),
}
KINDS = tuple(KIND_OPS)
STEPS_PER_WINDOW = 2.0
ANCHORS = {"p3": "p3.2xlarge", "g4": "g4dn.xlarge", "g3": "g3s.xlarge", "p2": "p2.xlarge"}
# reference values of the features (a V100's), so coefficients are ratios to it
REFERENCE = {"sm_count": 80.0, "boost_clock_mhz": 1530.0, "l2_mb": 6.0, "tdp_w": 300.0,
             "bandwidth_gbs": 900.0, "release_year": 2017.0}
# name -> (features of the bandwidth term, features of the launch term)
CANDIDATES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "bandwidth": ((), ()), "bandwidth^b": (("bandwidth_gbs",), ()),
    "+sm": (("sm_count",), ()), "+clock": (("boost_clock_mhz",), ()), "+l2": (("l2_mb",), ()),
    "launch~clock": ((), ("boost_clock_mhz",)), "launch~year": ((), ("release_year",)),
    "launch~sm": ((), ("sm_count",)), "launch~bandwidth": ((), ("bandwidth_gbs",)),
    "+l2, launch~year": (("l2_mb",), ("release_year",)),
    "+sm, launch~year": (("sm_count",), ("release_year",)),
}
# chosen on 2026-12-03 after seeing the held-out op-time errors of every candidate
# (docs/lab/layerwise-transfer.md, "Memory-bound kinds"): the best mean and median APE
CHOSEN = "launch~clock"
HALF = ("fp16", "bf16")


def spec_features(spec: Any) -> dict[str, float]:
    """The spec-sheet features of a :class:`fleet.catalog.GpuSpec` (bandwidth and the rest)."""
    return {k: float(getattr(spec, k) or REFERENCE[k]) for k in REFERENCE}


def row_work(row: Mapping, precision: str, training: bool) -> tuple[float, float]:
    """(bytes moved, kernels) of one memory-bound row (module rules)."""
    kind = str(row["layer"])
    moved = float(row.get("bytes_in", 0.0) or 0.0) + float(row.get("bytes_out", 0.0) or 0.0)
    moved *= 0.5 if precision in HALF else 1.0
    if not training:
        return moved, 1.0
    ratio = BACKWARD_RATIO.get(kind, DEFAULT_BACKWARD_RATIO)
    return moved * (1.0 + ratio), 1.0 if kind == "add" else 2.0


def _z(feature: str, value: float) -> float:
    """A feature's regressor: years minus the reference year, else log(value / reference)."""
    if feature == "release_year":
        return float(value) - REFERENCE[feature]
    return math.log(float(value) / REFERENCE[feature])


@dataclass
class MemoryBoundModel:
    """Fitted constants (module rules): per kind log efficiency and launch ms, and the powers
    of the bandwidth term's and the launch term's features."""

    features: tuple[str, ...] = ()
    launch_features: tuple[str, ...] = ()
    log_eff: dict[str, float] = field(default_factory=dict)
    launch_ms: dict[str, float] = field(default_factory=dict)
    coef: dict[str, float] = field(default_factory=dict)
    launch_coef: dict[str, float] = field(default_factory=dict)

    def ms(self, kind: str, moved: float, kernels: float, feats: Mapping[str, float]) -> float:
        """Predicted ms of ``moved`` bytes in ``kernels`` launches of ``kind`` on a GPU."""
        scale = sum(self.coef[f] * _z(f, feats[f]) for f in self.features)
        launch = sum(self.launch_coef[f] * _z(f, feats[f]) for f in self.launch_features)
        bw = feats["bandwidth_gbs"] * 1e9 * math.exp(self.log_eff[kind] + scale)
        return 1000.0 * moved / bw + kernels * self.launch_ms[kind] * math.exp(launch)


def _anchor(root: Path, key: str) -> pd.DataFrame:
    from layerwise.corpora.profet import INSTANCES, ZOO_NAMES

    table = pd.read_csv(root / f"profet_anchor_{key}_opprofile.csv.gz")
    table = table[table["model"].isin(list(ZOO_NAMES))]
    out = pd.DataFrame({"gpu": INSTANCES[ANCHORS[key]], "network": table["model"].map(ZOO_NAMES),
                        "image_size": table["dataset"].str.extract(r"^(\d+)")[0].astype(int),
                        "batch": table["batchsize"].astype(int)})
    for kind, ops in KIND_OPS.items():
        cols = [f"Device_{op}" for op in ops if f"Device_{op}" in table.columns]
        out[kind] = table[cols].fillna(0.0).sum(axis=1) / 1000.0 / STEPS_PER_WINDOW
    return out


def op_table(root: Path) -> pd.DataFrame:
    """Per (gpu, network, image_size, batch, kind): measured ms per step (module rules)."""
    frame = pd.concat([_anchor(Path(root), k) for k in ANCHORS], ignore_index=True)
    med = frame.groupby(["gpu", "network", "image_size", "batch"], as_index=False)[
        list(KINDS)].median()
    long = med.melt(id_vars=["gpu", "network", "image_size", "batch"], var_name="kind",
                    value_name="op_ms")
    return long[np.isfinite(long["op_ms"]) & (long["op_ms"] > 0)].reset_index(drop=True)


def network_work(network: str, side: int, batch: int,
                 cache: dict[tuple[str, int], Any]) -> dict[str, tuple[float, float]]:
    """Per kind (bytes moved, kernels) of a TensorFlow training step; ``act`` is absent when
    the network fuses activations into its convolutions (module rules)."""
    from layerwise.network import decompose

    if (network, side) not in cache:
        cache[(network, side)] = decompose(network, batch_size=1, framework="tensorflow",
                                           image_size=side, optimizer="sgd").rows
    rows = cache[(network, side)]
    out: dict[str, tuple[float, float]] = {}
    for row in rows:
        if row["layer"] not in KIND_OPS:
            continue
        moved, kernels = row_work(row, "fp32", True)
        old = out.get(row["layer"], (0.0, 0.0))
        out[row["layer"]] = (old[0] + moved * batch, old[1] + kernels)
    if any(r["layer"] == "conv" and r.get("activation") not in (None, "none") for r in rows):
        out.pop("act", None)
    return out


def fit_frame(root: Path) -> pd.DataFrame:
    """:func:`op_table` joined with the zoo's work per kind (rows the zoo builds only)."""
    from fleet.catalog import resolve_gpu
    from layerwise.network import NetworkSpecError

    ops = op_table(root)
    cache: dict[tuple[str, int], Any] = {}
    moved, kernels = [], []
    for r in ops.itertuples(index=False):
        try:
            work = network_work(str(r.network), int(r.image_size), int(r.batch), cache)
        except NetworkSpecError:
            work = {}
        m, k = work.get(str(r.kind), (math.nan, math.nan))
        moved.append(m)
        kernels.append(k)
    ops["moved"], ops["kernels"] = moved, kernels
    ops = ops[np.isfinite(ops["moved"]) & (ops["moved"] > 0)].reset_index(drop=True)
    feats = pd.DataFrame([spec_features(resolve_gpu(g)) for g in ops["gpu"]])
    ops["generation"] = [str(resolve_gpu(g).architecture) for g in ops["gpu"]]
    return pd.concat([ops, feats], axis=1)


def _columns(frame: pd.DataFrame, features: Sequence[str]) -> np.ndarray:
    return np.array([[_z(f, v) for v in frame[f]] for f in features]).reshape(
        len(features), len(frame))


def _unpack(theta: np.ndarray, nb: int) -> tuple[np.ndarray, ...]:
    n = len(KINDS)
    return theta[:n], theta[n:2 * n], theta[2 * n:2 * n + nb], theta[2 * n + nb:]


def _predict(theta: np.ndarray, frame: pd.DataFrame, zb: np.ndarray,
             zl: np.ndarray) -> np.ndarray:
    eff, launch, cb, cl = _unpack(theta, len(zb))
    kind = np.array([KINDS.index(k) for k in frame["kind"]])
    bw = frame["bandwidth_gbs"].to_numpy(float) * 1e9 * np.exp(eff[kind] + cb @ zb)
    return 1000.0 * frame["moved"].to_numpy(float) / bw + \
        frame["kernels"].to_numpy(float) * np.exp(launch[kind] + cl @ zl)


def fit(frame: pd.DataFrame, features: Sequence[str] = (),
        launch_features: Sequence[str] = ()) -> MemoryBoundModel:
    """The model fitted on ``frame`` (:func:`fit_frame` rows) with the features of each term."""
    from scipy.optimize import least_squares

    y = np.log(frame["op_ms"].to_numpy(float))
    zb, zl = _columns(frame, features), _columns(frame, launch_features)
    n = len(KINDS)
    theta0 = np.concatenate([np.full(n, math.log(0.5)), np.full(n, math.log(0.003)),
                             np.zeros(len(features) + len(launch_features))])
    res = least_squares(lambda t: np.log(_predict(t, frame, zb, zl)) - y, theta0,
                        loss="soft_l1", f_scale=0.3)
    eff, launch, cb, cl = _unpack(res.x, len(features))
    return MemoryBoundModel(tuple(features), tuple(launch_features),
                            {k: float(eff[i]) for i, k in enumerate(KINDS)},
                            {k: float(math.exp(launch[i])) for i, k in enumerate(KINDS)},
                            {f: float(c) for f, c in zip(features, cb, strict=True)},
                            {f: float(c) for f, c in zip(launch_features, cl, strict=True)})


def model_ms(model: MemoryBoundModel, frame: pd.DataFrame) -> np.ndarray:
    """``model``'s ms for each row of ``frame`` (:func:`fit_frame` columns)."""
    return np.array([model.ms(str(r["kind"]), float(r["moved"]), float(r["kernels"]), r)
                     for r in frame.to_dict("records")])


def held_out_errors(frame: pd.DataFrame, candidate: tuple[Sequence[str], Sequence[str]],
                    by: str = "gpu") -> np.ndarray:
    """Per row: log(predicted / measured) from a model with the ``candidate``'s features
    (bandwidth term, launch term) fitted without the row's ``by`` group."""
    out = np.full(len(frame), np.nan)
    for group in frame[by].unique():
        test = (frame[by] == group).to_numpy()
        model = fit(frame[~test], *candidate)
        out[test] = np.log(model_ms(model, frame[test]) / frame.loc[test, "op_ms"].to_numpy())
    return out


__all__ = ["CANDIDATES", "KINDS", "KIND_OPS", "MemoryBoundModel", "fit", "fit_frame",
           "held_out_errors", "model_ms", "op_table", "row_work", "spec_features"]


def kind_work(rows: list[dict], run: Any) -> dict[str, tuple[float, float]]:
    """Per memory-bound kind of :data:`KINDS`: (bytes moved, kernels) of a
    training step, each row at its kind's precision as run (:func:`row_work`)."""
    out: dict[str, tuple[float, float]] = {}
    for row in rows:
        kind = str(row["layer"])
        if kind in KINDS:
            moved, kernels = row_work(row, run.for_kind(kind), True)
            old = out.get(kind, (0.0, 0.0))
            out[kind] = (old[0] + moved, old[1] + kernels)
    return out


def reprice_memory_bound(sums: pd.DataFrame, model: Any) -> pd.DataFrame:
    """``sums`` with the memory-bound kinds of ``kind_work`` priced by ``model``
    (:class:`MemoryBoundModel`) instead of the layer predictor: ``kind_ms``,
    ``memory_ms`` and ``sum_ms`` replaced, ``low_ms`` and ``high_ms`` scaled with ``sum_ms``."""
    from fleet.catalog import resolve_gpu

    out = sums.copy()
    feats = {g: spec_features(resolve_gpu(str(g))) for g in out["gpu"].unique()}
    new_kind, delta = [], []
    for r in out.itertuples(index=False):
        priced = dict(r.kind_ms)
        change = 0.0
        for kind, (moved, kernels) in dict(r.kind_work).items():
            ms = model.ms(kind, moved, kernels, feats[r.gpu])
            change += ms - priced.get(kind, 0.0)
            priced[kind] = ms
        new_kind.append(priced)
        delta.append(change)
    moved = np.array(delta)
    ratio = (out["sum_ms"].to_numpy(float) + moved) / out["sum_ms"].to_numpy(float)
    out["kind_ms"], out["memory_ms"] = new_kind, out["memory_ms"] + moved
    out["sum_ms"] = out["sum_ms"] + moved
    out["low_ms"], out["high_ms"] = out["low_ms"] * ratio, out["high_ms"] * ratio
    return out




def kind_work_column(rows: list[dict], run: Any) -> dict[str, Any]:
    """``network_sums``' ``extra`` for this experiment: the ``kind_work`` column."""
    return {"kind_work": kind_work(rows, run)}
