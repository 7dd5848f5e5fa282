"""The end-to-end and calibration estimators follow scikit-learn's estimator contract."""

from __future__ import annotations

import inspect

import pandas as pd
import pytest
from sklearn.base import BaseEstimator, clone

from models.phase_model import PhaseTimeModel
from models.scale_calibration import ScaleCalibrator

POINTS = pd.DataFrame({"iterations": [10, 20, 30, 10, 20, 30], "batch_size": [32] * 6})
SECONDS = [1.0, 2.0, 3.1, 1.1, 2.1, 3.0]
RUNS = [1, 1, 1, 2, 2, 2]
CALIBRATION = pd.DataFrame({"network": ["a", "b"], "deployment": ["h", "h"],
                            "predicted": [1.0, 2.0]})


def _fitted(est):
    if isinstance(est, PhaseTimeModel):
        return est.fit(POINTS, SECONDS, RUNS)
    return est.fit(CALIBRATION, [2.0, 3.0])


@pytest.mark.parametrize("est", [PhaseTimeModel(form="per_iteration", coverage=0.8),
                                 ScaleCalibrator(shrinkage=0.5)])
def test_parameters_in_init_fitted_attributes_end_in_underscore(est):
    assert isinstance(est, BaseEstimator)
    params = set(inspect.signature(type(est).__init__).parameters) - {"self"}
    assert set(vars(est)) == params  # __init__ stores its parameters and nothing else
    copy = clone(est)
    assert copy.get_params() == est.get_params() and copy is not est
    fitted = _fitted(est)
    learnt = set(vars(fitted)) - params
    assert learnt and all(name.endswith("_") for name in learnt), learnt
    assert not any(name.endswith("_") for name in vars(copy))  # clone is unfitted
