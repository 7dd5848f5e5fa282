"""Slurm accounting: ``sacct --json`` and ``sacct --parsable2`` -> whole-job runs.

Rules
-----
* ``sacct --json`` in both number shapes: before Slurm 23.11 numbers are bare (``"task_id":
  100``, ``"state": {"current": "FAILED"}``); from 23.11 (data_parser v0.0.40 on) many are
  ``{"set": bool, "infinite": bool, "number": n}`` and states are lists (``["COMPLETED"]``).
  :func:`number` reads both: an unset or infinite number is None; a number that is not
  finite (``Infinity``, ``1e999``) is an error. A time of 0, or one of Slurm's "no value"
  markers (``4294967294`` = NO_VAL, ``4294967295`` = INFINITE and their 64-bit forms), is
  unset (:func:`slurm_time`).
* ``sacct --parsable2`` (or ``--parsable``) text with its header line: ``JobID`` and
  ``State`` are required, and the duration from ``Elapsed``/``ElapsedRaw`` or ``Start`` and
  ``End``; also read: ``JobName``, ``Submit``, ``AllocTRES``, ``NNodes``/``AllocNodes``,
  ``NodeList``, ``SubmitLine``, ``Cluster``, ``Partition``. Times without a zone are read as
  UTC (set ``SLURM_TIME_FORMAT=%s`` for exact ones). Step rows (``123.batch``, ``123.0``)
  and pending array ranges (``123_[1-9]``) are skipped.
* Per job: name, array job and task, state, submit/start/end, elapsed, GPUs from the
  allocated TRES (``gres`` ``gpu``, with the site's type from ``gpu:a100`` where named; the
  untyped total wins over the typed entries' sum), nodes. The wall time is End - Start
  where both are known (a failed, cancelled or timed-out job keeps its real time), else the
  elapsed time; an elapsed time that differs from End - Start by more than
  :data:`ELAPSED_SLACK_S` is a warning naming the job and both values.
* The job becomes a whole-job run (:mod:`ingest.whole_job`) with its identity
  ``slurm:<cluster>:<job id>`` (``ident``; :mod:`ingest.job_identity` stores a job once
  whatever file holds it): completed jobs are finished; failed, cancelled, timed-out, preempted,
  requeued, out-of-memory, node-fail ... jobs are stored with their state and never fitted;
  running, pending and suspended jobs are skipped (they are not history yet; ``jobcast
  check`` reads them with :func:`read_jobs`). A job that ended without starting (no start,
  and no elapsed time: cancelled while pending) is skipped with a warning naming it (on the
  file's first run). A file with no job that ran is an error.
* Any job with an unreadable value (not a number, not finite, out of range, the wrong kind
  of value, JSON nested too deep) rejects the file with the job's line and the reason in
  words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ingest.events import ParseContext, ParsedRun, ParseError, short_repr
from ingest.job_identity import job_identity
from ingest.validate import loads
from ingest.whole_job import MAX_TEXT, gpu_deployment, job_key, whole_job_run

FORMAT = "slurm"
LABEL = "Slurm sacct (--json or --parsable2)"
NOT_HISTORY = ("running", "pending", "suspended")
NO_VAL, INFINITE = 0xFFFFFFFE, 0xFFFFFFFF  # Slurm's "no value" and "infinite" (uint32)
UNSET_TIMES = frozenset(float(v) for v in (0, NO_VAL, INFINITE, 2**64 - 2, 2**64 - 1))
MAX_JOB_ID = 2**32  # job ids and array task ids are 32-bit
MAX_NODES = 1_000_000
ELAPSED_SLACK_S = 1.0
MAX_NAMED_JOBS = 10  # never-started jobs named one by one, then counted

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
    start_text: str = ""  # the start as sacct wrote it where it is unset ("4294967294")

    @property
    def seconds(self) -> float | None:
        """Wall time: End - Start where both are known, else sacct's elapsed time."""
        if self.start is not None and self.end is not None:
            return self.end - self.start
        return self.elapsed

    @property
    def never_started(self) -> bool:
        """Whether the job ended without running: no start and no elapsed time."""
        return self.start is None and not self.elapsed

    def elapsed_conflict(self) -> str | None:
        """A warning where sacct's elapsed time contradicts End - Start, else None."""
        span = self.seconds if self.start is not None and self.end is not None else None
        if span is None or self.elapsed is None or abs(self.elapsed - span) <= ELAPSED_SLACK_S:
            return None
        return (f"job {self.job_id}: sacct's elapsed time {self.elapsed:g} s contradicts End - "
                f"Start = {span:g} s; stored End - Start")


def number(value: object) -> float | None:
    """A sacct number in either shape (bare, or ``{"set","infinite","number"}``); None when
    unset or infinite; ValueError in words for anything else that is not a finite number."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, int | float):
        raise ValueError(f"not a number: {short_repr(value)}")
    try:
        out = float(value)
    except OverflowError:  # an integer beyond any float
        raise ValueError(f"not a finite number: {short_repr(value)}") from None
    if not math.isfinite(out):
        raise ValueError(f"not a finite number: {short_repr(value)}")
    return out


def _field(value: object, what: str) -> float | None:
    """:func:`number` with the field named in its error."""
    try:
        return number(value)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _whole(value: float | None, what: str, high: float) -> int | None:
    """A count or id: a whole number in 0 .. ``high`` (None stays None)."""
    if value is None:
        return None
    if not (0 <= value <= high and float(value).is_integer()):
        raise ValueError(f"{what} {value:g} is not a whole number in 0 .. {high:,.0f}")
    return int(value)


def slurm_time(value: float | None) -> float | None:
    """A sacct time: None where unset (0, NO_VAL, INFINITE: :data:`UNSET_TIMES`)."""
    return None if value is None or value in UNSET_TIMES else value


def _start_text(value: object) -> str:
    """How an unset start reads in a message: ``4294967294 (Slurm's 'no value')``, ``0``."""
    if value is None:
        return "missing"
    raw = number(value)
    if raw is None:
        return "unset"
    meaning = "Slurm's 'infinite'" if raw in (INFINITE, 2**64 - 1) else "Slurm's 'no value'"
    return f"{raw:.0f}" + (f" ({meaning})" if raw else "")


def state_of(value: object) -> str:
    """A job state (``"CANCELLED by 123"``, ``["COMPLETED"]``) as one of whole_job.STATES."""
    if isinstance(value, list):
        value = value[0] if value else ""
    word = str(value or "").strip().split(" ")[0].upper().rstrip("+")
    if word not in _STATE_WORDS:
        raise ValueError(f"unknown job state {short_repr(value)}")
    return _STATE_WORDS[word]


def _gpus_from_tres(entries: Iterable[tuple[str, float | None]]) -> tuple[int, str | None]:
    """(GPUs, type) from the (name, count) ``gres`` entries: the untyped ``gres/gpu`` total,
    else the sum of typed ones; the type where exactly one is named."""
    total: int | None = None
    typed: dict[str, int] = {}
    for name, count in entries:
        if not (name == "gpu" or name.startswith("gpu:")):
            continue
        if count is None or not math.isfinite(count) or count < 0 or not count.is_integer() \
                or count > 1e9:
            raise ValueError(f"GPU count {count!r} in the allocated TRES ({name}) is not a "
                             "whole number of GPUs")
        if name == "gpu":
            total = int(count)
        else:
            kind = name.split(":", 1)[1]
            typed[kind] = typed.get(kind, 0) + int(count)
    gpus = total if total is not None else sum(typed.values())
    gpu_type = next(iter(typed)) if len(typed) == 1 else None
    return gpus, gpu_type


def _job_id_count(value: object) -> int:
    """How many job-level-looking ``"job_id": <number>`` keys ``value`` holds (walked without
    recursion, so deep nesting cannot overflow the stack)."""
    count, todo = 0, [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                if key == "job_id" and isinstance(sub, int | float) and not isinstance(
                        sub, bool) and sub >= 0:
                    count += 1
                todo.append(sub)
        elif isinstance(item, list):
            todo.extend(item)
    return count


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
    except RecursionError:
        raise ParseError("the JSON nests deeper than a reader can follow: not sacct output",
                         line=1) from None
    except ValueError as exc:  # json.JSONDecodeError: its message without the position
        raise ParseError(f"not JSON: {getattr(exc, 'msg', exc)} (column "
                         f"{getattr(exc, 'colno', 1)})", line=getattr(exc, "lineno", 1)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ParseError('no "jobs" list: not sacct --json output', line=1)
    lines = _job_lines(text)
    jobs, seen = [], 0
    for index, job in enumerate(doc["jobs"]):
        # the line of the job's first "job_id" key (its array's, near the job's start)
        line = lines[min(seen, len(lines) - 1)] if lines else 1
        seen += _job_id_count(job)
        name = f"job {index + 1}" + (f" (JobID {job['job_id']})" if isinstance(job, dict)
                                     and isinstance(job.get("job_id"), int) else "")
        try:
            jobs.append(_json_job(job, line))
        except ValueError as exc:
            raise ParseError(f"{name}: {exc}", line=line) from None
        except (KeyError, TypeError, AttributeError, OverflowError, RecursionError):
            raise ParseError(f"{name}: a field holds a value of the wrong kind (not sacct "
                             "output)", line=line) from None
    return jobs


def _obj(value: object, what: str) -> dict:
    """``value`` where it is a JSON object (None and absent: empty); ValueError otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} is {short_repr(value)}, not an object")
    return value


def _json_gres(tres: object) -> list[tuple[str, float | None]]:
    """(name, count) of the ``gres`` entries of ``tres.allocated``."""
    allocated = _obj(tres, "tres").get("allocated") or []
    if not isinstance(allocated, list):
        raise ValueError(f"tres.allocated is {short_repr(allocated)}, not a list")
    out = []
    for entry in allocated:
        entry = _obj(entry, "a tres.allocated entry")
        name = str(entry.get("name") or "")
        if entry.get("type") == "gres" and (name == "gpu" or name.startswith("gpu:")):
            out.append((name, _field(entry.get("count"), f"TRES gres/{name} count")))
    return out


def _json_job(job: object, line: int) -> SlurmJob:
    job = _obj(job, "the job")
    job_id = _whole(_field(job.get("job_id"), "job_id"), "job_id", MAX_JOB_ID)
    if job_id is None:
        raise ValueError("no job_id")
    array = _obj(job.get("array"), "array")
    array_job = _whole(_field(array.get("job_id"), "array.job_id"), "array.job_id", MAX_JOB_ID)
    task = _whole(_field(array.get("task_id"), "array.task_id"), "array.task_id", MAX_JOB_ID)
    ident = f"{array_job}_{task}" if array_job and task is not None else str(job_id)
    times = _obj(job.get("time"), "time")
    when = {k: slurm_time(_field(times.get(k), f"time.{k}")) for k in ("submission", "start",
                                                                       "end")}
    gpus, gpu_type = _gpus_from_tres(_json_gres(job.get("tres")))
    nodes = _whole(_field(job.get("allocation_nodes"), "allocation_nodes"), "allocation_nodes",
                   MAX_NODES)
    state = _obj(job.get("state"), "state").get("current")
    extra: dict[str, object] = {k: v for k, v in (("cluster", job.get("cluster")),
                               ("partition", job.get("partition")),
                               ("node_list", job.get("nodes")),
                               ("submit_line", job.get("submit_line")))
                                if isinstance(v, str) and v}
    if array_job:
        extra["array_job"], extra["array_task"] = array_job, task
    return SlurmJob(
        job_id=ident, name=str(job.get("name") or ""), state=state_of(state), line=line,
        submit=when["submission"], start=when["start"], end=when["end"],
        elapsed=_field(times.get("elapsed"), "time.elapsed"), gpus=gpus, gpu_type=gpu_type,
        nodes=nodes or 1, extra=extra,
        start_text="" if when["start"] is not None else _start_text(times.get("start")))


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
        return slurm_time(float(text))
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"time {short_repr(text)} is not ISO 8601 or unix seconds") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def _text_number(text: str, what: str) -> float:
    """A finite number written as text; ValueError in words otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} {short_repr(text)} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} {short_repr(text)} is not a finite number")
    return value


def _tres_text(text: str) -> tuple[int, str | None, int | None]:
    """(GPUs, type, nodes) from ``billing=8,cpu=8,gres/gpu:a100=1,gres/gpu=1,node=1``."""
    entries, nodes = [], None
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name == "node":
            nodes = _whole(_text_number(value, "AllocTRES node"), "AllocTRES node", MAX_NODES)
        elif name.startswith("gres/gpu"):
            entries.append((name[len("gres/"):], _text_number(value, f"AllocTRES {name}")))
    gpus, gpu_type = _gpus_from_tres(entries)
    return gpus, gpu_type, nodes


_TEXT_FORMAT = ("JobID,JobName,State,Submit,Start,End,Elapsed,AllocTRES,NNodes,NodeList,"
                "Cluster,SubmitLine")


def _text_jobs(lines: list[str]) -> list[SlurmJob]:
    header_at = next(i for i, line in enumerate(lines) if line.strip())
    names = [f.strip().lower() for f in lines[header_at].rstrip("\n").split("|")]
    if names and names[-1] == "":
        names = names[:-1]  # --parsable ends each line with "|"
    col = {name: i for i, name in enumerate(names)}
    if "elapsed" not in col and "elapsedraw" not in col and not {"start", "end"} <= set(col):
        raise ParseError("the header has neither Elapsed nor Start and End: run sacct with "
                         f"--format={_TEXT_FORMAT}", line=header_at + 1)
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
        except ValueError as exc:
            raise ParseError(f"job {ident}: {exc}", line=number_) from None
    return jobs


def _text_ident(ident: str) -> tuple[int | None, int | None]:
    """(array job, task) of ``123_4``; (None, None) for a plain ``123``; ValueError else."""
    m = re.fullmatch(r"(\d{1,10})(?:_(\d{1,10}))?", ident, re.ASCII)
    if not m or any(int(g) > MAX_JOB_ID for g in m.groups() if g):
        raise ValueError(f"JobID {short_repr(ident)} is not a job id (123 or 123_4)")
    return (int(m[1]), int(m[2])) if m[2] else (None, None)


def _text_job(get: Callable[[str], str], ident: str, line: int) -> SlurmJob:
    array_job, task = _text_ident(ident)
    gpus, gpu_type, tres_nodes = _tres_text(get("alloctres"))
    nodes_text = get("nnodes") or get("allocnodes")
    nodes = _whole(_text_number(nodes_text, "NNodes"), "NNodes", MAX_NODES) if nodes_text \
        else tres_nodes
    elapsed = (_text_number(get("elapsedraw"), "ElapsedRaw") if get("elapsedraw")
               else parse_elapsed(get("elapsed")) if get("elapsed") else None)
    extra: dict[str, object] = {k: get(c) for k, c in (("cluster", "cluster"),
                                                       ("partition", "partition"),
                                                       ("node_list", "nodelist"),
                                                       ("submit_line", "submitline"))
                                if get(c) and get(c) not in ("None assigned", "Unknown")}
    if array_job is not None:
        extra["array_job"], extra["array_task"] = array_job, task
    start = parse_when(get("start"))
    return SlurmJob(
        job_id=ident, name=get("jobname"), state=state_of(get("state")), line=line,
        submit=parse_when(get("submit")), start=start, end=parse_when(get("end")),
        elapsed=elapsed, gpus=gpus, gpu_type=gpu_type, nodes=nodes or 1, extra=extra,
        start_text="" if start is not None else (short_repr(get("start")) if get("start")
                                                 else "missing"))


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
    try:
        deployment, deployment_key, notes = gpu_deployment(job.gpus, job.nodes, job.gpu_type)
    except ValueError as exc:  # the site's GPU alias file has a bad line
        raise ParseError(f"job {job.job_id}: {exc}", line=job.line) from None
    conflict = job.elapsed_conflict()
    submit_line = job.extra.get("submit_line")
    record = {"scheduler": "slurm", "job_id": job.job_id, "name": job.name,
              "key": job_key(job.name, submit_line), "state": job.state, "seconds": seconds,
              "submit": job.submit, "start": job.start, "end": job.end, "gpus": job.gpus,
              "gpu_type": job.gpu_type, "nodes": job.nodes}
    record.update({k: (v[:MAX_TEXT] if isinstance(v, str) else v)
                   for k, v in job.extra.items()})
    record["ident"] = job_identity(record)
    run = whole_job_run(FORMAT, record, deployment=deployment, deployment_key=deployment_key,
                        notes=[*([conflict] if conflict else []), *notes])
    run.first_line = run.last_line = job.line
    return run


def never_started_notes(jobs: list[SlurmJob]) -> list[str]:
    """The warnings for jobs that ended without starting: each named, up to
    :data:`MAX_NAMED_JOBS`, then how many more."""
    notes = [f"job {job.job_id} ({job.name or 'no name'}, {job.state}) never started (start "
             f"{job.start_text or 'missing'}, no elapsed time): skipped"
             for job in jobs[:MAX_NAMED_JOBS]]
    if len(jobs) > MAX_NAMED_JOBS:
        notes.append(f"{len(jobs) - MAX_NAMED_JOBS} more jobs never started: skipped")
    return notes


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """The ended jobs of a sacct file as whole-job runs (module doc)."""
    jobs = read_jobs(list(lines))
    ended = [job for job in jobs if job.state not in NOT_HISTORY]
    ran = [job for job in ended if not job.never_started]
    if not ran:
        counts: dict[str, int] = {}
        for job in jobs:
            kind = "never started" if job.state not in NOT_HISTORY else job.state
            counts[kind] = counts.get(kind, 0) + 1
        raise ParseError(f"no ended job in the file ({len(jobs)} jobs: "
                         + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
                         + "): ingest it after they end, or ask `jobcast check`", line=1)
    runs = [to_run(job, ctx) for job in ran]
    notes = never_started_notes([job for job in ended if job.never_started])
    if notes:
        old = runs[0].meta.get("warnings")
        runs[0].meta["warnings"] = [*(old if isinstance(old, list) else []), *notes]
    return runs
