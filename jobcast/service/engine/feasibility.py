"""Will the job fit? The memory verdict of a forecast request (per GPU, data parallel).

Rules:

* the GPU and the GPU count come from the request as the forecast routes read them: ``device``
  (one GPU, any spelling the catalog resolves, ``"8x V100"`` too) or else ``deployment`` (a key
  ``nvidia-a100-sxm4-40gb-x8`` or a free form), parsed by :meth:`fleet.deployment.Deployment.parse`;
  ``gpus`` overrides the count. A family name (``"V100"``) stands for its first catalog row
  (``Tesla V100 SXM2 16GB``), as everywhere in the service;
* the per-GPU batch is ``ceil(global batch / GPUs)`` (at least 1), as the layerwise route
  splits it;
* the estimate is :func:`layerwise.memory.estimate_memory` on the layers of the network,
  whatever its source (a zoo name's shipped spec for the request's framework, a
  ``file.py:callable``/``module:callable`` model's cached trace, a JSON spec), with the
  precision, optimizer and image size as asked;
* the band (:func:`may_not_fit`): an estimate over the GPU's memory by at most
  :data:`layerwise.memory_band.WARN_BAND` (its own measured error: the largest estimate /
  memory of a batch public data shows running) is "may not fit", answered with a warning;
  beyond it the forecaster refuses the job;
* ``None`` where it cannot say: a network the zoo ships no spec of, an accelerator the GPU
  catalog does not hold (TPUs, Gaudi, an unknown name: the forecast's own routes report those),
  no device or deployment, no batch size. Bad values the request check would refuse
  (precision, optimizer, framework) raise :class:`~layerwise.memory.MemoryEstimateError`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fleet.catalog import UnknownGpuError
from fleet.deployment import Deployment
from fleet.framework import parse_framework
from jobcast.service.engine.request import JobRequest
from layerwise.memory_band import WARN_BAND

if TYPE_CHECKING:  # the network zoo loads with the first job that has a network to check
    from layerwise.memory import MemoryEstimate


def _gpu_and_count(device: str | None, deployment: str | None) -> tuple[str, int] | None:
    """(catalog GPU name, GPU count) of a request's device or deployment, else None."""
    text = device or deployment
    if not text or not str(text).strip():
        return None
    try:
        parsed = Deployment.parse(str(text))
    except ValueError:
        return None
    spec = parsed.identity.spec
    return (spec.name, parsed.count) if spec is not None else None


def memory_verdict(network: str, device: str | None, *, batch_size: int | None,
                   gpus: int | None = None, precision: object = "fp32",
                   optimizer: str | None = "sgd", image_size: int | None = None,
                   framework: str | None = None,
                   deployment: str | None = None) -> MemoryEstimate | None:
    """The memory verdict of a job: ``device`` (or ``deployment``) as the user gives it, the
    *global* ``batch_size`` split over ``gpus`` (module rules); None where it cannot say."""
    if batch_size is None or not network:
        return None
    from layerwise.memory import MemoryEstimateError, estimate_memory, network_layers

    found = _gpu_and_count(device, deployment)
    if found is None:
        return None
    gpu, count = found
    count = int(gpus) if gpus else count
    if count < 1:
        raise MemoryEstimateError(f"GPU count must be >= 1, got {gpus}")
    try:
        network_layers(str(network), parse_framework(framework).value)
    except MemoryEstimateError:
        return None
    per_gpu = max(1, math.ceil(int(batch_size) / count))
    try:
        return estimate_memory(str(network), batch_size=per_gpu, precision=precision,
                               optimizer=optimizer or "sgd", gpu=gpu,
                               framework=parse_framework(framework).value,
                               image_size=image_size)
    except UnknownGpuError:
        return None


def request_verdict(req: JobRequest) -> MemoryEstimate | None:
    """:func:`memory_verdict` of a parsed request (its device, else its deployment)."""
    return memory_verdict(req.network, req.device, batch_size=req.batch_size,
                          precision=req.precision, optimizer=req.optimizer,
                          image_size=req.image_size, framework=req.framework,
                          deployment=req.deployment)


def may_not_fit(memory: MemoryEstimate) -> bool:
    """Over the GPU's memory, but within the estimate's own error of it (module rules)."""
    capacity = memory.gpu_memory_bytes
    return (memory.fits is False and capacity is not None
            and memory.total_bytes <= WARN_BAND * capacity)


def band_warning(memory: MemoryEstimate) -> str:
    """The warning of a job that :func:`may_not_fit`."""
    return (f"may not fit: {memory.summary()}; the estimate runs up to {WARN_BAND:g}x the "
            "GPU's memory at batches public data shows running (docs/memory.md), so the job "
            "is answered, not refused")


__all__ = ["band_warning", "may_not_fit", "memory_verdict", "request_verdict"]
