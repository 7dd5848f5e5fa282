"""The layerwise routes, and what every route shares: :class:`RouteMiss`.

Every route proposes candidate answers behind one interface
(:class:`jobcast.service.engine.candidates.Proposer`: ``name``, ``kinds``, ``propose(ask)``); the
route registry (``jobcast.service.engine.route_registry``: one ``register_route`` call per route)
orders them and the backtest selector picks among their candidates. The routes:

* :class:`jobcast.service.engine.rates.RateRoute`: the runs' own seconds per iteration.
* :class:`jobcast.service.engine.e2e_route.EndToEndRoute`: the phase models fitted on the job's own
  history (network x deployment x phase x stack x variant x system).
* :class:`jobcast.service.engine.hybrid.HybridRoute`: the layerwise shape of time versus batch size,
  scaled by the key's end-to-end history (where that history lacks the batch size).
* :class:`LayerwiseRoute`: per-layer predictions summed over the network for one device;
  a deployment of N devices splits the global batch N ways and adds the exposed all-reduce.
* :class:`ScaleCalibratedRoute` (formerly ``CalibratedRoute``, still an alias): the
  layerwise forecast scaled by what observed runs of the network (else of other networks) on
  the same deployment showed (``models.scale_calibration``). Its answers' route is
  ``layerwise`` (the registered route); ``layerwise-calibrated`` is their candidate kind
  (``details["candidate"]``, :func:`calibrated_by`); the model id ``+calibration/...`` and
  ``details["calibration"]`` keep their names (JSON values);
  ``details["calibration"]["hardware"]`` is the old name of
  its ``deployment``, kept for one release.

``LayerwiseRoute.forecast(req, why)`` raises :class:`NoLayerwiseForecast` (a
:class:`RouteMiss`, a :class:`LookupError`) when it cannot price the job (unknown GPU), with
the reason in ``.reason``; ``propose`` then answers no candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from fleet.catalog import resolve_gpu
from fleet.deployment import Deployment, deployment_key
from fleet.deprecation import renamed_attributes
from fleet.errors import ErrorInfo, FleetError, JobcastError
from fleet.framework import parse_framework
from jobcast.service.engine.candidates import Ask, Candidate, own_scale, phase_steps, to_job
from jobcast.service.engine.forecast import Forecast, ModelParts
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import (
    LAYERWISE,
    LAYERWISE_CALIBRATED,
    LAYERWISE_KIND,
    RegisteredRoute,
)
from jobcast.service.errors import ServiceError
from models.job import no_steps_message
from models.relation import Relation, runs_bucket

LAYERWISE_MODEL = "layerwise/default"
_CORE = ("seconds", "low", "high", "unit", "route", "model", "extrapolated")
CACHE_SIZE = 512  # layerwise network forecasts kept per route (oldest dropped first)


class RouteMiss(ServiceError, LookupError):
    """This route has no answer for the job (no history, unknown device, ...)."""

    kind: ClassVar[str] = "no_forecast"


class NoLayerwiseForecast(RouteMiss):
    """The layerwise route cannot price the job: ``reason`` says why (e.g. the GPU is not in
    the catalog), ``why`` why history did not answer either; the message says both."""

    def __init__(self, reason: str, why: str = "", cause: JobcastError | None = None):
        super().__init__(f"{why}; and no layerwise forecast: {reason}" if why
                         else f"no layerwise forecast: {reason}")
        self.reason = reason
        self.why = why
        self.cause = cause

    def info(self) -> ErrorInfo:
        """The one JSON shape, of the kind of the error that stopped the route (an unknown
        GPU: ``unknown_gpu``), else ``no_forecast``; the message says both reasons."""
        info = super().info()
        return info if self.cause is None else replace(info, kind=self.cause.info().kind)


def _details(result: dict) -> dict[str, Any]:
    """A model's result less the fields every Forecast has."""
    return {k: v for k, v in result.items() if k not in _CORE}


def layerwise_candidate(ask: Ask, f: Forecast) -> Candidate:
    """A layerwise (or calibrated) forecast of the ask as a candidate."""
    calibrated = calibrated_by(f) is not None
    runs = int(f.details.get("calibration", {}).get("runs", 0)) if calibrated else 0
    relation = Relation(kind=LAYERWISE_CALIBRATED if calibrated else LAYERWISE_KIND,
                        target=ask.phase, system="other" if ask.system else "any",
                        batch="other", variant="asked" if ask.variant else "assumed",
                        stack="none", runs=runs_bucket(runs), gpu="exact", age="none",
                        devices=ask.devices)
    level = f.details.get("calibration", {}).get("level", "")
    reason = (f"{LAYERWISE_CALIBRATED}: per-layer predictions scaled by observed runs "
              f"({level})" if calibrated else f"{LAYERWISE_KIND}: per-layer predictions "
              "composed into the network's step (no history of this job)")
    residual = (f.details.get("network_residual") or {}).get("reason")
    if residual:
        reason += f"; {residual}"
    f = f.with_details(chosen=reason)
    cand = Candidate(f, relation, own_scale(f.seconds, f.low, f.high), reason)
    return to_job(cand, ask, None) if ask.target == "job" else cand


def _phase_req(ask: Ask) -> JobRequest:
    """The request as the layerwise route prices it: the asked phase's steps."""
    return replace(ask.req, phase=ask.phase)


def device_for(req: JobRequest) -> tuple[str, int]:
    """The GPU to predict and how many share the batch (data parallel), from the request."""
    if req.device:
        return req.device, 1
    if not req.deployment:
        raise RouteMiss("no history for this job and no device or deployment to predict it on")
    deployment = Deployment.parse(req.deployment)
    return deployment.accelerator, deployment.count


class LayerwiseRoute(RegisteredRoute):
    """Per-layer predictions of the network on one device, times the job's steps."""

    route = LAYERWISE
    costly = True

    def __init__(self, predictor: Any = None):
        self.predictor = predictor
        self._cache: dict[tuple, dict] = {}  # one network's forecast per distinct question

    def propose(self, ask: Ask) -> list[Candidate]:
        """The plain layerwise candidate; :class:`RouteMiss` says why the job cannot be
        priced (the forecaster keeps the reason)."""
        if ask.req.batch_size is None or not (ask.req.device or ask.req.deployment):
            return []
        return [layerwise_candidate(ask, self.forecast(_phase_req(ask), "no history"))]

    def forecast(self, req: JobRequest, why: str = "") -> Forecast:
        """``why`` says why the end-to-end route did not answer (kept in the details)."""
        device, count = device_for(req)
        try:
            gpu = resolve_gpu(device)
        except FleetError as exc:  # the catalog does not know it, or cannot read the name
            raise NoLayerwiseForecast(str(exc), why, cause=exc) from None
        steps = phase_steps(req)
        if steps is None:
            raise RouteMiss(no_steps_message(req.phase))
        if req.batch_size is None:
            raise RouteMiss("no batch size to price the network at")
        per_device_batch = max(1, math.ceil(req.batch_size / count))
        training = req.phase != "test" and req.optimizer not in (None, "", "none")
        args = (req.network, gpu.name, per_device_batch, req.optimizer if training else None,
                req.image_size, str(req.precision), parse_framework(req.framework).value)
        if args not in self._cache:
            from layerwise.forecast import forecast_network  # the zoo loads with a network

            if len(self._cache) >= CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[args] = forecast_network(
                args[0], device=args[1], batch_size=args[2], optimizer=args[3],
                image_size=args[4], precision=req.precision, framework=args[6],
                predictor=self.predictor)
        result = self._cache[args]
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
        details = {
            **_details(result),
            "batch_seconds": batch_s,
            "batch_low": batch_low,
            "batch_high": batch_high,
            **parallel,
            "device": gpu.name,
            "devices": count,
            "iterations": steps,
            "pass": "forward (evaluation)" if req.phase == "test" else (
                "forward, backward and optimizer step" if training else "forward and backward"),
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
            why=why,
            parts=ModelParts(layerwise=LAYERWISE_MODEL),
        )


def _data_parallel(req: JobRequest, gpu: str, count: int,
                   result: dict) -> tuple[float, float, float, dict[str, Any]]:
    """(step s, low, high, details) of one data-parallel step from the per-device step, by
    the mechanism the request names (``data_parallel``), else the one ``auto`` means for its
    framework and stack (:func:`models.scaling.resolve_strategy`: PyTorch DDP's bucketed
    all-reduce behind the backward pass, TensorFlow 2's one all-reduce after it, TensorFlow
    1.x replicated variables only when the stack says 1.x); ``details["scaling"]`` names the
    mechanism and why it was chosen."""
    from fleet.data_parallel import MECHANISMS
    from models.scaling import data_parallel_step, resolve_strategy
    deployment = (Deployment.parse(req.deployment) if req.deployment
                  else Deployment(gpu, count))
    ic = deployment.interconnect()
    step1 = result["batch_seconds"] * 1000.0
    strategy = resolve_strategy(req.data_parallel, req.framework, req.stack)
    got = data_parallel_step(req.framework, step1, deployment, req.precision,
                             result.get("layers", []), strategy)
    factor = got.ms / step1
    asked = req.data_parallel not in (None, "auto")
    details = {"interconnect": ic.describe(), "assumed": list(ic.assumed),
               "allreduce_ms": got.allreduce_ms,
               "single_device_batch_seconds": result["batch_seconds"],
               "scaling": {"strategy": got.strategy, "mechanism": MECHANISMS[got.strategy],
                           "chosen": "asked (--data-parallel)" if asked else
                           f"auto for {parse_framework(req.framework).value}"
                           + (f" (stack {req.stack})" if req.stack else ""),
                           **got.details}}
    return (got.ms / 1000.0, result["low"] * factor * got.low_ms / got.ms,
            result["high"] * factor * got.high_ms / got.ms, details)


def calibrated_by(f: Forecast) -> dict[str, Any] | None:
    """The calibration a layerwise forecast was scaled by (``details["calibration"]``; its
    candidate kind is then ``layerwise-calibrated``), None for a plain one."""
    found = f.details.get("calibration")
    return found if isinstance(found, dict) else None


def calibrate(plain: Forecast, calibrator: ScaleCalibrator | None) -> Forecast:
    """A layerwise forecast scaled by its calibration factor; unchanged when none applies."""
    if calibrator is None or plain.route != LAYERWISE or calibrated_by(plain) is not None:
        return plain
    deployment = deployment_key(plain.details["device"], plain.details.get("devices", 1))
    scale = calibrator.scale_for(plain.job.network, deployment)
    if scale is None:
        return plain
    calibration = {
        "factor": scale.factor,
        "level": scale.level,
        "runs": scale.runs,
        "deployment": deployment,
        "hardware": deployment,  # the old name, for one release
    }
    return plain.scaled(
        scale.factor,
        model=f"{plain.model}+calibration/{scale.level}/{deployment}",
        details={**plain.details, "calibration": calibration},
    )


class ScaleCalibratedRoute(RegisteredRoute):
    """The layerwise route, scaled by observed runs where a factor applies."""

    route = LAYERWISE
    costly = True

    def __init__(self, layerwise: LayerwiseRoute, calibrator: ScaleCalibrator | None,
                 explain: Callable[[Ask], str] | None = None):
        """``explain(ask)`` says why history does not answer (kept as ``why_layerwise``)."""
        self.layerwise = layerwise
        self.calibrator = calibrator
        self.explain = explain

    def propose(self, ask: Ask) -> list[Candidate]:
        """The layerwise candidate, calibrated where a factor applies; :class:`RouteMiss` says
        why the job cannot be priced."""
        if ask.req.batch_size is None or not (ask.req.device or ask.req.deployment):
            return []
        why = self.explain(ask) if self.explain else "no history of this job"
        return [layerwise_candidate(ask, self.forecast(_phase_req(ask), why))]

    def forecast(self, req: JobRequest, why: str = "") -> Forecast:
        """Calibrated where a factor applies, else the plain layerwise forecast."""
        return calibrate(self.layerwise.forecast(req, why), self.calibrator)

    def has_own_runs(self, req: JobRequest) -> bool:
        """Whether this network's own runs on this hardware give a factor (cheap check)."""
        from models.scale_calibration import network_key
        if self.calibrator is None:
            return False
        try:
            device, count = device_for(req)
            deployment = deployment_key(resolve_gpu(device).name, count)
        except JobcastError:
            return False
        return (network_key(req.network), deployment) in self.calibrator.pairs_


# the deprecated name, for one release (fleet/deprecation.py)
__getattr__ = renamed_attributes(__name__, {"CalibratedRoute": "ScaleCalibratedRoute"})


if TYPE_CHECKING:
    from models.scale_calibration import ScaleCalibrator

__all__ = ["LayerwiseRoute", "NoLayerwiseForecast",
           "RouteMiss", "ScaleCalibratedRoute", "calibrate",
           "calibrated_by", "device_for", "layerwise_candidate"]
