"""Whole-job runs: a scheduler's record of one job (start, end, state, GPUs), no per-step data.

Slurm accounting (:mod:`ingest.parsers.slurm`) and Kubernetes through Prometheus
(:mod:`ingest.prometheus.kubernetes`) know when a job started and ended, how it ended and
what it ran on, but not its steps. Such a job is stored as a run **without segments**, so the
per-step models never see it; everything it knows sits in ``meta["whole_job"]``.

Rules
-----
* ``meta["whole_job"]``: ``scheduler`` (``slurm``, ``kubernetes``), ``job_id``, ``name`` (as
  the scheduler has it), ``key`` (the identity for history, see below), ``state`` (one of
  :data:`STATES`), ``seconds`` (wall time, start to end; for a running job the time so far),
  ``submit``/``start``/``end`` (unix seconds or None), ``gpus`` (in all), ``gpu_type`` (as the
  site names it, or None), ``nodes``, and where known ``node_list``, ``array_job``,
  ``array_task``, ``submit_line`` (cut to :data:`MAX_TEXT` characters), ``cluster``,
  ``namespace``, ``pods``, ``length`` (``{"unit": "iterations" | "epochs", "count": N}``:
  the training length each run had, as ``jobcast ingest --iterations/--epochs`` says; a
  scheduler does not know it, :func:`apply_length`), and ``ident`` (Slurm: the job's own identity,
  :func:`ingest.job_identity.job_identity`; such a job is stored once whatever file holds it).
* Only ``completed`` jobs are finished (:func:`finished`); failed, cancelled, timed-out,
  preempted (and every other state) are stored with their state and never fitted as if they
  had finished.
* Identity: a job's ``key`` is its name, lower-cased with runs of blanks as one, unless a
  ``--job-key`` rule says otherwise (:func:`job_key`): ``REGEX`` or ``name:REGEX`` searched in
  the name, ``submit:REGEX`` in the submit line; the key is the named group ``key``, else the
  first group, else the whole match; no match keeps the name. ``meta["system"]`` is the key,
  so per-step runs ingested with ``--system KEY`` are the same job's history.
* The run's ``network`` is ``--network`` where given, else the key (the scheduler does not
  know the network); its ``batch_size`` is ``--batch-size`` or 0 (unknown); its deployment
  the GPU model by the fleet catalog's name (:func:`gpu_deployment`: the site's type through
  its GPU alias file, the catalog and scheduler spellings, :mod:`fleet.site_aliases`; a type
  none resolves is kept as named, with a warning saying how to map it); where the site names no
  GPU type, ``meta["deployment_key"]`` is ``gpu-x<n>`` (``--deployment`` names it); a job
  without GPUs runs on ``cpu``.
* Checks before storing (:func:`check_whole_job`, called by ``ingest.pipeline.check_run``):
  a known state, plausible times with end >= start, seconds finite in
  [0, :data:`MAX_JOB_SECONDS`] (above 0 when finished), whole counts in range, names as the
  store's columns allow, a trace of at most :data:`MAX_TRACE_POINTS` finite points per series.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeGuard

from fleet.catalog import UnknownGpuError, resolve_gpu
from fleet.deployment import Deployment
from fleet.site_aliases import how_to_map, resolve_site_gpu
from ingest.errors import IngestOptionError
from ingest.events import ParsedRun, ParseError
from ingest.home import data_home
from ingest.job_index import (
    FINISHED,
    LENGTH_UNITS,
    index_row,
    normal_key,
    one_per_job,
    read_recent,
    read_rows,
    run_length,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ingest.store import Store

STATES = ("completed", "failed", "cancelled", "timeout", "preempted", "node_fail",
          "out_of_memory", "boot_fail", "deadline", "requeued", "revoked", "suspended",
          "running", "pending", "lost")
MAX_JOB_SECONDS = 366 * 86400.0
MAX_TRACE_POINTS = 240
MAX_TEXT = 500
MAX_GPUS = 1_000_000
KEY_CHARS = 128
MAX_LENGTH = 10**12  # at most this many iterations or epochs a run
_KEY = re.compile(r"[a-z0-9-]+-x\d+(?:-n\d+)?")


def finished(meta: dict) -> bool:
    """Whether a whole-job record (``meta["whole_job"]``) is a job that completed."""
    return isinstance(meta, dict) and meta.get("state") == FINISHED


@dataclass(frozen=True)
class KeyRule:
    """A ``--job-key`` rule: a regular expression searched in the name or the submit line."""

    field: str
    pattern: re.Pattern

    @classmethod
    def parse(cls, text: str) -> KeyRule:
        """``REGEX``, ``name:REGEX`` or ``submit:REGEX``; :class:`IngestOptionError` (a
        ValueError) on a bad expression."""
        field, _, rest = text.partition(":")
        if field in ("name", "submit") and rest:
            expression = rest
        else:
            field, expression = "name", text
        try:
            return cls(field, re.compile(expression))
        except re.error as exc:
            raise IngestOptionError(f"--job-key {text!r}: not a regular expression ({exc})",
                                    field="job_key") from None


def job_key(name: str, submit_line: str | None = None, rule: str | KeyRule | None = None) -> str:
    """The identity of a job for history (module doc): the rule's match, else the name."""
    if rule:
        rule = rule if isinstance(rule, KeyRule) else KeyRule.parse(rule)
        text = name if rule.field == "name" else (submit_line or "")
        m = rule.pattern.search(text)
        if m:
            groups = m.groupdict()
            found = groups.get("key") if "key" in groups else (m.group(1) if m.groups()
                                                                else m.group(0))
            if found and found.strip():
                return normal_key(found)
    return normal_key(name)


def apply_job_key(run: ParsedRun, rule: str | KeyRule) -> None:
    """Re-key a whole-job run with ``rule`` (its ``key``, ``system`` and, unless named by
    ``--network``, its network)."""
    record = run.meta.get("whole_job")
    if not isinstance(record, dict):
        return
    old = record.get("key")
    key = job_key(str(record.get("name") or ""), record.get("submit_line"), rule)
    record["key"] = key
    if run.meta.get("system") == old:
        run.meta["system"] = key
    if run.network == old:
        run.network = key


def apply_length(run: ParsedRun, length: tuple[str, int]) -> None:
    """Record ``--iterations``/``--epochs`` (``length``: unit and count) as the training
    length of a whole-job run (``record["length"]``); a per-step log counts its own steps, so
    it keeps them and gets a warning saying the flag was not used."""
    unit, count = length
    record = run.meta.get("whole_job")
    if isinstance(record, dict):
        record["length"] = {"unit": unit, "count": int(count)}
        return
    warnings = run.meta.setdefault("warnings", [])
    if isinstance(warnings, list):
        warnings.append(f"--{unit} not used: this log counts its own steps (the flag is for "
                        "a scheduler's records, which do not)")


@functools.lru_cache(maxsize=4096)
def deployment_identity(text: str) -> str:
    """A deployment key by the fleet catalog's GPU name (``8x A100 80GB``, ``8x NVIDIA
    A100-SXM4-80GB`` and ``nvidia-a100-sxm4-80gb-x8`` are one), else the key as written.
    Cached per text (a cluster's runs name a handful of deployments)."""
    text = str(text).strip()
    try:
        dep = Deployment.parse(text)
    except ValueError:
        return text
    try:
        name = resolve_gpu(dep.accelerator).name
    except UnknownGpuError:
        return text if _KEY.fullmatch(text) else (dep.key if dep.slug else text)
    return Deployment(name, dep.per_node, dep.nodes).key


def gpu_deployment(gpus: int, nodes: int, gpu_type: str | None
                   ) -> tuple[Deployment | None, str | None, list[str]]:
    """(deployment, deployment key when there is no deployment, notes) of a job.

    The GPU model by the catalog's name where the site's type resolves
    (:func:`fleet.site_aliases.resolve_site_gpu`: the site's alias file, the catalog, a
    scheduler's memory suffix such as ``a100_80``); a type that does not (unknown, or
    ambiguous such as ``rtx30``) is kept as the site names it, with a note that says how to map
    it; no type: no deployment and key ``gpu-x<n>``; no GPUs: ``cpu``. GPUs not evenly spread
    over the nodes count as one node's. A bad alias file raises
    :class:`~fleet.site_aliases.SiteAliasError`.
    """
    notes: list[str] = []
    nodes = max(1, int(nodes or 1))
    if gpus <= 0:
        return Deployment("cpu", 1, nodes), None, notes
    if gpus % nodes:
        notes.append(f"{gpus} GPUs do not spread evenly over {nodes} nodes; stored as one "
                     "node's")
        per_node, nodes = gpus, 1
    else:
        per_node = gpus // nodes
    if not gpu_type:
        key = f"gpu-x{per_node}" + (f"-n{nodes}" if nodes > 1 else "")
        notes.append(f"the site names no GPU type: stored under {key}; pass --deployment "
                     "to name the GPU model")
        return None, key, notes
    try:
        name = resolve_site_gpu(gpu_type, data_home()).name
    except UnknownGpuError as exc:
        name = gpu_type
        why = str(exc).split(": ", 1)[-1].rstrip(".")
        notes.append(f"GPU type {gpu_type!r} is not resolved ({why}); stored as named: "
                      + how_to_map(gpu_type, data_home()))
    return Deployment(name, per_node, nodes), None, notes


def whole_job_run(fmt: str, record: dict, *, deployment: Deployment | None,
                  deployment_key: str | None = None, notes: list[str] | None = None,
                  trace: dict | None = None) -> ParsedRun:
    """A segment-less run of one scheduler job (``record`` is ``meta["whole_job"]``)."""
    meta: dict[str, object] = {"whole_job": record, "system": record["key"]}
    if deployment_key:
        meta["deployment_key"] = deployment_key
    if notes:
        meta["warnings"] = list(notes)
    if trace:
        meta["trace"] = trace
    return ParsedRun(format=fmt, network=record["key"], deployment=deployment, batch_size=0,
                     start_time=record.get("start"), segments=[], meta=meta)


def _finite(value: object) -> TypeGuard[int | float]:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _time_ok(value: object) -> bool:
    from ingest.validate import plausible_time

    return value is None or plausible_time(value)


def _name_ok(value: object) -> bool:
    text = str(value or "")
    return 0 < len(text) <= KEY_CHARS and not re.search(r"[\x00-\x1f\x7f]", text)


def whole_job_problem(run: ParsedRun) -> str | None:
    """Why a whole-job run cannot be stored (rules in the module doc), or None."""
    record = run.meta.get("whole_job")
    if not isinstance(record, dict):
        return "no whole-job record"
    state, seconds = record.get("state"), record.get("seconds")
    if state not in STATES:
        return f"unknown job state {state!r}"
    for name in ("submit", "start", "end"):
        if not _time_ok(record.get(name)):
            return f"{name} time {record.get(name)!r} (want unix seconds in 1990 .. 2100)"
    start, end = record.get("start"), record.get("end")
    if start is not None and end is not None and end < start:
        return f"ends ({end}) before it starts ({start})"
    if not _finite(seconds) or not 0 <= seconds <= MAX_JOB_SECONDS:
        return f"wall time {seconds!r} s (want 0 .. {MAX_JOB_SECONDS / 86400:.0f} days)"
    if state == FINISHED and seconds <= 0:
        return "a completed job with no wall time"
    for name, high in (("gpus", MAX_GPUS), ("nodes", 1_000_000)):
        value = record.get(name)
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high):
            return f"{name} = {value!r} (want a whole number 0 .. {high:,})"
    length = record.get("length")
    if length is not None and (run_length(record) is None or length["count"] > MAX_LENGTH):
        return (f"training length {length!r} (want {' or '.join(LENGTH_UNITS)}, "
                f"1 .. {MAX_LENGTH:,})")
    if not _name_ok(record.get("key")):
        return f"job key {str(record.get('key'))[:40]!r} is empty, too long or not text"
    if not _name_ok(run.network):
        return f"network {str(run.network)[:40]!r} is empty, too long or not text"
    if run.deployment is None and not _name_ok(run.stored_key()):
        return "no deployment; pass --deployment"
    if run.deployment is not None and not _name_ok(run.deployment.accelerator):
        return f"accelerator {str(run.deployment.accelerator)[:40]!r} is not a usable name"
    return trace_problem(run.meta.get("trace"))


def trace_problem(trace: object) -> str | None:
    """Why a stored trace is not bounded and finite, or None."""
    if trace is None:
        return None
    if not isinstance(trace, dict):
        return "trace is not a mapping"
    series = trace.get("series") or {}
    if not isinstance(series, dict):
        return "trace series is not a mapping"
    for name, values in series.items():
        if not isinstance(values, list) or len(values) > MAX_TRACE_POINTS + 1:
            return f"trace series {name!r} holds more than {MAX_TRACE_POINTS} points"
        if any(v is not None and not _finite(v) for v in values):
            return f"trace series {name!r} holds a value that is not a finite number"
    summary = trace.get("summary") or {}
    if any(v is not None and not _finite(v) for v in summary.values()):
        return "trace summary holds a value that is not a finite number"
    return None


def check_whole_job(run: ParsedRun, index: int) -> None:
    """Raise :class:`ParseError` naming the run when it cannot be stored."""
    why = whole_job_problem(run)
    if why:
        raise ParseError(f"run {index + 1}: {why}", line=run.first_line)


# -- read back -------------------------------------------------------------------------------


@dataclass(frozen=True)
class WholeJobRun:
    """A stored whole-job run as the whole-job model reads it."""

    run_id: int
    source: str
    key: str
    deployment: str
    state: str
    seconds: float
    start: float | None
    end: float | None
    gpus: int
    accelerator: str | None
    name: str
    job_id: str
    trace: dict | None = None
    ident: str = ""  # the scheduler's own identity of the job (cluster and id)
    network: str = ""  # the stored run's network (``--network``, else the key)
    batch_size: int = 0  # the stored run's batch size (``--batch-size``, else 0: unknown)
    length: tuple[str, int] | None = None  # its training length as ingested (unit, count)

    @property
    def finished(self) -> bool:
        """Whether the job finished (state ``FINISHED``)."""
        return self.state == FINISHED

    @property
    def when(self) -> float | None:
        """The job's time on the history's axis: its start, else its end."""
        return self.start if self.start is not None else self.end


def whole_job_runs(store: Store, key: str | None = None, *, traces: bool = True,
                   newest: int | None = None) -> list[WholeJobRun]:
    """Every whole-job run in ``store`` (of one ``key`` if given), oldest first.

    ``traces=False`` reads the whole-job index (:mod:`ingest.job_index`: no JSON decoded;
    each run's ``trace`` None): what ``fit`` reads. With ``newest`` (and no traces), only
    the newest records per (job, deployment) and state, as :class:`RecentRuns` with the
    counts of all (what the forecaster reads). With traces, only the rows that may hold
    ``key`` are read (:func:`_stored_runs`)."""
    if newest is not None and not traces:
        return _recent(store, key, newest)
    if not traces:
        return _latest_records([_from_index(row) for row in read_rows(store.engine, key)])
    out = []
    wanted = normal_key(key) if key else None
    for run in _stored_runs(store, wanted):
        row = index_row(run.meta, run.network, run.source)  # the index's fields, one reading
        if row is None or (wanted and row["job_key"] != wanted):
            continue
        out.append(replace(_from_index({**row, "run_id": run.id, "source": run.source,
                                        "deployment": run.deployment, "network": run.network,
                                        "batch_size": run.batch_size}),
                           trace=run.meta.get("trace")))
    return _latest_records(out)


def _from_index(row: dict) -> WholeJobRun:
    """A :class:`WholeJobRun` (without its trace) from a ``job_index.read_rows`` row."""
    unit, count = row["length_unit"], row["length_count"]
    return WholeJobRun(
        run_id=row["run_id"], source=row["source"], key=row["job_key"],
        deployment=row["deployment"], state=row["state"], seconds=float(row["seconds"]),
        start=row["start"], end=row["end"], gpus=int(row["gpus"]),
        accelerator=_accelerator_of(row["deployment"]), name=row["name"],
        job_id=row["job_id"], network=row["network"] or "",
        batch_size=int(row["batch_size"] or 0), ident=row["ident"],
        length=(str(unit), int(count)) if unit and count else None)


def _stored_runs(store: Store, wanted: str | None) -> list:
    """The store's runs that may be whole-job runs (of the job key ``wanted``): a SQL filter
    on the run's JSON ``meta`` text, a superset the caller checks exactly. Its ``"system"``
    (the key, or ``--system``), ``"key"`` or the ``network`` column holds the key's words in
    order (any blanks between, any case); a key that is not ASCII (escaped in the JSON) reads
    every whole-job run."""
    import json

    import sqlalchemy as sa

    from ingest.store import runs as table

    where = [table.c.meta.contains('"whole_job"', autoescape=True)]
    if wanted and wanted.isascii():
        words = "%".join(w.replace("/", "//").replace("%", "/%").replace("_", "/_")
                         for w in json.dumps(wanted)[1:-1].split())
        where.append(sa.or_(table.c.network == wanted,
                            *(table.c.meta.ilike(f'%"{field}": "{words}"%', escape="/")
                              for field in ("system", "key"))))
    return store.runs(where=sa.and_(*where))


class RecentRuns(list):
    """A job's newest whole-job runs per deployment (``job_index.read_recent``, oldest
    first like :func:`whole_job_runs`), with the counts of all its records: ``records`` per
    job key, ``fitted`` per (job key, stored deployment): finished runs with a wall time.
    :func:`all_runs` reads the rest when a caller needs every run. Slices and filtered
    copies are plain lists."""

    def __init__(self, runs: list[WholeJobRun], records: dict[str, int],
                 fitted: dict[tuple[str, str], int],
                 everything: Callable[[], list[WholeJobRun]]):
        super().__init__(runs)
        self.records = records
        self.fitted = fitted
        self._everything = everything

    @property
    def complete(self) -> bool:
        """Whether the list holds every record of its jobs."""
        return len(self) == sum(self.records.values())

    def everything(self) -> list[WholeJobRun]:
        """Every record of its jobs (read again, unless none was left out)."""
        return list(self) if self.complete else self._everything()


def _recent(store: Store, key: str | None, newest: int) -> RecentRuns:
    """:func:`whole_job_runs` limited to the ``newest`` (module rules of ``job_index``)."""
    rows = read_recent(store.engine, key, newest)
    records = {r["job_key"]: int(r["job_records"]) for r in rows}
    fitted = {(r["job_key"], r["deployment"]): int(r["deployment_fitted"]) for r in rows
              if r["deployment_fitted"]}
    return RecentRuns(_in_order([_from_index(r) for r in rows]), records, fitted,
                      lambda: whole_job_runs(store, key, traces=False))


def all_runs(runs: list) -> list:
    """Every run of the history ``runs`` stands for (:class:`RecentRuns`: all of it)."""
    return runs.everything() if isinstance(runs, RecentRuns) else runs


def left_out(runs: list) -> int:
    """How many records of its jobs a :class:`RecentRuns` does not hold (0 for a list)."""
    return sum(runs.records.values()) - len(runs) if isinstance(runs, RecentRuns) else 0


def finished_counts(runs: list) -> dict[tuple[str, str], int]:
    """Finished runs with a wall time per (job key, stored deployment), of all the runs
    ``runs`` stands for (:class:`RecentRuns`: its counts)."""
    if isinstance(runs, RecentRuns):
        return dict(runs.fitted)
    counts: dict[tuple[str, str], int] = {}
    for r in runs:
        if r.finished and r.seconds > 0:
            counts[r.key, r.deployment] = counts.get((r.key, r.deployment), 0) + 1
    return counts


def _latest_records(runs: list[WholeJobRun]) -> list[WholeJobRun]:
    """One record per scheduler job (overlapping sacct dumps store a job more than once):
    an ended state over a running one, then the newest ingest; oldest job first."""
    return _in_order(one_per_job(runs, lambda r: (r.ident, r.state, r.run_id)))


def _in_order(runs: list[WholeJobRun]) -> list[WholeJobRun]:
    """``runs`` oldest first on the history's axis (undated last, then by run id)."""
    return sorted(runs, key=lambda r: (r.when is None, r.when or 0.0, r.run_id))


@functools.lru_cache(maxsize=4096)
def _accelerator_of(key: str) -> str | None:
    try:
        return Deployment.parse(key).accelerator
    except ValueError:
        return None
