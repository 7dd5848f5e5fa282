"""Robust levels beside the mean rate, and the line for runs of different lengths (issue 35).

A slow run never sets a level alone; runs that stop at different steps (MLPerf UNet3D trains
to a target accuracy) are answered by a line in the iterations, which the mean rate cannot be.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from jobcast.service.engine.rates import levels, line
from models.relation import lengths_bucket


def test_one_slow_run_never_sets_the_median_or_recent_level() -> None:
    typical = [1.00, 1.01, 0.99, 1.00]
    rates = np.array([*typical, 1.6])  # the newest run is 1.6x slow
    found = levels(rates)
    mean = float(np.mean(rates))
    for kind in ("own-median", "own-recent"):
        rate, _ = found[kind]
        assert abs(rate - 1.0) < 0.05 < abs(mean - 1.0), kind
    assert "own-trend" in found  # enough runs for a trend, kept within the runs' range
    assert min(rates) <= found["own-trend"][0] <= max(rates)


def test_two_runs_give_no_robust_level() -> None:
    assert levels(np.array([1.0, 1.1])) == {}


def test_a_line_through_runs_of_different_lengths() -> None:
    its = np.array([3000.0, 9000.0, 6000.0])
    seconds = 120.0 + 0.05 * its  # a fixed part the mean rate spreads over the steps
    at, a, b = line(its, seconds, 12000.0) or (math.nan,) * 3
    assert at == pytest.approx(120.0 + 0.05 * 12000.0) and a == pytest.approx(120.0)
    mean_rate = float(np.mean(seconds / its))
    assert abs(mean_rate * 12000.0 - at) > 0.05 * at  # what the line fixes
    # evaluations that begin late: a negative intercept is allowed, the answer stays physical
    late = -200.0 + 0.1 * its
    assert line(its, late, 4000.0) == pytest.approx((200.0, -200.0, 0.1))


def test_runs_of_one_length_have_no_line() -> None:
    its = np.array([5000.0, 5020.0])
    assert lengths_bucket(its) == "same" and line(its, its * 0.1, 5000.0) is None
    assert lengths_bucket([3000, 9000]) == "varied"
