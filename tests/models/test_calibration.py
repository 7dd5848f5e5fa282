"""Scale calibration: factors from observed runs, fallbacks, shrinkage, round trip, and the
deprecated names (``models.calibration``, the ``hardware`` column)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from fleet.deployment import Deployment, deployment_key
from jobcast.service.engine.forecast import Forecast
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import END_TO_END, LAYERWISE
from jobcast.service.engine.routes import calibrate
from models.scale_calibration import ScaleCalibrator


def _obs(rows):
    frame = pd.DataFrame(rows, columns=["network", "deployment", "predicted", "actual"])
    return frame, frame["actual"]


def test_pair_factor_is_the_geometric_mean_of_the_runs_ratios():
    X, y = _obs([("ResNet-50", "hw-x8", 10.0, 20.0), ("resnet50", "hw-x8", 10.0, 80.0)])
    cal = ScaleCalibrator().fit(X, y)
    scale = cal.scale_for("RESNET50", "hw-x8")
    assert scale.level == "network-hardware" and scale.runs == 2
    assert scale.factor == pytest.approx(math.sqrt(2.0 * 8.0))
    assert cal.predict(pd.DataFrame({"network": ["resnet50"], "deployment": ["hw-x8"],
                                     "predicted": [3.0]}))[0] == pytest.approx(3.0 * 4.0)


def test_hardware_fallback_counts_each_network_once_and_unknown_hardware_is_left_alone():
    X, y = _obs([("a", "hw", 1.0, 2.0)] * 3 + [("b", "hw", 1.0, 8.0)])
    cal = ScaleCalibrator().fit(X, y)
    scale = cal.scale_for("vgg16", "hw")
    assert scale.level == "hardware" and scale.runs == 4
    assert scale.factor == pytest.approx(4.0)  # sqrt(2 * 8), not weighted 3:1 towards a
    assert cal.scale_for("vgg16", "other-hw") is None
    assert ScaleCalibrator(fallback=False).fit(X, y).scale_for("vgg16", "hw") is None
    unchanged = pd.DataFrame({"network": ["vgg16"], "deployment": ["other-hw"],
                              "predicted": [5.0]})
    assert cal.predict(unchanged)[0] == 5.0


def test_shrinkage_pulls_a_network_towards_its_hardware_factor():
    X, y = _obs([("a", "hw", 1.0, 2.0), ("b", "hw", 1.0, 16.0)])
    factors = [ScaleCalibrator(shrinkage=k).fit(X, y).scale_for("a", "hw").factor
               for k in (0.0, 1.0, 5.0, 1000.0)]
    assert factors[0] == pytest.approx(2.0)
    assert all(x < y for x, y in zip(factors, factors[1:], strict=False))
    assert factors[-1] < 16.0 and factors[-1] == pytest.approx(16.0, rel=0.01)


def test_bad_rows_are_ignored_and_missing_columns_rejected():
    X, y = _obs([("a", "hw", 1.0, 3.0), ("a", "hw", 0.0, 5.0), ("a", "hw", 2.0, np.nan)])
    assert ScaleCalibrator().fit(X, y).scale_for("a", "hw").runs == 1
    with pytest.raises(ValueError, match="deployment"):
        ScaleCalibrator().fit(X.drop(columns="deployment"), y)
    with pytest.raises(ValueError, match="shrinkage"):
        ScaleCalibrator(shrinkage=-1).fit(X, y)


def test_json_round_trip_gives_the_same_factors():
    X, y = _obs([("a", "h1", 1.0, 2.0), ("b", "h1", 2.0, 3.0), ("a", "h2", 4.0, 1.0)])
    cal = ScaleCalibrator(shrinkage=0.5).fit(X, y)
    back = ScaleCalibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    for network in ("a", "b", "c"):
        for hardware in ("h1", "h2", "h3"):
            assert back.scale_for(network, hardware) == cal.scale_for(network, hardware)


def test_calibrate_scales_layerwise_forecasts_only():
    X, y = _obs([("vgg16", deployment_key("Tesla V100 SXM2 16GB", 8), 1.0, 3.0)])
    cal = ScaleCalibrator().fit(X, y)
    job = JobRequest(network="VGG16", deployment="8x V100", batch_size=256, iterations=10)
    layerwise = Forecast(job, 10.0, 8.0, 13.0, LAYERWISE, "layerwise/abc",
                         details={"device": "Tesla V100 SXM2 16GB", "devices": 8})
    out = calibrate(layerwise, cal)
    assert out.route == LAYERWISE and out.details["calibration"]["runs"] == 1
    ratios = [getattr(out, k) / getattr(layerwise, k) for k in ("seconds", "low", "high")]
    assert ratios == pytest.approx([3.0] * 3)
    assert out.model.startswith("layerwise/abc+calibration/network-hardware/")
    assert out.to_dict()["route"] == "layerwise" and calibrate(out, cal) is out  # once only
    single = replace(layerwise, details={**layerwise.details, "devices": 1})
    assert calibrate(single, cal) is single  # other hardware: no factor
    e2e = replace(layerwise, route=END_TO_END, model="e2e/x")
    assert calibrate(e2e, cal) is e2e


def test_calibration_hardware_is_the_deployment_key():
    assert deployment_key("Tesla V100-SXM2-16GB", 8) == "nvidia-v100-sxm2-16gb-x8"
    assert deployment_key("NVIDIA A100-SXM4-40GB", 2) == Deployment.parse("2x A100 SXM4 40GB").key


def test_old_module_and_hardware_column_still_work_with_a_warning():
    import importlib
    import sys

    X, y = _obs([("a", "h1", 1.0, 2.0), ("b", "h1", 2.0, 3.0), ("a", "h2", 4.0, 1.0)])
    new = ScaleCalibrator().fit(X, y)
    old_x = X.rename(columns={"deployment": "hardware"})
    with pytest.warns(DeprecationWarning, match="'hardware' is deprecated"):
        old = ScaleCalibrator().fit(old_x, y)
    assert old.to_dict() == new.to_dict()
    with pytest.warns(DeprecationWarning, match="'hardware' is deprecated"):
        assert list(old.predict(old_x)) == list(new.predict(X))
    with pytest.warns(DeprecationWarning, match="deployments_"):
        assert old.hardware_ == new.deployments_
    sys.modules.pop("models.calibration", None)
    with pytest.warns(DeprecationWarning, match="models.scale_calibration"):
        shim = importlib.import_module("models.calibration")
    assert shim.ScaleCalibrator is ScaleCalibrator
