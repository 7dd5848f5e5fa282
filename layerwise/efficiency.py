"""Roofline-efficiency layer predictor: learn how far a layer runs from its physical bound.

``EfficiencyPredictor`` fits, per op family (``gemm``: conv, dense; ``memory``: every other
kind), boosted trees on ``log(measured_ms / bound_ms)`` where ``bound_ms`` comes from
:mod:`layerwise.roofline` (FLOPs / peak at the row's precision with wave quantisation, bytes /
bandwidth, one launch). A forecast is ``bound_ms x exp(tree output)``. Rules:

* Features are ratios of the row to its device (arithmetic intensity versus the ridge point,
  tiles per SM, bytes versus L2, log bound), its GEMM shape, kind, pass (forward / training
  step with optimizer slots), framework and precision; with ``hardware_features`` the
  device's own log peak and bandwidth too. Trees are constant outside the data, so beyond the
  largest measured batch or shape the *efficiency* stays put and the time keeps scaling with
  the bound: no flat line.
* A row outside the training range of :data:`RANGE_FEATURES` is flagged ``extrapolated`` and
  its interval widened by ``extrapolation_widening``; a kind with no rows of its own (priced by
  its family's trees) is flagged ``own_data`` False and widened by ``no_data_widening``.
* Intervals (``coverage``, default 90 %): quantiles of log residuals in bins of log bound,
  from a random 10 % split for devices seen in training (per device where the split holds
  :data:`CHIP_INTERVAL_ROWS` of its rows, else pooled: a device's own noise sets its width),
  and from leave-one-device-out refits (device = GPU chip, so V100 SXM2 and V100 PCIe leave
  together) for any other device.
* Saved as ``efficiency.json`` + ``efficiency.npz`` (numpy arrays; no pickles, no TensorFlow).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from fleet.catalog import UnknownGpuError, resolve_gpu
from fleet.framework import FRAMEWORKS
from fleet.names import gpu_words
from layerwise.compose import Composition
from layerwise.estimators.gbt import Forest
from layerwise.layers import LAYER_TYPES
from layerwise.predictor import capped_fold, read_saved_doc
from layerwise.roofline import family_of, physics_frame

FORMAT_VERSION = 2
ACTIVATION_VALUES = ("none", "relu", "tanh", "sigmoid")
CHIP_INTERVAL_ROWS = 100  # held-out rows a device needs for an interval of its own
RANGE_FEATURES = ("log_m", "log_n", "log_k", "log_bytes", "log_bound")
OUTPUT_COLUMNS = ("predicted_ms", "low_ms", "high_ms")


@lru_cache(maxsize=1024)
def chip_of(gpu: str) -> str:
    """The GPU chip a device name belongs to (``Tesla V100-PCIE-32GB`` -> ``v100``)."""
    try:
        words = gpu_words(resolve_gpu(gpu).name)
    except UnknownGpuError:
        words = gpu_words(gpu)
    for word in words:
        if re.search(r"\d", word) and not re.fullmatch(r"\d+gb", word):
            return word
    return "".join(words) or str(gpu)


def feature_frame(rows: pd.DataFrame, phys: pd.DataFrame, hardware: bool) -> pd.DataFrame:
    """Model features (all numeric) of kind rows and their physics frame."""
    eps = 1e-12
    f: dict[str, Any] = {
        "log_bound": np.log(phys["bound_ms"]),
        "ridge": np.log(phys["compute_ms"] + eps) - np.log(phys["memory_ms"] + eps),
        "log_tiles_per_sm": np.log(phys["tiles"] / phys["sm_count"]),
        "wave_eff": phys["wave_eff"],
        "log_m": np.log1p(phys["m"]), "log_n": np.log1p(phys["n"]), "log_k": np.log1p(phys["k"]),
        "log_bytes": np.log1p(phys["bytes"]),
        "log_bytes_l2": np.log(phys["bytes"] + 1.0) - np.log(phys["l2_mb"] * 1e6),
        "weight_share": phys["weight_bytes"] / (phys["bytes"] + 1.0),
        "train": phys["train"], "slots": phys["slots"], "tensor": phys["tensor"],
    }
    layer = rows["layer"].astype(str)
    for kind in LAYER_TYPES:
        f[f"kind_{kind}"] = (layer == kind).astype(float)
    fw = (rows["framework"].astype(str).str.lower() if "framework" in rows.columns
          else pd.Series("tensorflow", index=rows.index))
    for name in FRAMEWORKS:
        f[f"fw_{name}"] = (fw == name).astype(float)
    act = (rows["activation"].astype(str).str.lower() if "activation" in rows.columns
           else pd.Series("none", index=rows.index))
    for name in ACTIVATION_VALUES:
        f[f"act_{name}"] = (act == name).astype(float)
    if hardware:
        f["log_peak"] = np.log(phys["peak_flops"])
        f["log_bandwidth"] = np.log(phys["bandwidth"])
        f["log_tdp"] = np.log(phys["tdp_w"])
        f["log_watts_per_tflop"] = np.log(phys["tdp_w"] / (phys["peak_flops"] * 1e-12))
    return pd.DataFrame(f, index=rows.index).astype(float)


def _interval(pred: np.ndarray, resid: np.ndarray, coverage: float, bins: int) -> dict:
    n_bins = max(1, min(bins, len(resid) // 200))
    edges = np.quantile(pred, np.linspace(0, 1, n_bins + 1)[1:-1]) if n_bins > 1 else []
    which = np.searchsorted(edges, pred)
    alpha = (1.0 - coverage) / 2.0
    low, high = [], []
    for b in range(n_bins):
        r = resid[which == b] if np.any(which == b) else resid
        low.append(min(float(np.quantile(r, alpha)), 0.0))
        high.append(max(float(np.quantile(r, 1.0 - alpha)), 0.0))
    return {"edges": [float(e) for e in edges], "low": low, "high": high}


def _apply_interval(iv: dict, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    which = np.searchsorted(np.asarray(iv["edges"], float), key)
    return np.asarray(iv["low"])[which], np.asarray(iv["high"])[which]


class EfficiencyPredictor(BaseEstimator):
    """Predict layer times (ms) as roofline bound x learned efficiency (see module rules).

    Parameters: ``max_iter``, ``learning_rate``, ``max_leaf_nodes``, ``min_samples_leaf``
    (the trees); ``hardware_features`` (give the trees the device's peak and bandwidth);
    ``coverage`` and ``interval_bins``; ``calibration_rows`` (row budget of each
    leave-one-device-out refit); ``extrapolation_widening``, ``no_data_widening`` (log-interval
    factors); ``calibrate_unseen`` (run the leave-one-device-out refits; off = unseen devices
    get the seen-device interval); ``random_state``.
    """

    def __init__(self, max_iter: int = 400, learning_rate: float = 0.1,
                 max_leaf_nodes: int = 63, min_samples_leaf: int = 20,
                 hardware_features: bool = True, coverage: float = 0.9,
                 interval_bins: int = 3, calibration_rows: int = 60000,
                 extrapolation_widening: float = 1.5, no_data_widening: float = 2.0,
                 calibrate_unseen: bool = True, random_state: int = 0):
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.hardware_features = hardware_features
        self.coverage = coverage
        self.interval_bins = interval_bins
        self.calibration_rows = calibration_rows
        self.extrapolation_widening = extrapolation_widening
        self.no_data_widening = no_data_widening
        self.calibrate_unseen = calibrate_unseen
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def _forest(self, X: pd.DataFrame, y: np.ndarray, max_iter: int | None = None) -> Forest:
        from sklearn.ensemble import HistGradientBoostingRegressor

        model = HistGradientBoostingRegressor(
            max_iter=max_iter or self.max_iter, learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=min(self.min_samples_leaf, max(1, len(X) // 4)),
            early_stopping=len(X) < 5000, random_state=self.random_state)
        model.fit(X.to_numpy(np.float64), y)
        return Forest.from_sklearn(model)

    def fit(self, rows: pd.DataFrame, measured_ms: Iterable[float],
            progress: Any = None) -> EfficiencyPredictor:
        """Fit on kind rows (see :mod:`layerwise.sources`) and their measured times in ms."""
        y_ms = pd.Series(np.asarray(list(measured_ms), float), index=rows.index)
        keep = np.isfinite(y_ms) & (y_ms > 0) & rows["layer"].astype(str).isin(list(LAYER_TYPES))
        rows, y_ms = rows.loc[keep], y_ms.loc[keep]
        if rows.empty:
            raise ValueError("no usable training rows (known kind, positive finite time)")
        phys = physics_frame(rows)
        X = feature_frame(rows, phys, self.hardware_features)
        y = np.log(y_ms.to_numpy() / phys["bound_ms"].to_numpy())
        fam = rows["layer"].astype(str).map(family_of)
        chips = rows["gpu"].astype(str).map(chip_of).to_numpy()
        rng = np.random.default_rng(self.random_state)
        self.families_: dict[str, dict[str, Any]] = {}
        for family in sorted(fam.unique()):
            sel = (fam == family).to_numpy()
            Xf, yf, cf = X.loc[sel], y[sel], chips[sel]
            entry: dict[str, Any] = {"features": list(Xf.columns), "n_train": int(sel.sum())}
            held = rng.random(len(Xf)) < 0.1
            part = self._forest(Xf.loc[~held], yf[~held])
            pred = part.predict(Xf.loc[held].to_numpy(np.float64))
            key = Xf.loc[held, "log_bound"].to_numpy()
            entry["seen_interval"] = _interval(key, yf[held] - pred, self.coverage,
                                               self.interval_bins)
            entry["seen_interval_by_chip"] = {
                str(chip): _interval(key[cf[held] == chip], (yf[held] - pred)[cf[held] == chip],
                                     self.coverage, self.interval_bins)
                for chip in np.unique(cf[held])
                if (cf[held] == chip).sum() >= CHIP_INTERVAL_ROWS}
            entry["unseen_interval"] = (self._leave_one_out(Xf, yf, cf, rng, progress)
                                        if self.calibrate_unseen else None)
            entry["forest"] = self._forest(Xf, yf)
            entry["ranges"] = {c: [float(Xf[c].min()), float(Xf[c].max())]
                               for c in RANGE_FEATURES}
            self.families_[family] = entry
        self.kinds_ = sorted(set(rows["layer"].astype(str)))
        self.chips_ = sorted(set(chips))
        self.info_ = {"trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
                      "n_rows": int(len(rows)), "gpus": sorted(set(rows["gpu"].astype(str)))}
        return self

    def _leave_one_out(self, X: pd.DataFrame, y: np.ndarray, chips: np.ndarray,
                       rng: np.random.Generator, progress: Any) -> dict | None:
        groups = np.unique(chips)
        if len(groups) < 3:
            return None
        keys, resids = [], []
        for chip in groups:
            train, test = capped_fold(chips, chip, rng, self.calibration_rows)
            forest = self._forest(X.iloc[train], y[train], max(50, self.max_iter // 2))
            pred = forest.predict(X.iloc[test].to_numpy(np.float64))
            keys.append(X.iloc[test]["log_bound"].to_numpy())
            resids.append(y[test] - pred)
            if progress is not None:
                progress(chip)
        return _interval(np.concatenate(keys), np.concatenate(resids), self.coverage,
                         self.interval_bins)

    # ------------------------------------------------------------------ prediction
    @property
    def known_layers(self) -> set[str]:
        """Kinds the predictor prices: every registered kind whose family has trees."""
        fams = set(getattr(self, "families_", {}))
        return {k for k in LAYER_TYPES if family_of(k) in fams}

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        """predicted/low/high ms, bound_ms, efficiency and the flags, per row (same index)."""
        if not getattr(self, "families_", None):
            raise RuntimeError("EfficiencyPredictor is not fitted; call fit() or load() first")
        out = pd.DataFrame(index=rows.index)
        if rows.empty:
            return out.assign(**{c: [] for c in (*OUTPUT_COLUMNS, "bound_ms")})
        layer = rows["layer"].astype(str)
        unknown = sorted(set(layer) - self.known_layers)
        if unknown:
            raise ValueError(f"no model for layer kind(s) {', '.join(unknown)}; this predictor "
                             f"prices {', '.join(sorted(self.known_layers))}")
        phys = physics_frame(rows)
        X = feature_frame(rows, phys, self.hardware_features)
        pred = np.zeros(len(rows))
        low = np.zeros(len(rows))
        high = np.zeros(len(rows))
        extrap = np.zeros(len(rows), dtype=bool)
        fam = layer.map(family_of).to_numpy()
        gpu = rows["gpu"].astype(str) if "gpu" in rows.columns else pd.Series("", index=rows.index)
        chip_sel = gpu.map(chip_of).to_numpy()
        seen = np.isin(chip_sel, self.chips_)
        for family in np.unique(fam):
            sel = fam == family
            entry = self.families_.get(family)
            if entry is None:
                raise ValueError(f"no trees for the {family!r} family")
            Xf = X.loc[sel, entry["features"]]
            pred[sel] = entry["forest"].predict(Xf.to_numpy(np.float64))
            key = Xf["log_bound"].to_numpy()
            lo, hi = _apply_interval(entry["seen_interval"], key)
            for chip, iv in entry.get("seen_interval_by_chip", {}).items():
                mine = chip_sel[sel] == chip
                if mine.any():
                    lo[mine], hi[mine] = _apply_interval(iv, key[mine])
            if entry["unseen_interval"] is not None:
                u_lo, u_hi = _apply_interval(entry["unseen_interval"], key)
                lo = np.where(seen[sel], lo, u_lo)
                hi = np.where(seen[sel], hi, u_hi)
            outside = np.zeros(sel.sum(), dtype=bool)
            for col, (a, b) in entry["ranges"].items():
                v = Xf[col].to_numpy()
                outside |= (v < a - 1e-9) | (v > b + 1e-9)
            widen = np.where(outside, self.extrapolation_widening, 1.0)
            low[sel], high[sel], extrap[sel] = lo * widen, hi * widen, outside
        own = layer.isin(self.kinds_).to_numpy()
        low = np.where(own, low, low * self.no_data_widening)
        high = np.where(own, high, high * self.no_data_widening)
        bound = phys["bound_ms"].to_numpy()
        out["predicted_ms"] = bound * np.exp(pred)
        out["low_ms"] = bound * np.exp(pred + low)
        out["high_ms"] = bound * np.exp(pred + high)
        out["bound_ms"] = bound
        out["efficiency"] = np.exp(-pred)
        out["extrapolated"] = extrap
        out["seen_device"] = seen
        out["own_data"] = own
        return out

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``efficiency.json`` and ``efficiency.npz`` into ``directory``."""
        if not getattr(self, "families_", None):
            raise RuntimeError("nothing to save: the predictor is not fitted")
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {}
        for family, entry in self.families_.items():
            forest = entry["forest"]
            arrays.update({f"{family}_{k}": v for k, v in forest.arrays().items()})
            meta[family] = {k: v for k, v in entry.items() if k != "forest"}
            meta[family].update(baseline=forest.baseline, depth=forest.depth)
        np.savez_compressed(path / "efficiency.npz", **arrays)
        doc = {"format_version": FORMAT_VERSION, "kind": "efficiency",
               "params": self.get_params(), "families": meta, "kinds": self.kinds_,
               "chips": self.chips_, "info": self.info_}
        (path / "efficiency.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
        if getattr(self, "composition_", None) is not None:
            self.composition_.save(path)
        for old in path.glob("composition-*.json"):
            old.unlink()
        for framework, comp in (getattr(self, "framework_compositions_", None) or {}).items():
            (path / f"composition-{framework}.json").write_text(
                json.dumps(comp.to_dict(), indent=1, sort_keys=True))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> EfficiencyPredictor:
        """Load a predictor written by :meth:`save`."""
        path = Path(directory)
        doc = read_saved_doc(path / "efficiency.json", FORMAT_VERSION, "efficiency predictor")
        est = cls(**doc["params"])
        with np.load(path / "efficiency.npz") as npz:
            arrays = {k: npz[k] for k in npz.files}
        est.families_ = {}
        for family, meta in doc["families"].items():
            prefix = f"{family}_"
            forest = Forest.from_arrays({k[len(prefix):]: v for k, v in arrays.items()
                                         if k.startswith(prefix)}, meta["baseline"],
                                        meta["depth"])
            est.families_[family] = {**meta, "forest": forest}
        est.kinds_, est.chips_, est.info_ = doc["kinds"], doc["chips"], doc.get("info", {})
        est.composition_ = Composition.load(path)
        est.framework_compositions_ = {}
        for file in sorted(path.glob("composition-*.json")):
            try:
                est.framework_compositions_[file.stem.split("-", 1)[1]] = \
                    Composition.from_dict(json.loads(file.read_text()))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{file}: bad composition file ({exc})") from None
        return est
