"""Errors and per-item lines are never wrapped, whatever the width or the path length.

The real ``jobcast`` runs in a subprocess with ``COLUMNS=40`` and its output piped (as in a
script or a CI log), on paths far longer than any screen; each message must come back on one
line, with paths that look like Rich markup or emoji codes printed as they are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def jobcast(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "40", "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("TERMINAL_WIDTH", None)
    return subprocess.run([sys.executable, "-m", "jobcast", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def deep(tmp_path) -> Path:
    """A folder whose path is over 300 characters, with markup- and emoji-like names."""
    folder = tmp_path / ("d" * 120) / "[bold]not markup[/bold] :smile:" / ("e" * 120)
    folder.mkdir(parents=True)
    return folder


def test_error_with_a_long_path_is_one_line(deep, tmp_path):
    store = f"sqlite:///{deep / 'missing' / 'x.db'}"
    done = jobcast("ingest-prometheus", "--url", "http://127.0.0.1:9", "--store", store,
                   cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: cannot open store {store}: folder {deep / 'missing'} does not exist"]
    assert len(done.stderr) > 300


def test_jobs_csv_error_is_one_line_in_process(deep, tmp_path):
    """The suite's ``no jobs`` check, on a path longer than any console."""
    from typer.testing import CliRunner

    from jobcast.cli.app import app

    jobs = deep / "jobs.csv"
    jobs.write_text("network,batch_size\n")
    result = CliRunner().invoke(app, ["predict", "--jobs", str(jobs), "--store",
                                      f"sqlite:///{tmp_path / 'x.db'}"])
    assert result.exit_code == 2
    assert result.output.splitlines() == [f"error: {jobs}: no jobs (only a header)"]


def test_rejected_files_are_one_line_each(deep, tmp_path):
    missing = [deep / "a.log", deep / "b.log"]  # files no parser reads
    for path in missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not a training log\n")
    done = jobcast("ingest", *map(str, missing), "--store", f"sqlite:///{tmp_path / 'y.db'}",
                   cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    rejected = [line for line in done.stdout.splitlines() if line.startswith("rejected ")]
    assert len(rejected) == 2
    for path in missing:  # each on one line, whatever the order
        assert sum(line.startswith(f"rejected {path}:") for line in rejected) == 1
    assert done.stderr == ""  # no progress bar or blank line when stderr is not a terminal


def test_usage_errors_are_plain_lines_when_piped(tmp_path):
    option = "--no-such-option-" + "x" * 200
    done = jobcast("predict", "--network", "resnet50", option, cwd=tmp_path)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if "No such option" in line]
    assert lines == [f"Error: No such option: {option}"], done.stderr
    assert "╭" not in done.stderr  # no Rich panel boxes in a log
