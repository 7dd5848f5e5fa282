"""Layer features, estimators and LayerPredictor on a real slice of the published data."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from paths import DATA as SAMPLES
from paths import REPO

from layerwise.estimators.gbt import Forest
from layerwise.features import FeatureError, feature_frame
from layerwise.predictor import (
    OUTPUT_COLUMNS,
    LayerPredictor,
    layer_types,
    metrics,
    training_rows,
)
from layerwise.published import PUBLISHED_GPUS
from layerwise.shipped import default_predictor

DATA = SAMPLES / "justus2018"
FAST = {"gbt": {"max_iter": 120, "max_leaf_nodes": 31, "transfer_max_iter": 60}}


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    frames = []
    for layer in ("conv", "dense"):
        frame = pd.read_csv(DATA / f"{layer}_slice.csv.gz")
        frame.insert(0, "layer", layer)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def split(rows):
    test = rows.groupby(["layer", "gpu"]).sample(frac=0.2, random_state=1)
    return rows.drop(test.index), test


@pytest.fixture(scope="module")
def fitted(split) -> LayerPredictor:
    train, _ = split
    return LayerPredictor(candidates=("gbt", "linear"), params=FAST).fit(train)


CONV = {"layer": "conv", "gpu": "V100", "batchsize": 2, "matsize": 5, "kernelsize": 3,
        "channels_in": 4, "channels_out": 6, "strides": 1, "padding": "same", "use_bias": True,
        "activation": "relu", "optimizer": "none", "precision": 32}
DENSE = {"layer": "dense", "gpu": "K80", "batchsize": 4, "dim_input": 10, "dim_output": 3,
         "activation": "relu", "optimizer": "adam", "precision": 32}


def test_conv_features_hand_computed():
    feats = feature_frame(pd.DataFrame([CONV]), "conv").iloc[0]
    out = 2 * 5 * 5 * 6  # batch x side x side x channels_out, SAME padding, stride 1
    flops = 2 * out * 3 * 3 * 4 + out + out  # multiply-adds, bias, relu
    assert feats["log_flops"] == pytest.approx(math.log1p(flops))
    assert feats["log_output_size"] == pytest.approx(math.log1p(out))
    assert feats["out_side"] == 5
    assert feats["pad_total"] == 2 and feats["pad_asym"] == 0
    assert feats["log_bytes_in"] == pytest.approx(math.log1p(2 * 5 * 5 * 4 * 4))
    assert feats["activation_relu"] == 1 and feats["optimizer_none"] == 1
    assert feats["training"] == 0
    assert feats["lanes_per_core"] == pytest.approx(64, rel=0.01)  # Volta: 64 FP32 lanes per SM
    assert np.isfinite(feats.to_numpy()).all()


def test_odd_same_padding_is_flagged():
    row = {**CONV, "kernelsize": 2}
    feats = feature_frame(pd.DataFrame([row]), "conv").iloc[0]
    assert feats["pad_total"] == 1 and feats["pad_asym"] == 1


def test_dense_features_hand_computed():
    feats = feature_frame(pd.DataFrame([DENSE]), "dense").iloc[0]
    flops = 2 * 4 * 3 * 10 + 4 * 3 + 4 * 3
    assert feats["log_flops"] == pytest.approx(math.log1p(flops))
    assert feats["log_work_flops"] == pytest.approx(math.log1p(3 * flops))  # training step
    assert feats["optimizer_adam"] == 1 and feats["training"] == 1
    assert feats["lanes_per_core"] == pytest.approx(192, rel=0.01)  # Kepler: 192 per SMX


def test_features_finite_on_real_rows(rows):
    for layer in ("conv", "dense"):
        part = rows[rows["layer"] == layer]
        feats = feature_frame(part, layer)
        assert len(feats) == len(part)
        assert np.isfinite(feats.to_numpy()).all()


def test_hw_columns_override_catalog():
    row = {**DENSE, "gpu": "cpu-some-model", "hw_kind": "cpu", "hw_memory_gb": 16,
           "hw_bandwidth_gbs": 20, "hw_clock_mhz": 2000, "hw_cores": 2, "hw_peak_tflops": 0.128}
    feats = feature_frame(pd.DataFrame([row]), "dense").iloc[0]
    assert feats["log_peak_tflops"] == pytest.approx(math.log(0.128))
    assert feats["cores"] == 2


def test_unknown_gpu_without_hw_columns_is_a_clear_error():
    with pytest.raises(FeatureError, match="V1000.*Did you mean"):
        feature_frame(pd.DataFrame([{**CONV, "gpu": "V1000"}]), "conv")


def test_bad_category_is_a_clear_error():
    with pytest.raises(FeatureError, match="optimizer 'lion'"):
        feature_frame(pd.DataFrame([{**DENSE, "optimizer": "lion"}]), "dense")


def test_layer_type_fallback():
    conv_only = pd.DataFrame([{k: v for k, v in CONV.items() if k != "layer"}])
    assert layer_types(conv_only).tolist() == ["conv"]
    assert layer_types(pd.DataFrame([{"batchsize": 1, "dim_input": 2}])).tolist() == ["dense"]


def test_training_rows_drop_failed_and_nonpositive():
    frame = pd.DataFrame({"status": ["ok", "failed", "ok"], "time_ms_median": [1.0, 2.0, 0.0]})
    assert training_rows(frame).index.tolist() == [0]


def test_exported_forest_matches_sklearn(rows):
    from sklearn.ensemble import HistGradientBoostingRegressor

    part = rows[rows["layer"] == "conv"]
    X = feature_frame(part, "conv").to_numpy()
    y = np.log(part["time_ms_median"].to_numpy())
    model = HistGradientBoostingRegressor(max_iter=50, max_leaf_nodes=15).fit(X, y)
    ours = Forest.from_sklearn(model).predict(X)
    np.testing.assert_allclose(ours, model.predict(X), rtol=0, atol=1e-5)


def test_round_trip_beats_naive_baseline(fitted, split):
    train, test = split
    pred = fitted.predict(test)
    assert list(pred.columns) == list(OUTPUT_COLUMNS)
    assert pred.index.equals(test.index)
    values = pred.to_numpy()
    assert np.isfinite(values).all() and (values > 0).all()
    assert (pred["low_ms"] <= pred["predicted_ms"]).all()
    assert (pred["predicted_ms"] <= pred["high_ms"]).all()
    for layer in ("conv", "dense"):
        sel = test["layer"] == layer
        truth = test.loc[sel, "time_ms_median"].to_numpy()
        # Naive baseline: the training rows' geometric mean time of the same layer type and GPU.
        tr = train[train["layer"] == layer]
        geo = np.exp(np.log(tr["time_ms_median"]).groupby(tr["gpu"]).mean())
        naive = test.loc[sel, "gpu"].map(geo).to_numpy()
        ours = metrics(truth, pred.loc[sel, "predicted_ms"].to_numpy())
        assert ours["mape"] < 0.5 * metrics(truth, naive)["mape"], layer
    assert fitted.known_layers == {"conv", "dense"}
    table = fitted.validation_table()
    assert set(table["model"]) == {"gbt", "linear"}
    assert table.groupby("layer")["chosen"].sum().eq(1).all()


def test_save_load_identical(fitted, split, tmp_path):
    _, test = split
    fitted.save(tmp_path / "model")
    loaded = LayerPredictor.load(tmp_path / "model")
    pd.testing.assert_frame_equal(loaded.predict(test), fitted.predict(test))
    assert loaded.known_layers == fitted.known_layers


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="predictor.json"):
        LayerPredictor.load(tmp_path)
    (tmp_path / "predictor.json").write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        LayerPredictor.load(tmp_path)


def test_unseen_gpu_predicted_from_catalog(rows):
    two = rows[rows["gpu"].isin(["V100", "P100", "K80"])]
    predictor = LayerPredictor(model="gbt", params=FAST).fit(two)
    target = rows[rows["gpu"] == "K40"]
    pred = predictor.predict(target)
    assert np.isfinite(pred.to_numpy()).all() and (pred.to_numpy() > 0).all()
    assert (pred["low_ms"] <= pred["high_ms"]).all()
    renamed = target.assign(gpu="Tesla T4")  # in the catalog, never trained on
    assert np.isfinite(predictor.predict(renamed).to_numpy()).all()
    # Unseen devices get the wider leave-one-device-out interval.
    seen = predictor.predict(rows[rows["gpu"] == "V100"])
    width_seen = np.log(seen["high_ms"] / seen["low_ms"]).median()
    width_unseen = np.log(pred["high_ms"] / pred["low_ms"]).median()
    assert width_unseen > width_seen


def test_mixed_and_unknown_layer_types(fitted, split):
    _, test = split
    mixed = test.sample(frac=1.0, random_state=0)
    pred = fitted.predict(mixed)
    pd.testing.assert_frame_equal(pred.loc[test.index], fitted.predict(test))
    pool = pd.DataFrame([{"layer": "pool", "gpu": "V100", "batchsize": 1, "matsize": 8,
                          "kernelsize": 2, "channels_in": 3, "strides": 2, "padding": "same",
                          "pool_type": "max", "optimizer": "none", "precision": 32}])
    with pytest.raises(FeatureError, match="no model for layer type"):
        fitted.predict(pool)


def test_too_few_rows_is_a_clear_error(rows):
    with pytest.raises(ValueError, match="need at least"):
        LayerPredictor(model="linear").fit(rows.head(5))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "resmlp"])
def test_mlp_round_trip(rows, tmp_path, name):
    part = rows[rows["layer"] == "dense"]
    params = {name: {"hidden": (16, 16, 16), "epochs": 3, "batch_size": 128}}
    predictor = LayerPredictor(model=name, params=params, unseen_interval_refits=False).fit(part)
    pred = predictor.predict(part)
    assert np.isfinite(pred.to_numpy()).all() and (pred.to_numpy() > 0).all()
    predictor.save(tmp_path / name)
    loaded = LayerPredictor.load(tmp_path / name)
    pd.testing.assert_frame_equal(loaded.predict(part), pred)


def test_default_predictor_covers_the_six_gpus(rows):
    predictor = default_predictor()
    assert {"conv", "dense"} <= predictor.known_layers
    pred = predictor.predict(rows)[["predicted_ms", "low_ms", "high_ms"]]
    assert np.isfinite(pred.to_numpy()).all() and (pred.to_numpy() > 0).all()
    for gpu in PUBLISHED_GPUS:
        sel = rows["gpu"] == gpu
        # Trained on all published rows (this slice included): close fit expected.
        assert metrics(rows.loc[sel, "time_ms_median"], pred.loc[sel, "predicted_ms"])["mape"] < 25


def test_default_predictor_loads_without_tensorflow():
    code = (
        "import sys, pandas as pd\n"
        "from layerwise.shipped import default_predictor\n"
        f"row = pd.DataFrame([{CONV!r}])\n"
        "p = default_predictor().predict(row)\n"
        "assert p['predicted_ms'].iloc[0] > 0\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_published_loader_reads_layout_and_reports_missing_files(tmp_path, monkeypatch):
    from layerwise.published import load_published

    for layer in ("conv", "dense"):
        frame = pd.read_csv(DATA / f"{layer}_slice.csv.gz")
        frame[frame["gpu"] == "K80"].to_csv(tmp_path / f"{layer}_K80.csv.gz", index=False)
    monkeypatch.setenv("JOBCAST_PUBLISHED_DIR", str(tmp_path))
    rows = load_published(gpus=["K80"], nrows=10)
    assert rows.groupby("layer").size().to_dict() == {"conv": 10, "dense": 10}
    assert set(rows["gpu"]) == {"K80"}
    with pytest.raises(FileNotFoundError, match="conv_V100.csv.gz"):
        load_published(gpus=["V100"])
    with pytest.raises(FileNotFoundError, match="JOBCAST_PUBLISHED_DIR"):
        load_published(tmp_path / "nowhere")
