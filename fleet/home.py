"""Where jobcast keeps its data: the one data directory, and its cache folder.

Rules: the data directory is ``$JOBCAST_HOME``, else ``$XDG_DATA_HOME/jobcast`` (an absolute
value only, as the XDG base-directory spec says), else ``~/.local/share/jobcast``. Nothing here
creates it: a command that writes creates it when it writes. :func:`cache_dir` is its
``cache`` folder (derived data jobcast can rebuild, e.g. traced network specs), never the
working directory. ``ingest.home`` re-exports :func:`data_home` with the store's defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR = "cache"


def data_home() -> Path:
    """The data directory (absolute; not created)."""
    home = os.environ.get("JOBCAST_HOME", "").strip()
    if home:
        return Path(home).expanduser().resolve()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():  # the XDG spec ignores a relative value
        return Path(xdg) / "jobcast"
    return Path.home() / ".local" / "share" / "jobcast"


def cache_dir(kind: str) -> Path:
    """``<data directory>/cache/<kind>`` (not created)."""
    return data_home() / CACHE_DIR / kind


__all__ = ["CACHE_DIR", "cache_dir", "data_home"]
