"""End-to-end forecasts at a GPU count with no history, from history at another count.

Rules (data parallel, fixed per-GPU batch):

* A source is a fitted model of the same network, phase (and stack, if asked) on the same
  accelerator at another count; the nearest count (in doublings) wins, then the newest runs.
* The source's step time at the job's per-GPU batch is its forecast slope:
  (seconds(iterations) - seconds(0)) / iterations at global batch ``per-GPU batch x M``.
* The step is moved from M to N GPUs by :class:`models.scaling.DataParallelScaling` (solved
  for the 1-GPU step, then applied at N) with the network's parameters and weight tensors
  from the shipped zoo (unknown networks: the synchronisation terms only, noted).
* Seconds = seconds(0) + iterations x step_N; the interval is the source's, widened by the
  scaling model's leave-one-GPU-model-out residuals; always ``extrapolated``.
"""

from __future__ import annotations

import math
from typing import Any

from fleet.deployment import Deployment
from fleet.precision import parse_precision
from jobcast.service.request import JobRequest
from models.e2e import FittedModel, forecast


def _source(models: list[FittedModel], req: JobRequest, target: Deployment
            ) -> tuple[FittedModel, Deployment] | None:
    found = []
    for m in models:
        if m.network != req.network.lower() or m.phase != req.phase:
            continue
        if req.stack is not None and m.stack != req.stack:
            continue
        try:
            dep = Deployment.parse(m.deployment)
        except ValueError:
            continue
        if dep.slug == target.slug and dep.count != target.count:
            found.append((abs(math.log2(dep.count / target.count)), -m.last_run_time, m, dep))
    if not found:
        return None
    _, _, model, dep = min(found, key=lambda t: (t[0], t[1]))
    return model, dep


def _network_size(network: str) -> tuple[float, int, str]:
    """(parameters, weight tensors, note) of a known network; zeros and a note otherwise."""
    from layerwise.network import decompose
    from models.scaling import weight_tensors

    try:
        net = decompose(network, batch_size=1)
    except (ValueError, LookupError, ImportError) as exc:
        return 0.0, 0, f"network size unknown ({exc}); only the step-share terms scale"
    return float(net.params), weight_tensors(net), ""


def scale_to_count(models: list[FittedModel], req: JobRequest, deployment: str
                   ) -> dict[str, Any] | None:
    """A forecast dict like :func:`models.e2e.forecast`, or None when no source exists."""
    from models.scaling import allreduce_ms, shipped_scaling
    if req.iterations is None:
        return None
    target = Deployment.parse(req.deployment or deployment)
    found = _source(models, req, target)
    if found is None:
        return None
    model, source = found
    per_gpu = req.batch_size / target.count
    batch_m = max(1, round(per_gpu * source.count))
    iters = max(float(req.iterations), 1.0)
    at_i = forecast(model, iters, batch_m)
    at_0 = forecast(model, 0.0, batch_m)
    step_m = max((at_i["seconds"] - at_0["seconds"]) / iters, 1e-9) * 1000.0
    params, tensors, note = _network_size(req.network)
    scaling = shipped_scaling()
    half = "half" if parse_precision(req.precision).value in ("fp16", "bf16") else "full"
    ar_m = allreduce_ms(params, req.precision, source) if source.count > 1 else 0.0
    ar_n = allreduce_ms(params, req.precision, target) if target.count > 1 else 0.0
    step_n = scaling.rescale(step_m, source.count, target.count, ar_m, ar_n, req.precision,
                             tensors)
    seconds = at_0["seconds"] + float(req.iterations) * step_n / 1000.0
    ratio = seconds / max(at_i["seconds"], 1e-12)
    low = at_i["low"] * ratio * math.exp(scaling.log_low_)
    high = at_i["high"] * ratio * math.exp(scaling.log_high_)
    ic = target.interconnect()
    return {
        "seconds": seconds, "low": min(low, seconds), "high": max(high, seconds), "unit": "s",
        "model": f"{model.model_id}+scaled/x{source.count}-to-x{target.count}",
        "extrapolated": True, "cv_mape": model.estimator.cv_mape_,
        "scaled_from": model.deployment, "source_step_ms": step_m, "step_ms": step_n,
        "interconnect": ic.describe(), "assumed": list(ic.assumed),
        "allreduce_ms": ar_n, "notes": [n for n in (note,) if n],
        "scaling": {"overlap": scaling.overlap_, "sync": scaling.sync_[half],
                    "tensor_ms": scaling.tensor_ms_[half], "tensors": tensors},
        "ratio_to_source": float(ratio),
    }
