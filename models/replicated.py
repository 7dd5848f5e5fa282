"""TensorFlow 1.x replicated variables: the N-GPU step from the 1-GPU step, fitted on the Lambda
tf_cnn_benchmarks logs (:func:`fit_all_runs`; built by ``jobcast build-shipped scaling``, scored
by ``benchmarks/scaling.py``); the ``replicated`` mechanism of
:func:`models.scaling.data_parallel_step` (which imports this module only for that mechanism,
so the other mechanisms load neither scikit-learn nor pandas).

TensorFlow replicated variables, rule: ``step_N = step_1 x (1 + sync[p] x log2 N) +
tensor_ms[p] x tensors x log2 N + (1 - overlap) x allreduce_N`` where ``allreduce_N`` is the
ring all-reduce of the gradients (:func:`fleet.interconnect.allreduce_seconds`: parameters x
bytes per element over the deployment's links), ``overlap`` the share of it hidden behind the
backward pass, ``tensors`` the network's weight tensors (layers with parameters), and
``sync[p]`` / ``tensor_ms[p]`` the per-doubling costs of keeping N replicas in step, per
precision class ``p`` (``half``: fp16/bf16, ``full``: fp32/tf32). In the Lambda logs the
per-tensor term dominates: at 8 GPUs an fp16 ResNet or Inception step is 1.8-2.1x the 1-GPU
step on every GPU model and link (NVLink, NVSwitch or PCIe alike) while fp16 AlexNet and
VGG-16 (16 and 32 weight tensors) scale perfectly, and the all-reduce itself is a few percent
of the step. Fitted (costs >= 0, 0 <= overlap <= 1) on multi-GPU runs, minimising squared log
error; the interval comes from the log residuals of fits that left the run's GPU model out
(``residuals``), else in-sample.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from fleet.precision import parse_precision

DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "scaling.json"


def _columns(X: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """step1_ms, allreduce_ms (0 on one GPU), log2 of the GPU count, half-precision flag,
    weight tensors (0 when absent)."""
    gpus = X["gpus"].to_numpy(float)
    prec = X["precision"] if "precision" in X.columns else pd.Series("fp32", index=X.index)
    half = np.array([parse_precision(p).value in ("fp16", "bf16") for p in prec], dtype=float)
    ar = X["allreduce_ms"].to_numpy(float) * (gpus > 1)
    tensors = X["tensors"].to_numpy(float) if "tensors" in X.columns else np.zeros(len(X))
    return (X["step1_ms"].to_numpy(float), ar, np.log2(np.maximum(gpus, 1.0)), half, tensors)


def _model(theta: np.ndarray, s1: np.ndarray, ar: np.ndarray, doublings: np.ndarray,
           half: np.ndarray, tensors: np.ndarray) -> np.ndarray:
    sync = theta[0] * (1 - half) + theta[1] * half
    per_tensor = theta[2] * (1 - half) + theta[3] * half
    return s1 * (1.0 + sync * doublings) + per_tensor * tensors * doublings + theta[4] * ar


class DataParallelScaling(BaseEstimator):
    """Fit ``sync`` (per precision class) and ``overlap`` of the module rule.

    ``fit(X, y)``: X has ``step1_ms``, ``allreduce_ms``, ``gpus`` and optionally ``precision``
    (fp32 when absent); y the N-GPU step ms.
    """

    def __init__(self, coverage: float = 0.9):
        self.coverage = coverage

    def fit(self, X: pd.DataFrame, y: Any, residuals: Any = None) -> DataParallelScaling:
        """Fit the module rule's costs on multi-GPU steps (``X``, ``y`` and
        ``residuals`` as in the class doc); returns ``self``."""
        from scipy.optimize import least_squares

        y = np.asarray(y, float)
        s1, ar, doublings, half, tensors = _columns(X)

        def resid(theta: np.ndarray) -> np.ndarray:
            return np.log(_model(theta, s1, ar, doublings, half, tensors)) - np.log(y)

        fit = least_squares(resid, np.array([0.05, 0.1, 0.01, 0.01, 0.5]),
                            bounds=([0.0] * 5, [np.inf] * 4 + [1.0]))
        self.sync_ = {"full": float(fit.x[0]), "half": float(fit.x[1])}
        self.tensor_ms_ = {"full": float(fit.x[2]), "half": float(fit.x[3])}
        self.overlap_ = float(1.0 - fit.x[4])
        pred = self.predict(X)
        log_resid = (np.asarray(residuals, float) if residuals is not None
                     else np.log(y) - np.log(pred))
        alpha = (1.0 - self.coverage) / 2.0
        self.log_low_ = min(float(np.quantile(log_resid, alpha)), 0.0)
        self.log_high_ = max(float(np.quantile(log_resid, 1.0 - alpha)), 0.0)
        self.n_fit_ = int(len(y))
        return self

    def _theta(self) -> np.ndarray:
        return np.array([self.sync_["full"], self.sync_["half"], self.tensor_ms_["full"],
                         self.tensor_ms_["half"], 1.0 - self.overlap_])

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """N-GPU step ms of each row of ``X`` (columns as for :meth:`fit`)."""
        return _model(self._theta(), *_columns(X))

    def step(self, step1_ms: float, allreduce: float, gpus: int, precision: str = "fp32",
             tensors: int = 0) -> tuple[float, float, float]:
        """(ms, low, high) of one N-GPU step; no widening for one GPU."""
        X = pd.DataFrame({"step1_ms": [step1_ms], "allreduce_ms": [allreduce], "gpus": [gpus],
                          "precision": [precision], "tensors": [tensors]})
        ms = float(self.predict(X)[0])
        if gpus <= 1:
            return ms, ms, ms
        return ms, ms * math.exp(self.log_low_), ms * math.exp(self.log_high_)

    def rescale(self, step_ms: float, from_gpus: int, to_gpus: int, allreduce_from: float,
                allreduce_to: float, precision: str = "fp32", tensors: int = 0) -> float:
        """The step at ``to_gpus`` from a measured step at ``from_gpus`` (the rule solved for
        the 1-GPU step, then applied at ``to_gpus``; same per-GPU batch)."""
        theta = self._theta()
        half = float(parse_precision(precision).value in ("fp16", "bf16"))
        d_from = math.log2(from_gpus)
        sync = theta[0] * (1 - half) + theta[1] * half
        per_tensor = theta[2] * (1 - half) + theta[3] * half
        ar_from = allreduce_from if from_gpus > 1 else 0.0
        s1 = max(step_ms - per_tensor * tensors * d_from - theta[4] * ar_from, 1e-6) \
            / (1.0 + sync * d_from)
        X = pd.DataFrame({"step1_ms": [s1], "allreduce_ms": [allreduce_to], "gpus": [to_gpus],
                          "precision": [precision], "tensors": [tensors]})
        return float(self.predict(X)[0])

    def to_dict(self) -> dict[str, Any]:
        """The fitted costs as JSON (what :meth:`save` writes)."""
        return {"sync": self.sync_, "tensor_ms": self.tensor_ms_, "overlap": self.overlap_,
                "log_low": self.log_low_, "log_high": self.log_high_, "n_fit": self.n_fit_,
                "coverage": self.coverage}

    def save(self, path: str | Path = DEFAULT_PATH) -> Path:
        """Write the fit to ``path`` (the shipped ``scaling.json`` by default)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | Path = DEFAULT_PATH) -> DataParallelScaling:
        """The fit saved at ``path`` (ValueError naming the file when unreadable)."""
        try:
            doc = json.loads(Path(path).read_text())
            model = cls(coverage=float(doc.get("coverage", 0.9)))
            model.sync_ = {k: float(v) for k, v in doc["sync"].items()}
            model.tensor_ms_ = {k: float(v) for k, v in doc["tensor_ms"].items()}
            model.overlap_ = float(doc["overlap"])
            model.log_low_, model.log_high_ = float(doc["log_low"]), float(doc["log_high"])
            model.n_fit_ = int(doc.get("n_fit", 0))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: bad scaling file ({exc})") from None
        return model


def held_out_steps(data: pd.DataFrame, step1: str = "step1_ms") -> pd.Series:
    """N-GPU step of each row from its ``step1`` column, by a fit (on the measured
    ``step1_ms``) on the other GPU models' runs (``chip`` column) only."""
    pred = pd.Series(np.nan, index=data.index)
    for chip in sorted(data["chip"].unique()):
        train = data["chip"] != chip
        model = DataParallelScaling().fit(data.loc[train], data.loc[train, "step_ms"])
        pred[~train] = model.predict(data.loc[~train].assign(step1_ms=data.loc[~train, step1]))
    return pred


def fit_all_runs(data: pd.DataFrame) -> DataParallelScaling:
    """The shipped fit: every multi-GPU run (columns of :meth:`DataParallelScaling.fit`,
    ``step_ms`` and ``chip``), the interval from the log residuals of
    :func:`held_out_steps`."""
    held_out = held_out_steps(data, "step1_ms")
    return DataParallelScaling().fit(data, data["step_ms"],
                                     residuals=np.log(data["step_ms"] / held_out))


@lru_cache(maxsize=1)
def shipped_scaling() -> DataParallelScaling:
    """The constants shipped in ``models/data/scaling.json`` (read once per process)."""
    return DataParallelScaling.load()
