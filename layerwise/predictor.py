"""Layer-time predictor: one model per layer type, chosen by validation error, with intervals.

``LayerPredictor(model="auto")`` fits every candidate estimator (GBT, Justus MLP, residual MLP,
PALEO-like linear) per layer type on the training rows, scores them on a validation split
(random, stratified per GPU), keeps the best and refits it on all rows. Prediction intervals
come from the quantiles of the chosen model's validation log-errors, conditioned on the
predicted time (a few bins), i.e. split-conformal style residual quantiles.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from layerwise.deprecated import renamed_param
from layerwise.efficiency_arrays import read_saved_doc
from layerwise.errors import SavedPredictorError, TrainingDataError
from layerwise.estimators import ESTIMATORS, Estimator, make_estimator
from layerwise.features import FeatureError, feature_frame, hardware_signatures, known_device
from layerwise.pricing.model import PER_TYPE

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
TIME_COLUMN = "time_ms_median"
OUTPUT_COLUMNS = ("predicted_ms", "low_ms", "high_ms")
ALL_MODELS = tuple(ESTIMATORS)


def layer_types(rows: pd.DataFrame) -> pd.Series:
    """Layer type per row: the ``layer`` column, else conv if ``kernelsize`` exists, else dense."""
    default = "conv" if "kernelsize" in rows.columns else "dense"
    if "layer" not in rows.columns:
        return pd.Series(default, index=rows.index, dtype=object)
    values = rows["layer"].astype(object)
    blank = values.isna() | (values.astype(str).str.strip() == "")
    return values.where(~blank, default).astype(str).str.strip()


def gpu_names(rows: pd.DataFrame) -> np.ndarray:
    """The ``gpu`` column as strings (empty strings when absent)."""
    if "gpu" not in rows.columns:
        return np.full(len(rows), "", dtype=object)
    return rows["gpu"].astype(str).to_numpy()


def training_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows usable for training: status ok (if present) and a positive finite median time."""
    if TIME_COLUMN not in rows.columns:
        raise TrainingDataError(f"training rows need a {TIME_COLUMN!r} column")
    keep = pd.Series(True, index=rows.index)
    if "status" in rows.columns:
        keep &= rows["status"].astype(str).str.strip().str.lower().isin(("ok", "nan", ""))
    t = pd.to_numeric(rows[TIME_COLUMN], errors="coerce")
    keep &= np.isfinite(t) & (t > 0)
    return rows.loc[keep]


def metrics(true_ms: np.ndarray, pred_ms: np.ndarray) -> dict[str, float]:
    """MAPE (%), RMSE (ms), RMSE of log time and row count."""
    true_ms, pred_ms = np.asarray(true_ms, float), np.asarray(pred_ms, float)
    err = pred_ms - true_ms
    return {
        "mape": float(np.mean(np.abs(err) / true_ms) * 100.0),
        "rmse_ms": float(np.sqrt(np.mean(err**2))),
        "log_rmse": float(np.sqrt(np.mean(np.log(pred_ms / true_ms) ** 2))),
        "n": int(len(true_ms)),
    }


def split_per_gpu(
    rows: pd.DataFrame, fraction: float, seed: int
) -> tuple[pd.Index, pd.Index]:
    """Random (train, held-out) index split taking ``fraction`` of each GPU's rows."""
    rng = np.random.default_rng(seed)
    gpus = pd.Series(gpu_names(rows), index=rows.index)
    held: list[Any] = []
    for _, idx in gpus.groupby(gpus).groups.items():
        idx = np.asarray(idx)
        n = int(round(fraction * len(idx)))
        if len(idx) >= 2:
            n = min(max(n, 1), len(idx) - 1)
            held.extend(rng.permutation(idx)[:n])
    held_index = pd.Index(held)
    return rows.index.difference(held_index), held_index


def capped_fold(groups: np.ndarray, held: Any, rng: np.random.Generator, max_train: int,
                max_test: int = 5000) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row positions of a leave-one-group-out fold, each randomly subsampled
    (sorted) to at most ``max_train`` / ``max_test`` rows."""
    train = np.flatnonzero(groups != held)
    test = np.flatnonzero(groups == held)
    if len(train) > max_train:
        train = np.sort(rng.choice(train, max_train, replace=False))
    if len(test) > max_test:
        test = np.sort(rng.choice(test, max_test, replace=False))
    return train, test


@dataclass
class Interval:
    """Residual quantiles of validation log-errors in bins of the predicted log time."""

    edges: np.ndarray  # interior bin edges on predicted log time
    low: np.ndarray  # per bin, <= 0
    high: np.ndarray  # per bin, >= 0

    @classmethod
    def from_residuals(
        cls, pred_log: np.ndarray, resid: np.ndarray, coverage: float, bins: int
    ) -> Interval:
        """Per-bin low and high quantiles of the log residuals, bins of equal count over
        the predicted log time (at most one bin per 100 residuals)."""
        n_bins = max(1, min(bins, len(resid) // 100))
        edges = np.quantile(pred_log, np.linspace(0, 1, n_bins + 1)[1:-1])
        which = np.searchsorted(edges, pred_log)
        alpha = (1.0 - coverage) / 2.0
        low, high = np.zeros(n_bins), np.zeros(n_bins)
        for b in range(n_bins):
            r = resid[which == b] if np.any(which == b) else resid
            low[b] = min(float(np.quantile(r, alpha)), 0.0)
            high[b] = max(float(np.quantile(r, 1.0 - alpha)), 0.0)
        return cls(np.asarray(edges, float), low, high)

    def apply(self, pred_log: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) log bounds of each predicted log time, from its bin."""
        which = np.searchsorted(self.edges, pred_log)
        return pred_log + self.low[which], pred_log + self.high[which]


@dataclass
class LayerModel:
    """The fitted model of one layer type."""

    layer: str
    model: str
    estimator: Estimator
    feature_names: list[str]
    interval: Interval
    validation: dict[str, dict[str, float]] = field(default_factory=dict)
    n_train: int = 0
    gpus: list[str] = field(default_factory=list)
    fit_seconds: dict[str, float] = field(default_factory=dict)
    signatures: np.ndarray = field(default_factory=lambda: np.empty((0, 5)))
    unseen_interval: Interval | None = None


class LayerPredictor(BaseEstimator):
    """Predict the time of single layers (ms) from benchmark-style rows.

    Parameters
    ----------
    model:
        ``"auto"`` (choose per layer type among ``candidates`` by validation error), an
        estimator name (``gbt``, ``mlp``, ``resmlp``, ``linear``), or a mapping layer -> name.
    candidates:
        Estimators tried by ``"auto"``.
    params:
        Hyper-parameters per estimator name, e.g. ``{"mlp": {"epochs": 20}}``.
    val_fraction:
        Share of each GPU's rows held out for validation when ``fit`` gets no validation rows.
    coverage:
        Nominal coverage of the ``low_ms``..``high_ms`` interval.
    interval_bins:
        Bins of predicted time in which the residual quantiles are taken.
    selection_metric:
        ``"mape"`` or ``"rmse_ms"`` (validation) for choosing among candidates.
    refit:
        Refit the chosen model on training plus validation rows.
    unseen_interval_refits:
        With three or more devices in training, refit the chosen model leaving each device out
        in turn (on at most ``interval_refit_rows`` rows) and take the interval for devices not
        seen in training from those out-of-device errors.
    interval_refit_rows:
        Row budget of each leave-one-device-out refit.
    min_rows:
        Fewest usable rows a layer type needs.
    calibrate_unseen, calibration_rows:
        Deprecated names of ``unseen_interval_refits`` and ``interval_refit_rows``
        (:mod:`layerwise.deprecated`).
    """

    pricing = PER_TYPE  # networks priced by layerwise.per_type (fp32 only)

    def __init__(
        self,
        model: str | Mapping[str, str] = "auto",
        candidates: Iterable[str] = ALL_MODELS,
        params: Mapping[str, Mapping[str, Any]] | None = None,
        val_fraction: float = 0.1,
        coverage: float = 0.9,
        interval_bins: int = 4,
        selection_metric: str = "mape",
        refit: bool = True,
        unseen_interval_refits: bool = True,
        interval_refit_rows: int = 30000,
        min_rows: int = 20,
        random_state: int = 0,
        calibrate_unseen: bool | None = None,
        calibration_rows: int | None = None,
    ):
        self.model = model
        self.candidates = tuple(candidates)
        self.params = params
        self.val_fraction = val_fraction
        self.coverage = coverage
        self.interval_bins = interval_bins
        self.selection_metric = selection_metric
        self.refit = refit
        self.unseen_interval_refits = unseen_interval_refits
        self.interval_refit_rows = interval_refit_rows
        self.min_rows = min_rows
        self.random_state = random_state
        self.calibrate_unseen = calibrate_unseen
        self.calibration_rows = calibration_rows

    # ------------------------------------------------------------------ fitting
    def _candidates_for(self, layer: str) -> tuple[str, ...]:
        choice = self.model.get(layer, "auto") if isinstance(self.model, Mapping) else self.model
        names = self.candidates if choice == "auto" else (choice,)
        for name in names:
            if name not in ESTIMATORS:
                raise ValueError(f"unknown model {name!r}; choose from {', '.join(ESTIMATORS)}")
        if not names:
            raise ValueError("no candidate models given")
        return tuple(names)

    def _params(self, name: str) -> dict[str, Any]:
        base = dict((self.params or {}).get(name, {}))
        if "random_state" in {f for f in ESTIMATORS[name].__dataclass_fields__}:
            base.setdefault("random_state", self.random_state)
        return base

    def fit(self, rows: pd.DataFrame, validation: pd.DataFrame | None = None) -> LayerPredictor:
        """Fit one model per layer type in ``rows``; ``validation`` rows, if given, choose it."""
        if self.selection_metric not in ("mape", "rmse_ms"):
            raise ValueError("selection_metric must be 'mape' or 'rmse_ms'")
        refits = renamed_param(self, "calibrate_unseen", "unseen_interval_refits")
        refit_rows = renamed_param(self, "calibration_rows", "interval_refit_rows")
        train_all = training_rows(rows)
        if train_all.empty:
            raise TrainingDataError(
                "no usable training rows (status ok and positive time_ms_median)")
        val_all = training_rows(validation) if validation is not None else None
        types = layer_types(train_all)
        val_types = layer_types(val_all) if val_all is not None else None
        self.layers_ = {}
        for layer in sorted(types.unique()):
            part = train_all.loc[types == layer]
            if len(part) < self.min_rows:
                raise TrainingDataError(
                    f"layer type {layer!r}: {len(part)} usable rows, need at least {self.min_rows}"
                )
            if val_all is not None:
                val = val_all.loc[val_types == layer]
                if len(val) == 0:
                    raise TrainingDataError(f"validation rows have no {layer!r} rows")
                train = part
            else:
                tr_idx, val_idx = split_per_gpu(part, self.val_fraction, self.random_state)
                train, val = part.loc[tr_idx], part.loc[val_idx]
            self.layers_[layer] = self._fit_layer(layer, train, val,
                                                  refit_rows if refits else None)
        self.info_ = {
            "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "n_rows": int(len(train_all)),
            "gpus": sorted(set(gpu_names(train_all))),
        }
        return self

    def _fit_layer(self, layer: str, train: pd.DataFrame, val: pd.DataFrame,
                   refit_rows: int | None) -> LayerModel:
        """The chosen model of one layer type; ``refit_rows`` None: no unseen-device refits."""
        X_tr, X_val = feature_frame(train, layer), feature_frame(val, layer)
        y_tr = np.log(train[TIME_COLUMN].to_numpy(float))
        y_val = np.log(val[TIME_COLUMN].to_numpy(float))
        g_tr, g_val = gpu_names(train), gpu_names(val)
        scores: dict[str, dict[str, float]] = {}
        fitted: dict[str, tuple[Estimator, np.ndarray]] = {}
        seconds: dict[str, float] = {}
        for name in self._candidates_for(layer):
            start = time.perf_counter()
            est = make_estimator(name, self._params(name)).fit(X_tr, y_tr, g_tr)
            seconds[name] = time.perf_counter() - start
            pred = est.predict(X_val, g_val)
            scores[name] = metrics(np.exp(y_val), np.exp(pred))
            fitted[name] = (est, pred)
            log.info("%s %s: validation MAPE %.2f %%, RMSE %.4g ms (%.1f s)", layer, name,
                     scores[name]["mape"], scores[name]["rmse_ms"], seconds[name])
        best = min(scores, key=lambda n: scores[n][self.selection_metric])
        est, pred_val = fitted[best]
        interval = Interval.from_residuals(
            pred_val, y_val - pred_val, self.coverage, self.interval_bins
        )
        n_train = len(train)
        X_all = pd.concat([X_tr, X_val])
        y_all, g_all = np.concatenate([y_tr, y_val]), np.concatenate([g_tr, g_val])
        if self.refit:
            start = time.perf_counter()
            est = make_estimator(best, self._params(best)).fit(X_all, y_all, g_all)
            seconds[f"{best}_refit"] = time.perf_counter() - start
            n_train += len(val)
        unseen = None
        if refit_rows is not None:
            start = time.perf_counter()
            unseen = self._unseen_interval(best, X_all, y_all, g_all, refit_rows)
            seconds["unseen_interval_refits"] = time.perf_counter() - start
        return LayerModel(
            layer=layer, model=best, estimator=est, feature_names=list(X_tr.columns),
            interval=interval, validation=scores, n_train=n_train,
            gpus=sorted(set(g_all)), fit_seconds=seconds,
            signatures=np.unique(hardware_signatures(X_all), axis=0), unseen_interval=unseen,
        )

    def _unseen_interval(
        self, name: str, X: pd.DataFrame, y: np.ndarray, gpu: np.ndarray, refit_rows: int
    ) -> Interval | None:
        """Interval from leave-one-device-out errors (None with fewer than three devices)."""
        _, device = np.unique(hardware_signatures(X), axis=0, return_inverse=True)
        device = np.ravel(device)
        if device.max(initial=0) < 2:
            return None
        rng = np.random.default_rng(self.random_state)
        base = make_estimator(name, self._params(name))
        params = {**self._params(name), **base.interval_refit_params()}
        preds, resids = [], []
        for d in np.unique(device):
            train, test = capped_fold(device, d, rng, refit_rows)
            est = make_estimator(name, params).fit(X.iloc[train], y[train], gpu[train])
            pred = est.predict(X.iloc[test], gpu[test])
            preds.append(pred)
            resids.append(y[test] - pred)
        return Interval.from_residuals(
            np.concatenate(preds), np.concatenate(resids), self.coverage, self.interval_bins
        )

    # ------------------------------------------------------------------ prediction
    @property
    def known_layers(self) -> set[str]:
        """Layer types this predictor has a model for."""
        return set(getattr(self, "layers_", {}))

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``predicted_ms``, ``low_ms``, ``high_ms`` for each row (same index)."""
        if not getattr(self, "layers_", None):
            raise RuntimeError("LayerPredictor is not fitted; call fit() or load() first")
        out = pd.DataFrame(index=rows.index, columns=list(OUTPUT_COLUMNS), dtype=float)
        if rows.empty:
            return out
        types = layer_types(rows)
        unknown = sorted(set(types) - self.known_layers)
        if unknown:
            raise FeatureError(
                f"no model for layer type(s) {', '.join(unknown)}; "
                f"this predictor knows {', '.join(sorted(self.known_layers))}"
            )
        for layer in types.unique():
            part = rows.loc[types == layer]
            lm = self.layers_[layer]
            X = feature_frame(part, layer)
            missing = [c for c in lm.feature_names if c not in X.columns]
            if missing:
                raise FeatureError(f"{layer} rows lack feature(s) {', '.join(missing)}")
            pred = lm.estimator.predict(X[lm.feature_names], gpu_names(part))
            low, high = lm.interval.apply(pred)
            unseen = ~known_device(X, lm.signatures)
            if lm.unseen_interval is not None and unseen.any():
                u_low, u_high = lm.unseen_interval.apply(pred[unseen])
                low[unseen], high[unseen] = u_low, u_high
            out.loc[part.index, "predicted_ms"] = np.exp(pred)
            out.loc[part.index, "low_ms"] = np.exp(low)
            out.loc[part.index, "high_ms"] = np.exp(high)
        return out

    # ------------------------------------------------------------------ reporting
    def validation_table(self) -> pd.DataFrame:
        """Validation metrics of every candidate per layer type (``chosen`` marks the pick)."""
        records = []
        for layer, lm in sorted(self.layers_.items()):
            for name, score in lm.validation.items():
                records.append({"layer": layer, "model": name, "chosen": name == lm.model,
                                **score, "fit_s": lm.fit_seconds.get(name, float("nan"))})
        return pd.DataFrame(records)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``predictor.json`` plus one ``<layer>.npz`` per layer type; return the folder."""
        if not getattr(self, "layers_", None):
            raise RuntimeError("nothing to save: the predictor is not fitted")
        import sklearn

        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        layers_meta = {}
        for layer, lm in self.layers_.items():
            meta, arrays = lm.estimator.state()
            arrays = {f"est_{k}": v for k, v in arrays.items()}
            arrays.update(iv_edges=lm.interval.edges, iv_low=lm.interval.low,
                          iv_high=lm.interval.high, signatures=lm.signatures)
            if lm.unseen_interval is not None:
                arrays.update(uv_edges=lm.unseen_interval.edges, uv_low=lm.unseen_interval.low,
                              uv_high=lm.unseen_interval.high)
            # numpy's stub types **kwds as bool (its allow_pickle keyword): arrays are right
            np.savez_compressed(path / f"{layer}.npz", **arrays)  # type: ignore[arg-type]
            layers_meta[layer] = {
                "model": lm.model,
                "params": lm.estimator.params(),
                "state": meta,
                "feature_names": lm.feature_names,
                "validation": lm.validation,
                "n_train": lm.n_train,
                "gpus": lm.gpus,
                "fit_seconds": lm.fit_seconds,
            }
        doc = {
            "format_version": FORMAT_VERSION,
            "coverage": self.coverage,
            "selection_metric": self.selection_metric,
            "info": self.info_,
            "trained_with": {"numpy": np.__version__, "scikit-learn": sklearn.__version__},
            "layers": layers_meta,
        }
        (path / "predictor.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> LayerPredictor:
        """Load a predictor written by :meth:`save` (no TensorFlow, no pickles)."""
        path = Path(directory)
        doc_path = path / "predictor.json"
        doc = read_saved_doc(doc_path, FORMAT_VERSION, "layer predictor")
        predictor = cls(coverage=doc["coverage"], selection_metric=doc["selection_metric"])
        predictor.info_ = doc.get("info", {})
        predictor.layers_ = {}
        for layer, meta in doc["layers"].items():
            with np.load(path / f"{layer}.npz") as npz:
                arrays = {k: npz[k] for k in npz.files}
            est_arrays = {k[4:]: v for k, v in arrays.items() if k.startswith("est_")}
            if meta["model"] not in ESTIMATORS:
                raise SavedPredictorError(
                    f"{doc_path}: unknown model {meta['model']!r} for {layer}")
            est = ESTIMATORS[meta["model"]].from_state(meta["params"], meta["state"], est_arrays)
            predictor.layers_[layer] = LayerModel(
                layer=layer, model=meta["model"], estimator=est,
                feature_names=list(meta["feature_names"]),
                interval=Interval(arrays["iv_edges"], arrays["iv_low"], arrays["iv_high"]),
                validation=meta.get("validation", {}), n_train=int(meta.get("n_train", 0)),
                gpus=list(meta.get("gpus", [])), fit_seconds=meta.get("fit_seconds", {}),
                signatures=arrays["signatures"],
                unseen_interval=(Interval(arrays["uv_edges"], arrays["uv_low"], arrays["uv_high"])
                                 if "uv_edges" in arrays else None),
            )
        return predictor
