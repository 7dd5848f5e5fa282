"""The point is never an end of its own interval (issue 35, cause 6).

The shipped prior's multi-GPU layerwise cell holds backtest forecasts that nearly all ran
high, so its 90 % interval lay wholly below the point: "6.6 h (1.5-6.6 h)". The side the
backtest cannot speak to is the candidate's own interval.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from models.relation import load_prior
from models.selector import RELATION_FIELDS, BacktestSelector

ASK = JobRequest("resnet50", "8x A100-SXM4-40GB", batch_size=512, iterations=25000)


def _one_sided(sign: float) -> BacktestSelector:
    """A selector whose every layerwise error has one sign (the forecasts all ran one way)."""
    rel = {f: "x" for f in RELATION_FIELDS} | {"kind": "layerwise"}
    rows = pd.DataFrame([rel] * 40)
    errors = sign * np.linspace(0.2, 1.4, 40)
    return BacktestSelector(min_count=8).fit(rows, errors)


@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_a_one_sided_backtest_keeps_the_point_inside(sign: float) -> None:
    f = Forecaster(selector=_one_sided(sign), prior=False).forecast(ASK)
    assert f.details["candidate"] == "layerwise"
    assert f.low < f.seconds < f.high
    assert min(f.seconds / f.low, f.high / f.seconds) > 1.05
    assert any("candidate's own" in w for w in f.details["warnings"])


def test_the_shipped_prior_no_longer_puts_the_point_at_the_top() -> None:
    if load_prior() is None:
        pytest.skip("no shipped prior")
    f = Forecaster().forecast(ASK)
    assert f.low < f.seconds < f.high and f.high / f.seconds > 1.05
