"""``jobcast check``: slow or normal, by how much and why, for Slurm jobs and training logs.

The log case trains real PyTorch jobs on this CPU (tests/torch_job.py): normal ones make
the history; one whose data loader is starved on purpose is checked beside a normal one,
each with the DCGM-like trace its own process recorded. The thresholds are generous and no
timing is hard-coded: the starved job sleeps several times its compute in its loader.
"""

from __future__ import annotations

import json

import pytest
from slurm_shapes import document, history, parsable2
from torch_job import run_jobs
from typer.testing import CliRunner

from jobcast.cli.app import app
from jobcast.service.features.diagnosis import Observed, find_causes

runner = CliRunner()
T0 = 1_714_000_000
KEY = "nvidia-a100-sxm4-40gb-x8"


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture()
def slurm_store(tmp_path):
    runs = [{"start": T0 + i * 86400, "seconds": s}
            for i, s in enumerate((1800, 1750, 1820, 1790, 1810, 1770))]
    (tmp_path / "hist").mkdir()
    (tmp_path / "hist" / "sacct.json").write_text(
        document(history("resnet50-nightly", runs), "new"))
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert cli("ingest", str(tmp_path / "hist"), "--store", url).exit_code == 0
    return url


def _today(tmp_path, jobs: list[dict], states: dict[int, str]) -> str:
    rendered = history("resnet50-nightly", jobs, first_id=777000)
    text = parsable2(rendered).splitlines()
    for row, state in states.items():  # a running job: no end yet
        cells = text[1 + 2 * row].split("|")
        cells[2], cells[5] = state, "Unknown"
        text[1 + 2 * row] = "|".join(cells)
    path = tmp_path / "today.txt"
    path.write_text("\n".join(text) + "\n")
    return str(path)


def test_slurm_jobs_slow_normal_and_why(slurm_store, tmp_path):
    today = _today(tmp_path, [{"start": T0 + 9 * 86400, "seconds": 4100},  # running long
                              {"start": T0 + 9 * 86400, "seconds": 1795},
                              {"start": T0 + 9 * 86400, "seconds": 600},  # running, early
                              {"start": T0 + 9 * 86400, "seconds": 3900, "gpus": 4}],
                   {0: "RUNNING", 2: "RUNNING"})
    trace = tmp_path / "busy.jsonl"
    trace.write_text("".join(json.dumps({
        "time": T0 + 9 * 86400 + t, "gpu": str(g), "modelName": "NVIDIA A100-SXM4-40GB",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.2 + 0.05 * (t // 60 % 3)}) + "\n"
        for t in range(0, 4000, 60) for g in range(8)))

    def check(job: str, *extra: str):
        result = cli("check", "--sacct", today, "--job-id", job, "--store", slurm_store,
                     "--json", *extra)
        return result.exit_code, json.loads(result.stdout)

    code, slow = check("777000", "--trace", str(trace))
    assert code == 1 and slow["status"] == "slow" and slow["state"] == "running"
    assert slow["ratio"] == pytest.approx(4100 / slow["expected"]["seconds"])
    assert slow["expected"]["runs"] == 6 and slow["expected"]["source"] == "whole-job"
    assert [c["cause"] for c in slow["causes"]] == ["input pipeline or host bound"]
    assert "still running" in slow["message"] and "GPU busy 25%" in slow["message"]
    code, normal = check("777001")
    assert code == 0 and normal["status"] == "normal" and normal["causes"] == []
    code, early = check("777002")
    assert code == 0 and "on track so far" in early["message"]
    code, fewer = check("777003")
    assert code == 1 and fewer["causes"][0]["cause"] == "fewer GPUs than its history"
    assert len(fewer["causes"]) == 1 and "expected time from its usual deployment " \
        f"{KEY}" in fewer["notes"][0]  # no history on 4 GPUs: its usual 8 answer
    lenient = cli("check", "--sacct", today, "--job-id", "777003", "--store", slurm_store,
                  "--threshold", "2")
    assert lenient.exit_code == 0 and "normal" in lenient.output
    plain = cli("check", "--sacct", today, "--job-id", "777000", "--store", slurm_store)
    assert plain.exit_code == 1 and plain.output.count("\n") == 1 and "SLOW" in plain.output


def test_slurm_errors_and_a_job_without_history(slurm_store, tmp_path):
    today = _today(tmp_path, [{"start": T0, "seconds": 100}], {})
    missing = cli("check", "--sacct", today, "--job-id", "1", "--store", slurm_store)
    assert missing.exit_code == 2 and "no job 1 (it holds 1 jobs: 777000)" in missing.output
    other = cli("check", "--sacct", today, "--job-id", "777000", "--job-key", "^(resnet)",
                "--store", slurm_store, "--json")
    assert other.exit_code == 3 and json.loads(other.stdout)["status"] == "unknown"
    assert "no forecast and no history" in json.loads(other.stdout)["message"]
    none = cli("check", "--store", slurm_store)
    assert none.exit_code == 2 and "give one job" in none.output
    both = cli("check", "--log", today, "--sacct", today, "--store", slurm_store)
    assert both.exit_code == 2 and "--sacct and --log" in both.output


def test_a_starved_pytorch_data_loader_is_slow_and_says_why(tmp_path):
    out = tmp_path / "jobs"
    run_jobs(out, [{"name": "hist0", "seed": 0}, {"name": "hist1", "seed": 1},
                   {"name": "normal", "seed": 2},
                   {"name": "starved", "seed": 3, "starve_ms": 2.0}])
    url = f"sqlite:///{tmp_path / 'torch.db'}"
    assert cli("ingest", str(out / "hist0.jsonl"), str(out / "hist1.jsonl"), "--store",
               url).exit_code == 0

    def check(name: str):
        result = cli("check", "--log", str(out / f"{name}.jsonl"), "--trace",
                     str(out / f"{name}.trace.jsonl"), "--store", url, "--threshold", "1",
                     "--json")
        return result.exit_code, json.loads(result.stdout)

    code, starved = check("starved")
    assert code == 1 and starved["status"] == "slow" and starved["ratio"] > 2
    assert starved["causes"][0]["cause"] == "input pipeline or host bound"
    assert starved["observed"]["trace_summary"]["busy_mean"] < 0.5
    code, normal = check("normal")
    assert code == 0 and normal["status"] in ("normal", "fast"), normal["message"]
    assert normal["observed"]["steps"] == starved["observed"]["steps"] == 60


def test_causes_from_traces_and_history():
    history = {"usual_gpus": 8, "usual_deployment": KEY, "sm_clock_mhz_mean": 1400.0,
               "busy_mean": 0.9}
    obs = Observed("slurm", "1", "completed", 100.0, deployment=KEY, gpus=8,
                   accelerator="A100 SXM4 40GB", trace={"summary": {
                       "busy_mean": 0.85, "sm_clock_mhz_mean": 1005.0,
                       "slowdown_share": 0.6}})
    assert [c["cause"] for c in find_causes(obs, history)] == [
        "throttled clocks", "power or thermal limits"]
    obs.trace = {"summary": {"busy_mean": 0.55}}  # below 0.7x its history's 0.9
    assert [c["cause"] for c in find_causes(obs, history)] == ["input pipeline or host bound"]
    obs.trace, obs.deployment = None, "nvidia-v100-sxm2-16gb-x8"
    assert [c["cause"] for c in find_causes(obs, history)] == [
        "another GPU model than its history"]
    boost = Observed("slurm", "2", "completed", 1.0, accelerator="A100 SXM4 40GB",
                     trace={"summary": {"busy_mean": 0.9, "sm_clock_mhz_mean": 900.0}})
    assert "the boost clock" in find_causes(boost, {})[0]["evidence"]


def test_a_forecaster_bug_is_said_to_be_a_bug_and_the_check_goes_on(tmp_path, monkeypatch):
    """Fault injection: the forecaster raises ZeroDivisionError (a bug), then a JobcastError
    (a miss); either way the check answers, but only the bug is called one."""
    from ingest.store import Store
    from jobcast.service.engine.forecast import ForecastFailure
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequestError
    from jobcast.service.features.diagnosis import check_log

    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    obs = Observed("log", "a.log", "completed", 100.0, deployment=KEY, network="resnet50",
                   batch_size=64, steps=1000)
    forecaster = Forecaster(models=[])

    def bug(*_args, **_kwargs):
        raise ZeroDivisionError("injected")

    def miss(*_args, **_kwargs):
        raise JobRequestError("injected miss")

    monkeypatch.setattr(forecaster, "forecast", bug)
    [note] = check_log(obs, store, forecaster)["notes"]
    assert "internal error (a bug in jobcast" in note and "ZeroDivisionError: injected" in note
    monkeypatch.setattr(forecaster, "forecast", miss)
    [note] = check_log(obs, store, forecaster)["notes"]
    assert note == "no forecast (injected miss); compared with history"
    monkeypatch.setattr(forecaster, "forecast", lambda req, **_: ForecastFailure(req, "no way"))
    [note] = check_log(obs, store, forecaster)["notes"]
    assert note == "no forecast (no way); compared with history"  # the failure's own reason
