"""Whole-network composition: the fit recovers its constants; passes and precision add up."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from layerwise.as_run import precision_class
from layerwise.compose import Composition, price_layers
from layerwise.forecast import device_features
from layerwise.pricing.step import BACKWARD_RATIO


def test_composition_recovers_scale_and_overheads():
    rng = np.random.default_rng(3)
    n = 40
    X = pd.DataFrame({"sum_ms": rng.uniform(20, 800, n), "kernels": rng.integers(50, 900, n),
                      "precision_class": np.where(np.arange(n) % 2, "tensor", "fp32")})
    scale = np.where(X["precision_class"] == "tensor", 2.5, 1.3)
    y = scale * X["sum_ms"] + 0.02 * X["kernels"] + 4.0
    comp = Composition().fit(X, y)
    assert comp.scale_["fp32"] == pytest.approx(1.3, rel=1e-3)
    assert comp.scale_["tensor"] == pytest.approx(2.5, rel=1e-3)
    assert comp.kernel_ms_ == pytest.approx(0.02, rel=1e-2)
    assert comp.step_ms_ == pytest.approx(4.0, rel=5e-2)
    ms, low, high = comp.step(100.0, 80.0, 130.0, 200, "fp32")
    assert ms == pytest.approx(1.3 * 100 + 0.02 * 200 + 4.0, rel=1e-2)
    assert low <= ms <= high


def test_composition_round_trips(tmp_path):
    comp = Composition.identity()
    comp.save(tmp_path)
    again = Composition.load(tmp_path)
    assert again.to_dict() == comp.to_dict()
    (tmp_path / "composition.json").write_text("{")
    with pytest.raises(ValueError, match="composition.json"):
        Composition.load(tmp_path)


def test_precision_class_follows_the_catalog():
    assert precision_class("fp16", device_features("V100")) == "tensor"
    assert precision_class("fp16", device_features("GTX 1080 Ti")) == "fp32"  # no tensor cores
    assert precision_class("fp32", device_features("A100")) == "fp32"
    assert precision_class("bf16", device_features("V100")) == "fp32"  # no bf16 tensor cores


class _Unit:
    """A stand-in predictor: every forward row costs 1 ms, every training row 2 ms."""

    known_layers = {"conv", "dense", "act", "bn", "add", "pool"}

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        ms = np.where(rows["optimizer"].eq("none"), 1.0, 2.0)
        return pd.DataFrame({"predicted_ms": ms, "low_ms": ms * 0.5, "high_ms": ms * 2},
                            index=rows.index)


def test_training_adds_input_gradients_and_backward_passes():
    from layerwise.network import decompose

    net = decompose({"name": "tiny", "input_shape": [8, 8, 3], "layers": [
        {"type": "conv", "filters": 4}, {"type": "bn"}, {"type": "act", "activation": "relu"},
        {"type": "conv", "filters": 4}, {"type": "flatten"}, {"type": "dense", "units": 2}]},
        batch_size=2, optimizer="sgd")
    hw = device_features("V100")
    fwd = price_layers(net.rows, _Unit(), hw, "fp32", False, "none")
    train = price_layers(net.rows, _Unit(), hw, "fp32", True, "sgd")
    by = train.set_index("name")["ms"]
    names = [r["name"] for r in net.rows if r["layer"] == "conv"]
    assert by[names[0]] == 2.0  # the first layer computes no input gradient
    assert by[names[1]] == 3.0  # training row + one forward pass for the input gradient
    bn = next(r["name"] for r in net.rows if r["layer"] == "bn")
    assert by[bn] == pytest.approx(1.0 + BACKWARD_RATIO["bn"])
    assert fwd["ms"].sum() < train["ms"].sum()
