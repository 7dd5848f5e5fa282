"""A real, private PostgreSQL server for tests and benchmarks (no mocks).

* :func:`ensure_postgres` finds the server programs (``initdb``, ``pg_ctl``), installing the
  Debian package (``apt-get install -y postgresql``) when they are missing; it raises
  :class:`PostgresUnavailable` (tests skip with the reason) if that fails.
* :func:`start_private` runs one cluster in a fresh temporary folder on 127.0.0.1 and a free
  port, as :class:`jobcast.cli.postgres.LocalPostgres` (the class ``jobcast stack`` runs),
  without fsync (test data is thrown away). The folder lives under the system temp folder,
  not pytest's private one: as root the server runs as ``postgres``, which must enter it.
* :func:`new_database` gives each test its own empty database on that server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobcast.cli.postgres import LocalPostgres, PostgresUnavailable, find_bin

__all__ = ["PostgresUnavailable", "ensure_postgres", "free_port", "new_database",
           "start_private"]


def ensure_postgres() -> Path:
    """The folder of PostgreSQL's server programs; installs Debian's package if needed."""
    try:
        return find_bin()
    except PostgresUnavailable as missing:
        if not shutil.which("apt-get"):
            raise PostgresUnavailable(f"{missing}; no apt-get to install it") from None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        done = subprocess.run(["apt-get", "install", "-y", "postgresql"], env=env,
                              capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PostgresUnavailable(f"apt-get install -y postgresql failed: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PostgresUnavailable(
            f"apt-get install -y postgresql failed (exit {done.returncode}): {' | '.join(tail)}")
    return find_bin()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def start_private(fast: bool = True) -> Iterator[LocalPostgres]:
    """A running private server in a temporary folder; stopped and deleted afterwards."""
    ensure_postgres()
    root = Path(tempfile.mkdtemp(prefix="jobcast-pg-"))
    server = LocalPostgres(root, free_port(), fast=fast)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def new_database(server: LocalPostgres, prefix: str = "t") -> Iterator[str]:
    """A fresh empty database on ``server``; yields its SQLAlchemy URL, drops it after."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    server.create_database(name)
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)
