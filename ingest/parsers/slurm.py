"""Slurm accounting: ``sacct --json`` and ``sacct --parsable2`` -> whole-job runs.

Rules
-----
* ``sacct --json`` in both number shapes: before Slurm 23.11 numbers are bare (``"task_id":
  100``, ``"state": {"current": "FAILED"}``); from 23.11 (data_parser v0.0.40 on) many are
  ``{"set": bool, "infinite": bool, "number": n}`` and states are lists (``["COMPLETED"]``).
  :func:`number` reads both: an unset or infinite number is None. Times of 0 are unset.
* ``sacct --parsable2`` (or ``--parsable``) text with its header line: ``JobID`` and
  ``State`` are required, and the duration from ``Elapsed``/``ElapsedRaw`` or ``Start`` and
  ``End``; also read: ``JobName``, ``Submit``, ``AllocTRES``, ``NNodes``/``AllocNodes``,
  ``NodeList``, ``SubmitLine``, ``Cluster``, ``Partition``. Times without a zone are read as
  UTC (set ``SLURM_TIME_FORMAT=%s`` for exact ones). Step rows (``123.batch``, ``123.0``)
  and pending array ranges (``123_[1-9]``) are skipped.
* Per job: name, array job and task, state, submit/start/end, elapsed, GPUs from the
  allocated TRES (``gres`` ``gpu``, with the site's type from ``gpu:a100`` where named; the
  untyped total wins over the typed entries' sum), nodes. The job becomes a whole-job run
  (:mod:`ingest.whole_job`): completed jobs are finished; failed, cancelled, timed-out,
  preempted, requeued, out-of-memory, node-fail ... jobs are stored with their state and
  never fitted; running, pending and suspended jobs are skipped (they are not history yet;
  ``jobcast check`` reads them with :func:`read_jobs`). A file with no ended job is an error.
* Any job with an unreadable value rejects the file with the job's line and the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ingest.events import ParseContext, ParsedRun, ParseError, short_repr
from ingest.validate import loads
from ingest.whole_job import MAX_TEXT, gpu_deployment, job_key, whole_job_run

FORMAT = "slurm"
LABEL = "Slurm sacct (--json or --parsable2)"
NOT_HISTORY = ("running", "pending", "suspended")

_STATE_WORDS = {"CANCELLED": "cancelled", "COMPLETED": "completed", "FAILED": "failed",
                "TIMEOUT": "timeout", "PREEMPTED": "preempted", "NODE_FAIL": "node_fail",
                "OUT_OF_MEMORY": "out_of_memory", "BOOT_FAIL": "boot_fail",
                "DEADLINE": "deadline", "REQUEUED": "requeued", "REVOKED": "revoked",
                "SUSPENDED": "suspended", "RUNNING": "running", "PENDING": "pending",
                "RESIZING": "running", "COMPLETING": "running", "REQUEUE_HOLD": "requeued",
                "REQUEUE_FED": "requeued", "SPECIAL_EXIT": "failed", "STOPPED": "suspended"}
_ELAPSED = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")


def sniff(head: list[str]) -> bool:
    """A sacct JSON document (``"jobs"`` plus Slurm's own keys), or a parsable header."""
    text = "\n".join(head).lstrip()
    if text.startswith("{"):
        return '"jobs"' in text and ('"allocation_nodes"' in text or '"slurm"' in text.lower()
                                     and '"release"' in text)
    first = next((line for line in head if line.strip()), "")
    fields = {f.strip().lower() for f in first.split("|")}
    return "|" in first and {"jobid", "state"} <= fields


@dataclass
class SlurmJob:
    """One job as sacct reports it (the allocation, not its steps)."""

    job_id: str
    name: str
    state: str
    line: int
    submit: float | None = None
    start: float | None = None
    end: float | None = None
    elapsed: float | None = None
    gpus: int = 0
    gpu_type: str | None = None
    nodes: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float | None:
        """Wall time: ``elapsed`` where sacct gives it, else end - start."""
        if self.elapsed is not None:
            return self.elapsed
        if self.start is not None and self.end is not None:
            return max(0.0, self.end - self.start)
        return None


def number(value: object) -> float | None:
    """A sacct number in either shape (bare, or ``{"set","infinite","number"}``)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, int | float):
        raise ValueError(f"not a number: {short_repr(value)}")
    return float(value)


def state_of(value: object) -> str:
    """A job state (``"CANCELLED by 123"``, ``["COMPLETED"]``) as one of whole_job.STATES."""
    if isinstance(value, list):
        value = value[0] if value else ""
    word = str(value or "").strip().split(" ")[0].upper().rstrip("+")
    if word not in _STATE_WORDS:
        raise ValueError(f"unknown job state {short_repr(value)}")
    return _STATE_WORDS[word]


def _when(value: float | None) -> float | None:
    return value if value else None


def _gpus_from_tres(entries: Iterable[tuple[str, str, float | None]]
                    ) -> tuple[int, str | None]:
    """(GPUs, type) from (type, name, count) TRES entries: the untyped ``gres/gpu`` total,
    else the sum of typed ones; the type where exactly one is named."""
    total: int | None = None
    typed: dict[str, int] = {}
    for kind, name, count in entries:
        if kind != "gres" or not (name == "gpu" or name.startswith("gpu:")):
            continue
        if count is None or count < 0 or count != int(count):
            raise ValueError(f"GPU count {count!r} in the allocated TRES")
        if name == "gpu":
            total = int(count)
        else:
            typed[name.split(":", 1)[1]] = typed.get(name.split(":", 1)[1], 0) + int(count)
    gpus = total if total is not None else sum(typed.values())
    gpu_type = next(iter(typed)) if len(typed) == 1 else None
    return gpus, gpu_type


def _job_lines(text: str) -> list[int]:
    """Line numbers of the job-level ``"job_id"`` keys, in order (for error messages)."""
    out, line = [], 1
    for m in re.finditer(r'\n|"job_id"\s*:\s*\d', text):
        if m.group(0) == "\n":
            line += 1
        else:
            out.append(line)
    return out


def _json_jobs(text: str) -> list[SlurmJob]:
    try:
        doc = loads(text)
    except ValueError as exc:
        raise ParseError(f"not JSON: {exc}", line=getattr(exc, "lineno", 1)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ParseError('no "jobs" list: not sacct --json output', line=1)
    lines = _job_lines(text)
    jobs, seen = [], 0
    for index, job in enumerate(doc["jobs"]):
        # the line of the job's first "job_id" key (its array's, near the job's start)
        line = lines[min(seen, len(lines) - 1)] if lines else 1
        seen += len(re.findall(r'"job_id"\s*:\s*\d', json.dumps(job)))
        try:
            jobs.append(_json_job(job, line))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ParseError(f"job {index + 1}: {exc}", line=line) from None
    return jobs


def _json_job(job: dict, line: int) -> SlurmJob:
    if not isinstance(job, dict):
        raise ValueError("a job is not an object")
    job_id = number(job.get("job_id"))
    if job_id is None:
        raise ValueError("no job_id")
    array = job.get("array") or {}
    array_job, task = number(array.get("job_id")), number(array.get("task_id"))
    ident = f"{int(array_job)}_{int(task)}" if array_job and task is not None else str(
        int(job_id))
    times = job.get("time") or {}
    tres = (job.get("tres") or {}).get("allocated") or []
    gpus, gpu_type = _gpus_from_tres(
        (str(t.get("type") or ""), str(t.get("name") or ""), number(t.get("count")))
        for t in tres)
    nodes = number(job.get("allocation_nodes"))
    state = (job.get("state") or {}).get("current")
    extra: dict[str, object] = {k: v for k, v in (("cluster", job.get("cluster")),
                               ("partition", job.get("partition")),
                               ("node_list", job.get("nodes")),
                               ("submit_line", job.get("submit_line")))
             if isinstance(v, str) and v}
    if array_job:
        extra["array_job"], extra["array_task"] = int(array_job), (
            int(task) if task is not None else None)
    return SlurmJob(
        job_id=ident, name=str(job.get("name") or ""), state=state_of(state), line=line,
        submit=_when(number(times.get("submission"))), start=_when(number(times.get("start"))),
        end=_when(number(times.get("end"))), elapsed=number(times.get("elapsed")),
        gpus=gpus, gpu_type=gpu_type, nodes=int(nodes) if nodes else 1, extra=extra)


def parse_elapsed(text: str) -> float:
    """``[D-][HH:]MM:SS`` -> seconds."""
    m = _ELAPSED.fullmatch(text.strip())
    if not m:
        raise ValueError(f"elapsed {short_repr(text)} is not [D-][HH:]MM:SS")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_when(text: str) -> float | None:
    """A sacct time: ISO 8601 (UTC when it has no zone), unix seconds, or unset."""
    text = text.strip()
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return _when(float(text))
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"time {short_repr(text)} is not ISO 8601 or unix seconds") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _tres_text(text: str) -> tuple[int, str | None, int | None]:
    """(GPUs, type, nodes) from ``billing=8,cpu=8,gres/gpu:a100=1,gres/gpu=1,node=1``."""
    entries, nodes = [], None
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name == "node":
            nodes = int(value)
        elif name.startswith("gres/"):
            entries.append(("gres", name[len("gres/"):], float(value)))
    gpus, gpu_type = _gpus_from_tres(entries)
    return gpus, gpu_type, nodes


def _text_jobs(lines: list[str]) -> list[SlurmJob]:
    header_at = next(i for i, line in enumerate(lines) if line.strip())
    names = [f.strip().lower() for f in lines[header_at].rstrip("\n").split("|")]
    if names and names[-1] == "":
        names = names[:-1]  # --parsable ends each line with "|"
    col = {name: i for i, name in enumerate(names)}
    if "elapsed" not in col and "elapsedraw" not in col and not {"start", "end"} <= set(col):
        raise ParseError("the header has neither Elapsed nor Start and End: run sacct with "
                         "--format=JobID,JobName,State,Submit,Start,End,Elapsed,AllocTRES,"
                         "NNodes,NodeList", line=header_at + 1)
    jobs = []
    for number_, raw in enumerate(lines[header_at + 1:], start=header_at + 2):
        if not raw.strip():
            continue
        cells = raw.rstrip("\n").split("|")
        if len(cells) < len(names):
            raise ParseError(f"{len(cells)} fields, the header names {len(names)}",
                             line=number_)

        def get(name: str, cells=cells) -> str:
            return cells[col[name]].strip() if name in col else ""

        ident = get("jobid") or get("jobidraw")
        if "." in ident or "[" in ident or not ident:
            continue  # a step of a job, or a pending array range
        try:
            jobs.append(_text_job(get, ident, number_))
        except (ValueError, StopIteration) as exc:
            raise ParseError(f"job {ident}: {exc}", line=number_) from None
    return jobs


def _text_job(get, ident: str, line: int) -> SlurmJob:
    gpus, gpu_type, tres_nodes = _tres_text(get("alloctres"))
    nodes_text = get("nnodes") or get("allocnodes")
    elapsed = (float(get("elapsedraw")) if get("elapsedraw")
               else parse_elapsed(get("elapsed")) if get("elapsed") else None)
    extra: dict[str, object] = {k: get(c) for k, c in (("cluster", "cluster"),
                                                       ("partition", "partition"),
                                                       ("node_list", "nodelist"),
                                                       ("submit_line", "submitline"))
                                if get(c) and get(c) not in ("None assigned", "Unknown")}
    if "_" in ident:
        array_job, task = ident.split("_", 1)
        extra["array_job"], extra["array_task"] = int(array_job), int(task)
    return SlurmJob(
        job_id=ident, name=get("jobname"), state=state_of(get("state")), line=line,
        submit=parse_when(get("submit")), start=parse_when(get("start")),
        end=parse_when(get("end")), elapsed=elapsed, gpus=gpus, gpu_type=gpu_type,
        nodes=int(nodes_text) if nodes_text else (tres_nodes or 1), extra=extra)


def read_jobs(lines: list[str]) -> list[SlurmJob]:
    """Every job of a sacct file (running and pending ones included), in file order."""
    text = "\n".join(lines)
    if text.lstrip().startswith("{"):
        return _json_jobs(text)
    if not any(line.strip() for line in lines):
        raise ParseError("empty file", line=1)
    return _text_jobs(lines)


def to_run(job: SlurmJob, ctx: ParseContext) -> ParsedRun:
    """The whole-job run of an ended ``job`` (rules in the module doc)."""
    seconds = job.seconds
    if seconds is None:
        raise ParseError(f"job {job.job_id}: no elapsed time and no start and end",
                         line=job.line)
    if not job.name:
        raise ParseError(f"job {job.job_id}: no job name", line=job.line)
    deployment, deployment_key, notes = gpu_deployment(job.gpus, job.nodes, job.gpu_type)
    submit_line = job.extra.get("submit_line")
    record = {"scheduler": "slurm", "job_id": job.job_id, "name": job.name,
              "key": job_key(job.name, submit_line), "state": job.state, "seconds": seconds,
              "submit": job.submit, "start": job.start, "end": job.end, "gpus": job.gpus,
              "gpu_type": job.gpu_type, "nodes": job.nodes}
    record.update({k: (v[:MAX_TEXT] if isinstance(v, str) else v)
                   for k, v in job.extra.items()})
    run = whole_job_run(FORMAT, record, deployment=deployment, deployment_key=deployment_key,
                        notes=notes)
    run.first_line = run.last_line = job.line
    return run


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """The ended jobs of a sacct file as whole-job runs (module doc)."""
    jobs = read_jobs(list(lines))
    ended = [job for job in jobs if job.state not in NOT_HISTORY]
    if not ended:
        waiting = sorted({job.state for job in jobs})
        raise ParseError(f"no ended job in the file ({len(jobs)} jobs"
                         + (f", all {'/'.join(waiting)}" if waiting else "")
                         + "): ingest it after they end, or ask `jobcast check`", line=1)
    return [to_run(job, ctx) for job in ended]
