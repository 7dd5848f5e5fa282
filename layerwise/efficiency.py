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
import warnings
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from layerwise.compose import Composition
from layerwise.deprecated import renamed_keys, renamed_param
from layerwise.efficiency_arrays import (
    ACTIVATION_VALUES,
    DEVICE_FEATURES,
    FORMAT_VERSION,
    OUTPUT_COLUMNS,
    RANGE_FEATURES,
    EfficiencyArrays,
    chip_of,
    feature_names,
    feature_values,
    gemm_physics,
    read_saved,
)
from layerwise.errors import SavedPredictorError, TrainingDataError
from layerwise.forest import Forest
from layerwise.layers import KINDS
from layerwise.predictor import capped_fold
from layerwise.pricing.model import COMPOSED, PricingModel, fitted_model
from layerwise.roofline import family_of, physics_columns

__all__ = ["ACTIVATION_VALUES", "CHIP_INTERVAL_ROWS", "EfficiencyPredictor", "OUTPUT_COLUMNS",
           "RANGE_FEATURES", "chip_of", "efficiency_features"]

CHIP_INTERVAL_ROWS = 100  # held-out rows a device needs for an interval of its own
COVER = (0.1, 0.9)  # quantiles of a chip's own log bounds that count as covered


def _features(rows: pd.DataFrame, device_features: bool,
              dual_issue: bool = True) -> tuple[pd.DataFrame, np.ndarray]:
    """(feature frame, bound ms) of kind rows (``device_features``: with the device's ``hw_*``
    columns; ``dual_issue``: :func:`gemm_physics`)."""
    records = rows.to_dict("records")
    columns = set(rows.columns)
    phys = physics_columns(records, rows.index, columns)
    if dual_issue:
        phys = gemm_physics(phys, records, columns)
    names = feature_names(device_features)
    X = pd.DataFrame(feature_values(names, records, columns, phys), index=rows.index,
                     columns=names)
    return X, phys["bound_ms"]


def efficiency_features(rows: pd.DataFrame, phys: pd.DataFrame,
                        device_features: bool | None = None,
                        *, hardware: bool | None = None) -> pd.DataFrame:
    """Model features (all numeric) of kind rows and their physics frame; ``device_features``:
    with the device's ``hw_*`` columns (``hardware`` is its deprecated keyword)."""
    if hardware is not None:
        warnings.warn("efficiency_features(hardware=...) is deprecated; use device_features=",
                      FutureWarning, stacklevel=2)
        device_features = hardware
    if device_features is None:
        raise TypeError("efficiency_features() needs device_features (True or False)")
    names = feature_names(device_features)
    cols = {c: phys[c].to_numpy() for c in phys.columns}
    return pd.DataFrame(feature_values(names, rows.to_dict("records"), set(rows.columns), cols),
                        index=rows.index, columns=names)


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


class EfficiencyPredictor(BaseEstimator):
    """Predict layer times (ms) as roofline bound x learned efficiency (see module rules).

    Parameters: ``max_iter``, ``learning_rate``, ``max_leaf_nodes``, ``min_samples_leaf``
    (the trees); ``hardware_features`` (give the trees the device's peak and bandwidth);
    ``coverage`` and ``interval_bins``; ``interval_refit_rows`` (row budget of each
    leave-one-device-out refit); ``extrapolation_widening``, ``no_data_widening``
    (log-interval factors); ``unseen_interval_refits`` (run the leave-one-device-out refits;
    off = unseen devices get the seen-device interval); ``transfer_scale`` (log units over
    which a row outside what the device trees learned from moves to the device-agnostic trees;
    None = device trees everywhere, as the v2 predictor first shipped); ``transfer_families``
    (the op families that get device-agnostic trees: GEMMs, whose efficiency a GPU's spec
    sheet tells least); ``seen_by_kind`` (a chip counts as seen for the interval only for
    kinds it has rows of); ``dual_issue`` (FP32 GEMMs of a dual-issue GPU priced against half
    its spec-sheet FP32 peak, :func:`gemm_physics`); ``random_state``.
    ``calibration_rows`` and ``calibrate_unseen`` are the deprecated names of
    ``interval_refit_rows`` and ``unseen_interval_refits`` (:mod:`layerwise.deprecated`).
    """

    pricing = COMPOSED  # priced by layerwise.pricing.price_network (pricing_model())

    def __init__(self, max_iter: int = 400, learning_rate: float = 0.1,
                 max_leaf_nodes: int = 63, min_samples_leaf: int = 20,
                 hardware_features: bool = True, coverage: float = 0.9,
                 interval_bins: int = 3, interval_refit_rows: int = 60000,
                 extrapolation_widening: float = 1.5, no_data_widening: float = 2.0,
                 unseen_interval_refits: bool = True, transfer_scale: float | None = 0.5,
                 transfer_families: tuple[str, ...] = ("gemm",), seen_by_kind: bool = True,
                 dual_issue: bool = True, random_state: int = 0,
                 calibration_rows: int | None = None, calibrate_unseen: bool | None = None):
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.hardware_features = hardware_features
        self.coverage = coverage
        self.interval_bins = interval_bins
        self.interval_refit_rows = interval_refit_rows
        self.extrapolation_widening = extrapolation_widening
        self.no_data_widening = no_data_widening
        self.unseen_interval_refits = unseen_interval_refits
        self.transfer_scale = transfer_scale
        self.transfer_families = transfer_families
        self.seen_by_kind = seen_by_kind
        self.dual_issue = dual_issue
        self.random_state = random_state
        self.calibration_rows = calibration_rows
        self.calibrate_unseen = calibrate_unseen

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
        keep = np.isfinite(y_ms) & (y_ms > 0) & rows["layer"].astype(str).isin(list(KINDS))
        rows, y_ms = rows.loc[keep], y_ms.loc[keep]
        if rows.empty:
            raise TrainingDataError("no usable training rows (known kind, positive finite time)")
        X, bound = _features(rows, self.hardware_features, self.dual_issue)
        y = np.log(y_ms.to_numpy() / bound)
        fam = rows["layer"].astype(str).map(family_of)
        chips = rows["gpu"].astype(str).map(chip_of).to_numpy()
        rng = np.random.default_rng(self.random_state)
        refits = renamed_param(self, "calibrate_unseen", "unseen_interval_refits")
        refit_rows = renamed_param(self, "calibration_rows", "interval_refit_rows")
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
            entry["unseen_interval"] = (self._leave_one_out(Xf, yf, cf, rng, progress,
                                                            refit_rows)
                                        if refits else None)
            entry["forest"] = self._forest(Xf, yf)
            entry["ranges"] = {c: [float(Xf[c].min()), float(Xf[c].max())]
                               for c in RANGE_FEATURES}
            if self.transfer_scale is not None and self.hardware_features \
                    and family in self.transfer_families:
                entry.update(self._transfer(Xf, yf, cf, rows.loc[sel, "layer"].astype(str)))
            self.families_[family] = entry
        self.kinds_ = sorted(set(rows["layer"].astype(str)))
        self.chips_ = sorted(set(chips))
        layer = rows["layer"].astype(str).to_numpy()
        self.chip_kinds_ = {str(c): sorted(set(layer[chips == c])) for c in self.chips_}
        self.info_ = {"trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
                      "n_rows": int(len(rows)), "gpus": sorted(set(rows["gpu"].astype(str)))}
        return self

    def _transfer(self, X: pd.DataFrame, y: np.ndarray, chips: np.ndarray,
                  layer: pd.Series) -> dict[str, Any]:
        """The device-agnostic trees and the extent of what the device trees learned from: per
        chip, kind and pass the log bounds its rows covered (the :data:`COVER` quantiles: a
        few stray rows do not cover a size), and the span of the device features over the
        training chips, per compute path (``tensor`` 0 or 1: the peaks of tensor cores and of
        the FP32 units are not comparable)."""
        agnostic = [c for c in X.columns if c not in DEVICE_FEATURES]
        keys = layer.to_numpy().astype(str) + "/" + X["train"].round().astype(int).astype(str)
        bound = X["log_bound"].groupby([chips, keys])
        lo, hi = bound.quantile(COVER[0]), bound.quantile(COVER[1])
        chip_ranges: dict[str, dict[str, list[float]]] = {}
        for (chip, key), low in lo.items():
            chip_ranges.setdefault(str(chip), {})[str(key)] = [float(low),
                                                               float(hi[(chip, key)])]
        span = {str(int(t)): {c: [float(part[c].min()), float(part[c].max())]
                              for c in DEVICE_FEATURES if c in X.columns}
                for t, part in X.groupby(X["tensor"].round())}
        return {"agnostic": {"features": agnostic, "forest": self._forest(X[agnostic], y)},
                "chip_ranges": chip_ranges, "device_span": span}

    def _leave_one_out(self, X: pd.DataFrame, y: np.ndarray, chips: np.ndarray,
                       rng: np.random.Generator, progress: Any,
                       refit_rows: int) -> dict | None:
        groups = np.unique(chips)
        if len(groups) < 3:
            return None
        keys, resids = [], []
        for chip in groups:
            train, test = capped_fold(chips, chip, rng, refit_rows)
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
        return {k for k in KINDS if family_of(k) in fams}

    def arrays(self) -> EfficiencyArrays:
        """The fitted model as :class:`EfficiencyArrays` (what every prediction runs on)."""
        if not getattr(self, "families_", None):
            raise RuntimeError("EfficiencyPredictor is not fitted; call fit() or load() first")
        key, cached = getattr(self, "_arrays", (None, None))
        if cached is None or key != id(self.families_):  # built once per fit or load
            cached = EfficiencyArrays(
                self.families_, self.kinds_, self.chips_, self.extrapolation_widening,
                self.no_data_widening,
                getattr(self, "chip_kinds_", None) if self.seen_by_kind else None,
                self.transfer_scale, self.dual_issue)
            self._arrays = (id(self.families_), cached)
        return cached

    def pricing_model(self) -> PricingModel:
        """The model a network is priced with (:mod:`layerwise.pricing.model`): the arrays
        and the compositions."""
        return fitted_model(self.arrays(), getattr(self, "composition_", None),
                            getattr(self, "framework_compositions_", None) or {})

    def predict_records(self, records: list[dict], columns: set[str] | None = None
                        ) -> dict[str, np.ndarray]:
        """:meth:`EfficiencyArrays.predict_records` of the fitted model (row dicts in)."""
        return self.arrays().predict_records(records, columns)

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        """predicted/low/high ms, bound_ms, efficiency and the flags, per row (same index)."""
        model = self.arrays()
        out = pd.DataFrame(index=rows.index)
        if rows.empty:
            return out.assign(**{c: [] for c in (*OUTPUT_COLUMNS, "bound_ms")})
        cols = model.predict_records(rows.to_dict("records"), set(rows.columns), rows.index)
        for name, values in cols.items():
            out[name] = values
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
            if "agnostic" in entry:
                other = entry["agnostic"]["forest"]
                arrays.update({f"agnostic-{family}_{k}": v for k, v in other.arrays().items()})
                meta[family]["agnostic"] = {"features": entry["agnostic"]["features"],
                                            "baseline": other.baseline, "depth": other.depth}
        # numpy's stub types **kwds as bool (its allow_pickle keyword): arrays are right
        np.savez_compressed(path / "efficiency.npz", **arrays)  # type: ignore[arg-type]
        doc = {"format_version": FORMAT_VERSION, "kind": "efficiency",
               "params": self.get_params(), "families": meta, "kinds": self.kinds_,
               "chips": self.chips_, "chip_kinds": getattr(self, "chip_kinds_", None),
               "info": self.info_}
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
        doc, families = read_saved(path)
        est = cls(**renamed_keys(doc["params"]))
        est.families_ = families
        est.kinds_, est.chips_, est.info_ = doc["kinds"], doc["chips"], doc.get("info", {})
        if doc.get("chip_kinds") is not None:
            est.chip_kinds_ = doc["chip_kinds"]
        est.composition_ = Composition.load(path)
        est.framework_compositions_ = {}
        for file in sorted(path.glob("composition-*.json")):
            try:
                est.framework_compositions_[file.stem.split("-", 1)[1]] = \
                    Composition.from_dict(json.loads(file.read_text()))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise SavedPredictorError(f"{file}: bad composition file ({exc})") from None
        return est
