"""End-to-end forecasts at a GPU count with no history, from history at another count.

Rules (data parallel, fixed per-GPU batch):

* A source is a fitted model of the same network, phase (and stack, if asked) on the same
  accelerator at another count; the nearest count (in doublings) wins, then the newest runs.
* The source's step time at the job's per-GPU batch is its forecast slope:
  (seconds(iterations) - seconds(0)) / iterations at global batch ``per-GPU batch x M``.
* The step is moved from M to N GPUs by :func:`models.scaling.rescale_parallel_step` (solved
  for the 1-GPU step, then applied at N) with the mechanism of :func:`history_strategy`: the
  request's ``--data-parallel`` when named, else ``auto`` for the *history's* stack
  (TensorFlow 1.x: replicated variables; TensorFlow 2: one all-reduce; PyTorch, MXNet,
  Horovod or unknown: DDP-like overlapped all-reduce). The network's layers (parameters, and
  FLOPs as the shape of the backward pass) come from the shipped zoo; an unknown network's
  step is moved unchanged (noted). Why not replicated variables for every stack: moving a
  measured MLPerf step to another GPU count of the same submission is 46 % off by them and
  7.6 % by DDP (7.5 % for the same step), ``docs/lab/scaling.md``.
* Seconds = seconds(0) + iterations x step_N; the interval is the source's, widened by the
  mechanism's own band (replicated: its leave-one-GPU-model-out residuals; DDP: up to the
  whole all-reduce exposed); always ``extrapolated``.
"""

from __future__ import annotations

import math
from typing import Any

from fleet.deployment import Deployment
from fleet.errors import JobcastError
from fleet.framework import stack_framework
from jobcast.service.engine.request import JobRequest
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
        except JobcastError:  # a stored key that names no deployment: not a source
            continue
        if dep.slug == target.slug and dep.count != target.count:
            found.append((abs(math.log2(dep.count / target.count)), -m.last_run_time, m, dep))
    if not found:
        return None
    _, _, model, dep = min(found, key=lambda t: (t[0], t[1]))
    return model, dep


def _network_layers(network: str) -> tuple[list[dict[str, float]], str]:
    """The known network's layers as (``ms``: FLOPs, a proxy that shapes the backward pass,
    ``params``) in forward order, and a note; none and a note for an unknown network."""
    from layerwise.network import decompose

    try:
        net = decompose(network, batch_size=1)
    except (JobcastError, ImportError) as exc:
        return [], f"network size unknown ({exc}); the step is moved unchanged"
    return [{"ms": float(r.get("flops", 0) or 0), "params": float(r.get("params", 0) or 0)}
            for r in net.rows], ""


def history_strategy(req: JobRequest, model: FittedModel) -> tuple[str, str]:
    """(mechanism, why) that moves a step of ``model``'s history between GPU counts: the
    request's ``data_parallel`` when named, else :func:`models.scaling.auto_strategy` of the
    history's own stack (TensorFlow 1.x: replicated variables; TensorFlow 2: one all-reduce;
    anything else, PyTorch, MXNet, Horovod or unknown: DDP-like overlapped all-reduce)."""
    from models.scaling import TF1_STACK, auto_strategy, resolve_strategy

    if req.data_parallel and req.data_parallel != "auto":
        return resolve_strategy(req.data_parallel, "pytorch"), "asked (--data-parallel)"
    stack = model.stack or ""
    framework = ("tensorflow" if TF1_STACK.search(stack)
                 else stack_framework(stack, default="pytorch"))
    return auto_strategy(framework, stack), f"auto for the history's stack ({stack or 'unknown'})"


def scale_to_count(models: list[FittedModel], req: JobRequest, deployment: str
                   ) -> dict[str, Any] | None:
    """A forecast dict like :func:`models.e2e.forecast`, or None when no source exists;
    ``scaled_from`` is the source's deployment key and ``source_model`` its model id."""
    from models.scaling import rescale_parallel_step
    if req.iterations is None or req.batch_size is None:
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
    layers, note = _network_layers(req.network)
    strategy, why = history_strategy(req, model)
    got = rescale_parallel_step("pytorch", step_m, source, target, req.precision or "fp32",
                                layers, strategy)
    step_n = got.ms
    seconds = at_0["seconds"] + float(req.iterations) * step_n / 1000.0
    ratio = seconds / max(at_i["seconds"], 1e-12)
    low = at_i["low"] * ratio * got.low_ms / got.ms
    high = at_i["high"] * ratio * got.high_ms / got.ms
    ic = target.interconnect()
    return {
        "seconds": seconds, "low": min(low, seconds), "high": max(high, seconds), "unit": "s",
        "model": f"{model.model_id}+scaled/x{source.count}-to-x{target.count}",
        "extrapolated": True, "cv_mape": model.estimator.cv_mape_,
        "scaled_from": model.deployment, "source_model": model.model_id,
        "source_step_ms": step_m, "step_ms": step_n,
        "interconnect": ic.describe(), "assumed": list(ic.assumed),
        "allreduce_ms": got.allreduce_ms, "notes": [n for n in (note,) if n],
        "scaling": {"strategy": got.strategy, "chosen": why, **got.details},
        "ratio_to_source": float(ratio),
    }
