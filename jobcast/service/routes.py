"""The layerwise route of the forecaster: a job with no history, predicted from its layers."""

from __future__ import annotations

import math
import re

from fleet.catalog import resolve_gpu


def device_for(req) -> tuple[str, int]:
    """The GPU to predict and how many share the batch (data parallel), from the request."""
    if req.device:
        return req.device, 1
    if not req.deployment:
        raise LookupError("no history for this job and no device or deployment to predict it on")
    m = re.fullmatch(r"(?:[a-z]+-)?(.+?)-x(\d+)(?:-n(\d+))?", req.deployment.strip().lower())
    if not m:
        return req.deployment, 1
    count = int(m.group(2)) * int(m.group(3) or 1)
    return m.group(1), count


def layerwise_forecast(req, e2e_miss: str, predictor=None) -> dict:
    """Per-batch layerwise prediction scaled to the job's iterations (or epochs)."""
    from layerwise.forecast import forecast_network

    device, count = device_for(req)
    try:
        gpu = resolve_gpu(device)
    except (KeyError, ValueError) as exc:
        raise LookupError(f"{e2e_miss}; and no layerwise forecast: {exc}") from None
    per_device_batch = max(1, math.ceil(req.batch_size / count))
    result = forecast_network(
        req.network,
        device=gpu.name,
        batch_size=per_device_batch,
        optimizer=None if req.optimizer in (None, "", "none") else req.optimizer,
        image_size=req.image_size,
        dataset_size=req.dataset_size,
        epochs=req.epochs,
        predictor=predictor,
    )
    warnings = list(result.get("warnings", []))
    if count > 1:
        warnings.append(
            f"data parallel over {count} devices: per-device batch {per_device_batch}; "
            "communication time is not modelled"
        )
    if req.iterations is not None:
        steps = req.iterations
    elif result.get("job_seconds") is not None:
        steps = result["job_seconds"] / result["batch_seconds"]
    else:
        steps = 1
    return {
        **result,
        "seconds": result["batch_seconds"] * steps,
        "low": result["low"] * steps,
        "high": result["high"] * steps,
        "unit": "s",
        "route": "layerwise",
        "model": result.get("model", "layerwise/default"),
        "device": gpu.name,
        "devices": count,
        "iterations": steps,
        "extrapolated": bool(result.get("extrapolated", False)),
        "why_layerwise": e2e_miss,
        "warnings": warnings,
    }
