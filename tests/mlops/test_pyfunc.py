"""The registered forecaster: signature, routes, errors, fresh-process loads, the alias rule."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from paths import DATA, REPO

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.mlops.pyfunc_model import OUTPUT_COLUMNS, jobs_frame, request_from_row
from jobcast.mlops.registry import (
    default_predictor_dir,
    register_forecaster,
    should_promote,
    validation_mape,
)
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from models.e2e import fit_store, load_models

MLPERF = DATA / "mlperf"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_RUN_ID",
                        "PYTHONPATH")}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", TF_CPP_MIN_LOG_LEVEL="2", **extra)
    return env


@pytest.fixture(autouse=True)
def _mlflow_env(monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="module")
def registered(registered_samples):
    """The session's store fitted on the MLPerf samples and registered without calibration
    (tests/conftest.py): (store, tracking URI, registration)."""
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    done = registered_samples
    return done["store"], done["uri"], done["registration"]


def _e2e_jobs(store) -> list[JobRequest]:
    jobs = []
    for m in load_models(store):
        lo, hi = m.estimator.batch_range_
        its = m.estimator.iteration_range_[1]
        jobs.append(JobRequest(network=m.network, deployment=m.deployment, batch_size=int(hi),
                               iterations=int(its), phase=m.phase, stack=m.stack))
        jobs.append(JobRequest(network=m.network, deployment=m.deployment, batch_size=int(lo),
                               iterations=int(its // 3) + 1, phase=m.phase))
    return jobs


def _load(uri: str, model_uri: str):
    import mlflow

    mlflow.set_tracking_uri(uri)
    try:
        return mlflow.pyfunc.load_model(model_uri)
    finally:
        mlflow.set_tracking_uri(None)
        os.environ.pop("MLFLOW_TRACKING_URI", None)


def test_registered_forecaster_answers_like_jobcast_predict(registered):
    store, uri, reg = registered
    assert reg.version == "1" and reg.promoted and reg.validation_mape is not None
    model = _load(uri, f"models:/{reg.name}@champion")
    jobs = _e2e_jobs(store)
    out = model.predict(jobs_frame(jobs))
    assert list(out.columns) == list(OUTPUT_COLUMNS)
    assert len(out) == len(jobs) and out["error"].isna().all()
    assert set(out["route"]) <= {"rate", "end-to-end"}  # the history routes (registry names)
    assert ((out["low"] <= out["seconds"]) & (out["seconds"] <= out["high"])).all()
    # the served answer names the candidate that answered and its backtest error (issue 22)
    assert out["candidate"].notna().all() and (out["backtest_error_percent"] >= 0).all()
    assert out["chosen"].str.contains("backtest").all()
    direct = Forecaster(store)
    for job, row in zip(jobs, out.to_dict(orient="records"), strict=True):
        expect = direct.forecast(job).to_dict()
        assert row["model"] == expect["model"]
        assert row["candidate"] == expect["candidate"]
        assert row["seconds"] == pytest.approx(expect["seconds"], rel=1e-12)
        assert (row["low"], row["high"]) == pytest.approx((expect["low"], expect["high"]))


def test_signature_requires_the_job_columns_and_rows_are_checked(registered):
    from mlflow.exceptions import MlflowException

    store, uri, reg = registered
    model = _load(uri, reg.model_uri)
    inputs = model.metadata.get_input_schema()
    required = {c.name for c in inputs.inputs if c.required}
    assert required == {"network", "deployment", "batch_size", "iterations", "phase"}
    assert {"device", "optimizer", "epochs", "dataset_size", "image_size"} <= set(
        inputs.input_names())
    good = jobs_frame(_e2e_jobs(store)[:1])
    with pytest.raises(MlflowException, match="batch_size"):
        model.predict(good.drop(columns="batch_size"))
    bad = pd.concat([good, good.assign(batch_size=-8), good.assign(network="no-such-net",
                                                                   device="NoSuchGPU")])
    bad = bad.reset_index(drop=True)
    with pytest.raises(MlflowException) as err:
        model.predict(bad)
    assert "2 of 3 job(s)" in err.value.message and "row 1: batch_size" in err.value.message
    assert "row 2:" in err.value.message
    rows = model.predict(bad, params={"errors": "row"})
    assert rows["error"].isna().tolist() == [True, False, False]
    assert "positive" in rows["error"][1] and rows["seconds"][1:].isna().all()
    with pytest.raises(MlflowException, match="params.errors"):
        model.predict(good, params={"errors": "ignore"})


def test_rows_with_nulls_and_bad_whole_numbers():
    req = request_from_row({"network": " vgg16 ", "deployment": None, "batch_size": 32,
                            "iterations": float("nan"), "phase": None, "device": "V100",
                            "epochs": 2.0, "dataset_size": 5000.0, "image_size": None})
    assert req == JobRequest(network="vgg16", batch_size=32, epochs=2.0, dataset_size=5000,
                             device="V100")
    with pytest.raises(ValueError, match="dataset_size must be a whole number"):
        request_from_row({"network": "x", "batch_size": 1, "dataset_size": 10.5})
    with pytest.raises(ValueError, match="network is missing"):
        request_from_row({"network": None, "batch_size": 1}).validate()


def test_fresh_process_loads_the_registered_model_and_predicts_the_same(registered, tmp_path):
    store, uri, reg = registered
    jobs = jobs_frame(_e2e_jobs(store))
    here = _load(uri, reg.model_uri).predict(jobs)
    jobs_file = tmp_path / "jobs.json"
    jobs.to_json(jobs_file, orient="split")
    code = (
        "import json, sys, mlflow, pandas as pd\n"
        f"m = mlflow.pyfunc.load_model({reg.model_uri!r})\n"
        "import jobcast\n"
        f"df = pd.read_json({str(jobs_file)!r}, orient='split', dtype=False)\n"
        "df = df.astype({'iterations': 'float64', 'batch_size': 'int64'})\n"
        "out = m.predict(df)\n"
        "print(json.dumps({'code': jobcast.__file__, "
        "'rows': out.to_dict(orient='records')}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=_env(MLFLOW_TRACKING_URI=uri))
    assert proc.returncode == 0, proc.stderr[-2000:]
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    # The served code is the copy packaged with the model, not this checkout.
    assert not Path(there["code"]).resolve().is_relative_to(REPO)
    assert "artifacts/code/jobcast" in Path(there["code"]).as_posix()
    assert [r["model"] for r in there["rows"]] == here["model"].tolist()
    assert [r["seconds"] for r in there["rows"]] == here["seconds"].tolist()  # bit-identical
    assert [r["high"] for r in there["rows"]] == here["high"].tolist()


def test_alias_moves_only_when_validation_error_is_not_worse(registered, tmp_path, capfd):
    import mlflow

    store, _, _ = registered
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # A store holding only the tinybox runs: its models validate worse than the full set's.
    small = Store(f"sqlite:///{tmp_path / 'small.db'}")
    ingest_paths(small, [str(MLPERF / "v4.0")])
    fit_store(small)
    full_score, small_score = validation_mape(load_models(store)), validation_mape(
        load_models(small))
    assert small_score > full_score

    first = register_forecaster(store, tracking_uri=uri, calibrate=False)
    worse = register_forecaster(small, tracking_uri=uri, calibrate=False)
    again = register_forecaster(store, tracking_uri=uri, calibrate=False)
    assert (first.version, worse.version, again.version) == ("1", "2", "3")
    printed = capfd.readouterr()
    # MLflow's own registration lines never reach the user (jobcast prints its own result).
    assert "registered model" not in (printed.out + printed.err).lower()
    assert first.promoted and not worse.promoted and again.promoted
    assert worse.previous_version == "1" and "> " in worse.reason
    client = mlflow.MlflowClient(uri)
    assert str(client.get_model_version_by_alias(first.name, "champion").version) == "3"
    assert float(client.get_model_version(first.name, "2").tags["validation_mape"]) == (
        pytest.approx(small_score))


def test_promotion_rule():
    assert should_promote(5.0, None, has_holder=False)[0]
    assert should_promote(None, None, has_holder=False)[0]
    assert not should_promote(None, 3.0, has_holder=True)[0]
    assert should_promote(3.0, 3.0, has_holder=True)[0]
    assert not should_promote(3.1, 3.0, has_holder=True)[0]
    assert should_promote(2.0, None, has_holder=True)[0]


@pytest.mark.slow
@pytest.mark.skipif(default_predictor_dir() is None, reason="no shipped layerwise predictor")
def test_layerwise_rows_load_the_same_in_a_fresh_process(registered, tmp_path):
    store, _, _ = registered
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = register_forecaster(store, tracking_uri=uri, calibrate=False)
    jobs = jobs_frame([JobRequest(network="mobilenetv2", batch_size=16, iterations=100,
                                  device="V100", image_size=96)])
    model = _load(uri, reg.model_uri)
    here = model.predict(jobs)
    assert here["route"].tolist() == ["layerwise"] and here["seconds"][0] > 0
    assert here["interconnect"].isna().all()  # one device: no all-reduce
    multi = model.predict(jobs_frame([JobRequest(
        network="mobilenetv2", batch_size=64, iterations=100, deployment="4x RTX 3090 PCIe",
        image_size=96)]))
    assert multi["route"].tolist() == ["layerwise"] and multi["error"].isna().all()
    assert "pcie" in multi["interconnect"][0].lower() and "peer" in multi["assumed"][0].lower()
    code = (
        "import io, json, mlflow, pandas as pd\n"
        f"m = mlflow.pyfunc.load_model({reg.model_uri!r})\n"
        f"df = pd.read_json(io.StringIO({jobs.to_json(orient='split')!r}), orient='split',"
        " dtype=False)\n"
        "df = df.astype({'iterations': 'float64', 'image_size': 'float64'})\n"
        "print(json.dumps(m.predict(df).to_dict(orient='records')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, env=_env(MLFLOW_TRACKING_URI=uri))
    assert proc.returncode == 0, proc.stderr[-2000:]
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    assert there[0]["seconds"] == here["seconds"][0] and there[0]["model"] == here["model"][0]


def test_cli_register_and_serve_refusals(registered, tmp_path):
    import typer
    from typer.testing import CliRunner

    from jobcast.cli import mlops as cli_mlflow

    app = typer.Typer()
    cli_mlflow.register(app)
    store, _, _ = registered
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runner = CliRunner()
    result = runner.invoke(app, ["register", "--store", store.url, "--tracking-uri", uri,
                                 "--no-scale-calibration", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["version"] == "1" and report["promoted"] and report["alias"] == "champion"

    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    result = runner.invoke(app, ["register", "--store", empty, "--tracking-uri", uri])
    assert result.exit_code == 2 and "no store at" in result.output  # never made empty
    Store(empty)
    result = runner.invoke(app, ["register", "--store", empty, "--tracking-uri", uri])
    assert result.exit_code == 2 and "run `jobcast fit` first" in result.output

    result = runner.invoke(app, ["serve", "--tracking-uri", uri, "--alias", "nope"])
    assert result.exit_code == 2 and "no alias 'nope'" in result.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["serve", "--tracking-uri", uri, "--port", str(port)])
    assert result.exit_code == 2 and "in use" in result.output
