"""One answer per job: the whole job composed phase by phase, and the summary a person reads.

The forecaster (``jobcast.service.engine.forecaster``) chooses one candidate per request; for a
whole job (target ``job``) this module then composes the answer from the best source of each
phase, and every answer gets a :func:`summary`.

Rules (:func:`compose_job`):

* **Training, and the gaps between phases**, come from the chosen whole-job candidate: its
  training forecast, and the gaps as the runs behind it spent them (none for a layerwise
  answer, which has no runs behind it).
* **Evaluation**: a request that gives its evaluations (``eval_every``, ``eval_size`` and
  ``epochs``) has them priced by the forecaster's own choice among every route's test-phase
  candidates (history of the test phase, else layerwise forward passes), whatever answered
  the training. A request that does not give them keeps the evaluation its runs had (stated
  in the phase's source), or none for a layerwise answer (stated). Evaluations asked but
  priced by no route leave the other phases standing, with a warning that the total lacks
  them: a missing phase never throws away the history of another.
* **Interval**: each phase keeps its source's 90 % interval (training and gaps the chosen
  candidate's, relative); the job's bounds are the sums of the phases' bounds (the phases'
  errors are taken to move together, the cautious choice). A request without evaluations
  keeps the chosen candidate's total and interval unchanged.
* **One total**: ``seconds`` is the sum of ``phases`` (``train``, ``test``, ``gaps``); the
  start-up before the run (``init``, where logs state it) is never part of it and is given
  beside (``wall_with_init``). The layerwise route's own per-epoch totals are not echoed.
* A whole-job history without phases (a scheduler's record) answers the job as its past
  runs ran it; evaluations asked are then an assumption it states.

:func:`summary`: per training step, per epoch (the job over its epochs: an epoch with its
share of evaluation) and whole job, each with its interval; the GPU and precision the
answer resolved to; the route, the candidate and a one-line why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleet.deployment import Deployment
from fleet.errors import JobcastError
from fleet.framework import parse_framework_choice
from jobcast.service.engine.candidates import job_plan, phase_steps
from jobcast.service.engine.forecast import Forecast, ForecastFailure
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import history_kinds, prices_network
from models.variant import variant_dict

PHASES = ("train", "test", "gaps")


@dataclass(frozen=True)
class Part:
    """One phase of a job: seconds with a 90 % interval, its steps (where counted) and the
    source that priced it."""

    phase: str
    seconds: float
    low: float
    high: float
    source: str
    steps: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"phase", "seconds", "low", "high", "steps", "source"}``."""
        return {"phase": self.phase, "seconds": self.seconds, "low": self.low,
                "high": self.high, "steps": self.steps, "source": self.source}


def evaluations_asked(req: JobRequest) -> bool:
    """Whether the request gives evaluations to price (``eval_every``, ``eval_size``,
    ``epochs``, and at least one pass)."""
    if not (req.eval_every and req.eval_size and req.epochs and req.batch_size):
        return False
    return job_plan(req).test_iterations() > 0


def _train_steps(req: JobRequest) -> int | None:
    return phase_steps(replace(req, phase="train"))


def _evaluation_text(req: JobRequest) -> str:
    """``"N passes of S samples"``: the evaluations a request gives."""
    passes = job_plan(req).eval_passes()
    return f"{passes} pass{'es' * (passes != 1)} of {int(req.eval_size or 0):,} samples"


def compose_job(answer: Forecast, test: Forecast | ForecastFailure | None) -> Forecast:
    """The whole-job answer from the chosen candidate and the evaluations' own answer
    (``test``: None when the request gives no evaluations); module rules."""
    phases = answer.details.get("phases")
    if not isinstance(phases, Mapping):
        return _no_phases(answer, test)
    lf, hf = answer.low / answer.seconds, answer.high / answer.seconds
    kind = str(answer.details.get("candidate", answer.route))
    history = not str(answer.details.get("whole_job", "")).startswith("no runs")
    runs = "its runs' own"
    train = float(phases.get("train", answer.seconds))
    parts = [Part("train", train, train * lf, train * hf, kind, _train_steps(answer.job))]
    warnings: list[str] = []
    own_test = float(phases.get("test", 0.0))
    if test is None:
        source = (f"{runs} evaluation (not asked: give --eval-every and --eval-size to "
                  "price yours)"
                  if history else "none asked (training only)")
        parts.append(Part("test", own_test, own_test * lf, own_test * hf, source))
    elif isinstance(test, Forecast):
        t = test
        source = (f"{t.details.get('candidate', t.route)}: {_evaluation_text(answer.job)}, "
                  f"{t.details.get('pass', 'forward')} ({t.model})")
        parts.append(Part("test", t.seconds, t.low, t.high, source,
                          int(job_plan(answer.job).test_iterations())))
    else:
        warnings.append(f"evaluations asked but no route prices them ({test.error}): the "
                        "total is training and gaps only")
        parts.append(Part("test", 0.0, 0.0, 0.0, "not priced (see warnings)"))
    gaps = float(phases.get("gaps", 0.0))
    parts.append(Part("gaps", gaps, gaps * lf, gaps * hf,
                      f"{runs} gaps between phases" if history else "none known"))
    if test is None:
        seconds, low, high = answer.seconds, answer.low, answer.high
    else:
        seconds = sum(p.seconds for p in parts)
        low, high = sum(p.low for p in parts), sum(p.high for p in parts)
    return _with_parts(answer, parts, seconds, low, high, phases.get("init"), warnings)


def _with_parts(answer: Forecast, parts: list[Part], seconds: float, low: float, high: float,
                init: Any, warnings: list[str]) -> Forecast:
    """The answer with its phases, breakdown and total set (one total: module rules)."""
    phases: dict[str, float] = {p.phase: p.seconds for p in parts}
    extra: dict[str, Any] = {"phases": phases, "breakdown": [p.as_dict() for p in parts]}
    if isinstance(init, int | float) and math.isfinite(init):
        phases["init"] = float(init)
    extra["wall_with_init"] = seconds + phases.get("init", 0.0)
    if warnings:
        extra["warnings"] = list(answer.details.get("warnings", [])) + warnings
    return replace(answer, seconds=seconds, low=min(low, seconds), high=max(high, seconds),
                   details={**answer.details, **extra})


def _no_phases(answer: Forecast, test: Forecast | ForecastFailure | None) -> Forecast:
    """A whole-job answer without phases (a scheduler's record of whole runs)."""
    source = str(answer.details.get("candidate", answer.route))
    part = Part("job", answer.seconds, answer.low, answer.high,
                f"{source}: whole runs as they ran (no phases recorded)")
    warnings = ([f"evaluations asked ({_evaluation_text(answer.job)}): the whole-job history "
                 "has no phases, so they are taken as its past runs had them"]
                if test is not None else [])
    extra: dict[str, Any] = {"breakdown": [part.as_dict()]}
    if warnings:
        extra["warnings"] = list(answer.details.get("warnings", [])) + warnings
    return answer.with_details(**extra)


# -- the summary --------------------------------------------------------------------------


def _span(seconds: float, low: float, high: float) -> dict[str, float]:
    return {"seconds": seconds, "low": low, "high": high}


def _scaled(part: Mapping[str, float], by: float) -> dict[str, float]:
    return _span(part["seconds"] / by, part["low"] / by, part["high"] / by)


def _resolved(f: Forecast) -> dict[str, Any]:
    """The GPU, count and precision the answer resolved to."""
    d, req = f.details, f.job
    gpu, devices = d.get("device") or d.get("gpu"), d.get("devices")
    where = req.deployment or req.device or ""
    if gpu is None and req.deployment:
        try:
            parsed = Deployment.parse(req.deployment)
            gpu, devices = parsed.accelerator, parsed.count
        except JobcastError:
            gpu = req.deployment
    out: dict[str, Any] = {"gpu": gpu or where, "asked_as": where, "devices": devices or 1}
    as_run = d.get("precision_as_run")
    if isinstance(as_run, Mapping):
        out["precision"] = {"asked": as_run.get("request"), "assumed": as_run.get("assumed")}
    elif d.get("variant"):
        out["precision"] = {"asked": str(req.precision) if req.states_precision() else None,
                            "history": str(d.get("variant"))}
    else:
        out["precision"] = {"asked": str(req.precision) if req.states_precision() else None}
    return out


def unused_flags(f: Forecast, asked: JobRequest | None = None) -> list[str]:
    """What the request asked that the answering route cannot use, said as an assumption
    (never silently ignored): a stack or variant tags on a layerwise answer, an image size,
    optimizer or framework on a history answer (its runs ran their own). ``asked``: the
    request as the user gave it (default ``f.job``): a framework jobcast chose is not a flag
    the user gave."""
    req, out = f.job, []
    asked = asked or req
    layerwise = prices_network(f.details, str(f.route))
    if layerwise and req.stack:
        out.append(f"--stack {req.stack!r} names history, and none of it answers: the "
                   "layerwise answer prices the network, not a software stack")
    if layerwise and req.tags:
        out.append(f"--tag {req.tags!r} names history, and none of it answers: the "
                   "layerwise answer does not use it")
    if not layerwise and f.details.get("candidate") in history_kinds():
        if req.image_size is not None:
            out.append(f"--image-size {req.image_size}: the history answering ran its own "
                       "input size; only layerwise answers use it")
        if str(req.optimizer or "").lower() not in ("", "sgd", "none"):
            out.append(f"--optimizer {req.optimizer}: the history answering ran its own "
                       "optimizer; only layerwise answers use it")
        if parse_framework_choice(asked.framework) is not None:
            out.append(f"--framework {asked.framework}: the history answering ran its own "
                       "framework; only layerwise answers use it")
    return out


def as_trained(req: JobRequest, f: Forecast) -> JobRequest:
    """The request with the precision its answer trains at: the asked one, else the
    history's where the answer's runs state one (for the memory estimate)."""
    if req.states_precision():
        return req
    precision = variant_dict(str(f.details.get("variant") or "")).get("precision")
    return replace(req, precision=precision) if precision else req


def ran_this_batch(f: Forecast) -> bool:
    """Whether the history behind an answer ran the asked batch size on the asked hardware
    (a history candidate with batch relation ``same`` and an exact GPU match)."""
    relation = f.details.get("relation", {})
    return (f.details.get("candidate") in history_kinds() and relation.get("batch") == "same"
            and relation.get("gpu") == "exact")


def summary(f: Forecast, memory: Any = None) -> dict[str, Any]:
    """What a person reads first (module rules): step, epoch and job with intervals, what the
    answer resolved to, and why; ``memory``: the job's memory estimate, if any (``fits``)."""
    req = f.job
    whole = _span(f.seconds, f.low, f.high)
    train = next((p for p in f.details.get("breakdown", []) if p["phase"] == "train"), None)
    steps = _train_steps(req) if req.phase != "test" else phase_steps(req)
    base = train if train is not None else whole
    step = _scaled(base, steps) if steps else None
    epoch = _scaled(whole, float(req.epochs)) if req.epochs else None
    backtest = f.details.get("backtest", {})
    return {
        "step": step, "epoch": epoch, "job": whole, "unit": f.unit,
        "steps": steps, "phase": req.phase, **_resolved(f),
        "route": str(f.route), "candidate": f.details.get("candidate"),
        "expected_error_percent": backtest.get("expected_error_percent"),
        "why": f.details.get("why", ""),
        "fits": None if memory is None else bool(memory.fits),
        "memory": None if memory is None else memory.summary(),
    }


__all__ = ["PHASES", "Part", "as_trained", "compose_job", "evaluations_asked", "ran_this_batch",
           "summary", "unused_flags"]
