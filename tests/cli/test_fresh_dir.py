"""A fresh machine and a fresh folder (issue 28): the data directory ($JOBCAST_HOME, XDG),
read-only commands create no file, an empty or misspelled store answers clearly, and
``predict --system`` finds the system's deployment in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import DATA
from typer.testing import CliRunner

from fleet.deployment import Deployment
from ingest.events import ParsedRun, Segment
from ingest.home import data_home, default_store_url, default_tracking_uri
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.service.engine.job_history import JobHistoryError, newest_run
from models.history import run_table

runner = CliRunner()


@pytest.fixture
def fresh(tmp_path, monkeypatch) -> Path:
    """An empty working folder, with the data directory (not created) beside it."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("JOBCAST_HOME", str(tmp_path / "home"))
    for name in ("JOBCAST_STORE", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name != "work")


def test_data_home_order(tmp_path, monkeypatch):
    monkeypatch.delenv("JOBCAST_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_home() == tmp_path / "xdg" / "jobcast"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec ignores it
    assert data_home() == Path.home() / ".local" / "share" / "jobcast"
    monkeypatch.setenv("JOBCAST_HOME", str(tmp_path / "mine"))
    assert default_store_url() == f"sqlite:///{tmp_path / 'mine' / 'jobcast.db'}"
    assert default_tracking_uri(None) == f"sqlite:///{tmp_path / 'mine' / 'mlflow.db'}"
    # beside a SQLite store named elsewhere; the data directory for a server store
    assert default_tracking_uri(f"sqlite:///{tmp_path / 's' / 'x.db'}") == (
        f"sqlite:///{tmp_path / 's' / 'mlflow.db'}")
    assert default_tracking_uri("postgresql+psycopg://u:p@db/j") == (
        f"sqlite:///{tmp_path / 'mine' / 'mlflow.db'}")


def test_predict_on_a_fresh_machine_creates_no_file(fresh):
    result = runner.invoke(app, ["predict", "--network", "resnet50", "--device", "T4",
                                 "--batch-size", "32", "--iterations", "10", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["seconds"] > 0
    assert _files(fresh) == []


def test_runs_on_a_fresh_store_says_where_data_is(fresh):
    result = runner.invoke(app, ["runs"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert f"0 runs in sqlite:///{fresh / 'home' / 'jobcast.db'}" in out
    assert "--store sqlite:///demo-out/jobcast.db" in out and "jobcast ingest" in out
    assert json.loads(runner.invoke(app, ["runs", "--json"]).stdout) == []
    assert _files(fresh) == []


def test_info_and_version_show_the_data_dir_and_create_nothing(fresh):
    result = runner.invoke(app, ["info", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["data_dir"] == str(fresh / "home") and info["data_dir_exists"] is False
    assert info["store"] == f"sqlite:///{fresh / 'home' / 'jobcast.db'}"
    assert info["store_exists"] is False and info["tracking_exists"] is False
    assert info["tracking_uri"] == f"sqlite:///{fresh / 'home' / 'mlflow.db'}"
    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and str(fresh / "home") in version.output
    assert runner.invoke(app, ["store", "version"]).exit_code == 0
    hidden = runner.invoke(app, ["info", "--json", "--store",
                                 "postgresql+psycopg://me:s3cret@127.0.0.1:9/none"])
    assert "s3cret" not in hidden.output
    assert _files(fresh) == []


def test_a_misspelled_store_is_an_error_not_a_new_file(fresh):
    missing = fresh / "work" / "typo.db"
    for args in (["runs"], ["report"], ["runs", "--json"],
                 ["predict", "--network", "resnet50", "--device", "T4", "--batch-size", "8",
                  "--iterations", "1"]):
        result = runner.invoke(app, [*args, "--store", f"sqlite:///{missing}"])
        assert result.exit_code == 2, result.output
        assert f"no store at {missing}; ingest first" in result.output
        assert "check --store" in result.output
    assert not missing.exists() and _files(fresh) == []


def test_report_on_an_empty_store_fails_cleanly_and_leaves_no_folder(fresh):
    out = fresh / "work" / "report-out"
    result = runner.invoke(app, ["report", "--out", str(out)])  # the default store: absent
    assert result.exit_code == 2 and "holds no runs" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    url = f"sqlite:///{fresh / 'work' / 'empty.db'}"
    Store(url)  # exists, holds nothing
    result = runner.invoke(app, ["report", "--store", url, "--out", str(out)])
    assert result.exit_code == 2 and "holds no runs" in result.output
    assert not out.exists()


def _run(system: str, accelerator: str, count: int) -> ParsedRun:
    segs = [Segment("train", iterations=50, seconds=100.0 + e, batch_size=256,
                    epoch_start=e, epoch_end=e, points=((25, 50.0), (50, 100.0 + e)))
            for e in range(3)]
    return ParsedRun(format="jsonl", network="resnet50",
                     deployment=Deployment(accelerator, count, 1), stack="x",
                     batch_size=256, start_time=1_600_000_000.0, segments=segs,
                     meta={"system": system})


def test_system_deployment_from_history(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    for i, (system, gpu, n) in enumerate([("lab/dgx", "NVIDIA A100-SXM4-80GB", 8),
                                          ("lab/mixed", "Tesla V100-SXM2-16GB", 8),
                                          ("lab/mixed", "Tesla V100-SXM2-16GB", 4)]):
        store.add_file(content_hash=f"{i:064d}", source=f"f{i}.jsonl", fmt="jsonl", size=1,
                       parsed=[_run(system, gpu, n)])
    history = run_table(store)
    only = newest_run("LAB/dgx ", history, [])
    assert only.deployment == store.runs()[0].deployment and only.spelled == "lab/dgx"
    mixed = newest_run("lab/mixed", history, [])
    assert mixed.deployment == store.runs()[2].deployment  # the newest run's
    assert set(mixed.deployments) == {r.deployment for r in store.runs()[1:]}
    with pytest.raises(JobHistoryError, match="jobs in the store: lab/dgx, lab/mixed"):
        newest_run("nowhere", history, [])
    result = runner.invoke(app, ["predict", "--store", store.url, "--network", "resnet50",
                                 "--system", "lab/mixed", "--batch-size", "256",
                                 "--iterations", "10", "--json"])
    assert result.exit_code == 0, result.output
    said = " ".join(json.loads(result.output)["assumptions"])
    assert f"it also ran on {store.runs()[1].deployment}" in said


def test_fit_prints_no_library_logs_and_writes_mlflow_beside_the_store(tmp_path):
    store = tmp_path / "data" / "jobcast.db"
    store.parent.mkdir()
    url = f"sqlite:///{store}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2",
           "JOBCAST_HOME": str(tmp_path / "home")}
    env.pop("MLFLOW_LOGGING_LEVEL", None)
    work = tmp_path / "work"
    work.mkdir()

    def jobcast(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jobcast", *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)

    assert jobcast("ingest", str(DATA / "mlperf"), "--store", url).returncode == 0
    fit = jobcast("fit", "--store", url)
    assert fit.returncode == 0, fit.stderr
    assert " INFO " not in fit.stderr and "Warning" not in fit.stderr, fit.stderr
    assert (store.parent / "mlflow.db").is_file() and list(work.iterdir()) == []
