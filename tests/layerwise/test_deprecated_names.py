"""Issue 26's layerwise renames keep their old names for one release: the interval-refit
parameters (and the shipped predictor file that still holds the old keys), the estimators'
``calibration_params`` and the ``layerwise.hardware`` module."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
from sklearn.base import clone

from layerwise.deprecated import renamed_keys, renamed_param
from layerwise.efficiency import EfficiencyPredictor
from layerwise.estimators.base import Estimator
from layerwise.estimators.gbt import GbtEstimator
from layerwise.predictor import LayerPredictor
from layerwise.pricing import SHIPPED_DIR


def test_the_shipped_efficiency_file_holds_the_old_keys_and_loads_under_the_new_ones():
    saved = json.loads((SHIPPED_DIR / "efficiency.json").read_text())["params"]
    assert {"calibrate_unseen", "calibration_rows"} <= set(saved)  # written before the rename
    loaded = EfficiencyPredictor.load(SHIPPED_DIR).get_params()
    assert loaded["unseen_interval_refits"] is saved["calibrate_unseen"]
    assert loaded["interval_refit_rows"] == saved["calibration_rows"]
    assert loaded["calibrate_unseen"] is None and loaded["calibration_rows"] is None


def test_renamed_keys_lets_a_set_old_key_win_and_drops_an_empty_one():
    assert renamed_keys({"calibrate_unseen": False, "unseen_interval_refits": True}) == \
        {"unseen_interval_refits": False}
    assert renamed_keys({"calibration_rows": None, "interval_refit_rows": 5}) == \
        {"interval_refit_rows": 5}


@pytest.mark.parametrize("cls", [LayerPredictor, EfficiencyPredictor])
def test_an_old_parameter_wins_with_a_future_warning_and_the_new_one_is_silent(cls, recwarn):
    new = cls(unseen_interval_refits=False, interval_refit_rows=123)
    assert renamed_param(new, "calibrate_unseen", "unseen_interval_refits") is False
    assert renamed_param(new, "calibration_rows", "interval_refit_rows") == 123
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]
    old = clone(cls(calibrate_unseen=False, calibration_rows=7))
    with pytest.warns(FutureWarning, match="'calibrate_unseen' is deprecated.*"
                                           "'unseen_interval_refits'"):
        assert renamed_param(old, "calibrate_unseen", "unseen_interval_refits") is False
    with pytest.warns(FutureWarning, match="'calibration_rows'"):
        assert renamed_param(old, "calibration_rows", "interval_refit_rows") == 7


def test_calibration_params_is_a_deprecated_name_of_interval_refit_params():
    gbt = GbtEstimator(max_iter=7)
    assert gbt.interval_refit_params() == {"max_iter": 1}
    with pytest.warns(FutureWarning, match="interval_refit_params"):
        assert gbt.calibration_params() == {"max_iter": 1}

    class OldStyle(GbtEstimator):  # a subclass written against the old name
        def calibration_params(self):
            return {"max_iter": 2}

    with pytest.warns(FutureWarning, match="override interval_refit_params"):
        assert Estimator.interval_refit_params(OldStyle()) == {"max_iter": 2}


def test_layerwise_hardware_is_a_deprecated_shim_of_local_device():
    from layerwise import local_device

    sys.modules.pop("layerwise.hardware", None)
    with pytest.warns(DeprecationWarning, match="layerwise.local_device"):
        old = importlib.import_module("layerwise.hardware")
    for name in old.__all__:
        assert getattr(old, name) is getattr(local_device, name)
    assert old.parse_device("gpu:1") == ("gpu", 1)


def test_feature_frame_takes_device_features_and_the_old_hardware_keyword():
    import pandas as pd

    from layerwise.efficiency import efficiency_features
    from layerwise.roofline import physics_columns

    rows = pd.DataFrame([{"layer": "dense", "batchsize": 8, "dim_input": 64, "dim_output": 32,
                          "activation": "relu",
                          "optimizer": "none", "precision": 32, "gpu": "V100"}])
    phys = pd.DataFrame(physics_columns(rows.to_dict("records"), rows.index, set(rows.columns)),
                        index=rows.index)
    new = efficiency_features(rows, phys, device_features=False)
    assert efficiency_features(rows, phys, False).equals(new)
    with pytest.warns(FutureWarning, match="device_features"):
        assert efficiency_features(rows, phys, hardware=False).equals(new)
    assert len(efficiency_features(rows, phys, device_features=True).columns) > len(new.columns)
