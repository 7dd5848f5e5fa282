"""The whole-job model at a cluster's scale (issue 35, cause 5): a job with tens of thousands
of runs is fitted in bounded memory (the newest ``MAX_RUNS`` runs, never ``n**2`` pairwise
slopes), and its answer follows its recent runs."""

from __future__ import annotations

import math
import random
import tracemalloc

import pytest

from ingest.whole_job import WholeJobRun
from models.whole_job import MAX_RUNS, backtest, candidate_from
from models.whole_job_estimator import WholeJobModel

DEP = "nvidia-a100-sxm4-80gb-x8"
PEAK_BYTES = 64 * 2**20  # far below n**2 * 8 bytes (20 GB at 50,000 runs)


def history(n: int, *, base: float = 1800.0, seed: int = 0) -> list[WholeJobRun]:
    """``n`` finished runs of one job, an hour apart, a few per cent of noise; the newest
    ``MAX_RUNS`` twice as long as the older ones (a new, slower stack)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        level = base * (2.0 if i >= n - MAX_RUNS else 1.0)
        out.append(WholeJobRun(i, f"s{i}", "nightly", DEP, "completed",
                               level * math.exp(rng.gauss(0, 0.03)), 1.6e9 + 3600.0 * i,
                               None, 8, None, "nightly", str(i)))
    return out


@pytest.mark.parametrize("n", [5_000, 50_000])
def test_a_long_history_is_fitted_without_pairwise_arrays(n):
    runs = history(n)
    tracemalloc.start()
    try:
        model = WholeJobModel().fit(runs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES < n * n * 8
    fit = model.group("nightly", DEP)
    assert fit is not None and fit.n == MAX_RUNS and fit.runs == model.n_runs_ == n
    recent = [r.seconds for r in runs[-MAX_RUNS:]]
    found = candidate_from(model, "nightly", DEP)
    assert min(recent) <= found.seconds <= max(recent)  # the new level, not the old one
    assert found.low < found.seconds < found.high and found.n_runs == n
    assert f"the newest {MAX_RUNS} fitted" in found.reason


def test_a_short_history_is_fitted_whole():
    runs = history(MAX_RUNS // 2)
    model = WholeJobModel().fit(runs)
    fit = model.group("nightly", DEP)
    assert fit is not None and fit.n == fit.runs == len(runs)
    assert "fitted)" not in candidate_from(model, "nightly", DEP).reason


def test_backtest_forecasts_each_run_as_a_fit_on_its_whole_past_would():
    runs = history(MAX_RUNS + 40, seed=1)
    rows = backtest(runs, min_history=MAX_RUNS + 30)
    assert len(rows) == 10
    for row in rows:
        i = row["history"]
        whole = candidate_from(WholeJobModel().fit(runs[:i]), "nightly", DEP)
        assert row["forecast"] == pytest.approx(whole.seconds, rel=1e-12)
        assert (row["low"], row["high"]) == pytest.approx((whole.low, whole.high), rel=1e-12)


def test_max_runs_is_checked():
    with pytest.raises(ValueError, match="max_runs"):
        WholeJobModel(max_runs=1).fit(history(3))
