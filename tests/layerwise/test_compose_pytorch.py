"""The composition across GPUs: overlap and floors, the fit on a tiny frame, the PyTorch targets."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pandas as pd
import pytest

from layerwise.compose import Composition, price_layers
from layerwise.corpora.network_fit import leave_one_out, naive_nearest_gpu, naive_roofline
from layerwise.corpora.torchvision_bench import (
    first_session_targets,
    measured_detection,
    measured_targets,
    tvbench_targets,
)
from layerwise.forecast import device_features
from layerwise.network import decompose
from layerwise.pricing.step import step_array, step_from_dict


def _frame(n: int = 60, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"sum_ms": rng.uniform(5, 400, n), "kernels": rng.integers(50, 1500, n),
                         "floor_ms": rng.uniform(1, 4, n),
                         "precision_class": np.where(np.arange(n) % 3, "tensor", "fp32"),
                         "chip": np.array(["a", "b", "c", "d"])[np.arange(n) % 4],
                         "network": [f"net{i % 10}" for i in range(n)]})


@pytest.mark.parametrize("form", [{"overlap_p": 4.0}, {"subtract_floor": True},
                                  {"overlap_p": 2.0, "subtract_floor": True}])
def test_the_fit_recovers_the_constants_of_each_form(form):
    X = _frame()
    truth = {"scale": {"fp32": 0.6, "tensor": 0.4}, "kernel_ms": 0.03, "step_ms": 2.0,
             "overlap_p": form.get("overlap_p", 0.0),
             "subtract_floor": form.get("subtract_floor", False)}
    y = step_array(truth, X["sum_ms"].to_numpy(), X["kernels"].to_numpy(float),
                   X["precision_class"].to_numpy(), X["floor_ms"].to_numpy())
    comp = Composition(**form).fit(X, y)
    assert comp.scale_["fp32"] == pytest.approx(0.6, rel=2e-2)
    assert comp.scale_["tensor"] == pytest.approx(0.4, rel=2e-2)
    assert comp.kernel_ms_ == pytest.approx(0.03, rel=5e-2)
    again = Composition.from_dict(comp.to_dict())
    assert again.to_dict() == comp.to_dict()


def test_the_array_formula_is_the_scalar_one():
    X = _frame(12)
    doc = {"scale": {"fp32": 0.7, "tensor": 0.3}, "kernel_ms": 0.02, "step_ms": 1.0,
           "overlap_p": 4.0, "subtract_floor": True, "log_low": -0.2, "log_high": 0.3}
    arr = step_array(doc, X["sum_ms"].to_numpy(), X["kernels"].to_numpy(float),
                     X["precision_class"].to_numpy(), X["floor_ms"].to_numpy())
    for r, a in zip(X.itertuples(), arr, strict=True):
        ms, low, high, _ = step_from_dict(doc, (r.sum_ms, r.sum_ms * 0.8, r.sum_ms * 1.3),
                                          r.kernels, r.precision_class, r.floor_ms)
        assert ms == pytest.approx(a) and low <= ms <= high


def test_overlap_is_never_below_either_side_and_old_files_stay_additive():
    doc = {"scale": {"fp32": 1.0}, "kernel_ms": 0.01, "step_ms": 0.0, "overlap_p": 4.0,
           "log_low": 0.0, "log_high": 0.0}
    ms = step_from_dict(doc, (10.0, 10.0, 10.0), 500, "fp32")[0]
    assert max(10.0, 5.0) <= ms < 15.0
    old = Composition.from_dict({k: v for k, v in doc.items() if k != "overlap_p"})
    assert old.overlap_p == 0.0 and old.step(10.0, 10.0, 10.0, 500, "fp32")[0] == \
        pytest.approx(15.0)


def test_leave_one_out_and_the_naive_rules_on_a_tiny_frame():
    X = _frame()
    X["step_ms"] = 0.5 * X["sum_ms"] + 0.02 * X["kernels"] + 1.0
    X["low_ms"], X["high_ms"] = 0.8 * X["sum_ms"], 1.3 * X["sum_ms"]
    X["roofline_ms"] = X["sum_ms"] / 3
    X["peak_tflops"] = X["chip"].map({"a": 10.0, "b": 20.0, "c": 40.0, "d": 80.0})
    X["precision"], X["batch_per_gpu"] = "fp32", 32
    for by in ("chip", "network"):
        out = leave_one_out(X, by=by, form={"overlap_p": 4.0})
        assert np.isfinite(out["pred_ms"]).all() and (out["pred_low_ms"] <= out["pred_ms"]).all()
        assert out["covered"].dtype == bool
        assert np.isfinite(naive_roofline(X, by)).all()
    near = naive_nearest_gpu(X)
    assert np.isfinite(near).any()


class _Unit:
    known_layers = {"conv", "dense", "act", "bn"}

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        ms = np.where(rows["optimizer"].eq("none"), 1.0, 2.0) * np.where(
            rows.get("batchsize", pd.Series(1, index=rows.index)).fillna(1) > 1, 3.0, 1.0)
        return pd.DataFrame({"predicted_ms": ms, "low_ms": ms, "high_ms": ms}, index=rows.index)


def test_every_priced_layer_carries_a_floor_no_larger_than_its_time():
    net = decompose({"name": "tiny", "input_shape": [8, 8, 3], "layers": [
        {"type": "conv", "filters": 4}, {"type": "bn"}, {"type": "act", "activation": "relu"},
        {"type": "conv", "filters": 4}, {"type": "flatten"}, {"type": "dense", "units": 2}]},
        batch_size=4, optimizer="sgd")
    layers = price_layers(net.rows, _Unit(), device_features("V100"), "fp32", True, "sgd")
    priced = layers[layers["method"].eq("predictor")]
    assert (priced["floor_ms"] > 0).all() and (priced["floor_ms"] <= priced["low_ms"]).all()


def test_torchvision_bench_reader_takes_fp32_steps_and_the_half_files(tmp_path):
    raw = tmp_path / "raw" / "results" / "dgx"
    raw.mkdir(parents=True)
    steps = pd.DataFrame({"network": ["resnet18", "resnet18", "resnet18"],
                          "gpu": ["A100-SXM4-40GB", "A100-SXM4-40GB", "TITAN Xp"],
                          "n_gpus": [1, 2, 1], "precision": ["fp32", "fp32", "fp64"],
                          "batch_per_gpu": 12, "image_size": 224,
                          "step_seconds": [0.02, 0.03, 0.5], "file": "x"})
    with gzip.open(tmp_path / "steps.csv.gz", "wt") as handle:
        steps.to_csv(handle, index=False)
    (raw / "A100-SXM4-40GB_1_gpus__half_model_train_benchmark.csv").write_text(
        "resnet18,vgg11\n10,20\n12,22\n11,\n")
    out = tvbench_targets(tmp_path)
    assert len(out) == 3 and set(out["precision"]) == {"fp32", "fp16-pure"}
    half = out[out["precision"].eq("fp16-pure")].set_index("network")["step_ms"]
    assert half["resnet18"] == 11.0 and half["vgg11"] == 21.0
    assert set(out["fw_version"]) == {"1.7"} and set(out["optimizer"]) == {"none"}
    assert math.isclose(out.loc[out["precision"].eq("fp32"), "step_ms"].iloc[0], 20.0)


def test_the_measured_h100_steps_say_what_ran():
    runs = measured_targets()
    assert {"tvbench", "train"} == set(runs["suite"])
    assert runs["fw_version"].str.startswith("2.11").all()
    assert set(runs["precision"]) <= {"fp32", "tf32", "fp16", "bf16", "fp16-pure"}
    assert (runs["step_ms"] > 0).all() and set(runs["gpu"]) == {"H100 SXM5"}
    first = first_session_targets()
    assert "fp32" not in set(first["precision"])  # that session ran fp32 with TF32 off
    assert len(measured_detection()) > 0


def test_the_launch_cost_by_gpu_year_is_recovered_and_shared_by_both_formulas():
    X = _frame()
    X["year"] = np.array([-2.0, -1.0, 1.0, 3.0])[np.arange(len(X)) % 4]
    truth = {"scale": {"fp32": 0.6, "tensor": 0.4}, "kernel_ms": 0.05, "step_ms": 1.0,
             "overlap_p": 4.0, "subtract_floor": True, "year_coef": -0.15,
             "log_low": -0.2, "log_high": 0.3}
    y = step_array(truth, X["sum_ms"].to_numpy(), X["kernels"].to_numpy(float),
                   X["precision_class"].to_numpy(), X["floor_ms"].to_numpy(),
                   X["year"].to_numpy())
    comp = Composition(overlap_p=4.0, subtract_floor=True, year_kernel=True).fit(X, y)
    assert comp.year_coef_ == pytest.approx(-0.15, abs=0.02)
    assert comp.kernel_ms_ == pytest.approx(0.05, rel=5e-2)
    again = Composition.from_dict(comp.to_dict())
    assert again.to_dict() == comp.to_dict() and again.year_kernel
    for r, a in zip(X.head(8).itertuples(), y[:8], strict=True):
        ms = step_from_dict(truth, (r.sum_ms,) * 3, r.kernels, r.precision_class, r.floor_ms,
                            r.year)[0]
        assert ms == pytest.approx(a)
    # a newer GPU launches faster with a negative coefficient; year 0 is the plain kernel cost
    new, old = (step_from_dict(truth, (1.0,) * 3, 1000, "fp32", 0.0, y_)[0] for y_ in (3, -2))
    assert new < old
    plain = {k: v for k, v in truth.items() if k != "year_coef"}
    assert step_from_dict(truth, (5.0,) * 3, 100, "fp32", 0.0, 0.0) == \
        step_from_dict(plain, (5.0,) * 3, 100, "fp32", 0.0, 5.0)
