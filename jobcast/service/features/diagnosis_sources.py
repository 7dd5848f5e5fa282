"""Where ``jobcast check`` reads the job it checks: a sacct file, Prometheus, or a log.

Rules
-----
* **Slurm**: the job ``job_id`` (``123`` or an array task ``123_4``) of a ``sacct --json`` or
  ``--parsable2`` file; a running job's time so far is sacct's ``elapsed``, else ``now -
  start``. Its key is its name or the ``--job-key`` rule's.
* **Kubernetes**: the Job ``name`` (in ``namespace``) through Prometheus, running or ended
  (:func:`ingest.prometheus.kubernetes.fetch_k8s_jobs` with ``job_name``), with its DCGM trace.
* **Log**: any log format ``jobcast ingest`` reads (parsed, never stored): its last run's
  closed train phases, network, deployment (``--deployment`` where the log lacks it), batch
  size and planned steps (``epochs x steps_per_epoch`` where the log says).
* **Traces**: a DCGM-like JSON-lines file (:func:`ingest.prometheus.dcgm.read_trace_file`),
  or for a Slurm job the DCGM series of its nodes in Prometheus (``hostname`` labels), over
  the job's life; stored bounded like an ingested job's (:func:`trace_from_series`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from ingest.events import ParseError
from ingest.parsers import slurm
from ingest.prometheus.dcgm import fetch_trace, read_trace_file, trace_from_series
from ingest.whole_job import gpu_deployment, job_key
from jobcast.service.features.diagnosis import CheckError, Observed


def expand_hosts(text: str) -> list[str]:
    """Slurm host lists: ``ng[30103,30706-30707],cn-a1`` -> every host name."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text or ""):
        m = re.fullmatch(r"(.*?)\[([^\]]*)\](.*)", part)
        if not m:
            hosts.append(part)
            continue
        head, body, tail = m.groups()
        for item in body.split(","):
            lo, _, hi = item.partition("-")
            if hi and lo.isdigit() and hi.isdigit():
                hosts += [f"{head}{n:0{len(lo)}d}{tail}" for n in range(int(lo), int(hi) + 1)]
            else:
                hosts.append(f"{head}{item}{tail}")
    return [h for h in hosts if h]


def observe_slurm(path: str | Path, job_id: str, *, rule: str | None = None,
                  now: float | None = None) -> tuple[Observed, slurm.SlurmJob]:
    """The Slurm job ``job_id`` of a sacct file; CheckError when it is not there."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        jobs = slurm.read_jobs(lines)
    except OSError as exc:
        raise CheckError(f"{path}: cannot read: {exc.strerror or exc}", file=path) from None
    except ParseError as exc:
        raise CheckError(f"{path}:{exc.line or 1}: {exc.reason}", file=path,
                         line=exc.line or 1) from None
    found = [j for j in jobs if j.job_id == str(job_id)]
    if not found:
        ids = ", ".join(j.job_id for j in jobs[:8])
        raise CheckError(f"{path}: no job {job_id} (it holds {len(jobs)} jobs: {ids}"
                         f"{' ...' if len(jobs) > 8 else ''})", file=path)
    job = found[-1]
    seconds = job.seconds
    if job.state == "running" and (seconds is None or job.elapsed is None) and job.start:
        seconds = (time.time() if now is None else now) - job.start
    if seconds is None:
        raise CheckError(f"{path}: job {job_id} has no elapsed time and no start "
                         f"(state {job.state})", file=path)
    deployment, dep_key, notes = gpu_deployment(job.gpus, job.nodes, job.gpu_type)
    return Observed(
        source="slurm", job_id=job.job_id, state=job.state, seconds=seconds,
        key=job_key(job.name, job.extra.get("submit_line"), rule),
        deployment=deployment.key if deployment else dep_key, gpus=job.gpus,
        accelerator=deployment.accelerator if deployment else None, notes=notes), job


def observe_kubernetes(client, name: str, *, namespace: str | None = None,
                       lookback: float = 30 * 86400.0, now: float | None = None,
                       rule: str | None = None) -> Observed:
    """The Kubernetes Job ``name`` as Prometheus saw it, with its DCGM trace."""
    from ingest.prometheus.kubernetes import fetch_k8s_jobs

    until = time.time() if now is None else now
    fetched = fetch_k8s_jobs(client, until - lookback, until, namespace=namespace,
                             job_name=name, job_key_rule=rule)
    if fetched.rejected:
        raise CheckError(fetched.rejected[0].reason)
    if not fetched.runs:
        why = fetched.skipped[0]["reason"] if fetched.skipped else (
            "not found (is kube-state-metrics scraped, and the name and namespace right?)")
        raise CheckError(f"Job {name} at {client.url}: {why}")
    _, run = fetched.runs[-1]
    record: dict[str, Any] = dict(run.meta["whole_job"])  # type: ignore[call-overload]
    return Observed(
        source="kubernetes", job_id=record["job_id"], state=record["state"],
        seconds=record["seconds"], key=record["key"],
        deployment=run.stored_key(),
        gpus=record["gpus"], accelerator=run.deployment.accelerator if run.deployment else None,
        trace=_mapping(run.meta, "trace"), notes=_texts(run.meta, "warnings"))


def _mapping(meta: dict[str, object], name: str) -> dict | None:
    """``meta[name]`` when it is a dict (a trace), else None."""
    value = meta.get(name)
    return value if isinstance(value, dict) else None


def _texts(meta: dict[str, object], name: str) -> list[str]:
    """``meta[name]`` as a list of texts (a run's warnings), empty when absent."""
    value = meta.get(name)
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _number(meta: dict[str, object], name: str) -> float | None:
    """``meta[name]`` as a number, None when absent, zero or not a number."""
    value = meta.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float | str) or not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def observe_log(path: str | Path, *, network: str | None = None,
                deployment: str | None = None, batch_size: int | None = None,
                key: str | None = None) -> tuple[Observed, float | None, float | None]:
    """The last run of a training log: (observed, its first train start, its last end)."""
    from ingest.parsers import ParseOverrides, registered
    from ingest.pipeline import parse_data, read_file

    path = Path(path)
    try:
        data = read_file(str(path), path)
        parsed = parse_data(str(path), path, data, ParseOverrides(
            network=network, deployment=deployment, batch_size=batch_size), registered())
    except ParseError as exc:
        raise CheckError(str(exc), file=path, line=exc.line) from None
    run = parsed.runs[-1]
    train = [s for s in run.segments if s.phase == "train"]
    if not train:
        raise CheckError(f"{path}: no complete train phase in its last run", file=path)
    dep = run.stored_key()
    epochs, per_epoch = _number(run.meta, "epochs"), _number(run.meta, "steps_per_epoch")
    planned = epochs * per_epoch if epochs and per_epoch else None
    starts = [s.start_time for s in run.segments if s.start_time is not None]
    ends = [s.start_time + s.seconds for s in run.segments if s.start_time is not None]
    obs = Observed(
        source="log", job_id=str(path.name), state="running" if run.meta.get("truncated")
        else "completed", seconds=sum(s.seconds for s in train), key=key, deployment=dep,
        accelerator=run.deployment.accelerator if run.deployment else None,
        steps=sum(s.iterations for s in train), planned_steps=planned,
        network=run.network, batch_size=run.batch_size, stack=run.stack)
    return obs, (min(starts) if starts else run.start_time), (max(ends) if ends else None)


def attach_trace_file(obs: Observed, path: str | Path, start: float | None,
                      end: float | None) -> None:
    """Read a DCGM-like JSON-lines trace for the job's life into ``obs.trace``."""
    try:
        series = read_trace_file(path)
    except (OSError, ValueError) as exc:
        raise CheckError(f"--trace {path}: {exc}", file=path) from None
    obs.trace = trace_from_series(series, start, end)
    if obs.trace is None:
        obs.notes.append(f"--trace {path}: no busy, power or clock sample during the job")


def attach_slurm_trace(obs: Observed, client, job: slurm.SlurmJob,
                       now: float | None = None) -> None:
    """The DCGM series of a Slurm job's nodes in Prometheus over its life."""
    hosts = expand_hosts(job.extra.get("node_list", ""))
    if not hosts or job.start is None:
        obs.notes.append("no node list or start time: no DCGM trace asked for")
        return
    end = job.end or (time.time() if now is None else now)
    series = fetch_trace(client, job.start, end, hosts=hosts)
    obs.trace = trace_from_series(series, job.start, end)
    if obs.trace is None:
        obs.notes.append(f"no DCGM series of {', '.join(hosts[:4])} during the job")
