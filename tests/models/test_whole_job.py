"""The whole-job model: level, trend and interval from a recurring job's past durations."""

from __future__ import annotations

import inspect
import math
import random

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, clone

from ingest.whole_job import WholeJobRun
from models.whole_job import (
    WholeJobMiss,
    backtest,
    combine,
    whole_job_candidate,
)
from models.whole_job_estimator import WholeJobModel

DEP = "nvidia-a100-sxm4-80gb-x8"
DAY = 86400.0


def runs(seconds, *, key="nightly", dep=DEP, t0=1.7e9, step=DAY, state="completed"):
    return [WholeJobRun(i, f"s{i}", key, dep, state, float(s), t0 + i * step, None, 8, None,
                        key, f"{key}-{i}") for i, s in enumerate(seconds)]


def noisy(n, *, base=1800.0, trend=0.0, sigma=0.03, seed=0):
    rng = random.Random(seed)
    return [base * math.exp(trend * i + rng.gauss(0, sigma)) for i in range(n)]


def test_estimator_contract():
    est = WholeJobModel(coverage=0.8, trend="off")
    assert isinstance(est, BaseEstimator)
    params = set(inspect.signature(type(est).__init__).parameters) - {"self"}
    assert set(vars(est)) == params
    copy = clone(est)
    assert copy.get_params() == est.get_params() and copy is not est
    learnt = set(vars(est.fit(runs([100, 110, 105])))) - params
    assert learnt and all(name.endswith("_") for name in learnt)
    with pytest.raises(ValueError, match="coverage"):
        WholeJobModel(coverage=1.5).fit(runs([1, 2]))


def test_level_and_interval_without_a_trend():
    seconds = noisy(12, seed=1)
    smoothed = WholeJobModel().fit(runs(seconds)).group("nightly", DEP)
    assert smoothed.alpha is not None and min(seconds) < math.exp(smoothed.level) < max(seconds)
    model = WholeJobModel(min_smoothing_runs=100).fit(runs(seconds))  # the median level
    fit = model.group("nightly", "8x A100 80GB")  # the catalog's GPU identity
    assert fit.slope == 0 and fit.n == 12 and fit.alpha is None
    (point,), ((low,), (high,)) = (model.predict([("nightly", DEP)]),
                                   model.predict_interval([("nightly", DEP)]))
    assert point == pytest.approx(math.exp(float(np.median(np.log(seconds)))), rel=1e-9)
    assert low < min(seconds) * 1.02 and high > max(seconds) * 0.98
    frame = pd.DataFrame({"key": ["nightly"] * 12, "deployment": DEP, "seconds": seconds,
                          "start": [1.7e9 + i * DAY for i in range(12)],
                          "state": "completed"})
    assert WholeJobModel(min_smoothing_runs=100).fit(frame).predict([("nightly", DEP)])[0] == point
    assert math.isnan(model.predict([("other", DEP)])[0])


def test_a_trend_is_followed_only_when_the_data_show_one():
    rising = noisy(15, trend=0.02, sigma=0.01, seed=2)
    auto = WholeJobModel().fit(runs(rising))
    off = WholeJobModel(trend="off").fit(runs(rising))
    assert auto.group("nightly", DEP).slope == pytest.approx(0.02, abs=0.005)
    nxt = rising[-1] * math.exp(0.02)
    assert abs(auto.predict([("nightly", DEP)])[0] / nxt - 1) < abs(
        off.predict([("nightly", DEP)])[0] / nxt - 1)
    flat = WholeJobModel().fit(runs(noisy(15, sigma=0.05, seed=3)))
    assert flat.group("nightly", DEP).slope == 0
    far = auto.predict_interval([("nightly", DEP, 10)])  # ten runs ahead
    near = auto.predict_interval([("nightly", DEP)])  # the next run
    assert far[1][0] / far[0][0] > near[1][0] / near[0][0]  # wider the further out


def test_a_level_shift_is_followed_at_once():
    before, after = noisy(8, sigma=0.005, seed=6), noisy(2, base=1400.0, sigma=0.005, seed=7)
    model = WholeJobModel().fit(runs(before + after))
    assert model.predict([("nightly", DEP)])[0] == pytest.approx(1400.0, rel=0.02)


def test_rolling_backtest_beats_or_matches_the_naive_rules_and_covers():
    history = runs(noisy(40, trend=0.01, sigma=0.03, seed=4))
    rows = backtest(history, min_history=3)
    err = lambda col: np.mean([abs(r[col] / r["actual"] - 1) for r in rows])  # noqa: E731
    covered = np.mean([r["low"] <= r["actual"] <= r["high"] for r in rows])
    assert err("forecast") < err("naive_mean")
    assert 0.75 <= covered <= 1.0


def test_unfinished_runs_one_run_and_misses():
    mixed = runs([1000, 1100]) + runs([50, 9000], state="failed")
    model = WholeJobModel().fit(mixed)
    assert model.skipped_ == 2 and model.n_runs_ == 2
    one = whole_job_candidate(runs([1000]), "nightly", DEP)
    assert one.n_runs == 1 and one.low < 1000 < one.high
    with pytest.raises(WholeJobMiss, match="has finished runs on nvidia-a100-sxm4-80gb-x8, "
                                           "none on nvidia-v100-sxm2-16gb-x8"):
        whole_job_candidate(runs([1000, 1100]), "nightly", "8x V100")
    with pytest.raises(WholeJobMiss, match="no finished run of job 'weekly'"):
        whole_job_candidate(runs([1000]), "weekly", DEP)


def test_combine_with_a_per_step_forecast():
    whole = whole_job_candidate(runs(noisy(10, seed=5)), "nightly", DEP)
    sharp = (whole.seconds * 1.1, whole.seconds * 1.08, whole.seconds * 1.12)
    vague = (whole.seconds * 1.1, whole.seconds * 0.5, whole.seconds * 2.4)
    near_sharp = combine(whole, sharp)
    near_whole = combine(whole, vague)
    assert near_sharp.source == "whole-job+per-step" and "blended" in near_sharp.reason
    assert whole.seconds < near_whole.seconds < near_sharp.seconds < sharp[0]
    assert near_whole.seconds / whole.seconds < 1.02
    with pytest.raises(ValueError, match="not a forecast"):
        combine(whole, (0.0, 0.0, 1.0))


def test_theil_sen_is_scipys_to_the_bit():
    """The forecast path's Theil-Sen (no ``scipy.stats`` import) is ``theilslopes``'s slope
    and interval, ties in the log seconds included."""
    import numpy as np
    from scipy import stats

    from models.whole_job import theil_sen

    rng = np.random.default_rng(35)
    for n, digits, coverage in ((3, 1, 0.9), (8, 2, 0.8), (25, 1, 0.95), (60, 3, 0.9)):
        ys = np.round(rng.normal(0, 0.1, n) + 0.01 * np.arange(n), digits)
        ref = stats.theilslopes(ys, np.arange(n, dtype=float), alpha=coverage)
        assert theil_sen(ys, coverage) == (ref.slope, ref.low_slope, ref.high_slope)
