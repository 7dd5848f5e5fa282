"""What the tests that run a whole ``jobcast stack`` (a real PostgreSQL and MLflow server, as
subprocesses) share: a clean environment, one ``jobcast`` command as a subprocess
(:func:`run_jobcast`: where a test checks a process boundary) or in this process
(:func:`cli`: everywhere else; a subprocess costs seconds of imports), and a folder for the
stack once PostgreSQL's programs are there (else the test is skipped with the reason)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from paths import REPO

# settings of the caller's shell that would point a stack's commands elsewhere
FOREIGN = ("JOBCAST_STORE", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI",
           "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def stack_env() -> dict[str, str]:
    """This process's environment for a stack's commands: the repository importable, no
    telemetry, nothing of :data:`FOREIGN`."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                         if p)}
    for key in FOREIGN:
        env.pop(key, None)
    return env


def run_jobcast(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    """One ``python -m jobcast`` command from the repository root, its output captured."""
    return subprocess.run([sys.executable, "-m", "jobcast", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=REPO)


def cli(*args: str, env: dict[str, str] | None = None):
    """One ``jobcast`` command in this process, through the console script's own ``main``
    (its exit codes and error lines, as :func:`run_jobcast` sees them) under Click's runner:
    stdout, and stderr in ``output``; ``env`` set for its duration, :data:`FOREIGN` unset."""
    import click
    from click.testing import CliRunner

    from jobcast.cli.app import main

    @click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                     "help_option_names": []})
    @click.pass_context
    def jobcast(ctx: click.Context) -> None:
        argv, sys.argv = sys.argv, ["jobcast", *ctx.args]
        try:
            main()
        finally:
            sys.argv = argv

    settings: dict[str, str | None] = {key: None for key in FOREIGN}
    settings.update(env or {})
    return CliRunner().invoke(jobcast, list(args), env=settings)


def stack_folder(prefix: str) -> Path:
    """A fresh folder for a stack, once PostgreSQL's programs are there (installed if
    missing; else the test is skipped). Not pytest's private tmp folder: as root the server
    runs as ``postgres``, which must enter it."""
    from pg_server import PostgresUnavailable, ensure_postgres

    try:
        ensure_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")
    return Path(tempfile.mkdtemp(prefix=prefix))
