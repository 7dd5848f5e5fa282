"""``jobcast ingest mlflow+URI``: a real ``mlflow server`` on 127.0.0.1 (SQLite backend in a
temporary folder) holding runs of several experiments, each a tiny CNN trained a few steps on
this CPU by tests/ingest/history_artifacts.py (which times every step itself).

The three steps: one command ingests every experiment's finished runs (a run left RUNNING is
reported, not stored); the same command again adds nothing; a run logged afterwards is
picked up. The same runs read through the server's SQLite file are the same runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from history_checks import (
    DEPLOYMENT,
    SYSTEM,
    check_run,
    forecast_check,
    generate,
    measured,
    report,
    stored,
)
from prom_server import free_port
from typer.testing import CliRunner

from ingest.events import ParseContext, ParseError
from ingest.mlflow_run import Unfinished, parse_run
from ingest.mlflow_source import ingest_tracking, run_hash, tracking_uri
from ingest.store import Store
from jobcast.cli.app import app

pytestmark = pytest.mark.slow

runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``mlflow server`` on 127.0.0.1 with a SQLite backend; the runs of the first
    generation (two experiments, one run left RUNNING)."""
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    backend = f"sqlite:///{folder / 'mlflow.db'}"
    log = open(folder / "server.log", "w")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
         "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited: {(folder / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("mlflow server did not answer /health within 120 s")
            time.sleep(0.3)
        out = folder / "gen"
        generate(out, "--mlflow", uri, "--mlflow-runs", "cnn-a:20,cnn-b:30",
                 "--mlflow-running", "cnn-b")
        yield {"uri": uri, "out": out, "backend": backend, "folder": folder}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:  # uvicorn waits for this process's keep-alive connections: not for long
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


def _ingest(store_url: str, *args: str) -> dict:
    result = runner.invoke(app, ["ingest", *args, "--store", store_url, "--deployment",
                                 DEPLOYMENT, "--system", SYSTEM, "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_three_steps_ingest_again_and_a_new_run(server, tmp_path):
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    source = f"mlflow+{server['uri']}"
    runs = {m["name"]: m for m in measured(server["out"])}
    finished = [m for m in runs.values() if m["finished"]]
    [running] = [m for m in runs.values() if not m["finished"]]

    first = _ingest(store_url, source)
    assert first["stored"] == 2 and not first["rejected"], first
    assert {a["source"].rsplit("/", 1)[1] for a in first["added"]} == {m["name"] for m in finished}
    [skipped] = first["skipped"]
    assert running["name"] in skipped and "still running" in skipped
    assert "127.0.0.1" in first["added"][0]["source"]

    second = _ingest(store_url, source)
    assert second["stored"] == 0 and len(second["duplicates"]) == 2 and not second["rejected"]

    st = Store(store_url)
    figures = {m["name"]: check_run(e, m) for m in finished
               for s, e in stored(st).items() if s.endswith(m["name"])}
    assert len(figures) == 2
    # a longer run of the same job, logged after the first ingest: forecast from the history
    # first, then picked up by the next ingest
    long_steps = 80
    generate(server["out"], "--mlflow", server["uri"], "--mlflow-runs", f"cnn-a:{long_steps}")
    long = [m for m in measured(server["out"]) if m["name"] not in runs][0]
    figures_forecast = forecast_check(st, "tinycnn", long["steps"], long["total"])

    third = _ingest(store_url, source)
    assert third["stored"] == 1 and third["added"][0]["source"].endswith(long["name"])
    assert len(third["duplicates"]) == 2 and len(third["skipped"]) == 1
    entry = next(e for s, e in stored(st).items() if s.endswith(long["name"]))
    figures[long["name"]] = check_run(entry, long)
    meta = entry["meta"]
    assert meta["mlflow_experiment"] == "cnn-a" and meta["status"] == "FINISHED"
    assert any(k.startswith("system/") for k in meta.get("system_metrics", {})) or \
        "system_metric_gpus" not in meta  # CPU: no GPU metrics, nothing invented
    report("mlflow three steps", {"first": {"stored": first["stored"],
                                            "skipped_running": len(first["skipped"])},
                                  "second": {"stored": second["stored"],
                                             "duplicates": len(second["duplicates"])},
                                  "third": {"stored": third["stored"],
                                            "duplicates": len(third["duplicates"])}})
    report("mlflow runs", figures)
    report("mlflow forecast", {"steps": long["steps"], **figures_forecast})
    st.engine.dispose()


def test_experiment_filter_and_the_sqlite_file_of_the_same_server(server, tmp_path):
    st = Store(f"sqlite:///{tmp_path / 's.db'}")
    got = ingest_tracking(st, f"mlflow+{server['uri']}", ["cnn-b"], _overrides())
    assert len(got.added) == 0 or all("/" in s for s, _ in got.added)
    names = {m["name"] for m in measured(server["out"]) if m.get("experiment") == "cnn-b"}
    assert {s.rsplit("/", 1)[1] for s, _ in got.added} | {s.rsplit("/", 1)[1]
                                                          for s, _ in got.running} == names
    # the server's own SQLite store: the same run ids, so the same runs (nothing new)
    again = ingest_tracking(st, f"mlflow+{server['backend']}", ["cnn-b"], _overrides())
    assert not again.added and len(again.duplicates) == len(got.added), again
    assert again.duplicates[0][0].startswith("mlflow://sqlite:///")
    missing = ingest_tracking(st, f"mlflow+{server['uri']}", ["no-such"], _overrides())
    assert "no active experiment named 'no-such'" in missing.rejected[0].reason
    # recorded in the store, as a file ingest records its rejections
    assert any("no-such" in r.reason for r in st.rejections())
    st.engine.dispose()


def _overrides():
    from ingest.pipeline import IngestOptions

    return IngestOptions(deployment=DEPLOYMENT)


def test_credentials_in_the_uri_are_refused_and_never_shown():
    got = ingest_tracking(Store("sqlite://"), "mlflow+http://alice:s3cret@127.0.0.1:9/x")
    [err] = got.rejected
    assert "MLFLOW_TRACKING_USERNAME" in str(err) and "s3cret" not in str(err) \
        and "alice" not in str(err)
    uri, shown = tracking_uri("mlflow+http://127.0.0.1:5000/?token=abc#frag")
    assert "abc" not in shown and uri == "http://127.0.0.1:5000/?token=abc#frag"


def test_an_unreachable_server_is_one_clear_rejection():
    port = free_port()  # nothing listens there
    started = time.monotonic()
    got = ingest_tracking(Store("sqlite://"), f"mlflow+http://127.0.0.1:{port}")
    [err] = got.rejected
    assert "cannot reach the tracking server" in err.reason
    assert time.monotonic() - started < 30


def test_experiment_flag_without_a_tracking_source_fails(tmp_path):
    result = runner.invoke(app, ["ingest", str(tmp_path), "--experiment", "x", "--store",
                                 f"sqlite:///{tmp_path / 's.db'}"])
    assert result.exit_code == 2 and "mlflow+" in result.output


# --- the conversion rules on snapshots (no server) ----------------------------------------------

def _snapshot(**over) -> dict:
    base = {"run_id": "r1", "status": "FINISHED", "start_time": 1_795_000_000.0,
            "params": {"batch_size": "32", "model": "resnet18", "epochs": "3"},
            "tags": {"gpu": "NVIDIA A100-SXM4-40GB", "mlflow.runName": "x"},
            "latest": {"system/gpu_0_utilization_percentage": 90.0,
                       "system/gpu_1_utilization_percentage": 88.0},
            "metrics": {"loss": [[i, 1_795_000_000_000 + 500 + 100 * i, 1.0]
                                 for i in range(10)]}}
    return {**base, **over}


def test_snapshot_facts_system_metrics_and_warmup():
    run = parse_run(_snapshot(), ParseContext())
    assert (run.network, run.batch_size) == ("resnet18", 32)
    assert run.deployment.key == "nvidia-a100-sxm4-40gb-x2"
    assert run.meta["system_metric_gpus"] == 2
    assert sum(s.iterations for s in run.segments) == 10
    assert sum(s.seconds for s in run.segments) == pytest.approx(1.4)
    assert run.meta["warmup_steps"] == 1


def test_snapshot_rules():
    with pytest.raises(Unfinished):
        parse_run(_snapshot(status="RUNNING"), ParseContext())
    per_epoch = {"loss": [[e, 1_795_000_000_000 + 1000 * (e + 1), 1.0] for e in range(3)]}
    with pytest.raises(ParseError, match="logged per epoch"):
        parse_run(_snapshot(metrics=per_epoch), ParseContext())
    with_spe = _snapshot(metrics=per_epoch,
                         params={"batch_size": "32", "epochs": "3", "steps_per_epoch": "50"})
    assert sum(s.iterations for s in parse_run(with_spe, ParseContext()).segments) == 150
    flat = {"loss": [[0, 1_795_000_000_000 + 100 * i, 1.0] for i in range(5)]}
    with pytest.raises(ParseError, match="without step="):
        parse_run(_snapshot(metrics=flat), ParseContext())
    at_once = {"loss": [[i, 1_795_000_000_900, 1.0] for i in range(5)]}
    with pytest.raises(ParseError, match="do not advance"):
        parse_run(_snapshot(metrics=at_once), ParseContext())
    assert run_hash("abc") == run_hash("abc") != run_hash("abd")


def test_a_source_id_never_holds_credentials(tmp_path: Path):
    _, shown = tracking_uri(f"mlflow+sqlite:///{tmp_path}/mlflow.db")
    assert shown.startswith("sqlite:///") and str(tmp_path) in shown


def test_an_old_mlruns_file_store(tmp_path, monkeypatch):
    """``mlflow+file:///…/mlruns``: MLflow 3 keeps file stores behind MLFLOW_ALLOW_FILE_STORE;
    the ingest reads one without the user setting it."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = f"file://{tmp_path / 'mlruns'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("old-team"))
    client.log_param(run.info.run_id, "batch_size", "8")
    client.log_param(run.info.run_id, "arch", "tinycnn")
    for step in range(8):
        time.sleep(0.01)
        client.log_metric(run.info.run_id, "train_loss", 1.0 / (step + 1), step=step)
    client.set_terminated(run.info.run_id)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    st = Store("sqlite://")
    got = ingest_tracking(st, f"mlflow+{uri}", None, _overrides())
    assert [s for s, _ in got.added] == [f"mlflow://{uri}/{run.info.run_id}"], got
    [stored_run] = st.runs()
    assert (stored_run.network, stored_run.batch_size) == ("tinycnn", 8)
