"""The door to the store for the commands and notebooks: open one, read its schema state,
migrate it (``jobcast store``), and the helpers that name it.

Rules:

- A store is named by a URL: the argument, else ``$JOBCAST_STORE``, else ``jobcast.db`` in the
  data directory (:func:`store_url`). URLs are shown without their password
  (:func:`hide_password`).
- :func:`open_store` with ``create=False`` (every reader: runs, predict, compare, report,
  fit, ...) never creates a SQLite file: a default store that does not exist yet reads as an
  empty one (:func:`empty_store`: a fresh machine still forecasts from the shipped data), and
  a named one (``--store``, ``$JOBCAST_STORE``) that does not exist is a :class:`StoreError`
  (a misspelled name). Writers (``ingest``, set-up commands) create the store on first use.
- :func:`history_store` answers None where the store certainly holds no history, read without
  SQLAlchemy and creating nothing (:func:`ingest.store_probe.holds_no_history`), so a forecast
  from nothing loads neither SQLAlchemy nor pandas.
- Every failure to open, read or migrate a store is a :class:`StoreError` (a
  :class:`fleet.errors.JobcastError`) whose message names the store (without its password)
  and the reason; nothing else escapes on purpose.
- Importing this module loads no SQLAlchemy: ``Store``, ``StoreError``, ``StoredRun`` and
  ``SchemaVersionError`` are re-exported from :mod:`ingest.store` when first used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.credentials import hide_password
from ingest.home import data_home, sqlite_path

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ingest.migrations import SchemaVersionError
    from ingest.store import Store, StoredRun, StoreError

__all__ = ["SchemaVersionError", "Store", "StoreError", "StoreStatus", "StoreUpgrade",
           "StoredRun", "data_home", "empty_store", "hide_password", "history_store",
           "open_store", "open_store_later", "sqlite_path", "store_status", "store_url",
           "upgrade_store"]

_LAZY = {"Store": "ingest.store", "StoreError": "ingest.store", "StoredRun": "ingest.store",
         "SchemaVersionError": "ingest.migrations"}


def __getattr__(name: str) -> Any:
    """The store's classes, imported (with SQLAlchemy) when first asked for (module rules)."""
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _store_error(message: str) -> StoreError:
    from ingest.store import StoreError

    return StoreError(message)


def store_url(url: str | None = None) -> str:
    """The store URL a command uses: ``url``, else ``$JOBCAST_STORE``, else the default."""
    from ingest.store import store_url as resolve

    return resolve(url)


def _named(url: str | None) -> str:
    return hide_password(url) if url else "(default)"


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """The store at ``url`` (module rules for ``create``); a bad URL, an unreachable server or
    a missing named store raise :class:`StoreError`."""
    from ingest.store import Store

    if not create:
        full = store_url(url)
        path = sqlite_path(full)
        if path is not None and not path.exists():
            if url or os.environ.get("JOBCAST_STORE"):
                where = "--store" if url else "$JOBCAST_STORE"
                raise _store_error(f"no store at {path.resolve()}; ingest first (`jobcast "
                                   f"ingest LOGS...`) or check {where}")
            return empty_store(full)
    try:
        return Store(url)
    except Exception as exc:  # bad URL, unreachable server, unreadable file
        raise _store_error(f"cannot open store {_named(url)}: {exc}") from exc


def empty_store(url: str) -> Store:
    """An empty store in memory that names itself ``url``: the history of a store that does
    not exist yet, read without creating it."""
    import sqlalchemy as sa
    from sqlalchemy.pool import StaticPool

    from ingest.migrations import ensure_head
    from ingest.store import Store, metadata

    store = Store.__new__(Store)
    store.url = url
    store.engine = sa.create_engine("sqlite://", poolclass=StaticPool,
                                    connect_args={"check_same_thread": False})
    ensure_head(store.engine, metadata, "sqlite://")
    return store


def open_store_later(url: str | None = None) -> Callable[[], Store]:
    """An opener for a command that may fail before it writes: an existing store (or a
    server) is opened and checked now; a SQLite file that does not exist yet is created only
    when the opener is called, so a failed command leaves no empty file behind. Raises
    :class:`StoreError` now on a bad URL or a missing folder."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    full = store_url(url)
    try:
        parsed = make_url(full)
    except ArgumentError as exc:
        raise _store_error(f"cannot open store {_named(url)}: {exc}") from exc
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:") or Path(path).exists():
        st = open_store(url)
        return lambda: st
    folder = Path(path).resolve().parent
    if not folder.is_dir() and folder != data_home().resolve():  # the data dir is made
        raise _store_error(f"cannot open store {full}: folder {folder} does not exist")
    return lambda: open_store(url)


def history_store(url: str | None = None) -> Store | None:
    """The store a forecast reads history from: None where it certainly holds none (module
    rules: no SQLAlchemy, no file created), else :func:`open_store` without creating."""
    from ingest.store_probe import holds_no_history

    return None if holds_no_history(url) else open_store(url, create=False)


# -- the schema: `jobcast store version` and `jobcast store upgrade` ---------------------------


@dataclass(frozen=True)
class StoreStatus:
    """A store's schema revision against this jobcast's (``status``: current, empty,
    outdated or newer; ``exists`` False: a SQLite file not created yet, read as empty)."""

    store: str  # the URL, without its password
    revision: str | None
    head: str
    status: str
    revisions: tuple[str, ...] = field(default=())
    exists: bool = True

    @property
    def usable(self) -> bool:
        """Whether commands may use the store as it is (current, or empty until first use)."""
        return self.status in ("current", "empty")

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``jobcast store version --json`` (``exists`` only when False)."""
        out: dict[str, Any] = {"store": self.store, "revision": self.revision,
                               "head": self.head, "status": self.status,
                               "revisions": list(self.revisions)}
        if not self.exists:
            out["exists"] = False
        return out


@dataclass(frozen=True)
class StoreUpgrade:
    """What ``jobcast store upgrade`` did: the revision before (None: empty) and after."""

    store: str  # the URL, without its password
    before: str | None
    after: str

    @property
    def changed(self) -> bool:
        """Whether any revision ran."""
        return self.before != self.after

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``jobcast store upgrade --json``."""
        return {"store": self.store, "from": self.before, "to": self.after,
                "changed": self.changed}


def _engine(url: str) -> Engine:
    from ingest.store import make_engine

    try:
        return make_engine(url)
    except Exception as exc:  # bad URL, missing driver
        raise _store_error(f"cannot open store {hide_password(url)}: {exc}") from exc


def store_status(url: str | None = None) -> StoreStatus:
    """The store's schema state, read and never created (a SQLite file that does not exist
    is ``empty`` with ``exists`` False); :class:`StoreError` when it cannot be read."""
    from ingest.migrations import HEAD, REVISIONS, SchemaVersionError, state

    full = store_url(url)
    path = sqlite_path(full)
    if path is not None and not path.exists():
        return StoreStatus(hide_password(full), None, HEAD, "empty", tuple(REVISIONS),
                           exists=False)
    engine = _engine(full)
    try:
        found = state(engine)
    except SchemaVersionError as exc:
        raise _store_error(f"store {hide_password(full)}: {exc}") from exc
    except Exception as exc:  # unreachable server, unreadable file
        reason = getattr(exc, "orig", None) or exc
        raise _store_error(f"cannot open store {hide_password(full)}: {reason}") from exc
    finally:
        engine.dispose()
    return StoreStatus(hide_password(full), found.revision, HEAD, found.status,
                       tuple(REVISIONS))


def upgrade_store(url: str | None = None) -> StoreUpgrade:
    """Migrate the store to this jobcast's revision (all steps or none; a no-op when
    current); :class:`StoreError` when it cannot (a newer store, a refused migration)."""
    from ingest.migrations import SchemaVersionError, upgrade

    full = store_url(url)
    engine = _engine(full)
    try:
        before, after = upgrade(engine)
    except SchemaVersionError as exc:
        raise _store_error(f"store {hide_password(full)}: {exc}") from exc
    except Exception as exc:  # unreachable server, a migration the database refused
        reason = getattr(exc, "orig", None) or exc
        raise _store_error(f"cannot upgrade store {hide_password(full)} (nothing changed): "
                           f"{reason}") from exc
    finally:
        engine.dispose()
    return StoreUpgrade(hide_password(full), before, after)


def run_clocks(store: Store, runs: list[Any]) -> dict[int, tuple[float | None, str]]:
    """Run id -> (wall seconds, state) of ``runs`` (:func:`models.history.run_clock`: a
    scheduler's recorded time and state, else the run's own start/stop records), as
    ``jobcast runs`` shows them."""
    from models.history import run_clock

    totals: dict[int, dict[str, dict]] = {}
    wanted = {r.id for r in runs}
    for row in store.phase_totals():
        if row["run_id"] in wanted:
            totals.setdefault(row["run_id"], {})[row["phase"]] = row
    return {r.id: run_clock(r.meta if isinstance(r.meta, dict) else {}, totals.get(r.id, {}))
            for r in runs}
