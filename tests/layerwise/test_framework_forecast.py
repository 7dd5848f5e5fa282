"""The shipped predictor prices a network per framework: PyTorch jobs get the composition
fitted on measured PyTorch steps, TensorFlow jobs the Lambda one; both survive save/load."""

from __future__ import annotations

import pytest

from layerwise.efficiency import EfficiencyPredictor
from layerwise.forecast import forecast_network
from layerwise.pricing import SHIPPED_DIR
from layerwise.shipped import default_predictor


def test_shipped_predictor_has_a_pytorch_composition():
    pred = default_predictor()
    assert "pytorch" in pred.framework_compositions_
    torch_comp = pred.framework_compositions_["pytorch"]
    assert torch_comp.n_fit_ > 0 and torch_comp.log_low_ <= 0 <= torch_comp.log_high_


def test_framework_changes_the_forecast_and_is_reported():
    kwargs = dict(device="H100 SXM5", batch_size=64, optimizer="momentum", precision="fp16")
    tf = forecast_network("resnet50", framework="tensorflow", **kwargs)
    pt = forecast_network("resnet50", framework="pytorch", **kwargs)
    assert tf["framework"] == "tensorflow" and pt["framework"] == "pytorch"
    assert pt["batch_seconds"] != pytest.approx(tf["batch_seconds"], rel=1e-3)
    for result in (tf, pt):
        assert result["low"] <= result["batch_seconds"] <= result["high"]


def test_framework_compositions_round_trip(tmp_path):
    pred = EfficiencyPredictor.load(SHIPPED_DIR)
    pred.save(tmp_path)
    again = EfficiencyPredictor.load(tmp_path)
    assert set(again.framework_compositions_) == set(pred.framework_compositions_)
    assert again.framework_compositions_["pytorch"].to_dict() == \
        pred.framework_compositions_["pytorch"].to_dict()
    (tmp_path / "composition-pytorch.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad composition file"):
        EfficiencyPredictor.load(tmp_path)
