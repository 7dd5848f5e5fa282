"""The whole-job index: a recurring job's history read by its key, without decoding JSON.

A cluster's year of scheduler records is hundreds of thousands of whole-job runs
(:mod:`ingest.whole_job`), each with its record in the run's JSON ``meta``. ``jobcast
predict --job NAME`` needs one job's runs; reading them from the JSON means decoding every
candidate row's meta (and its trace). The ``whole_jobs`` table (:mod:`ingest.tables`,
migration 0005) keeps, as a run is stored, the few fields the whole-job model and the
job's history read, keyed by the job's key (indexed).

Rules
-----
* One row per stored whole-job run, written in the transaction that stores the run
  (:func:`index_row` from the parsed run; ``ingest.store``), and by migration 0005 for runs
  stored before it (the same function on the stored meta). No other writer.
* ``job_key`` is :func:`normal_key` of the run's system (``--system``, else the record's
  key, else its network): the key ``jobcast runs`` and ``predict --job`` use.
* ``ident`` is :func:`job_ident`: the scheduler's identity of the job (a Slurm job is
  ``slurm:<cluster>:<id>``; a Kubernetes Job ``<source before '#'>#<uid>``), by which
  overlapping exports are one record.
* ``length_unit`` / ``length_count``: the training length ``--iterations`` / ``--epochs``
  recorded (:func:`run_length`), else NULL.
* :func:`read_rows` reads one job's rows (or every job's) with the run's deployment,
  network and batch size and the file's source: no JSON is decoded.
* :func:`read_recent` reads only what a forecast uses (issue 35: 61,000 rows of one job at
  a cluster's scale, where the model fits the newest 200 a deployment): eight narrow
  columns of the job's rows (its key's index, the run's deployment); one record per
  scheduler job (``ident``; an ended state over a running one, then the newest run:
  :data:`STATE_RANK`); per (job, deployment, finished or not) the ``newest`` records on the
  history's axis (start, else end; undated ones newest) and the ``newest`` by time (undated
  ones oldest); then the whole rows of those only, each with the counts of all records:
  ``job_records`` (the job's) and ``deployment_fitted`` (the job's finished runs with a
  wall time there). The fold and the choice run on those narrow tuples in Python: SQLite's
  window functions doing the same took longer than reading every whole row (0.25 s
  against 0.23 s for 20,000 rows; this: 0.1 s).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ingest.tables import files, runs, whole_jobs

LENGTH_UNITS = ("iterations", "epochs")  # what --iterations / --epochs record of a job
FINISHED = "completed"  # the one state of a job that finished (``ingest.whole_job``)
# which of one scheduler job's records is kept: the highest rank, then the newest run
STATE_RANK = {FINISHED: 3, "running": 0, "pending": 0, "suspended": 0}
OTHER_RANK = 2  # every other (ended) state


def normal_key(text: str) -> str:
    """A job identity: lower case, runs of blanks as one, ends stripped."""
    return " ".join(str(text).split()).lower()


def run_length(record: dict) -> tuple[str, int] | None:
    """A stored whole-job record's training length (unit, count), None where not recorded."""
    found = record.get("length")
    if not isinstance(found, dict) or found.get("unit") not in LENGTH_UNITS:
        return None
    count = found.get("count")
    return (str(found["unit"]), int(count)) if isinstance(count, int) and count > 0 else None


def job_ident(record: dict, source: str) -> str:
    """The scheduler's identity of a whole-job record (module rules)."""
    if record.get("scheduler") == "kubernetes":
        return source.split("#", 1)[0] + "#" + str(record.get("job_id"))
    return f"slurm:{record.get('cluster') or ''}:{record.get('job_id')}"


def job_key_of(meta: dict, network: str | None) -> str:
    """The key a whole-job run is asked by (module rules)."""
    record = meta.get("whole_job") or {}
    return normal_key(meta.get("system") or record.get("key") or network or "")


def index_row(meta: Any, network: str | None, source: str) -> dict | None:
    """The ``whole_jobs`` row of a run (without its ``run_id``), None for a run that is not a
    whole job."""
    record = meta.get("whole_job") if isinstance(meta, dict) else None
    if not isinstance(record, dict):
        return None
    length = run_length(record)
    return {"job_key": job_key_of(meta, network), "state": str(record.get("state")),
            "seconds": float(record.get("seconds") or 0.0), "start": record.get("start"),
            "end": record.get("end"), "gpus": int(record.get("gpus") or 0),
            "name": str(record.get("name") or ""), "job_id": str(record.get("job_id") or ""),
            "ident": job_ident(record, source),
            "length_unit": length[0] if length else None,
            "length_count": length[1] if length else None}


def read_rows(engine: Engine, key: str | None = None) -> list[dict]:
    """The index rows of one job (``key``, normalised) or of every job, each with the run's
    ``deployment``, ``network``, ``batch_size`` and the file's ``source``."""
    query = _joined()
    if key is not None:
        query = query.where(whole_jobs.c.job_key == normal_key(key))
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def _joined(*extra: Any) -> sa.Select:
    """``whole_jobs`` rows with the run's deployment, network and batch size and the file's
    source (and ``extra`` columns)."""
    return (sa.select(whole_jobs, runs.c.deployment, runs.c.network, runs.c.batch_size,
                      files.c.source, *extra)
            .join(runs, whole_jobs.c.run_id == runs.c.id)
            .join(files, runs.c.file_id == files.c.id))


def read_recent(engine: Engine, key: str | None, newest: int) -> list[dict]:
    """The rows of one job (``key``, normalised; None: every job) that a forecast reads, with
    their counts (module rules): :func:`read_rows`' columns plus ``job_records`` and
    ``deployment_fitted``."""
    if not (isinstance(newest, int) and newest >= 1):
        raise ValueError(f"newest must be a whole number >= 1, got {newest!r}")
    wj = whole_jobs.c
    query = (sa.select(wj.run_id, wj.job_key, wj.ident, wj.state, wj.seconds, wj.start, wj.end,
                       runs.c.deployment).join(runs, wj.run_id == runs.c.id))
    if key is not None:
        query = query.where(wj.job_key == normal_key(key))
    with engine.connect() as conn:
        chosen = one_per_job(conn.execute(query).all(), _narrow_fields)
        kept, records, fitted = _newest_of(chosen, newest)
        ids = sorted(kept)
        rows = [dict(r) for i in range(0, len(ids), _CHUNK) for r in conn.execute(
            _joined().where(wj.run_id.in_(ids[i:i + _CHUNK]))).mappings()]
    return [{**r, "job_records": records[r["job_key"]],
             "deployment_fitted": fitted.get((r["job_key"], r["deployment"]), 0)}
            for r in rows]


_CHUNK = 500  # run ids a query
_Narrow = Any  # (run_id, job_key, ident, state, seconds, start, end, deployment)
T = TypeVar("T")


def one_per_job(records: Iterable[T], fields: Callable[[T], tuple[str, str, int]]) -> list[T]:
    """One record per scheduler job (overlapping sacct dumps store a job more than once):
    ``fields`` gives a record's (ident, state, run id); a record without an ident is its own
    job. Kept: the highest :data:`STATE_RANK` (an ended state over a running one), then the
    newest run. The one rule of both readers (this module's and ``ingest.whole_job``'s)."""
    best: dict[str, tuple[tuple[int, int], T]] = {}
    for r in records:
        ident, state, run_id = fields(r)
        ident = ident or f"run-{run_id}"
        rank = (STATE_RANK.get(state, OTHER_RANK), run_id)
        old = best.get(ident)
        if old is None or rank > old[0]:
            best[ident] = (rank, r)
    return [r for _, r in best.values()]


def _narrow_fields(r: _Narrow) -> tuple[str, str, int]:
    return r[2], r[3], r[0]


def _newest_of(chosen: list[_Narrow], newest: int
               ) -> tuple[set[int], dict[str, int], dict[tuple[str, str], int]]:
    """The run ids kept (module rules: per job, deployment and finished or not, the
    ``newest`` on the history's axis and by time), the records per job and the finished runs
    with a wall time per (job, deployment)."""
    groups: dict[tuple[str, str, bool], list[_Narrow]] = {}
    records: dict[str, int] = {}
    fitted: dict[tuple[str, str], int] = {}
    for r in chosen:
        done = r[3] == FINISHED
        groups.setdefault((r[1], r[7], done), []).append(r)
        records[r[1]] = records.get(r[1], 0) + 1
        if done and r[4] > 0:
            fitted[r[1], r[7]] = fitted.get((r[1], r[7]), 0) + 1
    kept: set[int] = set()
    for members in groups.values():
        for order in (_axis, _dated):
            kept.update(r[0] for r in heapq.nlargest(newest, members, key=order))
    return kept, records, fitted


def _axis(r: _Narrow) -> tuple[bool, float, int]:
    """A record's place on the history's axis (its start, else its end; undated: newest)."""
    when = r[5] if r[5] is not None else r[6]
    return when is None, when or 0.0, r[0]


def _dated(r: _Narrow) -> tuple[bool, float, int]:
    """A record's place by time (undated: oldest), as the job's newest run is found."""
    when = r[5] if r[5] is not None else r[6]
    return when is not None, when or 0.0, r[0]


__all__ = ["FINISHED", "LENGTH_UNITS", "OTHER_RANK", "STATE_RANK", "index_row", "job_ident",
           "job_key_of", "normal_key", "one_per_job", "read_recent", "read_rows", "run_length"]
