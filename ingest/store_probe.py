"""Whether a store holds no history, found without SQLAlchemy (issue 23, speed).

A forecast from a store without runs is a forecast without history (the layerwise routes
alone); opening the store for it would cost SQLAlchemy's import and reading its (empty) run
summaries pandas' (together about 0.3 s of a fresh ``jobcast predict``). This probe answers
"certainly nothing here" with the standard library's ``sqlite3``, read-only, before anything
heavier is built.

Rules (:func:`holds_no_history`):

- Only a plain SQLite file URL is probed (``sqlite:///path``: no query, ``%`` escape or ``~``);
  anything else (PostgreSQL, in memory, a ``file:`` URI, a URL with options) is "unsure"
  and takes the normal path (``ingest.store.Store``).
- The file is opened read-only (``mode=ro`` URI): the probe never creates or changes a
  file. A default store whose file does not exist yet holds nothing (it reads as empty); a
  named one that does not exist is "unsure" (its opener reports the misspelled name).
- Nothing there: a database without the store's tables (an empty database, which opening
  the store would create at the code's revision), or a store at the code's revision
  (:func:`head_revision`) whose ``runs``, ``models`` and ``artifacts`` tables hold no row.
  Everything else is "unsure": another revision (its opener refuses it), a database with
  the store's tables but no version, an unreadable, locked or non-SQLite file, any row.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ingest.home import default_store_url

SQLITE_PREFIX = "sqlite:///"
VERSION_TABLE = "jobcast_alembic_version"  # as ingest.migrations names them (a test checks)
LEGACY_TABLE = "schema_info"
STORE_TABLES = ("files", "runs", "segments", "models", "rejections", "artifacts", "whole_jobs")
HISTORY_TABLES = ("runs", "models", "artifacts")  # what a forecaster reads from a store
VERSIONS = Path(__file__).resolve().parent / "migrations" / "versions"


def head_revision() -> str | None:
    """The newest revision shipped in ``ingest/migrations/versions`` (file names start with
    their revision, e.g. ``0004_...``): ``ingest.migrations.HEAD`` without its import."""
    found = sorted(p.name.split("_", 1)[0] for p in VERSIONS.glob("[0-9]*_*.py"))
    return found[-1] if found else None


def sqlite_file(url: str) -> Path | None:
    """The file of a plain SQLite URL (module rules), else None."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    database = url[len(SQLITE_PREFIX):]
    if not database or any(c in database for c in "?%#") or database == ":memory:" \
            or database.startswith(("file:", "~")):
        return None
    return Path(database)


def holds_no_history(url: str | None) -> bool:
    """True when the store ``url`` names (None: ``$JOBCAST_STORE``, else the default store)
    certainly holds no run, fitted model or fit artifact; False when unsure (module rules)."""
    named = url or os.environ.get("JOBCAST_STORE")
    path = sqlite_file(named or default_store_url())
    if path is None:
        return False
    if not path.exists():
        return not named
    if not path.is_file():
        return False
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return False
    try:
        return _empty(conn)
    except sqlite3.Error:  # not a database, locked, unreadable
        return False
    finally:
        conn.close()


def _empty(conn: sqlite3.Connection) -> bool:
    tables = {row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables & {*STORE_TABLES, VERSION_TABLE, LEGACY_TABLE}:
        return True  # an empty database
    if VERSION_TABLE not in tables or not set(HISTORY_TABLES) <= tables:
        return False
    found = [row[0] for row in conn.execute(f"SELECT version_num FROM {VERSION_TABLE}")]
    if found != [head_revision()]:
        return False
    return all(conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None
               for table in HISTORY_TABLES)
