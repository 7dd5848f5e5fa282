"""Schema versions of the store: Alembic revisions in ``versions/``, shipped with the package.

Rules:

- The revision a store is at lives in the table :data:`VERSION_TABLE`
  (``jobcast_alembic_version``, not ``alembic_version``: an MLflow database uses that name).
- A store made before versioning (table ``schema_info`` holding 1, no version table) is at
  revision ``0001``; a database with none of the store's tables is empty.
- :func:`ensure_head` (what ``Store()`` runs) accepts a store at :data:`HEAD` only. An empty
  database is created at HEAD directly (today's tables, stamped HEAD) under a lock, so
  processes opening a new store at once create it once. An older store is refused with
  "run ``jobcast store upgrade``": no store is migrated implicitly, SQLite file or shared
  PostgreSQL alike. A store at a revision this code does not know (made by a newer jobcast)
  is refused too.
- :func:`upgrade` runs the revisions from the store's to HEAD in one locked transaction
  (PostgreSQL: an advisory lock; SQLite: ``BEGIN IMMEDIATE``): all of them or none.
- :data:`REVISIONS` lists the chain in order so opening a store needs no Alembic import; a
  test checks it against ``versions/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fleet.credentials import hide_password
from ingest.errors import StoreError

REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0004", "0005")
HEAD = REVISIONS[-1]
VERSION_TABLE = "jobcast_alembic_version"
LEGACY_TABLE = "schema_info"
# Tables of the store at any revision: a database holding one of them unversioned is not
# empty, and is not ours to create tables in.
STORE_TABLES = ("files", "runs", "segments", "models", "rejections", "artifacts",
                "whole_jobs")
SCRIPTS = Path(__file__).resolve().parent
_PG_LOCK = 0x6A6F6263  # "jobc": the advisory lock key of schema changes

_version = sa.Table(
    VERSION_TABLE, sa.MetaData(),
    sa.Column("version_num", sa.String(32), primary_key=True),
)


class SchemaVersionError(StoreError):
    """The store's schema is not the one this code reads; the message says what to do. A
    :class:`~ingest.errors.StoreError` (so an ``IngestError`` and a ``RuntimeError``)."""

    kind: ClassVar[str] = "store"


@dataclass(frozen=True)
class SchemaState:
    """Where a store stands: its revision (None: empty database) against :data:`HEAD`."""

    revision: str | None
    head: str = HEAD

    @property
    def status(self) -> str:
        """``current``, ``empty``, ``outdated`` or ``newer``."""
        if self.revision == self.head:
            return "current"
        if self.revision is None:
            return "empty"
        return "outdated" if self.revision in REVISIONS else "newer"


def revision_of(conn: Connection) -> str | None:
    """The store's revision; None for a database without the store's tables.

    Raises :class:`SchemaVersionError` for a database that holds store tables but no version
    (not a jobcast store, e.g. an MLflow database) or a malformed version record.
    """
    inspector = sa.inspect(conn)
    if inspector.has_table(VERSION_TABLE):
        found = list(conn.execute(sa.select(_version.c.version_num)).scalars())
        if len(found) > 1:
            raise SchemaVersionError(
                f"table {VERSION_TABLE} holds {len(found)} revisions {found}, not one")
        if found:
            return str(found[0])
    if inspector.has_table(LEGACY_TABLE):
        versions = list(conn.execute(sa.text(f"SELECT version FROM {LEGACY_TABLE}")).scalars())
        if versions == [1]:
            return REVISIONS[0]
        raise SchemaVersionError(f"table {LEGACY_TABLE} holds {versions}, not the version 1 "
                                 "stores had before migrations")
    present = [t for t in STORE_TABLES if inspector.has_table(t)]
    if present:
        raise SchemaVersionError(
            f"the database holds tables {', '.join(present)} but no jobcast schema version: "
            "not a jobcast store (an MLflow database?); give the store its own database")
    return None


def state(engine: Engine) -> SchemaState:
    """The schema revision the database at ``engine`` is at."""
    with engine.connect() as conn:
        return SchemaState(revision_of(conn))


def _refusal(url: str, found: SchemaState) -> SchemaVersionError:
    url = hide_password(url)
    if found.status == "outdated":
        return SchemaVersionError(
            f"the store is at schema revision {found.revision}, this jobcast reads {HEAD}: "
            f"run `jobcast store upgrade --store {url}` (it migrates the data in place)")
    return SchemaVersionError(
        f"the store is at schema revision {found.revision}, newer than this jobcast knows "
        f"(revisions {', '.join(REVISIONS)}): upgrade jobcast to use this store")


@contextmanager
def locked(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that holds the store's schema lock; commits on success."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            # pysqlite does not BEGIN before DDL by itself: take the write lock explicitly,
            # so creation and migration are one transaction and writers wait.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
        try:
            yield conn
        except BaseException:
            conn.rollback()
            raise
        conn.commit()


def ensure_head(engine: Engine, metadata: sa.MetaData, url: str) -> None:
    """Accept a store at HEAD, create an empty one at HEAD, refuse any other (module rules)."""
    try:
        if state(engine).status == "current":
            return
    except SchemaVersionError:
        pass  # read without the lock, perhaps mid-creation by another process: decide below
    with locked(engine) as conn:  # a consistent view: no one creates or migrates meanwhile
        found = SchemaState(revision_of(conn))
        if found.status == "empty":
            metadata.create_all(conn)
            _version.create(conn, checkfirst=True)
            conn.execute(_version.insert().values(version_num=HEAD))
        elif found.status != "current":
            raise _refusal(url, found)


def upgrade(engine: Engine, target: str = "head") -> tuple[str | None, str]:
    """Migrate the store to ``target`` (default HEAD); returns (revision before, after).

    An empty database is built by running every revision. Refuses a newer store.
    """
    from alembic import command
    from alembic.config import Config

    with locked(engine) as conn:
        before = SchemaState(revision_of(conn))
        if before.status == "newer":
            raise _refusal(str(engine.url), before)
        if before.revision is not None and not sa.inspect(conn).has_table(VERSION_TABLE):
            # a store from before versioning: record the revision it is at
            _version.create(conn, checkfirst=True)
            conn.execute(_version.insert().values(version_num=before.revision))
        config = Config()
        config.set_main_option("script_location", str(SCRIPTS))
        config.attributes["connection"] = conn
        command.upgrade(config, target)
        after = revision_of(conn)
    return before.revision, str(after)


def script_revisions() -> list[str]:
    """The revisions in ``versions/``, oldest first (imports Alembic)."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory(str(SCRIPTS))
    return [s.revision for s in reversed(list(scripts.walk_revisions()))]
