"""Whole-network step time from layer predictions: passes, fusion-free sum and fitted overheads.

:func:`price_layers` asks the layer predictor for every computing row of a decomposed network
(:class:`layerwise.network.Network`) and returns one entry per layer; :class:`Composition`
turns the sum into a step time. Rules:

* **Forward**: the row's forward time (optimizer ``none``) at the step's precision and
  framework.
* **Training step, GEMM kinds** (conv, dense): the predictor's training-step time of the row
  (forward + weight gradient + optimizer update, learned from the Justus training rows) plus
  the input gradient, priced as one more forward pass (its FLOPs equal the forward's) for every
  layer but the first (``grad_input``).
* **Training step, other kinds**: forward x (1 + ``BACKWARD_RATIO[kind]``): the backward pass
  of a memory-bound op moves about that multiple of the forward's bytes (e.g. an activation's
  gradient reads y and dy and writes dx: 3 tensors against the forward's 2).
* **Precision as run**: ``precision`` is a request (``fp32`` = the framework's default, which
  on Ampere and newer runs convolutions in TF32) or a resolved
  :class:`layerwise.as_run.RunPrecision`; each row is priced at its kind's precision.
* **Composition** (:class:`Composition`, fitted on whole networks per framework): gpu =
  ``scale[class]`` x sum, cpu = ``kernel_ms`` x kernels, step = gpu + cpu + ``step_ms``, or
  with ``overlap_p`` > 0 (eager PyTorch launches kernels while the GPU works) step =
  (gpu^p + cpu^p)^(1/p) + ``step_ms`` (:func:`layerwise.as_run.step_from_dict`); with
  ``year_kernel`` the cost per kernel is ``kernel_ms x exp(year_coef x year)``, ``year`` the
  GPU's release year minus 2019 from the catalog (:func:`layerwise.as_run.year_offset`),
  ``year_coef`` fitted within [-1, 1]. Class is
  ``fp32`` or ``tensor`` (the layers holding most GEMM FLOPs on tensor cores, TF32 and half
  alike; :func:`layerwise.as_run.run_class`). A ``half`` class (FP16/BF16 on tensor cores)
  was scored on 2026-12-03 and not shipped (``docs/lab/layerwise-transfer.md``); a class the
  composition has no scale for is priced at its fallback's
  (:data:`layerwise.as_run.CLASS_FALLBACK`: half -> tensor -> fp32), and the residual counts
  every class of :data:`layerwise.as_run.TENSOR_CLASSES` as on tensor cores; kernels counts
  the priced kernels (forward, weight and input gradient) plus mixed precision's weight casts.
  The interval comes from the log residuals of the fit on networks of GPUs left out, widened
  to the layer intervals' sum when that is wider.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from layerwise.as_run import TENSOR_CLASSES, RunPrecision
from layerwise.errors import SavedPredictorError
from layerwise.pricing.residual import (
    FEATURES,
    correction,
    features,
    is_half,
    network_key,
)
from layerwise.pricing.rows import FLAGS, OUT, price_rows
from layerwise.pricing.step import class_scale, step_array, step_from_dict

COMPOSITION_FILE = "composition.json"


def price_layers(rows: list[dict], predictor: Any, hw: dict, precision: str | RunPrecision,
                 training: bool, optimizer: str, framework: str = "tensorflow") -> pd.DataFrame:
    """One entry per network row: ms, low_ms, high_ms, method, flags (see module rules and
    :func:`layerwise.pricing.price_rows`)."""
    predictor = getattr(predictor, "network_model", predictor)

    def predict(distinct: list[dict]) -> dict[str, np.ndarray]:
        pred = predictor.predict(pd.DataFrame(distinct))
        out = {c: pred[c].to_numpy(float) for c in OUT}
        out.update({c: pred[c].to_numpy(bool) if c in pred.columns
                    else np.zeros(len(distinct), bool) for c in FLAGS})
        return out

    return pd.DataFrame(price_rows(rows, predictor.known_layers, predict, hw, precision,
                                   training, optimizer, framework))


class Composition(BaseEstimator):
    """The step from the layer sums (see module rules), fitted on whole networks.

    ``fit(X, y)``: X has ``sum_ms`` (all priced layers), ``kernels``, ``precision_class``,
    ``year`` when ``year_kernel`` (:func:`layerwise.as_run.year_offset`) and optionally
    ``floor_ms`` and ``extra_ms`` (known time outside the layers, e.g. a host-to-GPU copy,
    added as is); y the measured step ms; the fit minimises squared log errors. ``overlap_p``: 0 =
    the additive form, > 0 = GPU and launch time overlap with that exponent. One scale per
    class for all layers: a separate memory-bound scale was tried and fitted to zero
    (memory-bound layers free), which is not physical, so it was dropped. ``coverage``: the
    interval from the log residuals (``residuals`` given to ``fit``, e.g. leave-one-GPU-out
    ones, take precedence). ``residual_alpha`` (None: no residual) and ``residual_shrink``:
    the whole-network residual's :class:`NetworkResidual` parameters; X then also needs
    ``kind_ms``, ``precision``, ``batch_per_gpu``, ``network`` and optionally ``chip``
    (one vote per GPU), as :func:`layerwise.corpora.network_fit.network_sums` gives them.
    Separate kind-group scales were tried again with the residual (issue 23): batch norm
    fits at 4-5x the convolutions' scale, but leaving a GPU out got worse, so the residual
    carries the layer mix instead.
    """

    def __init__(self, coverage: float = 0.9, overlap_p: float = 0.0,
                 subtract_floor: bool = False, year_kernel: bool = False,
                 residual_alpha: float | None = None, residual_shrink: float = 1.0):
        self.coverage = coverage
        self.overlap_p = overlap_p
        self.subtract_floor = subtract_floor
        self.year_kernel = year_kernel
        self.residual_alpha = residual_alpha
        self.residual_shrink = residual_shrink

    def _doc(self, theta: np.ndarray, classes: list[str]) -> dict[str, Any]:
        n = len(classes)
        return {"scale": {name: math.exp(theta[j]) for j, name in enumerate(classes)},
                "kernel_ms": math.exp(theta[n]), "step_ms": math.exp(theta[n + 1]),
                "overlap_p": float(self.overlap_p), "subtract_floor": bool(self.subtract_floor),
                "year_coef": float(theta[n + 2]) if self.year_kernel else 0.0,
                "log_low": 0.0, "log_high": 0.0}

    def fit(self, X: pd.DataFrame, y: Any, residuals: Any = None) -> Composition:
        """Fit the scales, kernel and step costs on whole networks (``X``, ``y`` and
        ``residuals`` as in the class doc); returns ``self``."""
        from scipy.optimize import least_squares

        y = np.asarray(y, float)
        classes = sorted(set(X["precision_class"]))
        s, k = X["sum_ms"].to_numpy(float), X["kernels"].to_numpy(float)
        c = X["precision_class"].to_numpy()
        extra = X["extra_ms"].to_numpy(float) if "extra_ms" in X.columns else np.zeros(len(y))
        floor = X["floor_ms"].to_numpy(float) if "floor_ms" in X.columns else np.zeros(len(y))
        year = X["year"].to_numpy(float) if self.year_kernel else 0.0

        def model(theta: np.ndarray) -> np.ndarray:
            return step_array(self._doc(theta, classes), s, k, c, floor, year) + extra

        theta0 = np.array([math.log(0.5)] * len(classes) + [math.log(0.005), math.log(1.0)]
                          + ([0.0] if self.year_kernel else []))
        low = np.full(len(theta0), -25.0)
        high = np.full(len(theta0), 8.0)
        if self.year_kernel:
            low[-1], high[-1] = -1.0, 1.0
        fit = least_squares(lambda t: np.log(model(t)) - np.log(y), theta0, bounds=(low, high))
        doc = self._doc(fit.x, classes)
        self.scale_ = {k_: float(v) for k_, v in doc["scale"].items()}
        self.kernel_ms_, self.step_ms_ = float(doc["kernel_ms"]), float(doc["step_ms"])
        self.year_coef_ = float(doc["year_coef"])
        own = np.log(y) - np.log(model(fit.x))
        self.residual_ = None
        if self.residual_alpha is not None:
            feats = frame_features(X)
            res = NetworkResidual(self.residual_alpha, self.residual_shrink).fit(
                feats, own, X["network"].astype(str).to_numpy(),
                X["precision"].map(is_half).to_numpy(bool), catalog_names(X))
            self.residual_ = res.to_dict()
            own = own - np.log(self.corrections(X, feats)[0])
        resid = np.asarray(residuals, float) if residuals is not None else own
        alpha = (1.0 - self.coverage) / 2.0
        self.log_low_ = min(float(np.quantile(resid, alpha)), 0.0)
        self.log_high_ = max(float(np.quantile(resid, 1.0 - alpha)), 0.0)
        self.n_fit_ = int(len(y))
        return self

    def corrections(self, X: pd.DataFrame,
                    feats: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
        """Per row of ``X`` (``fit``'s columns): the residual's factor and source
        (:func:`layerwise.pricing.residual.correction`; 1.0 and ``none`` without a residual);
        ``feats``: :func:`frame_features` of ``X`` when already computed."""
        doc = getattr(self, "residual_", None)
        if not doc:
            return np.ones(len(X)), ["none"] * len(X)
        feats = frame_features(X) if feats is None else feats
        half = X["precision"].map(is_half).to_numpy(bool)
        names = catalog_names(X)
        gpus: list[str | None] = [None] * len(X) if names is None else list(names)
        out = [correction(doc, f, str(n), bool(h), g)
               for f, n, h, g in zip(feats, X["network"], half, gpus, strict=True)]
        return np.array([o[0] for o in out]), [o[1] for o in out]

    def scale_for(self, pclass: str) -> float:
        """The layer-sum scale of a precision class (fp32's for an unknown class)."""
        return class_scale(self.scale_, pclass)

    def step(self, sum_ms: float, low_ms: float, high_ms: float, kernels: int,
             pclass: str, floor_ms: float = 0.0, year: float = 0.0) -> tuple[float, float, float]:
        """(ms, low, high) of one step from the layer sums (and their floors' sum; ``year``:
        the GPU's :func:`layerwise.as_run.year_offset`)."""
        return step_from_dict(self.to_dict(), (sum_ms, low_ms, high_ms), kernels, pclass,
                              floor_ms, year)[:3]

    def to_dict(self) -> dict[str, Any]:
        """The fitted composition as a JSON-able dict (what :meth:`save` writes)."""
        return {"coverage": self.coverage, "scale": self.scale_, "kernel_ms": self.kernel_ms_,
                "step_ms": self.step_ms_, "log_low": self.log_low_, "log_high": self.log_high_,
                "n_fit": self.n_fit_, "overlap_p": float(self.overlap_p),
                "subtract_floor": bool(self.subtract_floor),
                "year_kernel": bool(self.year_kernel),
                "year_coef": float(getattr(self, "year_coef_", 0.0)),
                **({"residual": self.residual_} if getattr(self, "residual_", None) else {})}

    def save(self, directory: str | Path) -> Path:
        """Write ``composition.json`` into ``directory``; returns the file."""
        path = Path(directory) / COMPOSITION_FILE
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))
        return path

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Composition:
        """The composition saved by :meth:`to_dict` (missing optional keys: defaults)."""
        comp = cls(coverage=float(doc.get("coverage", 0.9)),
                   overlap_p=float(doc.get("overlap_p", 0.0) or 0.0),
                   subtract_floor=bool(doc.get("subtract_floor", False)),
                   year_kernel=bool(doc.get("year_kernel", False)))
        comp.scale_ = {str(k): float(v) for k, v in doc["scale"].items()}
        comp.kernel_ms_, comp.step_ms_ = float(doc["kernel_ms"]), float(doc["step_ms"])
        comp.year_coef_ = float(doc.get("year_coef", 0.0) or 0.0)
        comp.log_low_, comp.log_high_ = float(doc["log_low"]), float(doc["log_high"])
        comp.n_fit_ = int(doc.get("n_fit", 0))
        comp.residual_ = doc.get("residual") or None
        if comp.residual_ and len(comp.residual_.get("coef", ())) != len(FEATURES):
            raise KeyError("residual: its coefficients do not match the features")
        return comp

    @classmethod
    def load(cls, directory: str | Path) -> Composition | None:
        """The composition saved in ``directory``; None when it holds none,
        :class:`~layerwise.errors.SavedPredictorError` for an unreadable file."""
        path = Path(directory) / COMPOSITION_FILE
        if not path.is_file():
            return None
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SavedPredictorError(f"{path}: bad composition file ({exc})") from None

    @classmethod
    def identity(cls) -> Composition:
        """No fitted overheads: the plain sum, interval = the layer intervals' sum."""
        return cls.from_dict({"scale": {"fp32": 1.0, "tensor": 1.0}, "kernel_ms": 0.0,
                              "step_ms": 0.0, "log_low": 0.0, "log_high": 0.0})


def catalog_names(X: pd.DataFrame) -> np.ndarray | None:
    """Each row's GPU as the catalog names it (:func:`fleet.catalog.catalog_name`, what a
    forecast's ``hw_model`` holds); None without a ``gpu`` column."""
    if "gpu" not in X.columns:
        return None
    from fleet.catalog import catalog_name

    names = {g: catalog_name(g) for g in X["gpu"].astype(str).unique()}
    return X["gpu"].astype(str).map(names).to_numpy()


def frame_features(X: pd.DataFrame) -> np.ndarray:
    """:func:`layerwise.pricing.residual.features` of each row of a whole-network frame (columns
    ``kind_ms``: a dict of priced ms per layer kind, ``kernels``, ``precision``,
    ``precision_class``, ``batch_per_gpu``)."""
    rows = [features(dict(r.kind_ms), float(r.kernels), is_half(str(r.precision)),
                     str(r.precision_class) in TENSOR_CLASSES, int(r.batch_per_gpu))
            for r in X.itertuples(index=False)]
    return np.array(rows, float).reshape(len(rows), len(FEATURES))


class NetworkResidual(BaseEstimator):
    """The whole-network residual's fit (rules of :mod:`layerwise.pricing.residual`): ridge of
    the log residuals on the standardised features (``alpha``), then each (network, half)
    key's mean leftover, one vote per GPU, shrunk by ``n / (n + shrink)``, then each (GPU,
    half) key's mean of what is still left, one vote per network, shrunk by ``m / (m + shrink)``.
    ``to_dict`` is what :func:`layerwise.pricing.residual.correction` reads."""

    def __init__(self, alpha: float = 100.0, shrink: float = 1.0):
        self.alpha = alpha
        self.shrink = shrink

    def fit(self, X: np.ndarray, r: np.ndarray, networks: np.ndarray, half: np.ndarray,
            gpus: np.ndarray | None = None) -> NetworkResidual:
        """Fit on features ``X`` (rows x :data:`FEATURES`), log residuals ``r``, each row's
        network, half flag and GPU's catalog name (None: each row its own vote, and no GPU
        part); returns ``self``."""
        X, r = np.asarray(X, float), np.asarray(r, float)
        self.low_, self.high_ = X.min(axis=0), X.max(axis=0)
        self.mean_ = X.mean(axis=0)
        sd = X.std(axis=0)
        self.scale_ = np.where(sd > 1e-12, sd, 1.0)
        Z = (X - self.mean_) / self.scale_
        self.intercept_ = float(r.mean())
        gram = Z.T @ Z + float(self.alpha) * np.eye(Z.shape[1])
        self.coef_ = np.linalg.solve(gram, Z.T @ (r - self.intercept_))
        left = r - self.intercept_ - Z @ self.coef_
        known = gpus is not None
        gpus = np.asarray(gpus).astype(str) if known else np.arange(len(r)).astype(str)
        frame = pd.DataFrame({"net": [network_key(str(n), bool(h))
                                      for n, h in zip(networks, half, strict=True)],
                              "gpu": [network_key(str(g), bool(h))
                                      for g, h in zip(gpus, half, strict=True)],
                              "left": left})
        self.networks_ = self._votes(frame, "net", "gpu")
        frame["left"] -= frame["net"].map({k: v[0] for k, v in self.networks_.items()})
        self.gpus_ = self._votes(frame, "gpu", "net") if known else {}
        return self

    def _votes(self, frame: pd.DataFrame, key: str, voter: str) -> dict[str, tuple[float, int]]:
        """Per ``key``: the mean of ``left`` averaged per ``voter`` first (one vote each),
        shrunk by ``n / (n + shrink)``, and the voters ``n``."""
        per = frame.groupby([key, voter])["left"].mean().groupby(level=0)
        means, counts = per.mean(), per.size()
        return {str(k): (float(m * n / (n + float(self.shrink))), int(n))
                for k, m, n in zip(means.index, means, counts, strict=True)}

    def to_dict(self) -> dict[str, Any]:
        """The saved form: features, mean, scale, coef, the fitted range (low, high),
        intercept, alpha, shrink, networks (key -> [log effect, GPUs]), gpus (key -> [log
        effect, networks])."""
        return {"features": list(FEATURES), "mean": self.mean_.tolist(),
                "scale": self.scale_.tolist(), "coef": self.coef_.tolist(),
                "low": self.low_.tolist(), "high": self.high_.tolist(),
                "intercept": self.intercept_, "alpha": float(self.alpha),
                "shrink": float(self.shrink),
                "networks": {k: [v[0], v[1]] for k, v in sorted(self.networks_.items())},
                "gpus": {k: [v[0], v[1]] for k, v in sorted(self.gpus_.items())}}


def composition_for(predictor: Any, framework: str) -> Composition:
    """The predictor's composition for ``framework``: its own (``framework_compositions_``),
    else the default one (``composition_``, fitted on TensorFlow networks), else identity."""
    own = getattr(predictor, "framework_compositions_", None) or {}
    return own.get(str(framework)) or getattr(predictor, "composition_", None) \
        or Composition.identity()
