"""The team chain, end to end on 127.0.0.1: ``jobcast stack up`` (a real private PostgreSQL
and a real MLflow tracking server on it) -> ingest into the PostgreSQL store -> fit and
register against the tracking server -> ``stack up`` again starts the forecast server ->
a forecast request -> ``stack down`` stops everything."""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from paths import DATA
from pg_server import free_port
from stack_support import run_jobcast, stack_env, stack_folder

pytestmark = pytest.mark.slow

JOB = {"network": "resnet50", "deployment": "nvidia-a100-sxm4-40gb-x8", "batch_size": 2048,
       "iterations": 20000, "phase": "train"}


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _json(done: subprocess.CompletedProcess):
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _pieces(status: dict) -> dict[str, dict]:
    return {p["name"]: p for p in status["pieces"]}


def _stack_env(folder: Path) -> dict[str, str]:
    """The variables ``D/env`` exports."""
    out = {}
    for line in (folder / "env").read_text(encoding="utf-8").splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        out[key] = shlex.split(value)[0]
    return out


def _mlflow_runs_in_postgres(folder: Path, port: int) -> int:
    """Rows of MLflow's ``runs`` table in the stack's ``mlflow`` database (the superuser's:
    the store's roles may not connect to it)."""
    import sqlalchemy as sa

    from jobcast.cli.postgres import LocalPostgres

    engine = sa.create_engine(LocalPostgres(folder, port).url("mlflow"))
    with engine.connect() as conn:
        count = conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one()
    engine.dispose()
    return int(count)


def test_ingest_fit_register_serve_on_postgres_and_a_tracking_server():
    folder = stack_folder("jobcast-stack-")
    ports = [free_port() for _ in range(3)]
    env = stack_env()
    stack = ["--dir", str(folder)]
    try:
        first = _pieces(_json(run_jobcast(
            "stack", "up", *stack, "--pg-port", str(ports[0]), "--mlflow-port", str(ports[1]),
            "--serve-port", str(ports[2]), "--json", env=env)))
        assert first["postgres"]["running"] and first["mlflow"]["running"]
        assert "***" in first["postgres"]["url"]  # the password is not printed
        assert not first["forecast"]["running"]
        assert "jobcast register" in first["forecast"]["note"]
        urls = _stack_env(folder)
        store, tracking = urls["JOBCAST_STORE"], urls["MLFLOW_TRACKING_URI"]
        assert store.startswith("postgresql+psycopg://") and tracking == first["mlflow"]["url"]

        ingested = _json(run_jobcast("ingest", str(DATA / "mlperf"), "--store", store, "--json",
                                  env=env))
        assert ingested["added"] and not ingested["rejected"]
        fitted = _json(run_jobcast("fit", "--store", store, "--tracking-uri", tracking, "--json",
                                env=env))
        assert any(str(m.get("model") or m.get("model_id", "")).startswith("e2e/")
                   for m in fitted)
        registered = _json(run_jobcast("register", "--store", store, "--tracking-uri", tracking,
                                    "--no-scale-calibration", "--json", env=env))
        assert registered["promoted"] and registered["version"] == "1"
        # the tracking server keeps its runs in PostgreSQL and its artifacts in D/artifacts
        assert _mlflow_runs_in_postgres(folder, ports[0]) >= 2
        assert any(p.is_file() for p in (folder / "artifacts").rglob("*"))

        second = _pieces(_json(run_jobcast("stack", "up", *stack, "--json", env=env)))
        assert all(p["running"] for p in second.values()), second
        request = urllib.request.Request(
            f"{second['forecast']['url']}/invocations",
            data=json.dumps({"dataframe_records": [JOB]}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as resp:
            [served] = json.load(resp)["predictions"]
        assert served["error"] is None
        assert 0 < served["low"] <= served["seconds"] <= served["high"]
        local = _json(run_jobcast("predict", "--store", store, "--network", JOB["network"],
                               "--deployment", JOB["deployment"], "--batch-size",
                               str(JOB["batch_size"]), "--iterations", str(JOB["iterations"]),
                               "--json", env=env))
        # the same models answer: those fitted into the PostgreSQL store (the local forecast
        # may add calibration the registered version was built without)
        assert served["model"] == local["model"]
        assert served["seconds"] == pytest.approx(local["seconds"], rel=0.05)
        logs = run_jobcast("stack", "logs", *stack, "--service", "forecast", "-n", "5", env=env)
        assert logs.returncode == 0 and "forecast" in logs.stdout
    finally:
        down = run_jobcast("stack", "down", *stack, "--json", env=env, timeout=120)
        try:
            assert not any(p["running"] for p in _json(down)["pieces"])
            assert not any(_listening(p) for p in ports)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
