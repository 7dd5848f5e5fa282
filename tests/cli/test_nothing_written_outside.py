"""Nothing is written outside the data directory and the outputs asked for (issue 37):
``jobcast fit`` (which tracks in MLflow) leaves no telemetry file in ``$HOME`` and no
``mlflow.db`` in the working directory, with telemetry not switched off by the caller
(``fleet.telemetry`` does it before MLflow is imported)."""

from __future__ import annotations

import os
import subprocess
import sys

from paths import DATA, REPO


def test_fit_writes_no_telemetry_and_nothing_in_the_working_directory(tmp_path):
    home, work, data = tmp_path / "home", tmp_path / "work", tmp_path / "data"
    for folder in (home, work):
        folder.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK", "MLFLOW_TRACKING_URI")}
    env.update(HOME=str(home), JOBCAST_HOME=str(data), XDG_CONFIG_HOME=str(home / ".config"),
               PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    for args in (["ingest", str(DATA / "mlperf" / "v0.7"), "--workers", "1"],
                 ["fit", "--no-backtest"]):
        done = subprocess.run([sys.executable, "-m", "jobcast", *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    assert (data / "mlflow.db").is_file()  # the fit was tracked, in the data directory
    assert list(work.iterdir()) == []
    written = [p.relative_to(home) for p in home.rglob("*") if "mlflow" in str(p).lower()]
    assert written == []
