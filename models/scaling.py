"""Data-parallel scaling: the step time on N GPUs from the step time on one, per mechanism.

:func:`data_parallel_step` is the entry point; the mechanism is what the user says
(``data_parallel``: :func:`parse_data_parallel`), and ``auto`` (the default) is chosen by
:func:`auto_strategy` from the framework and the stack the user named:

* ``ddp``: PyTorch DistributedDataParallel (and MXNet/Horovod-style fused all-reduce): bucketed
  NCCL all-reduce behind the backward pass, :func:`models.torch_parallel.ddp_step`, physics
  only. ``auto`` for PyTorch (:data:`STRATEGIES`).
* ``allreduce``: TensorFlow 2 ``MirroredStrategy`` as Keras runs it: the gradients (fp32, one
  pack) all-reduced once after the backward pass, nothing hidden: ``step_1 + allreduce_N``.
  ``auto`` for TensorFlow unless the stack says 1.x.
* ``replicated``: TensorFlow 1.x replicated variables (:class:`DataParallelScaling` below,
  fitted on the Lambda tf_cnn_benchmarks logs); ``auto`` only when the stack the user names
  is TensorFlow 1.x (``tensorflow-1.15``, ``TF 1.14``, NGC ``-tf1-``).
* ``dp``: ``torch.nn.DataParallel`` (fitted on torchvision_bench); only when asked by name.

Why ``auto`` is not ``replicated`` for TensorFlow: on 1030 MLPerf ResNet-50 runs (2-2048
NVIDIA GPUs, MXNet+Horovod/NCCL mostly) the per-GPU step grows 0-2 % per doubling of the GPUs
(within a GPU model), where replicated variables predict 17-23 %; moving a measured step to
another GPU count of the same submission is several times further off by ``replicated``
than by ``ddp``, ``allreduce`` or the same step (46 % against 8 % when written;
``docs/scaling.md``, ``benchmarks/scaling_mlperf.py``). Those
runs cannot tell ``ddp`` from ``allreduce`` (ResNet-50's gradients take about 1 ms on NVLink);
TensorFlow's ``auto`` is ``allreduce`` because that is what Keras' MirroredStrategy does
(chosen after seeing those figures).

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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from fleet.data_parallel import KNOWN_STRATEGIES, parse_data_parallel
from fleet.deployment import Deployment
from fleet.framework import parse_framework
from fleet.interconnect import allreduce_seconds
from fleet.precision import bytes_per_element, parse_precision
from models.torch_parallel import (
    GRAD_BYTES,
    DataParallelFit,
    ddp_step,
    gradient_allreduce_ms,
    layers_of,
)

DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "scaling.json"
STRATEGIES = {"tensorflow": "allreduce", "pytorch": "ddp"}  # a framework's modern default (auto)
_TF1 = re.compile(r"(?:tensorflow|\btf)[\s_-]*v?1\.\d+|\btf1\b", re.IGNORECASE)  # NGC -tf1-


def auto_strategy(framework: str, stack: str | None = None) -> str:
    """The mechanism ``auto`` means: ``replicated`` when the ``stack`` the user named is
    TensorFlow 1.x, else the framework's modern default (:data:`STRATEGIES`)."""
    fw = parse_framework(framework).value
    if fw == "tensorflow" and stack and _TF1.search(str(stack)):
        return "replicated"
    return STRATEGIES[fw]


def resolve_strategy(data_parallel: object, framework: str, stack: str | None = None) -> str:
    """The mechanism a request means: its ``data_parallel`` when named, else
    :func:`auto_strategy`."""
    named = parse_data_parallel(data_parallel)
    return auto_strategy(framework, stack) if named == "auto" else named


def weight_tensors(net: Any) -> int:
    """Layers with parameters of a decomposed network (its weight tensors, one per layer)."""
    return int(sum(1 for row in net.rows if row.get("params", 0)))


def allreduce_ms(params: float, precision: str, deployment: Deployment) -> float:
    """Milliseconds of one gradient all-reduce of ``params`` weights on ``deployment``."""
    nbytes = float(params) * bytes_per_element(parse_precision(precision))
    ic = deployment.interconnect()
    return 1000.0 * allreduce_seconds(nbytes, deployment.per_node, deployment.nodes, ic)


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
        resid = (np.asarray(residuals, float) if residuals is not None
                 else np.log(y) - np.log(pred))
        alpha = (1.0 - self.coverage) / 2.0
        self.log_low_ = min(float(np.quantile(resid, alpha)), 0.0)
        self.log_high_ = max(float(np.quantile(resid, 1.0 - alpha)), 0.0)
        self.n_fit_ = int(len(y))
        return self

    def _theta(self) -> np.ndarray:
        return np.array([self.sync_["full"], self.sync_["half"], self.tensor_ms_["full"],
                         self.tensor_ms_["half"], 1.0 - self.overlap_])

    def predict(self, X: pd.DataFrame) -> np.ndarray:
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
        return {"sync": self.sync_, "tensor_ms": self.tensor_ms_, "overlap": self.overlap_,
                "log_low": self.log_low_, "log_high": self.log_high_, "n_fit": self.n_fit_,
                "coverage": self.coverage}

    def save(self, path: str | Path = DEFAULT_PATH) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | Path = DEFAULT_PATH) -> DataParallelScaling:
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


@lru_cache(maxsize=1)
def shipped_scaling() -> DataParallelScaling:
    """The constants shipped in ``models/data/scaling.json`` (read once per process)."""
    return DataParallelScaling.load()


@lru_cache(maxsize=1)
def shipped_dp() -> DataParallelFit:
    """The ``torch.nn.DataParallel`` constants shipped in ``models/data/scaling_pytorch.json``."""
    return DataParallelFit.load()


@dataclass(frozen=True)
class ParallelStep:
    """One data-parallel step: ms with its interval, the mechanism and what it added."""

    ms: float
    low_ms: float
    high_ms: float
    strategy: str  # replicated | ddp | dp
    allreduce_ms: float  # the gradients' all-reduce(s), end to end
    details: dict[str, Any]


def data_parallel_step(framework: str, step1_ms: float, deployment: Deployment,
                       precision: str = "fp32", layers: Sequence[Mapping[str, Any]] = (),
                       strategy: str | None = None) -> ParallelStep:
    """The step on ``deployment`` (N GPUs, each with the 1-GPU per-device batch) from the
    1-GPU step, by ``strategy`` (module rules; ``None`` or ``auto``: :func:`auto_strategy`
    of ``framework``).

    ``layers``: the layerwise forecast's per-layer entries (``ms``, ``params``) in forward
    order: their parameters are the gradients, their times the shape of the backward pass.
    A 1-GPU deployment returns the step unchanged."""
    fw = parse_framework(framework).value
    strategy = STRATEGIES[fw] if strategy in (None, "", "auto") else str(strategy)
    if strategy not in KNOWN_STRATEGIES:
        raise ValueError(f"unknown data-parallel strategy {strategy!r}; known: "
                         f"{', '.join(KNOWN_STRATEGIES)}")
    net = layers_of(layers)
    params = sum(layer.params for layer in net)
    n = deployment.count
    if strategy == "ddp":
        got = ddp_step(step1_ms, net, deployment)
        return ParallelStep(got.ms, got.low_ms, got.high_ms, strategy, got.allreduce_ms,
                            {"buckets": got.buckets, "exposed_ms": got.exposed_ms,
                             "backward_ms": got.backward_ms,
                             "gradient_bytes_per_param": GRAD_BYTES})
    if strategy == "allreduce":
        ar = gradient_allreduce_ms(params, deployment) if n > 1 else 0.0
        return ParallelStep(step1_ms + ar, step1_ms, step1_ms + ar, strategy, ar,
                            {"exposed_ms": ar, "gradient_bytes_per_param": GRAD_BYTES})
    if strategy == "dp":
        ar = gradient_allreduce_ms(params, deployment)
        fit = shipped_dp()
        ms, low, high = fit.step(step1_ms, n, len(net), ar)
        return ParallelStep(ms, low, high, strategy, ar, fit.to_dict())
    ar = allreduce_ms(params, precision, deployment)
    model = shipped_scaling()
    tensors = sum(1 for layer in net if layer.params)
    ms, low, high = model.step(step1_ms, ar, n, precision, tensors)
    return ParallelStep(ms, low, high, strategy, ar,
                        {"overlap": model.overlap_, "sync": model.sync_,
                         "tensor_ms": model.tensor_ms_, "tensors": tensors})


def rescale_parallel_step(framework: str, step_ms: float, source: Deployment,
                          target: Deployment, precision: str = "fp32",
                          layers: Sequence[Mapping[str, Any]] = (),
                          strategy: str | None = None) -> ParallelStep:
    """The step on ``target`` from a step measured on ``source`` (same per-device batch): the
    1-GPU step that gives ``step_ms`` on ``source`` under :func:`data_parallel_step` (found by
    fixed-point iteration; the added time shrinks with the step), then that step on ``target``."""
    step1 = float(step_ms)
    if source.count > 1:
        for _ in range(50):
            got = data_parallel_step(framework, step1, source, precision, layers, strategy).ms
            if abs(got - step_ms) <= 1e-9 * step_ms:
                break
            step1 = max(step1 * step_ms / got, 1e-6)
    return data_parallel_step(framework, step1, target, precision, layers, strategy)
