"""Where jobcast keeps its data when no URL is given: one data directory.

Rules:

- The data directory is ``$JOBCAST_HOME``, else ``$XDG_DATA_HOME/jobcast``, else
  ``~/.local/share/jobcast`` (the XDG base-directory default; defined once in
  :func:`fleet.home.data_home`, re-exported here). Nothing here creates it: a
  command that writes creates it when it writes (:func:`ensure_home`).
- The default store is ``sqlite:///<home>/jobcast.db``; ``--store`` and ``$JOBCAST_STORE``
  win over it (:func:`ingest.store.store_url`).
- The default MLflow tracking is ``sqlite:///<folder>/mlflow.db`` with artifacts in
  ``<folder>/mlartifacts``, where the folder is the SQLite store's own folder (so the default
  store and its tracking share the data directory) and the data directory for any other store;
  ``--tracking-uri`` and ``$MLFLOW_TRACKING_URI`` win over it.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleet.home import data_home as data_home  # re-exported: the one definition

STORE_FILE = "jobcast.db"
TRACKING_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"


def default_store_url() -> str:
    """``sqlite:///<home>/jobcast.db``."""
    return f"sqlite:///{data_home() / STORE_FILE}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (``None``: not SQLite, in memory, or a ``file:`` URI)."""
    if not url.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    try:
        database = make_url(url).database
    except Exception:  # noqa: BLE001 - not a URL: the store's opener reports it
        return None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def tracking_folder(store_url: str | None) -> Path:
    """The folder of the default MLflow database: a SQLite store's folder, else the data
    directory (``store_url`` ``None``: ``$JOBCAST_STORE``, else the default store)."""
    url = store_url or os.environ.get("JOBCAST_STORE") or default_store_url()
    path = sqlite_path(url)
    return path.resolve().parent if path is not None else data_home()


def default_tracking_uri(store_url: str | None) -> str:
    """``sqlite:///<tracking folder>/mlflow.db`` (see :func:`tracking_folder`)."""
    return f"sqlite:///{tracking_folder(store_url) / TRACKING_FILE}"


def ensure_home(url: str) -> None:
    """Create the data directory when ``url`` is a SQLite file in it (the default store or
    MLflow database), for a command about to write there; any other URL is left alone (a
    missing folder elsewhere is the user's to fix)."""
    path = sqlite_path(url)
    if path is not None and path.resolve().parent == data_home().resolve():
        path.resolve().parent.mkdir(parents=True, exist_ok=True)
