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
* ``replicated``: TensorFlow 1.x replicated variables
  (:class:`models.replicated.DataParallelScaling`, fitted on the Lambda tf_cnn_benchmarks
  logs); ``auto`` only when the stack the user names is TensorFlow 1.x
  (``tensorflow-1.15``, ``TF 1.14``, NGC ``-tf1-``).
* ``dp``: ``torch.nn.DataParallel`` (fitted on torchvision_bench); only when asked by name.

Why ``auto`` is not ``replicated`` for TensorFlow: on 1030 MLPerf ResNet-50 runs (2-2048
NVIDIA GPUs, MXNet+Horovod/NCCL mostly) the per-GPU step grows 0-2 % per doubling of the GPUs
(within a GPU model), where replicated variables predict 17-23 %; moving a measured step to
another GPU count of the same submission is several times further off by ``replicated``
than by ``ddp``, ``allreduce`` or the same step (46 % against 8 % when written;
``docs/lab/scaling.md``, ``benchmarks/scaling_mlperf.py``). Those
runs cannot tell ``ddp`` from ``allreduce`` (ResNet-50's gradients take about 1 ms on NVLink);
TensorFlow's ``auto`` is ``allreduce`` because that is what Keras' MirroredStrategy does
(chosen after seeing those figures).

The replicated-variable rule and its fit: :mod:`models.replicated`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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

STRATEGIES = {"tensorflow": "allreduce", "pytorch": "ddp"}  # a framework's modern default (auto)
TF1_STACK = re.compile(r"(?:tensorflow|\btf)[\s_-]*v?1\.\d+|\btf1\b", re.IGNORECASE)  # NGC -tf1-


def auto_strategy(framework: str, stack: str | None = None) -> str:
    """The mechanism ``auto`` means: ``replicated`` when the ``stack`` the user named is
    TensorFlow 1.x, else the framework's modern default (:data:`STRATEGIES`)."""
    fw = parse_framework(framework).value
    if fw == "tensorflow" and stack and TF1_STACK.search(str(stack)):
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
    from models.replicated import shipped_scaling

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
