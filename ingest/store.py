"""The store: ingested files, their runs and phase segments, and fitted models.

Any SQLAlchemy URL works; the default is a SQLite file ``jobcast.db`` in the working
directory. Each ingested file is written in one transaction, keyed by the SHA-256 of its
content, so a file is stored whole or not at all and never twice. Saving fitted models
replaces them all in one transaction; a database that refuses them raises
:class:`StoreError` (the old models stay).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ingest.events import ParsedRun

DEFAULT_STORE = "sqlite:///jobcast.db"
SCHEMA_VERSION = 1

metadata = sa.MetaData()

files = sa.Table(
    "files",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("format", sa.String(32), nullable=False),
    sa.Column("size_bytes", sa.Integer, nullable=False),
    sa.Column("ingested_at", sa.Float, nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("file_id", sa.Integer, sa.ForeignKey("files.id"), nullable=False, index=True),
    sa.Column("run_index", sa.Integer, nullable=False),
    sa.Column("network", sa.String(128), nullable=False, index=True),
    sa.Column("deployment", sa.String(128), nullable=False, index=True),
    sa.Column("accelerator", sa.String(128)),
    sa.Column("accelerators_per_node", sa.Integer),
    sa.Column("nodes", sa.Integer),
    sa.Column("framework", sa.String(256)),
    sa.Column("batch_size", sa.Integer, nullable=False),
    sa.Column("start_time", sa.Float),
    sa.Column("meta", sa.Text, nullable=False, default="{}"),
    sa.UniqueConstraint("file_id", "run_index"),
)

segments = sa.Table(
    "segments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("phase", sa.String(8), nullable=False),
    sa.Column("iterations", sa.Float, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
    sa.Column("batch_size", sa.Integer),
    sa.Column("start_time", sa.Float),
    sa.Column("epoch_start", sa.Float),
    sa.Column("epoch_end", sa.Float),
    sa.Column("iteration_start", sa.Integer),
    sa.Column("iteration_end", sa.Integer),
    sa.Column("line", sa.Integer),
    sa.Column("points", sa.Text, nullable=False, default="[]"),
    sa.UniqueConstraint("run_id", "seq"),
)

fitted_models = sa.Table(
    "models",
    metadata,
    sa.Column("model_id", sa.String(512), primary_key=True),
    sa.Column("network", sa.String(128), nullable=False),
    sa.Column("deployment", sa.String(128), nullable=False),
    sa.Column("phase", sa.String(8), nullable=False),
    sa.Column("stack", sa.String(256), nullable=False),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("fitted_at", sa.Float, nullable=False),
)

schema_info = sa.Table(
    "schema_info",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True),
)


class StoreError(RuntimeError):
    """The database refused a write; the message says what was being written and why."""


def store_url(url: str | None = None) -> str:
    """The store URL: the argument, else ``$JOBCAST_STORE``, else ``sqlite:///jobcast.db``."""
    return url or os.environ.get("JOBCAST_STORE") or DEFAULT_STORE


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
    framework: str | None
    batch_size: int
    start_time: float | None
    meta: dict


class Store:
    """Thin access layer over the SQL schema above."""

    def __init__(self, url: str | None = None):
        self.url = store_url(url)
        self.engine: Engine = sa.create_engine(self.url, future=True)
        if self.engine.dialect.name == "sqlite":
            # Writers wait for each other instead of failing at once.
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            if conn.execute(sa.select(schema_info.c.version)).first() is None:
                conn.execute(schema_info.insert().values(version=SCHEMA_VERSION))

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

    def add_file(
        self, *, content_hash: str, source: str, fmt: str, size: int, parsed: list[ParsedRun]
    ) -> int | None:
        """Write a file and all its runs in one transaction; None if the content is known."""
        with self.transaction() as conn:
            exists = conn.execute(
                sa.select(files.c.id).where(files.c.content_hash == content_hash)
            ).first()
            if exists:
                return None
            file_id = conn.execute(
                files.insert().values(
                    content_hash=content_hash,
                    source=source,
                    format=fmt,
                    size_bytes=size,
                    ingested_at=time.time(),
                )
            ).inserted_primary_key[0]
            for index, run in enumerate(parsed):
                _insert_run(conn, file_id, index, run)
            return int(file_id)

    def runs(self, network: str | None = None, deployment: str | None = None) -> list[StoredRun]:
        query = (
            sa.select(runs, files.c.source, files.c.content_hash, files.c.format)
            .join(files, runs.c.file_id == files.c.id)
            .order_by(files.c.source, runs.c.run_index)
        )
        if network:
            query = query.where(runs.c.network == network)
        if deployment:
            query = query.where(runs.c.deployment == deployment)
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
                framework=r["framework"],
                batch_size=r["batch_size"],
                start_time=r["start_time"],
                meta=json.loads(r["meta"] or "{}"),
            )
            for r in rows
        ]

    def segments(self, run_ids: list[int] | None = None) -> list[dict]:
        """Segments as dicts (``points`` decoded), ordered by run and sequence."""
        query = sa.select(segments).order_by(segments.c.run_id, segments.c.seq)
        if run_ids is not None:
            query = query.where(segments.c.run_id.in_(run_ids))
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        out = []
        for r in rows:
            d = dict(r)
            d["points"] = [tuple(p) for p in json.loads(d["points"] or "[]")]
            out.append(d)
        return out

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

    def save_models(self, models: list[dict]) -> None:
        """Replace all fitted models with ``models`` (dicts with key fields and params).

        One transaction: on any database error nothing changes and :class:`StoreError` says
        why (e.g. two models with one ``model_id``).
        """
        try:
            with self.transaction() as conn:
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

    def load_models(self) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(fitted_models)).mappings().all()
        return [{**dict(r), "params": json.loads(r["params"])} for r in rows]


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout = 30000")
    cur.execute("PRAGMA foreign_keys = ON")
    cur.close()


def _insert_run(conn: Connection, file_id: int, index: int, run: ParsedRun) -> None:
    dep = run.deployment
    run_id = conn.execute(
        runs.insert().values(
            file_id=file_id,
            run_index=index,
            network=run.network,
            deployment=run.meta.get("deployment_key") or (dep.key if dep else None),
            accelerator=dep.accelerator if dep else None,
            accelerators_per_node=dep.per_node if dep else None,
            nodes=dep.nodes if dep else None,
            framework=run.framework,
            batch_size=run.batch_size,
            start_time=run.start_time,
            meta=json.dumps(run.meta, default=str, sort_keys=True),
        )
    ).inserted_primary_key[0]
    conn.execute(
        segments.insert(),
        [
            {
                "run_id": run_id,
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
                "points": json.dumps([list(p) for p in s.points]),
            }
            for seq, s in enumerate(run.segments)
        ],
    )
