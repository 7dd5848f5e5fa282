"""MLflow tracking of fits: where runs go, what a run holds, the data fingerprint."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from paths import DATA

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.mlops.tracking import (
    data_fingerprint,
    fingerprint_files,
    log_fit_run,
    log_layerwise_run,
    resolve_tracking_uri,
    tracking,
)
from models.e2e import fit_store

MLPERF = DATA / "mlperf"


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    store = Store(f"sqlite:///{folder / 'jobcast.db'}")
    ingest_paths(store, [str(MLPERF)])
    return store, fit_store(store)


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    store_url = f"sqlite:///{tmp_path / 'sub' / 'jobcast.db'}"
    assert resolve_tracking_uri(None, store_url) == f"sqlite:///{tmp_path / 'sub' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert resolve_tracking_uri(None, store_url) == "http://127.0.0.1:5999"
    assert resolve_tracking_uri("sqlite:///x.db", store_url) == "sqlite:///x.db"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setenv("JOBCAST_HOME", str(tmp_path / "home"))  # a server store: the data dir
    assert resolve_tracking_uri(None, "postgresql://u:p@db/jobs") == (
        f"sqlite:///{(tmp_path / 'home').resolve() / 'mlflow.db'}"
    )


def test_tracking_block_restores_the_environment(tmp_path):
    import os

    import mlflow

    before = mlflow.get_tracking_uri()
    with tracking(f"sqlite:///{tmp_path / 'm.db'}", "x"):
        assert mlflow.get_tracking_uri().endswith("m.db")
    assert "MLFLOW_TRACKING_URI" not in os.environ
    assert mlflow.get_tracking_uri() == before


def test_fit_run_holds_params_metrics_fingerprint_and_plot(fitted, tmp_path):
    import mlflow

    store, models = fitted
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = log_fit_run(store, models, tracking_uri=uri, form="auto")
    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "jobcast-fit"
    params = run.data.params
    assert params["data_fingerprint"] == data_fingerprint(store)
    assert int(params["models"]) == len(models) and int(params["runs"]) == len(store.runs())
    cv = [m.estimator.cv_mape_ for m in models if m.estimator.cv_mape_ is not None]
    metrics = run.data.metrics
    assert min(cv) <= metrics["cv_mape_mean"] <= max(cv)
    assert metrics["cv_mape_max"] == pytest.approx(max(cv))
    assert sum(k.startswith("cv_mape/e2e/") for k in metrics) == len(cv)
    assert run.inputs.dataset_inputs[0].dataset.digest == params["data_fingerprint"][:36]

    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_relative_to(tmp_path)  # beside the tracking database, not in the cwd
    assert (artifacts / "predicted_vs_actual.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = json.loads((artifacts / "models.json").read_text())["models"]
    assert sorted(r["model_id"] for r in records) == sorted(m.model_id for m in models)
    held = pd.read_csv(artifacts / "held_out_predictions.csv")
    assert len(held) == sum(len(m.estimator.cv_errors_) for m in models)
    # The plotted held-out predictions reproduce each model's cross-validated MAPE.
    for model_id, group in held.groupby("model_id"):
        mape = float(((group.actual - group.predicted).abs() / group.predicted).mean() * 100)
        assert mape == pytest.approx(metrics[f"cv_mape/{model_id}"], rel=1e-6)


def test_held_out_predictions_carry_interval_and_skip_stale_models(fitted):
    from models.dataset import progress_points
    from models.evaluation import COLUMNS, held_out_predictions

    store, models = fitted
    points = progress_points(store)
    pred = held_out_predictions(models, points)
    assert list(pred.columns) == list(COLUMNS)
    assert len(pred) == sum(len(m.estimator.cv_errors_) for m in models)
    assert (pred["low"] <= pred["predicted"]).all() and (pred["predicted"] <= pred["high"]).all()
    assert set(pred["source"]) <= set(points["source"])
    # A run added after the fit: that model's errors no longer line up, so it is left out.
    first = pred["run_id"].iloc[0]
    stale = points[points["run_id"] != first]
    assert first not in set(held_out_predictions(models, stale)["run_id"])


def test_fingerprint_depends_on_content_not_names_or_order(tmp_path):
    logs = sorted(p for p in MLPERF.rglob("result_*.txt"))
    assert len(logs) >= 3
    a = Store(f"sqlite:///{tmp_path / 'a.db'}")
    for path in reversed(logs):  # another order
        ingest_paths(a, [str(path)])
    b = Store(f"sqlite:///{tmp_path / 'b.db'}")
    copy = shutil.copytree(MLPERF, tmp_path / "elsewhere" / "logs")  # other paths, same bytes
    ingest_paths(b, [str(copy)])
    assert len(b.runs()) == len(a.runs())
    assert data_fingerprint(a) == data_fingerprint(b)
    c = Store(f"sqlite:///{tmp_path / 'c.db'}")
    ingest_paths(c, [str(p) for p in logs[:-1]])
    assert data_fingerprint(c) != data_fingerprint(a)
    assert fingerprint_files(logs) == fingerprint_files(list(reversed(logs)))


def test_layerwise_run_logs_metrics_plot_and_predictor(tmp_path):
    import mlflow

    predictor = tmp_path / "predictor"
    predictor.mkdir()
    (predictor / "model.json").write_text("{}")
    data = sorted((DATA / "keras").glob("*.jsonl"))
    actual = [1.0, 2.0, 4.0, 8.0]
    predicted = [1.1, 1.8, 4.4, 7.0]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = log_layerwise_run(
        params={"layers": ["conv", "dense"], "rows": 4}, metrics={"mape_conv": 9.5,
                                                                  "bad": math.nan},
        actual_ms=actual, predicted_ms=predicted, labels=["conv", "conv", "dense", "dense"],
        data_paths=data, predictor_dir=predictor, tracking_uri=uri,
    )
    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.params["data_fingerprint"] == fingerprint_files(data)
    assert run.data.metrics == {"mape_conv": 9.5}  # non-finite metrics are left out
    paths = {a.path for a in client.list_artifacts(run_id)}
    assert {"predicted_vs_actual.png", "predictions.csv", "predictor"} <= paths
    assert [a.path for a in client.list_artifacts(run_id, "predictor")] == ["predictor/model.json"]


def test_layerwise_training_run_from_a_fitted_predictor(tmp_path):
    import mlflow

    from jobcast.mlops.tracking import log_layerwise_training
    from layerwise.predictor import LayerPredictor

    files = sorted((DATA / "justus2018").glob("*_slice.csv.gz"))
    frames = []
    for path in files:
        frame = pd.read_csv(path)
        frame.insert(0, "layer", path.name.split("_")[0])
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True)
    predictor = LayerPredictor(model="linear").fit(rows)
    out = predictor.save(tmp_path / "predictor")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = log_layerwise_training(predictor, rows, out_dir=out, data_paths=files,
                                    params={"models": "linear"}, tracking_uri=uri, plot_rows=300)
    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    table = predictor.validation_table()
    assert run.data.metrics["val_mape_conv"] == pytest.approx(
        float(table[table.chosen & (table.layer == "conv")]["mape"].iloc[0]))
    assert set(run.data.params["layers"].strip("[]").replace('"', "").split(", ")) == {
        "conv", "dense"}
    artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
    plotted = pd.read_csv(artifacts / "predictions.csv")
    assert len(plotted) == 300 and set(plotted["label"]) == {"conv", "dense"}
    assert (plotted["predicted_ms"] > 0).all()
    assert (artifacts / "predictor" / "predictor.json").is_file()
    assert LayerPredictor.load(artifacts / "predictor").known_layers == predictor.known_layers
