"""The CLI contract scripts depend on: JSON shapes, exit codes, clear errors, light start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import DATA
from typer.testing import CliRunner

import jobcast.service.engine.forecaster  # noqa: F401  (registers the built-in routes)
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.service.engine.route_registry import history_kinds

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def fitted_store(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'jobcast.db'}"
    result = invoke("ingest", str(DATA / "mlperf"), "--store", url, "--json")
    assert result.exit_code == 0, result.output
    result = invoke("fit", "--store", url)
    assert result.exit_code == 0, result.output
    return url


def _runs(url: str) -> list[dict]:
    result = invoke("runs", "--store", url, "--json")
    assert result.exit_code == 0
    return json.loads(result.stdout)


def test_help_does_not_import_heavy_packages():
    code = (
        "import sys; from jobcast.cli.app import app; "
        "heavy = [m for m in ('tensorflow', 'keras', 'pandas', 'sqlalchemy', 'mlflow', 'sklearn') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    help_out = subprocess.run(
        [sys.executable, "-m", "jobcast", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("ingest", "runs", "fit", "predict", "demo", "bench", "layerwise"):
        assert command in help_out.stdout


def test_ingest_json_report_and_idempotence(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    first = json.loads(invoke("ingest", str(DATA / "mlperf"), "--store", url, "--json").stdout)
    assert first["added"] and not first["rejected"]
    second = json.loads(invoke("ingest", str(DATA / "mlperf"), "--store", url, "--json").stdout)
    assert second["added"] == [] and len(second["duplicates"]) == len(first["added"])
    assert second["store"] == first["store"]


def test_runs_json_contract(fitted_store):
    runs = _runs(fitted_store)
    assert runs
    for run in runs:
        assert {"source", "network", "deployment", "batch_size", "phases"} <= run.keys()
        assert run["stack"] == run["framework"]  # the stack; "framework" kept one release
        assert Path(run["source"]).exists()
        assert run["phases"], run["source"]
        for seg in run["phases"]:
            assert seg["phase"] in ("train", "test")
            assert seg["iterations"] > 0 and seg["seconds"] > 0


def test_fit_json_has_cv_error_per_model(fitted_store):
    models = json.loads(invoke("fit", "--store", fitted_store, "--json").stdout)
    assert models
    keys = {(m["network"], m["deployment"], m["phase"], m["stack"]) for m in models}
    assert len(keys) == len(models)  # one model per key
    multi_run = [m for m in models if m["runs"] >= 2]
    assert multi_run and all(m["cv_mape"] is not None for m in multi_run)


def test_predict_single_job_json(fitted_store):
    run = next(r for r in _runs(fitted_store) if r["network"] == "resnet50")
    train_iters = sum(p["iterations"] for p in run["phases"] if p["phase"] == "train")
    actual = sum(p["seconds"] for p in run["phases"] if p["phase"] == "train")
    result = invoke(
        "predict",
        "--store",
        fitted_store,
        "--network",
        run["network"],
        "--deployment",
        run["deployment"],
        "--batch-size",
        str(run["batch_size"]),
        "--iterations",
        str(int(train_iters)),
        "--phase",
        "train",
        "--json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["unit"] == "s" and out["route"] == "rate"
    # the run's own history answers: its rate or its phase model (issue 22: chosen by backtest)
    assert out["model"].startswith((f"e2e/resnet50/{run['deployment']}/train/",
                                    f"rate/resnet50/{run['deployment']}/train"))
    assert out["candidate"] in history_kinds()
    assert out["low"] <= out["seconds"] <= out["high"]
    assert out["extrapolated"] is False
    assert abs(out["seconds"] - actual) / actual < 0.25  # an in-sample run, loosely


def test_predict_jobs_csv(fitted_store, tmp_path):
    run = _runs(fitted_store)[0]
    iters = int(sum(p["iterations"] for p in run["phases"] if p["phase"] == "train"))
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "network,deployment,batch_size,iterations,phase\n"
        f"{run['network']},{run['deployment']},{run['batch_size']},{iters},train\n"
        f"{run['network']},{run['deployment']},{run['batch_size'] // 4},{iters},train\n"
        f"nosuchnet,{run['deployment']},32,10,train\n"
    )
    result = invoke("predict", "--store", fitted_store, "--jobs", str(jobs), "--json")
    out = json.loads(result.stdout)
    assert len(out) == 3
    assert out[0]["route"] == "rate" and not out[0]["extrapolated"]
    assert out[1]["extrapolated"] is True  # a quarter of the batch size ever seen
    assert "error" in out[2] and "nosuchnet" in out[2]["error"]
    assert result.exit_code == 1  # a job failed


def test_predict_jobs_csv_bad_row_gets_its_error_and_others_are_answered(tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("network,batch_size,device,precision\nresnet50,abc,V100,fp32\n"
                    "resnet50,32,V100,fp16\nresnet50,32,V100,fp8\n")
    # no --store: the test's own data directory, whose default store is empty (not created)
    result = runner.invoke(app, ["predict", "--jobs", str(jobs), "--json"])
    assert result.exit_code == 1  # some jobs failed
    out = json.loads(result.output)
    assert "jobs.csv:2: batch_size must be a number" in out[0]["error"]
    assert out[1]["route"] == "layerwise" and out[1]["low"] <= out[1]["seconds"] <= out[1]["high"]
    assert out[1]["precision"] == "fp16" and out[1]["layers"]
    assert "fp8" in out[2]["error"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("network,deployment\nresnet50,x\n", "missing column(s) batch_size"),
        ("network,batch_size,colour\nresnet50,8,red\n", "unknown column(s) colour"),
        ("network,batch_size\n", "no jobs"),
    ],
)
def test_predict_jobs_csv_errors(tmp_path, content, message):
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(content)
    result = runner.invoke(
        app, ["predict", "--jobs", str(jobs), "--store", f"sqlite:///{tmp_path / 'x.db'}"]
    )
    assert result.exit_code == 2
    assert message in result.output


def test_predict_negative_batch_is_refused(fitted_store):
    result = runner.invoke(
        app,
        [
            "predict",
            "--store",
            fitted_store,
            "--network",
            "resnet50",
            "--deployment",
            "x",
            "--batch-size",
            "-4",
            "--iterations",
            "5",
        ],
    )
    assert result.exit_code == 2
    assert "batch-size" in result.output


def test_fit_on_empty_store_says_what_to_do(tmp_path):
    result = runner.invoke(app, ["fit", "--store", f"sqlite:///{tmp_path / 'empty.db'}"])
    assert result.exit_code == 2
    assert "jobcast ingest" in result.output


def test_multi_gpu_layerwise_forecast_adds_the_allreduce(tmp_path):
    store = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(store)  # an empty store (predict does not create one)
    common = ["predict", "--network", "resnet50", "--iterations", "100", "--store", store,
              "--json"]
    one = json.loads(runner.invoke(app, [*common, "--batch-size", "32", "--device", "2080 Ti"])
                     .output)
    eight = runner.invoke(app, [*common, "--batch-size", "256",
                                "--deployment", "8x GeForce RTX 2080 Ti"])
    assert eight.exit_code == 0, eight.output
    out = json.loads(eight.output)
    assert out["route"] == "layerwise" and out["devices"] == 8
    assert out["interconnect"].startswith("pcie-nop2p") and out["assumed"]
    assert out["allreduce_ms"] > 0
    # per-device batch 32 plus communication: slower per step than one GPU at batch 32
    assert out["batch_seconds"] > one["batch_seconds"]
    assert out["seconds"] == pytest.approx(100 * out["batch_seconds"])
    assert out["low"] <= out["seconds"] <= out["high"]


def test_history_at_another_gpu_count_answers_end_to_end(fitted_store):
    def ask(deployment: str, batch: int) -> dict:
        result = invoke("predict", "--network", "resnet50", "--deployment", deployment,
                        "--batch-size", str(batch), "--iterations", "1000",
                        "--store", fitted_store, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    eight = ask("nvidia-a100-sxm4-40gb-x8", 3264)  # the history
    four = ask("4x A100-SXM4-40GB", 1632)  # same per-GPU batch, half the GPUs
    sixteen = ask("2x8 A100-SXM4-40GB IB200", 6528)
    assert eight["route"] == "rate" and four["route"] == sixteen["route"] == "end-to-end"
    assert "+scaled/x8-to-x4" in four["model"] and four["extrapolated"]
    assert four["scaled_from"] == "nvidia-a100-sxm4-40gb-x8"
    assert four["low"] <= four["seconds"] <= four["high"]
    # MLPerf history (MXNet): DDP-like all-reduce behind the backward pass, so the same
    # per-GPU work takes no less on more GPUs, and longer across nodes (the slower links)
    assert four["scaling"]["strategy"] == sixteen["scaling"]["strategy"] == "ddp"
    assert four["step_ms"] <= four["source_step_ms"] < sixteen["step_ms"]
    assert sixteen["interconnect"].endswith("ib200 25 GB/s")
    other = ask("8x H100 SXM5", 2048)  # no history on this accelerator at any count
    assert other["route"] not in ("rate", "end-to-end")
