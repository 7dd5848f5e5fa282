"""The store: ingested files, their runs and phase segments, and fitted models.

SQLite (the default: ``jobcast.db`` in the data directory, :mod:`ingest.home`) and PostgreSQL
(``postgresql+psycopg://user:password@host:port/db``) are supported and tested; the SQL is
SQLAlchemy's dialect-neutral constructs. The schema is versioned (:mod:`ingest.migrations`):
a store opens only at the code's revision; an empty database is created at it; an older
store is refused until ``jobcast store upgrade`` migrates it. Each ingested file is written
in one transaction, keyed by the SHA-256 of its content, so a file is stored whole or not
at all and never twice. Saving fitted models replaces them all in one transaction; a
database that refuses them raises :class:`StoreError` (the old models stay).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fleet.deprecation import renamed_property
from ingest.errors import StoreError
from ingest.events import ParsedRun, StorableFile
from ingest.home import default_store_url, ensure_home
from ingest.job_identity import drop_stored_jobs
from ingest.job_index import index_row
from ingest.migrations import SchemaVersionError, ensure_head
from ingest.tables import (  # the tables: one definition, there
    artifacts,
    files,
    fitted_models,
    metadata,
    rejections,
    runs,
    segments,
    whole_jobs,
)

BUSY_WAIT_S = 120.0  # how long a write waits out other writers before it fails
_BUSY = ("database is locked", "database table is locked", "busy", "deadlock detected",
         "could not serialize access", "lock timeout")

__all__ = ["SchemaVersionError", "StoreError"]  # re-exported (SchemaVersionError: a StoreError)


def store_url(url: str | None = None) -> str:
    """The store URL: the argument, else ``$JOBCAST_STORE``, else ``<data home>/jobcast.db``."""
    return url or os.environ.get("JOBCAST_STORE") or default_store_url()


@dataclass(frozen=True)
class StoredRun:
    """A run and its file as read back from the store."""

    id: int
    source: str
    content_hash: str
    format: str
    run_index: int
    network: str
    deployment: str
    stack: str | None  # the software stack (column ``framework``)
    batch_size: int
    start_time: float | None
    meta: dict
    framework = renamed_property("StoredRun", "framework", "stack")


class Store:
    """Thin access layer over the SQL schema above."""

    def __init__(self, url: str | None = None):
        """Open the store at ``url``; raises :class:`SchemaVersionError` unless it is at the
        code's schema revision (an empty database is created at it)."""
        self.url = store_url(url)
        ensure_home(self.url)
        self.engine: Engine = make_engine(self.url)
        ensure_head(self.engine, metadata, self.url)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def has_content(self, content_hash: str) -> str | None:
        """The source a file with this content was first ingested from, if any."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(files.c.source).where(files.c.content_hash == content_hash)
            ).first()
        return row[0] if row else None

    def known_contents(self, hashes: Iterable[str]) -> dict[str, str]:
        """``content hash -> source first ingested from`` for those of ``hashes`` already
        stored: one query per 500 hashes (a batch's duplicate check)."""
        wanted = sorted(set(hashes))
        found: dict[str, str] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                query = sa.select(files.c.content_hash, files.c.source).where(
                    files.c.content_hash.in_(wanted[i:i + 500]))
                found.update((content_hash, source) for content_hash, source in conn.execute(query))
        return found

    def add_file(
        self, *, content_hash: str, source: str, fmt: str, size: int, parsed: list[ParsedRun]
    ) -> int | None:
        """Write a file and all its runs in one transaction; None if the content is known
        (also when another writer stores the same content at the same time)."""
        return self.add_files([FileRecord(content_hash, source, fmt, size, parsed)])[0]

    def add_files(
        self, items: Iterable[StorableFile], *, wait_s: float = BUSY_WAIT_S
    ) -> list[int | None]:
        """Write many files and all their runs in ONE transaction: all of them or none.

        ``items``: objects with ``content_hash``, ``source``, ``fmt``, ``size`` and ``runs``
        (a :class:`FileRecord`, an :class:`ingest.pipeline.ParsedFile`), or with ``rows``
        already built by :func:`file_rows` (where the file was parsed). Returns, per item,
        the new file id, or None where the content is already stored (by anyone: also by a
        writer racing this one, or an earlier item of ``items``): insert-or-ignore on
        ``files.content_hash`` (``INSERT ... ON CONFLICT DO NOTHING`` on SQLite and
        PostgreSQL), never an IntegrityError. Rows are written in content-hash order (one lock
        order for all writers) with bulk inserts. A busy database (the SQLite lock held past
        its busy timeout; a PostgreSQL deadlock or serialization failure) is retried with
        backoff for up to ``wait_s`` seconds; any other database error raises and nothing of
        ``items`` is stored.
        """
        prepared = [getattr(item, "rows", None) or file_rows(item) for item in items]
        if not prepared:
            return []
        delay = 0.02
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with self.transaction() as conn:
                    return _write_files(conn, prepared)
            except sa.exc.DBAPIError as exc:
                if not _busy(exc) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(2 * delay, 1.0)

    def runs(self, network: str | None = None, deployment: str | None = None, *,
             where: sa.ColumnElement[bool] | None = None) -> list[StoredRun]:
        """Runs by source and index; of one network, deployment, SQL ``where`` if given."""
        query = (
            sa.select(runs, files.c.source, files.c.content_hash, files.c.format)
            .join(files, runs.c.file_id == files.c.id)
            .order_by(files.c.source, runs.c.run_index)
        )
        if network:
            query = query.where(runs.c.network == network)
        if deployment:
            query = query.where(runs.c.deployment == deployment)
        if where is not None:
            query = query.where(where)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            StoredRun(
                id=r["id"],
                source=r["source"],
                content_hash=r["content_hash"],
                format=r["format"],
                run_index=r["run_index"],
                network=r["network"],
                deployment=r["deployment"],
                stack=r["framework"],
                batch_size=r["batch_size"],
                start_time=r["start_time"],
                meta=json.loads(r["meta"] or "{}"),
            )
            for r in rows
        ]

    def segments(self, run_ids: list[int] | None = None) -> list[dict]:
        """Segments as dicts (``points`` decoded), ordered by run and sequence; ``run_ids``
        asked 500 at a time (SQLite bounds a statement's variables)."""
        query = sa.select(segments).order_by(segments.c.run_id, segments.c.seq)
        ids = sorted(set(run_ids)) if run_ids is not None else None
        with self.engine.connect() as conn:
            rows = (conn.execute(query).mappings().all() if ids is None else [
                r for i in range(0, len(ids), 500) for r in conn.execute(
                    query.where(segments.c.run_id.in_(ids[i:i + 500]))).mappings().all()])
        return [{**r, "points": [tuple(p) for p in json.loads(r["points"] or "[]")]}
                for r in rows]

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {
                name: conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
                for name, table in (("files", files), ("runs", runs), ("segments", segments))
            }

    def run_warnings(self, sources: Iterable[str]) -> list[tuple[str, int, str]]:
        """``(source, run number from 1, warning)`` for each ``meta["warnings"]`` entry of
        the runs of the newest file stored from each of ``sources``, in the given order."""
        wanted = list(dict.fromkeys(sources))
        newest: dict[str, int] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                for file_id, source in conn.execute(
                    sa.select(files.c.id, files.c.source).where(files.c.source.in_(chunk))
                ):
                    newest[source] = max(file_id, newest.get(source, file_id))
            found: dict[int, list[tuple[int, str]]] = {}
            ids = list(newest.values())
            for i in range(0, len(ids), 500):
                query = sa.select(runs.c.file_id, runs.c.run_index, runs.c.meta).where(
                    runs.c.file_id.in_(ids[i : i + 500]), runs.c.meta.contains('"warnings"')
                )
                for file_id, index, meta in conn.execute(query):
                    for text in json.loads(meta or "{}").get("warnings", []):
                        found.setdefault(file_id, []).append((index + 1, str(text)))
        return [
            (source, number, text)
            for source in wanted
            if source in newest
            for number, text in sorted(found.get(newest[source], []), key=lambda w: w[0])
        ]

    # -- fitted models -------------------------------------------------------------

    def save_models(self, models: list[dict], extra: dict[str, object] | None = None) -> None:
        """Replace all fitted models with ``models`` (dicts with key fields and params), and
        the fitted artifacts with ``extra`` (name -> JSON-able document) when given.

        One transaction: on any database error nothing changes and :class:`StoreError` says
        why (e.g. two models with one ``model_id``).
        """
        try:
            with self.transaction() as conn:
                if extra is not None:
                    conn.execute(artifacts.delete())
                    for name, doc in extra.items():
                        conn.execute(artifacts.insert().values(
                            name=name, params=json.dumps(doc, allow_nan=False),
                            fitted_at=time.time()))
                conn.execute(fitted_models.delete())
                for m in models:
                    conn.execute(
                        fitted_models.insert().values(
                            model_id=m["model_id"],
                            network=m["network"],
                            deployment=m["deployment"],
                            phase=m["phase"],
                            stack=m["stack"],
                            params=json.dumps(m["params"]),
                            fitted_at=time.time(),
                        )
                    )
        except sa.exc.SQLAlchemyError as exc:
            reason = getattr(exc, "orig", None) or exc
            raise StoreError(f"cannot save the fitted models in {self.url}: {reason}") from None

    def load_artifact(self, name: str) -> object | None:
        """The fitted artifact ``name`` (its JSON document), None when the fit left none."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(artifacts.c.params)
                               .where(artifacts.c.name == name)).first()
        return None if row is None else json.loads(row[0])

    def phase_totals(self) -> list[dict]:
        """Per run and phase: summed iterations and seconds, segments, the earliest segment
        start and the latest segment end (None where the log gives no segment times)."""
        end = segments.c.start_time + segments.c.seconds
        query = (sa.select(segments.c.run_id, segments.c.phase,
                           sa.func.sum(segments.c.iterations).label("iterations"),
                           sa.func.sum(segments.c.seconds).label("seconds"),
                           sa.func.count().label("segments"),
                           sa.func.min(segments.c.start_time).label("first_start"),
                           sa.func.max(end).label("last_end"))
                 .group_by(segments.c.run_id, segments.c.phase))
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings().all()]

    def load_models(self) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(fitted_models)).mappings().all()
        return [{**dict(r), "params": json.loads(r["params"])} for r in rows]

    # -- rejected files ------------------------------------------------------------

    def add_rejections(self, items: Iterable[object]) -> int:
        """Record files an ingest refused, in one transaction; returns how many.

        ``items``: objects with ``source``, ``reason``, ``line`` and optionally
        ``content_hash`` (an :class:`ingest.events.ParseError` or a :class:`Rejection`).
        """
        now = time.time()
        rows = []
        for item in items:
            line = getattr(item, "line", None)
            rows.append({  # text the database can hold: undecodable bytes as \x escapes
                "source": _text(getattr(item, "source", None) or "<input>"),
                "reason": _text(getattr(item, "reason", None) or item),
                "line": int(line) if line is not None else None,
                "content_hash": getattr(item, "content_hash", None),
                "rejected_at": now,
            })
        if rows:
            with self.transaction() as conn:
                conn.execute(rejections.insert(), rows)
        return len(rows)

    def rejections(self, *, current: bool = True) -> list[Rejection]:
        """Recorded rejections, newest first.

        ``current``: the newest of each (source, content hash) only, and only while it still
        stands: not once the same content is stored, nor once a file from the same source
        was stored after it (the log was fixed, or ingested again with the missing flag).
        """
        query = sa.select(rejections).order_by(rejections.c.rejected_at.desc(),
                                               rejections.c.id.desc())
        with self.engine.connect() as conn:
            found = [Rejection(source=r["source"], reason=r["reason"], line=r["line"],
                               content_hash=r["content_hash"], rejected_at=r["rejected_at"])
                     for r in conn.execute(query).mappings()]
            if not current:
                return found
            stored_hashes: set[str] = set()
            stored_at: dict[str, float] = {}
            hashes = sorted({r.content_hash for r in found if r.content_hash})
            sources = sorted({r.source for r in found})
            for i in range(0, len(hashes), 500):
                stored_hashes.update(conn.execute(sa.select(files.c.content_hash).where(
                    files.c.content_hash.in_(hashes[i:i + 500]))).scalars())
            for i in range(0, len(sources), 500):
                for source, when in conn.execute(
                    sa.select(files.c.source, sa.func.max(files.c.ingested_at))
                    .where(files.c.source.in_(sources[i:i + 500])).group_by(files.c.source)
                ):
                    stored_at[source] = when
        seen: set[tuple[str, str | None]] = set()
        out = []
        for r in found:
            key = (r.source, r.content_hash)
            if key in seen or r.content_hash in stored_hashes \
                    or stored_at.get(r.source, -math.inf) > cast("float", r.rejected_at):
                continue
            seen.add(key)
            out.append(r)
        return out


@dataclass(frozen=True)
class Rejection:
    """A file an ingest refused: where (source, line), why, and its content hash if read."""

    source: str
    reason: str
    line: int | None = None
    content_hash: str | None = None
    rejected_at: float | None = None


def make_engine(url: str) -> Engine:
    """The store's engine: SQLite writers wait for each other (busy timeout) and check
    foreign keys; server connections are checked before use (a restarted database)."""
    engine = sa.create_engine(url, future=True, pool_pre_ping=not url.startswith("sqlite"))
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _text(value: object) -> str:
    """``value`` as valid UTF-8 text: lone surrogates (undecodable file-name bytes) escaped."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout = 30000")
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


@dataclass(frozen=True)
class FileRecord:
    """One file to store: its content hash, source, format, size in bytes and parsed runs."""

    content_hash: str
    source: str
    fmt: str
    size: int
    runs: list[ParsedRun]


# (file row, [(run row, [segment rows])]): rows built before the transaction opens
_Prepared = tuple[dict, list[tuple[dict, list[dict]]]]


def _busy(exc: sa.exc.DBAPIError) -> bool:
    """A failure worth retrying: another writer holds the database (or, where the dialect
    has no insert-or-ignore, won the race for a content hash)."""
    text = str(exc.orig or exc).lower()
    if isinstance(exc, sa.exc.IntegrityError):
        return "content_hash" in text and "unique" in text
    return any(word in text for word in _BUSY)


def file_rows(item: StorableFile) -> _Prepared:
    """The rows of one file for :meth:`Store.add_files` (ids filled in at write time): JSON
    encoded here, so a parallel ingest builds them in its parsing processes."""
    file_row = {
        "content_hash": item.content_hash,
        "source": item.source,
        "format": item.fmt,
        "size_bytes": item.size,
        "ingested_at": time.time(),
    }
    out = []
    for index, run in enumerate(item.runs):
        dep = run.deployment
        run_row = {
            "run_index": index,
            "network": run.network,
            "deployment": run.stored_key(),
            "accelerator": dep.accelerator if dep else None,
            "accelerators_per_node": dep.per_node if dep else None,
            "nodes": dep.nodes if dep else None,
            "framework": run.stack,
            "batch_size": run.batch_size,
            "start_time": run.start_time,
            "meta": json.dumps(run.meta, default=str, sort_keys=True),
            "_job": index_row(run.meta, run.network, item.source),
        }
        segment_rows = [
            {
                "seq": seq,
                "phase": s.phase,
                "iterations": s.iterations,
                "seconds": s.seconds,
                "batch_size": s.batch_size,
                "start_time": s.start_time,
                "epoch_start": s.epoch_start,
                "epoch_end": s.epoch_end,
                "iteration_start": s.iteration_start,
                "iteration_end": s.iteration_end,
                "line": s.line,
                "points": json.dumps(s.points),  # tuples encode as arrays
            }
            for seq, s in enumerate(run.segments)
        ]
        out.append((run_row, segment_rows))
    return file_row, out


def _insert_ignoring_hash(conn: Connection):
    """``INSERT INTO files ... ON CONFLICT (content_hash) DO NOTHING`` where the dialect has
    it (SQLite, PostgreSQL), else None."""
    name = conn.dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(files).on_conflict_do_nothing(index_elements=[files.c.content_hash])
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(files).on_conflict_do_nothing(index_elements=[files.c.content_hash])
    return None


def _write_files(conn: Connection, prepared: list[_Prepared]) -> list[int | None]:
    """Insert the prepared files (new content only), their runs and segments; file id per
    item, None for content already stored or holding only jobs already stored (job_identity)."""
    firsts: dict[str, int] = {}
    for i, (file_row, _) in enumerate(prepared):
        firsts.setdefault(file_row["content_hash"], i)
    order = sorted(set(firsts) - drop_stored_jobs(conn, prepared, runs, files), key=str)
    stmt = _insert_ignoring_hash(conn)
    if stmt is None:  # other dialects: check, then insert (a race is retried by add_files)
        known = set(conn.execute(sa.select(files.c.content_hash)
                                 .where(files.c.content_hash.in_(order))).scalars())
        order = [h for h in order if h not in known]
        stmt = files.insert()
    new: dict[str, int] = {}
    if order:
        rows = [prepared[firsts[h]][0] for h in order]
        result = conn.execute(stmt.returning(files.c.content_hash, files.c.id), rows)
        new = {content_hash: file_id for content_hash, file_id in result}
    run_rows, run_segments, job_rows = [], [], []
    for content_hash in sorted(new, key=str):
        for run_row, segment_rows in prepared[firsts[content_hash]][1]:
            row = {**run_row, "file_id": new[content_hash]}
            job_rows.append(row.pop("_job", None))
            run_rows.append(row)
            run_segments.append(segment_rows)
    if run_rows:
        ids = {
            (file_id, index): run_id
            for run_id, file_id, index in conn.execute(
                runs.insert().returning(runs.c.id, runs.c.file_id, runs.c.run_index), run_rows
            )
        }
        segment_rows = [
            {**seg, "run_id": ids[(row["file_id"], row["run_index"])]}
            for row, segs in zip(run_rows, run_segments, strict=True)
            for seg in segs
        ]
        if segment_rows:
            _bulk_insert(conn, segments, segment_rows)
        indexed = [{**job, "run_id": ids[(row["file_id"], row["run_index"])]}
                   for row, job in zip(run_rows, job_rows, strict=True) if job is not None]
        if indexed:
            _bulk_insert(conn, whole_jobs, indexed)
    return [
        new.get(file_row["content_hash"]) if firsts[file_row["content_hash"]] == i else None
        for i, (file_row, _) in enumerate(prepared)
    ]


def _bulk_insert(conn: Connection, table: sa.Table, rows: list[dict]) -> None:
    """``INSERT`` many rows of plain values (no RETURNING) through the driver's executemany,
    without SQLAlchemy's per-row parameter processing."""
    compiled = table.insert().compile(dialect=conn.dialect, column_keys=list(rows[0]))
    if compiled.positional:
        order = compiled.positiontup or []
        conn.exec_driver_sql(str(compiled), [tuple(row[k] for k in order) for row in rows])
    else:
        conn.exec_driver_sql(str(compiled), rows)
