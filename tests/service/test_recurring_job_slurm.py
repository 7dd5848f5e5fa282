"""A recurring Slurm job asked by its name (issue 35, cause 3).

A real-shaped ``sacct --json`` export (Slurm 23.11's number shapes; the real SARC job as the
template, ``tests/slurm_shapes.py``) of one job name run daily: six typical runs, one 1.6x
slow run and one failed run. ``ingest``, ``fit`` and ``predict --job NAME`` must answer near
the typical run, not the outlier, with the job's own backtest behind the interval; ``--gpus``
moves it to another GPU count.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from slurm_shapes import document, history
from typer.testing import CliRunner

from jobcast.cli.app import app

runner = CliRunner()
NAME = "resnet50-imagenet"
TYPICAL = [30000, 31000, 29500, 30500, 30200, 30800]
SLOW = 48000  # the run `jobcast check` would flag


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("slurm")
    t0 = 1_760_000_000
    seconds = [*TYPICAL[:4], SLOW, 2000, *TYPICAL[4:]]
    states = ["COMPLETED"] * 5 + ["FAILED"] + ["COMPLETED"] * 2
    runs = [dict(start=t0 + i * 86400, seconds=s, state=st)
            for i, (s, st) in enumerate(zip(seconds, states, strict=True))]
    path = Path(root / "sacct.json")
    path.write_text(document(history(NAME, runs), "new"))
    url = f"sqlite:///{root}/s.db"
    res = runner.invoke(app, ["ingest", str(path), "--store", url, "--network", "resnet50"])
    assert res.exit_code == 0, res.output
    return url


def _predict(store: str, *flags: str) -> dict:
    res = runner.invoke(app, ["predict", "--job", NAME, "--store", store, "--json", *flags])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_fit_fits_a_store_of_scheduler_history(store: str) -> None:
    res = runner.invoke(app, ["fit", "--store", store, "--json", "--no-track"])
    assert res.exit_code == 0, res.output
    whole = [e["whole_job"] for e in json.loads(res.output) if "whole_job" in e]
    assert whole and whole[0]["jobs"] == 1 and whole[0]["forecasts"] >= 3


def test_next_run_is_the_typical_run_not_the_outlier(store: str) -> None:
    out = _predict(store)
    assert out["candidate"] == "whole-job"
    typical = statistics.median(TYPICAL)
    assert abs(out["seconds"] - typical) < 0.5 * abs(SLOW - typical)
    assert out["low"] < typical < out["high"]
    assert "own runs" in out["chosen"]  # the job's own backtest, not a pooled cell
    said = " ".join(out["assumptions"])
    assert "newest run" in said and "network resnet50" in said


def test_gpus_moves_the_job_to_another_count(store: str) -> None:
    base, half = _predict(store), _predict(store, "--gpus", "4")
    assert 1.8 < half["seconds"] / base["seconds"] < 2.2
    assert half["extrapolated"] and "moved to 4 GPUs" in half["why"]


def test_a_length_the_history_cannot_scale_is_refused_with_the_way_to_record_it(
        store: str) -> None:
    res = runner.invoke(app, ["predict", "--job", NAME, "--store", store, "--json",
                              "--iterations", "1000"])
    assert res.exit_code != 0
    error = json.loads(res.stdout)["error"]
    assert "do not record their iterations" in error["message"]
    assert "--iterations N" in error["message"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The same job, its records ingested with the iterations each run trained (5,000)."""
    root = tmp_path_factory.mktemp("slurm-length")
    t0 = 1_760_000_000
    runs = [dict(start=t0 + i * 86400, seconds=s, state="COMPLETED")
            for i, s in enumerate(TYPICAL)]
    path = Path(root / "sacct.json")
    path.write_text(document(history(NAME, runs), "new"))
    url = f"sqlite:///{root}/s.db"
    res = runner.invoke(app, ["ingest", str(path), "--store", url, "--network", "resnet50",
                              "--iterations", "5000"])
    assert res.exit_code == 0, res.output
    return url


def test_iterations_scale_a_history_that_records_its_length(measured: str) -> None:
    usual = _predict(measured)
    same = _predict(measured, "--iterations", "5000")
    double = _predict(measured, "--iterations", "10000")
    assert same["seconds"] == pytest.approx(usual["seconds"], rel=1e-6)
    assert 1.9 < double["seconds"] / usual["seconds"] < 2.1
    assert double["low"] < double["seconds"] < double["high"]
    assert (double["high"] / double["low"]) > (usual["high"] / usual["low"])
    assert "10,000 asked" in double["why"]


def test_epochs_are_not_iterations(measured: str) -> None:
    res = runner.invoke(app, ["predict", "--job", NAME, "--store", measured, "--json",
                              "--epochs", "2"])
    assert res.exit_code != 0
    assert "do not record their epochs" in json.loads(res.stdout)["error"]["message"]


def test_runs_show_each_runs_wall_clock_and_state(store: str) -> None:
    res = runner.invoke(app, ["runs", "--store", store, "--json"])
    assert res.exit_code == 0, res.output
    runs = json.loads(res.output)
    walls = sorted((r["state"], r["wall_seconds"]) for r in runs)
    assert ("failed", 2000) in walls  # its real elapsed time, never 0 s
    assert sorted(w for s, w in walls if s == "completed") == sorted([*TYPICAL, SLOW])


def test_ingest_takes_one_length_unit(tmp_path: Path) -> None:
    path = tmp_path / "sacct.json"
    path.write_text(document(history(NAME, [dict(start=1_760_000_000, seconds=100,
                                                  state="COMPLETED")]), "new"))
    res = runner.invoke(app, ["ingest", str(path), "--store", f"sqlite:///{tmp_path}/s.db",
                              "--iterations", "10", "--epochs", "2", "--json"])
    assert res.exit_code != 0
    assert "not both" in res.stdout


def test_the_next_run_by_name_loads_no_scikit_learn(store: str) -> None:
    """The whole-job model is fitted per request: its forecast path (``WholeJobFit``, the
    job's rows from the whole-job index) runs without scikit-learn or SciPy's ``stats``,
    and a job with no network to check loads no network zoo (the memory check's)."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from ingest.store import Store\n"
            "from jobcast.service.engine.forecaster import Forecaster\n"
            "from jobcast.service.engine.request import JobRequest\n"
            f"out = Forecaster(Store({store!r})).forecast(JobRequest(network='', "
            f"system={NAME!r}))\n"
            "assert out.ok and out.details['candidate'] == 'whole-job', out\n"
            "print(sorted(m for m in ('sklearn', 'scipy.stats', 'layerwise.zoo')\n"
            "             if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
