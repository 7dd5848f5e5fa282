"""One scheduler job, stored once: a job is its scheduler's id, whatever file holds it.

Rules
-----
* A job's identity (:func:`job_identity`, ``meta["whole_job"]["ident"]``) is
  ``<scheduler>:<cluster>:<job id>`` (``slurm:mila:123``; an array task's job id is
  ``<array job>_<task>``). Jobs of the schedulers in :data:`ONCE_SCHEDULERS` are stored once.
* The store calls :func:`drop_stored_jobs` inside the transaction that writes new files, after
  taking the writers' turn (SQLite's write lock, a PostgreSQL advisory lock), so two ingests
  at once cannot both store a job: a run of a job already stored, or held by an earlier run of
  the same write, is not written. Two runs are
  one job when scheduler, job id and start agree and the clusters agree or one is unnamed (a
  ``--parsable2`` export without ``Cluster``). The job id alone is not enough: Slurm reuses ids
  once its counter wraps, and a requeued job's attempts (``sacct --duplicates``) share one id
  with different starts.
* Stored runs are found by the ``start_time`` column (runs that started in the same second;
  the store has no column for the identity, so each candidate's JSON ``meta`` is then read) or,
  for a job without a start, by its job id in the ``meta`` text: a write reads the few runs
  that may be its jobs, never the whole store.
* A file that loses runs keeps a warning on its first kept run naming the jobs skipped and
  where they were stored from; a file left with no run is not written and is reported as a
  duplicate of the source that holds its jobs (``file_row["duplicate_of"]``).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine import Connection

ONCE_SCHEDULERS = ("slurm",)  # schedulers whose job id (with the cluster) names one job
MAX_NAMED_SKIPPED = 10
CHUNK = 2000  # starts per query (SQLite >= 3.32 and PostgreSQL take far more parameters)
WRITER_LOCK = 0x6A6F6263  # PostgreSQL advisory lock of the writers of scheduler jobs ("jobc")
# (scheduler:job id, start): the key stored runs are found by; then the cluster must agree
_JobKey = tuple[str, float | None]


def job_identity(record: dict) -> str:
    """A scheduler job's own identity: ``<scheduler>:<cluster>:<job id>`` (``slurm:mila:123``;
    an array task's job id is ``<array job>_<task>``)."""
    return f"{record.get('scheduler')}:{record.get('cluster') or ''}:{record.get('job_id')}"


def _job_of(meta_text: str) -> tuple[str, str, float | None] | None:
    """(``scheduler:job id``, cluster, start) of a run's meta (JSON text) where it is a job
    of a scheduler in :data:`ONCE_SCHEDULERS`, else None."""
    if '"whole_job"' not in meta_text:
        return None
    record = json.loads(meta_text).get("whole_job")
    if not isinstance(record, dict) or record.get("scheduler") not in ONCE_SCHEDULERS:
        return None
    start = record.get("start")
    return (f"{record['scheduler']}:{record.get('job_id')}", str(record.get("cluster") or ""),
            float(start) if isinstance(start, int | float) and not isinstance(start, bool)
            and math.isfinite(start) else None)


def _stored_jobs(conn: Connection, wanted: set[_JobKey], runs: sa.Table, files: sa.Table
                 ) -> dict[_JobKey, list[tuple[str, str]]]:
    """``key -> [(cluster, source)]`` of the stored runs of the ``wanted`` jobs. Runs are
    found by their start (column ``start_time``; for a job without a start, by its job id in
    the meta text), so only runs that started in the same second are read, not the store."""
    import sqlalchemy as sa

    base = sa.select(runs.c.meta, files.c.source).join(files, files.c.id == runs.c.file_id)
    starts = sorted({start for _, start in wanted if start is not None})
    queries = [base.where(runs.c.start_time.in_(starts[i:i + CHUNK]),
                          runs.c.meta.contains('"whole_job"'))
               for i in range(0, len(starts), CHUNK)]
    ids = sorted({job.split(":", 1)[1] for job, start in wanted if start is None})
    for i in range(0, len(ids), 50):
        texts = [runs.c.meta.contains(json.dumps({"job_id": j})[1:-1], autoescape=True)
                 for j in ids[i:i + 50]]
        queries.append(base.where(runs.c.start_time.is_(None), sa.or_(*texts)))
    found: dict[_JobKey, list[tuple[str, str]]] = {}
    for query in queries:
        for meta, source in conn.execute(query):
            job = _job_of(meta)
            if job is not None and (job[0], job[2]) in wanted:
                found.setdefault((job[0], job[2]), []).append((job[1], source))
    return found


def _take_turns(conn: Connection, files: sa.Table) -> None:
    """Make the writers of scheduler jobs take turns from here to the end of the transaction,
    so none reads "not stored" while another stores the job: SQLite's write lock (a write
    that changes nothing takes it; others wait out the busy timeout), a PostgreSQL
    transaction-level advisory lock."""
    import sqlalchemy as sa

    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(WRITER_LOCK)))
    else:
        conn.execute(files.update().where(sa.false()).values(id=files.c.id))


def drop_stored_jobs(conn: Connection, prepared: list, runs: sa.Table, files: sa.Table
                     ) -> set[str]:
    """Trim from ``prepared`` (``(file row, [(run row, segment rows)])`` of new files, as
    :func:`ingest.store.file_rows` builds them, about to be written in the transaction
    ``conn``; ``runs`` and ``files`` are the store's tables) each run of a scheduler job
    already stored, or held by an earlier run of ``prepared`` (the first item of each content
    only): the same scheduler and job id, the same start, the same cluster (or one of the two
    unnamed). A job id alone is not enough: Slurm reuses ids once its counter wraps, and a
    requeued job's attempts (``sacct --duplicates``) start at different times.

    The first run a trimmed file keeps gets a warning naming the jobs skipped and where they
    were stored from. Returns the content hashes of files left with no run: they are not
    written, and their file row's ``duplicate_of`` names the source that holds their jobs.
    """
    firsts: dict[str, tuple[dict, list]] = {}
    for file_row, rows in prepared:
        firsts.setdefault(file_row["content_hash"], (file_row, rows))
    prepared = list(firsts.values())  # in order, one item per content
    jobs = [[_job_of(run_row["meta"]) for run_row, _ in rows] for _, rows in prepared]
    wanted = {(job[0], job[2]) for file_jobs in jobs for job in file_jobs if job}
    if not wanted:
        return set()
    _take_turns(conn, files)
    known = _stored_jobs(conn, wanted, runs, files)
    emptied: set[str] = set()
    for (file_row, rows), file_jobs in zip(prepared, jobs, strict=True):
        kept, skipped = [], []
        for row, job in zip(rows, file_jobs, strict=True):
            if job is None:
                kept.append(row)
                continue
            key, cluster = (job[0], job[2]), job[1]
            held = next((source for other, source in known.get(key, [])
                         if other == cluster or not other or not cluster), None)
            if held is not None:
                skipped.append((job[0].split(":", 1)[1], held))
                continue
            kept.append(row)
            known.setdefault(key, []).append((cluster, file_row["source"]))
        if not skipped:
            continue
        rows[:] = kept
        if kept:
            meta = json.loads(kept[0][0]["meta"])
            meta.setdefault("warnings", []).append(_skipped_note(skipped))
            kept[0][0]["meta"] = json.dumps(meta, default=str, sort_keys=True)
        else:
            file_row["duplicate_of"] = skipped[0][1]
            emptied.add(file_row["content_hash"])
    return emptied


def _skipped_note(skipped: list[tuple[str, str]]) -> str:
    """``2 jobs already in the store, not stored again: 11, 12 (from week1.json)``."""
    by_source: dict[str, list[str]] = {}
    for job_id, source in skipped[:MAX_NAMED_SKIPPED]:
        by_source.setdefault(source, []).append(job_id)
    named = "; ".join(f"{', '.join(ids)} (from {source})" for source, ids in by_source.items())
    more = len(skipped) - MAX_NAMED_SKIPPED
    return (f"{len(skipped)} job{'s' * (len(skipped) != 1)} already in the store, not stored "
            f"again: {named}" + (f"; and {more} more" if more > 0 else ""))
