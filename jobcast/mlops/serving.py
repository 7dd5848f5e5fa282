"""Serving the registered forecaster: the ``mlflow models serve`` command line, its
environment, and a runner that stops the whole process group on SIGTERM or Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def serve_argv(model_uri: str, port: int, host: str = "127.0.0.1", workers: int = 1,
               timeout: int = 60) -> list[str]:
    """The ``mlflow models serve`` command line jobcast runs (local environment)."""
    return [
        sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri,
        "--env-manager", "local", "-p", str(port), "--host", host,
        "-w", str(workers), "-t", str(timeout),
    ]


def serve_env(tracking_uri: str) -> dict[str, str]:
    """The server's environment: the caller's, pointed at the tracking/registry URI.

    The interpreter's folder goes first on PATH: MLflow starts ``uvicorn`` by name, which an
    un-activated virtual environment would not find.
    """
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, *[p for p in env.get("PATH", "").split(os.pathsep)
                                              if p and p != bin_dir]])
    env["MLFLOW_TRACKING_URI"] = tracking_uri
    env["MLFLOW_REGISTRY_URI"] = tracking_uri
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_server(argv: list[str], env: dict[str, str]) -> int:
    """Run the server in its own process group; Ctrl-C or SIGTERM stops the whole group.

    (``mlflow models serve`` starts uvicorn as a child that outlives a signal sent to the
    parent alone.)
    """
    proc = subprocess.Popen(argv, env=env, start_new_session=True)

    def stop(*_args) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, lambda *a: stop())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop()
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait()
    finally:
        stop()
        signal.signal(signal.SIGTERM, previous)
