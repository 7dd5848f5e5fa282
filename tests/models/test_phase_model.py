"""The phase model recovers physical coefficients, validates by run and bounds its forecasts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.phase_model import PhaseTimeModel


def _curves(batches, a=30.0, b=0.05, c=0.001, noise=0.01, seed=0) -> pd.DataFrame:
    """Cumulative progress curves of runs obeying t = a + I (b + c B) with noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for run, batch in enumerate(batches):
        for epoch in range(1, 11):
            iters = epoch * 100
            secs = (a + iters * (b + c * batch)) * (1 + rng.normal(0, noise))
            rows.append((run, iters, batch, secs))
    return pd.DataFrame(rows, columns=["run", "iterations", "batch_size", "seconds"])


def _fit(df, **kw) -> PhaseTimeModel:
    return PhaseTimeModel(**kw).fit(df[["iterations", "batch_size"]], df["seconds"], df["run"])


def test_recovers_overhead_and_per_sample_cost():
    model = _fit(_curves([64, 128, 256, 512], noise=0.002))
    assert model.form_ == "iteration_and_sample"
    a, b, c = model.coef_
    assert a == pytest.approx(30, rel=0.3)
    assert b == pytest.approx(0.05, rel=0.2)
    assert c == pytest.approx(0.001, rel=0.05)
    assert model.cv_kind_ == "leave-one-run-out"
    assert model.cv_["iteration_and_sample"] < model.cv_["per_iteration"]


def test_one_batch_size_cannot_separate_step_and_sample_cost():
    model = _fit(_curves([256, 256, 256]))
    assert "iteration_and_sample" not in model.cv_
    assert model.form_ == "per_sample"  # the tie-break documented in the module


def test_interval_contains_truth_and_flags_extrapolation():
    model = _fit(_curves([128, 256, 512], noise=0.01))
    X = pd.DataFrame({"iterations": [700, 700], "batch_size": [256, 4096]})
    out = model.predict_interval(X)
    truth = 30 + 700 * (0.05 + 0.001 * 256)
    assert out.loc[0, "low"] <= truth <= out.loc[0, "high"]
    assert not out.loc[0, "extrapolated"]
    assert out.loc[1, "extrapolated"]
    rel_width = (out["high"] - out["low"]) / out["seconds"]
    assert rel_width[1] > rel_width[0]  # extrapolating widens the interval


def test_single_run_uses_tail_holdout():
    model = _fit(_curves([256]))
    assert model.cv_kind_ == "tail-holdout"
    assert model.cv_mape_ is not None


def test_serialisation_round_trip():
    model = _fit(_curves([128, 512]))
    again = PhaseTimeModel.from_dict(model.to_dict())
    X = pd.DataFrame({"iterations": [10, 1000, 5000], "batch_size": [128, 256, 512]})
    pd.testing.assert_frame_equal(model.predict_interval(X), again.predict_interval(X))


@pytest.mark.parametrize(
    "iterations, batch, seconds",
    [([0, 10], [1, 1], [1, 2]), ([1, 10], [0, 1], [1, 2]), ([1, 10], [1, 1], [-1, 2])],
)
def test_rejects_non_positive_inputs(iterations, batch, seconds):
    X = pd.DataFrame({"iterations": iterations, "batch_size": batch})
    with pytest.raises(ValueError, match="positive"):
        PhaseTimeModel().fit(X, seconds, [0, 0])


def test_single_batch_bounds_other_batches_by_the_two_pure_forms():
    """Truth with both step and sample cost lies inside the interval at 1/4 and 4x the batch."""
    model = _fit(_curves([256, 256, 256], a=5.0, b=0.2, c=0.001, noise=0.002))
    X = pd.DataFrame({"iterations": [1000, 1000], "batch_size": [64, 1024]})
    out = model.predict_interval(X)
    truth = 5.0 + 1000 * (0.2 + 0.001 * X["batch_size"])
    assert out["extrapolated"].all()
    assert (out["low"] <= truth).all() and (truth <= out["high"]).all()


def test_extrapolates_agrees_with_predict_interval():
    model = _fit(_curves([128, 256]))
    X = pd.DataFrame({"iterations": [900, 900, 100_000, 1], "batch_size": [200, 4096, 200, 128]})
    flags = model.predict_interval(X)["extrapolated"].tolist()
    assert flags == [
        model.extrapolates(i, b) for i, b in zip(X.iterations, X.batch_size, strict=True)
    ]
    assert flags[0] is False and flags[1] is True


def _runs_of_mixed_length() -> pd.DataFrame:
    """Three day-long batch-1 runs whose speeds differ by 30 % (as the CaffeNet batch-1 logs
    do) and three runs of about a minute at batch 64, 128 and 512."""
    rows = []
    for run, batch, iters, step in [("b1a", 1, 34e6, 0.0082), ("b1b", 1, 38.5e6, 0.0065),
                                    ("b1c", 1, 9.3e6, 0.0096), ("b64", 64, 1200, 0.060),
                                    ("b128", 128, 1000, 0.090), ("b512", 512, 1000, 0.27)]:
        for k in range(1, 21):
            rows.append((run, iters * k / 20, batch, 1.0 + step * iters * k / 20))
    return pd.DataFrame(rows, columns=["run", "iterations", "batch_size", "seconds"])


def test_long_runs_do_not_outweigh_short_ones():
    """Errors count relative to each run's own total: the day-long runs' disagreement must not
    become a one-off cost of an hour for a one-minute job (as seconds alone make it)."""
    df = _runs_of_mixed_length()
    X, job = df[["iterations", "batch_size"]], pd.DataFrame({"iterations": [1000],
                                                            "batch_size": [32]})
    by_run = PhaseTimeModel().fit(X, df["seconds"], df["run"])
    by_seconds = PhaseTimeModel(weighting="absolute").fit(X, df["seconds"], df["run"])
    assert by_run.weighting == "run"
    assert 15 < by_run.predict(job)[0] < 60  # between 1000 x 0.0096 s and 1000 x 0.060 s
    assert by_seconds.predict(job)[0] > 1000
    long = pd.DataFrame({"iterations": [34e6], "batch_size": [1]})
    assert abs(by_run.predict(long)[0] / (1 + 0.0082 * 34e6) - 1) < 0.25
