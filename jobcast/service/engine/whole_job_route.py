"""The whole-job route: a recurring job's wall time from its own finished runs, as the
scheduler (Slurm) or the cluster (Kubernetes) recorded them, without per-step data.

Rules (:class:`WholeJobRoute.propose`):

* Only for a whole job (target ``job``) of a named system: the system is the job's key
  (``jobcast ingest --job-key``), the deployment as the store keys it.
* The answer is :func:`models.whole_job.whole_job_candidate` (level, trend over runs and the
  spread of past durations; ``docs/cluster-history.md``), one ``whole-job`` candidate with
  relation ``system`` ``own``; a job without finished runs there gives none.
* **Another GPU count** (``--gpus``, or a deployment of the job's GPU at a count it never
  ran): the job's runs at the nearest count, moved (:func:`moved_to`): a recurring job
  trains the same epochs at the same per-GPU batch, so its time goes as the GPUs' ratio, with
  :data:`LOSS_PER_DOUBLING` lost a doubling (MLPerf ResNet-50's per-GPU step grows 0-2 %
  a doubling, docs/lab/scaling.md) and a wider interval; ``batch`` relation ``other``,
  ``extrapolated``, and the reason says which part of the history still applies.
* **Its own backtest**: each of the job's newest :data:`OWN_ORIGINS` finished runs there
  forecast from at most :data:`OWN_HISTORY` finished runs before it (``models.whole_job.
  backtest``, at least two; :func:`recent_backtest`); the signed log errors go with the
  candidate, so the choice judges it by the job's own error and interval
  (``jobcast.service.engine.choice.Chooser.judge``) rather than a pooled cell. ``jobcast fit``
  backtests every job so.
* **Another length** (``--iterations`` / ``--epochs``): only where the job's finished runs
  on the deployment answered record their length in that unit (``jobcast ingest
  --iterations N``; :func:`to_length`): each run's wall time is put at their median length
  (time in proportion), the model fitted on those, and the answer scaled to the asked
  length, the interval widened by :data:`LENGTH_BAND` per e-fold; relation ``lengths``
  ``varied`` where the asked length is :data:`models.relation.LENGTH_SPREAD` from theirs.
  Runs that do not record it are an error saying how to record it, never the usual length
  answered as if it were the asked one.
* The job's whole-job runs are read once per forecaster and job
  (``Forecaster.job_runs``: one job's rows, never the whole store).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fleet.deployment import Deployment, canonical_key
from fleet.errors import JobcastError
from ingest.whole_job import normal_key
from jobcast.service.engine.candidates import Ask, Candidate, own_scale
from jobcast.service.engine.forecast import Forecast
from jobcast.service.engine.route_registry import WHOLE_JOB, WHOLE_JOB_KIND, RegisteredRoute
from models.relation import LENGTH_SPREAD, Relation, runs_bucket

LOSS_PER_DOUBLING = 0.01  # step time lost per doubling of the GPUs (docs/lab/scaling.md)
MOVE_BAND = 0.05  # log half-width added to a job moved to another GPU count
BAND_PER_DOUBLING = 0.05  # and per doubling moved
OWN_ORIGINS = 30  # the newest runs the job's own backtest forecasts
OWN_HISTORY = 60  # at most this many earlier runs behind each of those forecasts
LENGTH_BAND = 0.1  # log half-width added per e-fold of length scaled (start-up not scaled)


def _newest(runs: list[Any], key: str) -> float | None:
    """The newest start (unix s) of the job's whole-job runs, None when undated."""
    want = normal_key(key)
    times = [r.when for r in runs if getattr(r, "when", None) and normal_key(r.key) == want]
    return max(times) if times else None


class WholeJobRoute(RegisteredRoute):
    """A recurring job's next wall time from its finished runs (module rules)."""

    route = WHOLE_JOB
    costly = False

    def __init__(self, job_runs: Callable[[str], list[Any]]):
        self.job_runs = job_runs

    def propose(self, ask: Ask) -> list[Candidate]:
        """The whole-job candidate of a named system's recurring job on the asked deployment
        (module rules); none when the ask is not a whole job of a named system."""
        if ask.target != "job" or not ask.system or not ask.deployment:
            return []
        runs = self.job_runs(ask.system)
        if not runs:
            return []
        from models.whole_job import (
            WholeJobFit,
            WholeJobMiss,
            candidate_from,
            whole_job_candidate,
        )
        moved, source = "", ask.deployment
        fitted = WholeJobFit().fit(runs)
        try:
            found = candidate_from(fitted, ask.system, source)
        except WholeJobMiss:
            other = _other_count(runs, ask.deployment)
            if other is None:
                return []
            source = other
            found = candidate_from(fitted, ask.system, source)
        runs, factor, length_note = to_length(runs, ask.system, source, ask.req)
        if length_note:
            found = whole_job_candidate(runs, ask.system, source)
        if source != ask.deployment:
            found, moved = moved_to(found, source, ask.deployment)
        if length_note:
            found = scaled_to(found, factor, length_note)
        reason = f"whole-job: {found.reason}"
        f = Forecast(job=ask.req, seconds=found.seconds, low=found.low, high=found.high,
                     route=self.name, model=found.model, extrapolated=bool(moved),
                     details={"chosen": reason, "whole_job": found.to_dict(),
                              "evidence": {"runs": found.n_runs}}, why=reason)
        relation = Relation(kind=WHOLE_JOB_KIND, target="job", system="own",
                            batch="other" if moved else "same", variant="unstated",
                            stack="none", runs=runs_bucket(found.n_runs), gpu="exact",
                            age=ask.age(_newest(runs, ask.system)), devices=ask.devices,
                            lengths="varied" if max(factor, 1 / factor) >= LENGTH_SPREAD
                            else "same")
        errors = () if moved else own_errors(runs, found.key, found.deployment)
        return [Candidate(f, relation, own_scale(f.seconds, f.low, f.high), reason,
                          own_errors=errors,
                          own_cell=f"job {found.key}'s own runs on {found.deployment}")]


def asked_length(req: Any) -> tuple[str, float] | None:
    """The training length a request states: (``iterations``, n), else (``epochs``, n)."""
    if req.iterations is not None:
        return "iterations", float(req.iterations)
    if req.epochs is not None:
        return "epochs", float(req.epochs)
    return None


def to_length(runs: list[Any], key: str, deployment: str, req: Any
              ) -> tuple[list[Any], float, str]:
    """The job's runs with the finished ones on ``deployment`` put at their median recorded
    length, the factor to the asked length, and the note that says so (module rules); the
    runs as they are, 1.0 and "" when the request states no length. A
    :class:`models.whole_job.WholeJobMiss` where the runs do not record it in that unit."""
    from ingest.whole_job import all_runs, deployment_identity
    from models.whole_job import WholeJobMiss

    asked = asked_length(req)
    if asked is None:
        return list(runs), 1.0, ""
    runs = all_runs(runs)  # the median length of every run (the forecaster reads the newest)
    unit, count = asked
    want, where = normal_key(key), deployment_identity(deployment)
    mine = [r for r in runs if r.finished and r.seconds > 0 and normal_key(r.key) == want
            and deployment_identity(r.deployment) == where]
    lengths = [r.length[1] for r in mine if r.length and r.length[0] == unit]
    if not mine or len(lengths) < len(mine):
        raise WholeJobMiss(
            f"--{unit} {count:g}: {len(mine) - len(lengths)} of job {key}'s {len(mine)} "
            f"finished runs on {deployment} do not record their {unit}, so no answer can be "
            f"scaled to it: ingest its records with --{unit} N (the {unit} each run had), or "
            f"ask without --{unit} for the length its runs had")
    middle = sorted(lengths)[len(lengths) // 2]
    chosen = {id(r) for r in mine}
    put = [replace(r, seconds=r.seconds * middle / r.length[1])
           if id(r) in chosen and r.length[1] != middle else r for r in runs]
    note = (f"; its runs put at {middle:,} {unit} (wall time in proportion) and scaled to "
            f"the {count:,g} asked (start-up scaled too)")
    return put, count / middle, note


def scaled_to(found: Any, factor: float, note: str) -> Any:
    """``found`` scaled by ``factor`` (a length), its interval widened (module rules)."""
    band = math.exp(LENGTH_BAND * abs(math.log(factor)))
    return replace(found, seconds=found.seconds * factor, low=found.low * factor / band,
                   high=found.high * factor * band, reason=found.reason + note)


def _other_count(runs: list[Any], asked: str) -> str | None:
    """The deployment of the job's finished runs on the asked GPU at the nearest other
    count (in doublings; ties: the more runs), None when there is none."""
    try:
        want = Deployment.parse(asked)
    except JobcastError:
        return None
    from ingest.whole_job import finished_counts

    counts: dict[str, int] = {}
    for (_, stored), n in finished_counts(runs).items():  # of all its runs, read or not
        counts[stored] = counts.get(stored, 0) + n
    found = []
    for key, n in counts.items():
        try:
            dep = Deployment.parse(key)
        except JobcastError:
            continue
        if dep.slug == want.slug and dep.count != want.count:
            found.append((abs(math.log2(dep.count / want.count)), -n, key))
    return min(found)[2] if found else None


def moved_to(found: Any, source: str, asked: str) -> tuple[Any, str]:
    """The job's whole-job answer on ``source`` moved to the asked GPU count (module
    rules): time x source GPUs / asked GPUs, :data:`LOSS_PER_DOUBLING` lost per doubling,
    the interval widened by :data:`MOVE_BAND` and :data:`BAND_PER_DOUBLING` a doubling."""
    have, want = Deployment.parse(source).count, Deployment.parse(asked).count
    doublings = math.log2(want / have)
    factor = have / want * (1 + LOSS_PER_DOUBLING) ** doublings
    band = math.exp(MOVE_BAND + BAND_PER_DOUBLING * abs(doublings))
    note = (f"; its {have}-GPU runs moved to {want} GPUs: the same epochs at the same "
            f"per-GPU batch assumed, time x {have}/{want} with {100 * LOSS_PER_DOUBLING:g} % "
            "lost per doubling (MLPerf ResNet-50: 0-2 %, docs/lab/scaling.md)")
    moved = replace(found, seconds=found.seconds * factor, low=found.low * factor / band,
                    high=found.high * factor * band, reason=found.reason + note,
                    deployment=canonical_key(asked), model=f"{found.model}/moved-x{want}")
    return moved, note


def own_errors(runs: list[Any], key: str, deployment: str) -> tuple[float, ...]:
    """ln(actual / forecast) of the job's newest :data:`OWN_ORIGINS` finished runs on
    ``deployment``, each forecast from its finished runs before it (module rules)."""
    from ingest.whole_job import deployment_identity

    mine = [r for r in runs if normal_key(r.key) == key
            and deployment_identity(r.deployment) == deployment]
    return tuple(math.log(r["actual"] / r["forecast"]) for r in recent_backtest(mine))


def recent_backtest(runs: list[Any]) -> list[dict[str, Any]]:
    """``models.whole_job.backtest`` rows of each (job, deployment) of ``runs``, bounded: its
    newest :data:`OWN_ORIGINS` finished runs, each from at most :data:`OWN_HISTORY` runs
    before it; each row also has its ``when``, the history's newest ``last_when`` and the
    run's ``gpus``."""
    from ingest.whole_job import deployment_identity
    from models.whole_job import backtest

    groups: dict[tuple[str, str], list[Any]] = {}
    for r in runs:
        if r.finished and r.seconds > 0:
            groups.setdefault((normal_key(r.key), deployment_identity(r.deployment)),
                              []).append(r)
    out: list[dict[str, Any]] = []
    for members in groups.values():
        members.sort(key=lambda r: (r.when is None, r.when or 0.0))
        members = members[-(OWN_ORIGINS + OWN_HISTORY):]
        rows = backtest(members, min_history=max(2, len(members) - OWN_ORIGINS))
        first = len(members) - len(rows)
        for i, row in enumerate(rows):
            if row["actual"] > 0 and row["forecast"] > 0:
                out.append({**row, "when": members[first + i].when,
                            "last_when": members[first + i - 1].when,
                            "gpus": members[first + i].gpus})
    return out
