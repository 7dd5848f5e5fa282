"""Routes: each turns a job request into a :class:`Forecast` one way, behind one interface.

A route's ``forecast(req)`` returns a :class:`Forecast` or raises :class:`RouteMiss`
(a :class:`LookupError`) saying why it cannot answer this job; the forecaster tries the
next route then. A new route is one class with ``name`` and ``forecast``.

* :class:`EndToEndRoute`: the phase models fitted on the job's own history (network x
  deployment x phase x stack x variant x system); a job plan (epochs, evaluations) sums its
  phases. The request's precision and tags pick the variant (never a model of another
  precision), its system that system's own model (``models.choice``); the answer says
  which model and why (``chosen``), with its ``evidence``.
* :class:`LayerwiseRoute`: per-layer predictions summed over the network for one device;
  a deployment of N devices splits the global batch N ways (communication not modelled).
* :class:`CalibratedRoute`: the layerwise forecast scaled by what observed runs of the
  network (else of other networks) on the same hardware showed (``models.calibration``).
* :class:`jobcast.service.hybrid.HybridRoute`: the layerwise shape of time versus batch size,
  scaled by the key's end-to-end history (where that history lacks the batch size).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from fleet.catalog import resolve_gpu
from fleet.deployment import Deployment, deployment_key, normalise_deployment
from fleet.framework import parse_framework
from jobcast.service.forecast import Forecast, Route
from jobcast.service.other_counts import scale_to_count
from jobcast.service.request import JobRequest, JobRequestError
from layerwise.forecast import forecast_network
from models.calibration import ScaleCalibrator, network_key
from models.choice import narrow
from models.e2e import FittedModel, NoModelError, forecast, select
from models.job import JobPlan, forecast_job
from models.scaling import allreduce_ms, shipped_scaling
from models.variant import compatible, request_variant

LAYERWISE_MODEL = "layerwise/default"
_CORE = ("seconds", "low", "high", "unit", "route", "model", "extrapolated")


class RouteMiss(LookupError):
    """This route has no answer for the job (no history, unknown device, ...)."""


class ForecastRoute(Protocol):
    """A way to forecast: ``forecast(req)`` answers or raises :class:`RouteMiss`."""

    name: Route

    def forecast(self, req: JobRequest) -> Forecast: ...


def _details(result: dict) -> dict[str, Any]:
    """A model's result less the fields every Forecast has."""
    return {k: v for k, v in result.items() if k not in _CORE}


class EndToEndRoute:
    """History of the same network, deployment, phase (and stack)."""

    name = Route.END_TO_END

    def __init__(self, models: Sequence[FittedModel]):
        self.models = models

    def forecast(self, req: JobRequest) -> Forecast:
        if req.deployment is None:
            raise RouteMiss("no deployment given")
        deployment = normalise_deployment(req.deployment)
        try:
            result = self._predict(req, deployment)
        except NoModelError as exc:
            raise RouteMiss(str(exc)) from None
        return Forecast(
            job=req,
            seconds=result["seconds"],
            low=result["low"],
            high=result["high"],
            route=self.name,
            model=result["model"],
            extrapolated=bool(result["extrapolated"]),
            details=_details(result),
        )

    def _predict(self, req: JobRequest, deployment: str) -> dict:
        asked = request_variant(req.precision if req.states_precision() else None, req.tags)
        if req.epochs is not None and req.iterations is None:
            train_iters = None
            if req.dataset_size is not None:
                train_iters = req.epochs * math.ceil(req.dataset_size / req.batch_size)
            choice = select(self.models, req.network, deployment, "train", req.stack,
                            train_iters, req.batch_size, asked, req.system)
            same = [m for m in self.models if m.variant == choice.model.variant
                    and m.system == choice.model.system]
            plan = JobPlan(
                network=req.network,
                deployment=deployment,
                batch_size=req.batch_size,
                epochs=req.epochs,
                dataset_size=req.dataset_size,
                eval_every=req.eval_every,
                eval_size=req.eval_size,
                stack=req.stack or choice.model.stack,
            )
            return {**forecast_job(same, plan), "chosen": choice.reason,
                    "evidence": choice.model.evidence(), "thin": choice.model.thin}
        if req.iterations is None:
            raise JobRequestError("give iterations, or epochs with dataset_size")
        try:
            choice = select(self.models, req.network, deployment, req.phase, req.stack,
                            req.iterations, req.batch_size, asked, req.system)
        except NoModelError:
            scaled = scale_to_count(self._usable(asked, req.system), req, deployment)
            if scaled is None:
                raise
            return scaled
        return forecast(choice.model, req.iterations, req.batch_size, choice.reason)

    def _usable(self, asked: dict, system: str | None) -> list[FittedModel]:
        """The models of the asked variant (precision and tags) that serve ``system``."""
        return narrow([m for m in self.models if compatible(m.variant, asked)], system)

    def model_of(self, forecast_: Forecast) -> FittedModel | None:
        return next((m for m in self.models if m.model_id == forecast_.model), None)


def device_for(req: JobRequest) -> tuple[str, int]:
    """The GPU to predict and how many share the batch (data parallel), from the request."""
    if req.device:
        return req.device, 1
    if not req.deployment:
        raise RouteMiss("no history for this job and no device or deployment to predict it on")
    deployment = Deployment.parse(req.deployment)
    return deployment.accelerator, deployment.count


class LayerwiseRoute:
    """Per-layer predictions of the network on one device, times the job's steps."""

    name = Route.LAYERWISE

    def __init__(self, predictor: Any = None):
        self.predictor = predictor

    def forecast(self, req: JobRequest, why: str = "") -> Forecast:
        """``why`` says why the end-to-end route did not answer (kept in the details)."""
        device, count = device_for(req)
        try:
            gpu = resolve_gpu(device)
        except (KeyError, ValueError) as exc:
            raise RouteMiss(f"{why}; and no layerwise forecast: {exc}") from None
        per_device_batch = max(1, math.ceil(req.batch_size / count))
        result = forecast_network(
            req.network,
            device=gpu.name,
            batch_size=per_device_batch,
            optimizer=None if req.optimizer in (None, "", "none") else req.optimizer,
            image_size=req.image_size,
            precision=req.precision,
            framework=parse_framework(req.framework).value,
            dataset_size=req.dataset_size,
            epochs=req.epochs,
            predictor=self.predictor,
        )
        warnings = list(result.get("warnings", []))
        batch_s, batch_low, batch_high = result["batch_seconds"], result["low"], result["high"]
        parallel: dict[str, Any] = {}
        if count > 1:
            batch_s, batch_low, batch_high, parallel = _data_parallel(req, gpu.name, count,
                                                                      result)
            warnings.append(
                f"data parallel over {count} devices: per-device batch {per_device_batch}; "
                f"gradient all-reduce over {parallel['interconnect']}"
                + (f" (assumed: {'; '.join(parallel['assumed'])})" if parallel["assumed"] else "")
            )
        if req.iterations is not None:
            steps = req.iterations
        elif req.epochs is not None and req.dataset_size is not None:
            steps = req.epochs * math.ceil(req.dataset_size / req.batch_size)
        else:
            steps = 1
        details = {
            **_details(result),
            "batch_seconds": batch_s,
            "batch_low": batch_low,
            "batch_high": batch_high,
            **parallel,
            "device": gpu.name,
            "devices": count,
            "iterations": steps,
            "why_layerwise": why,
            "warnings": warnings,
        }
        return Forecast(
            job=req,
            seconds=batch_s * steps,
            low=batch_low * steps,
            high=batch_high * steps,
            route=self.name,
            model=LAYERWISE_MODEL,
            details=details,
        )


def _data_parallel(req: JobRequest, gpu: str, count: int,
                   result: dict) -> tuple[float, float, float, dict[str, Any]]:
    """(step s, low, high, details) of one data-parallel step: the per-device step plus the
    exposed gradient all-reduce (:mod:`models.scaling`)."""
    deployment = (Deployment.parse(req.deployment) if req.deployment
                  else Deployment(gpu, count))
    ic = deployment.interconnect()
    ar = allreduce_ms(result["params"], req.precision, deployment)
    model = shipped_scaling()
    step1 = result["batch_seconds"] * 1000.0
    tensors = sum(1 for layer in result.get("layers", []) if layer.get("params"))
    ms, low, high = model.step(step1, ar, count, req.precision, tensors)
    factor = ms / step1
    details = {"interconnect": ic.describe(), "assumed": list(ic.assumed),
               "allreduce_ms": ar, "single_device_batch_seconds": result["batch_seconds"],
               "scaling": {"overlap": model.overlap_, "sync": model.sync_}}
    return (ms / 1000.0, result["low"] * factor * low / ms, result["high"] * factor * high / ms,
            details)


def calibrate(plain: Forecast, calibrator: ScaleCalibrator | None) -> Forecast:
    """A layerwise forecast scaled by its calibration factor; unchanged when none applies."""
    if calibrator is None or plain.route is not Route.LAYERWISE:
        return plain
    hardware = deployment_key(plain.details["device"], plain.details.get("devices", 1))
    scale = calibrator.scale_for(plain.job.network, hardware)
    if scale is None:
        return plain
    calibration = {
        "factor": scale.factor,
        "level": scale.level,
        "runs": scale.runs,
        "hardware": hardware,
    }
    return plain.scaled(
        scale.factor,
        route=Route.LAYERWISE_CALIBRATED,
        model=f"{plain.model}+calibration/{scale.level}/{hardware}",
        details={**plain.details, "calibration": calibration},
    )


class CalibratedRoute:
    """The layerwise route, scaled by observed runs where a factor applies."""

    name = Route.LAYERWISE_CALIBRATED

    def __init__(self, layerwise: LayerwiseRoute, calibrator: ScaleCalibrator | None):
        self.layerwise = layerwise
        self.calibrator = calibrator

    def forecast(self, req: JobRequest, why: str = "") -> Forecast:
        """Calibrated where a factor applies, else the plain layerwise forecast."""
        return calibrate(self.layerwise.forecast(req, why), self.calibrator)

    def has_own_runs(self, req: JobRequest) -> bool:
        """Whether this network's own runs on this hardware give a factor (cheap check)."""
        if self.calibrator is None:
            return False
        try:
            device, count = device_for(req)
            hardware = deployment_key(resolve_gpu(device).name, count)
        except (LookupError, ValueError):
            return False
        return (network_key(req.network), hardware) in self.calibrator.pairs_
