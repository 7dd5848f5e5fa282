"""The layer-time estimators and the predictor follow scikit-learn's estimator contract."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from sklearn.base import BaseEstimator, clone

from layerwise.estimators.gbt import GbtEstimator
from layerwise.estimators.linear import PaleoLinearEstimator
from layerwise.estimators.mlp import MlpEstimator, ResMlpEstimator
from layerwise.predictor import LayerPredictor


@pytest.mark.parametrize("est", [GbtEstimator(max_iter=7), PaleoLinearEstimator(floor_ms=0.01),
                                 MlpEstimator(epochs=3), ResMlpEstimator(epochs=2),
                                 LayerPredictor(model="gbt", coverage=0.8)])
def test_parameters_in_init_only(est):
    assert isinstance(est, BaseEstimator)
    params = set(inspect.signature(type(est).__init__).parameters) - {"self"}
    assert set(vars(est)) == params  # no fitted state before fit
    copy = clone(est)
    assert copy.get_params() == est.get_params()
    if dataclasses.is_dataclass(est):
        assert {f.name for f in dataclasses.fields(est)} == params


def test_an_unfitted_estimator_says_so():
    with pytest.raises(RuntimeError, match="not fitted"):
        GbtEstimator().state()
    with pytest.raises(RuntimeError, match="not fitted"):
        LayerPredictor().predict(__import__("pandas").DataFrame({"layer": ["conv"]}))
