"""Whole-network forecasts with a stand-in layer predictor (no training, no timing)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from layerwise.forecast import forecast_network
from layerwise.layers import KINDS, layer_of
from layerwise.pricing.model import PER_TYPE

NET = {
    "name": "small", "input_shape": [16, 16, 3],
    "layers": [
        {"type": "conv", "filters": 8, "kernel": 3, "activation": "relu"},
        {"type": "bn"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "conv", "filters": 16, "kernel": 3, "activation": "relu"},
        {"type": "flatten"},
        {"type": "dense", "units": 10, "activation": "softmax"},
    ],
}


class StandIn:
    """A FLOPs-proportional predictor with a per-call floor, knowing only some layer types."""

    pricing = PER_TYPE  # priced layer by layer (layerwise.per_type)

    def __init__(self, known=("conv", "dense"), floor_ms=0.05, ms_per_mflop=0.01):
        self.known_layers = set(known)
        self.floor_ms, self.ms_per_mflop = floor_ms, ms_per_mflop
        self.seen: list[pd.DataFrame] = []

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        self.seen.append(rows)
        ms = []
        for _, row in rows.iterrows():
            kind = layer_of(row)
            assert kind in self.known_layers
            work = 3.0 if row["optimizer"] != "none" else 1.0
            ms.append(self.floor_ms + work * self.ms_per_mflop * KINDS[kind].flops(row) / 1e6)
        pred = pd.Series(ms, index=rows.index)
        return pd.DataFrame({"predicted_ms": pred, "low_ms": 0.8 * pred, "high_ms": 1.25 * pred})


def test_tiny_net_forecast_is_positive_with_an_interval_and_warns_about_unknowns():
    p = StandIn()
    out = forecast_network(NET, device="cpu", batch_size=8, optimizer="adam", predictor=p)
    assert math.isfinite(out["batch_seconds"]) and out["batch_seconds"] > 0
    assert 0 < out["low"] <= out["batch_seconds"] <= out["high"]
    names = [row["name"] for row in out["layers"]]
    assert len(names) == 6  # every layer listed, flatten included at 0 s
    methods = {row["name"]: row["method"] for row in out["layers"]}
    assert methods["bn_1"] == "roofline" and methods["pool_2"] == "roofline"
    assert methods["conv_0"] == "predictor" and methods["flatten_4"] == "none"
    assert set(out["unknown_layers"]) == {"bn_1", "pool_2"}
    assert any("'bn'" in w for w in out["warnings"])
    assert all(r["low_ms"] <= r["ms"] <= r["high_ms"] for r in out["layers"])
    total_ms = sum(r["ms"] for r in out["layers"]) + out["step_overhead_ms"]
    assert total_ms == pytest.approx(1000 * out["batch_seconds"])
    sent = pd.concat(p.seen)
    assert (sent["gpu"] == out["gpu"]).all() and (sent["hw_kind"] == "cpu").all()


def test_epoch_and_job_seconds():
    out = forecast_network(NET, device="cpu", batch_size=32, optimizer="sgd",
                           dataset_size=1000, epochs=3, predictor=StandIn())
    assert out["steps_per_epoch"] == 32  # ceil(1000 / 32)
    assert out["epoch_seconds"] == pytest.approx(32 * out["batch_seconds"])
    assert out["job_seconds"] == pytest.approx(3 * out["epoch_seconds"])
    assert out["job_low_seconds"] <= out["job_seconds"] <= out["job_high_seconds"]
    no_job = forecast_network(NET, device="cpu", batch_size=32, optimizer="sgd",
                              dataset_size=1000, predictor=StandIn())
    assert "epoch_seconds" in no_job and "job_seconds" not in no_job


def test_training_costs_more_than_forward_and_overhead_counted_once():
    kw = dict(device="cpu", batch_size=8, predictor=StandIn(floor_ms=0.5))
    fwd = forecast_network(NET, optimizer="none", **kw)
    train = forecast_network(NET, optimizer="momentum", **kw)
    assert train["batch_seconds"] > fwd["batch_seconds"]
    per_layer = forecast_network(NET, optimizer="momentum", call_overhead="per-layer", **kw)
    # three predicted layers each carry a 0.5 ms floor; "once" keeps one of them
    assert 1000 * (per_layer["batch_seconds"] - train["batch_seconds"]) == pytest.approx(
        1.0, rel=0.05)
    assert fwd["optimizer"] == "none"
    assert forecast_network(NET, optimizer=None, **kw)["batch_seconds"] == fwd["batch_seconds"]


def test_known_layers_are_predicted_when_the_predictor_knows_them():
    p = StandIn(known=tuple(KINDS))
    out = forecast_network(NET, device="cpu", batch_size=4, optimizer="adam", predictor=p)
    assert out["unknown_layers"] == []
    assert not any("not trained" in w for w in out["warnings"])


def test_gpu_forecast_adds_input_gradients():
    kw = dict(device="V100", batch_size=16, optimizer="adam", predictor=StandIn())
    auto = forecast_network(NET, **kw)
    measured = forecast_network(NET, input_grad="measured", **kw)
    assert auto["hw_kind"] == "gpu" and auto["gpu"] == "V100"
    assert auto["batch_seconds"] > measured["batch_seconds"]
    first, second = (r for r in auto["layers"] if r["layer"] == "conv")
    assert "input gradient" in second["note"] and "input gradient" not in first["note"]


@pytest.mark.slow
def test_keras_model_with_unknown_layer():
    import keras

    inp = keras.Input((12, 12, 3))
    x = keras.layers.ZeroPadding2D(((0, 1), (0, 1)))(inp)  # uneven: no kind takes it
    x = keras.layers.Conv2D(4, 3)(x)
    y = keras.layers.Conv2D(4, 1)(x)
    x = keras.layers.Concatenate(axis=1)([x, y])  # not the channel axis: no kind
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inp, keras.layers.Dense(3)(x))
    out = forecast_network(model, device="cpu", batch_size=2, optimizer="sgd",
                           predictor=StandIn(known=("conv", "dense", "act")))
    rough = {r["keras_class"]: r for r in out["layers"] if r["method"] != "predictor"}
    assert {"ZeroPadding2D", "Concatenate", "GlobalAveragePooling2D"} <= set(rough)
    assert rough["ZeroPadding2D"]["method"] == "proxy-act"  # priced as an element-wise op
    assert rough["ZeroPadding2D"]["ms"] > 0
    assert any("ZeroPadding2D" in w and "Concatenate" in w for w in out["warnings"])
    assert 0 < out["low"] <= out["batch_seconds"] <= out["high"]


def test_bad_inputs_are_clear_errors():
    kw = dict(batch_size=4, optimizer="sgd", predictor=StandIn())
    with pytest.raises(ValueError, match="unknown GPU 'Voodoo5'"):
        forecast_network(NET, device="Voodoo5", **kw)
    with pytest.raises(ValueError, match="epochs needs dataset_size"):
        forecast_network(NET, device="cpu", epochs=2, **kw)
    with pytest.raises(ValueError, match="call_overhead"):
        forecast_network(NET, device="cpu", call_overhead="twice", **kw)
