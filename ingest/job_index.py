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
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ingest.tables import files, runs, whole_jobs

LENGTH_UNITS = ("iterations", "epochs")  # what --iterations / --epochs record of a job


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
    query = (sa.select(whole_jobs, runs.c.deployment, runs.c.network, runs.c.batch_size,
                       files.c.source)
             .join(runs, whole_jobs.c.run_id == runs.c.id)
             .join(files, runs.c.file_id == files.c.id))
    if key is not None:
        query = query.where(whole_jobs.c.job_key == normal_key(key))
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


__all__ = ["LENGTH_UNITS", "index_row", "job_ident", "job_key_of", "normal_key",
           "read_rows", "run_length"]
