"""Issue 28: one answer per job. Every phase from the best source it has, each flag honoured
or stated, one total that the parts add up to, and a summary per step, epoch and job.

Runs go through the real Store and the real forecaster; expectations are derived from the
runs each test writes or from the forecaster's own answers, never hard-coded.
"""

from __future__ import annotations

import pytest
from test_choice_by_evidence import DAY, _run, _store

from jobcast.service.engine.fitting import fit_store_all
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest

LAYERWISE = dict(network="resnet50", device="T4", batch_size=64)


def _parts(answer) -> dict:
    return {p["phase"]: p for p in answer.details["breakdown"]}


def _assert_one_total(answer) -> None:
    parts = _parts(answer)
    assert sum(p["seconds"] for p in parts.values()) == pytest.approx(answer.seconds)
    assert sum(p["low"] for p in parts.values()) <= answer.seconds + 1e-9
    assert answer.low <= answer.seconds <= answer.high
    phases = answer.details["phases"]
    assert sum(phases[k] for k in ("train", "test", "gaps")) == pytest.approx(answer.seconds)
    s = answer.details["summary"]
    assert s["job"]["seconds"] == answer.seconds
    assert "job_seconds" not in answer.details and "epoch_seconds" not in answer.details


def test_layerwise_prices_the_evaluations_asked_as_forward_passes():
    """The layerwise route used to ignore --eval-every/--eval-size; now they add evaluation
    passes priced as forward passes, and more passes cost more."""
    fc = Forecaster()
    base = dict(LAYERWISE, epochs=2, dataset_size=20_000)
    plain = fc.forecast(JobRequest(**base))
    every = fc.forecast(JobRequest(**base, eval_every=1, eval_size=5_000))
    half = fc.forecast(JobRequest(**base, eval_every=2, eval_size=5_000))
    assert plain.ok and every.ok and half.ok
    for answer in (plain, every, half):
        _assert_one_total(answer)
    assert _parts(plain)["test"]["seconds"] == 0.0
    assert "none asked" in _parts(plain)["test"]["source"]
    assert _parts(every)["train"]["seconds"] == pytest.approx(_parts(plain)["train"]["seconds"])
    assert _parts(every)["test"]["seconds"] == pytest.approx(
        2 * _parts(half)["test"]["seconds"])
    assert every.seconds > half.seconds > plain.seconds
    steps = _parts(every)["test"]["steps"]
    per_eval_step = _parts(every)["test"]["seconds"] / steps
    per_train_step = every.details["summary"]["step"]["seconds"]
    assert 0 < per_eval_step < per_train_step  # forward only


def test_the_test_phase_on_layerwise_is_forward_only():
    """--phase test used to return the training cost."""
    fc = Forecaster()
    train = fc.forecast(JobRequest(**LAYERWISE, iterations=100, phase="train"))
    test = fc.forecast(JobRequest(**LAYERWISE, iterations=100, phase="test"))
    assert train.ok and test.ok
    assert test.seconds < train.seconds
    assert test.details["pass"] == "forward (evaluation)"
    assert test.job.phase == "test" and test.details["summary"]["phase"] == "test"


def test_a_test_phase_without_steps_is_an_error_not_a_guess():
    out = Forecaster().forecast(JobRequest(**LAYERWISE, epochs=1, dataset_size=1000,
                                           phase="test"))
    assert not out.ok and "--eval-every" in out.error


def test_history_trains_and_prices_the_evaluations_asked_from_test_history(tmp_path):
    """Training and evaluation both from the system's runs; the evaluation as asked
    (twice as many passes as the runs had: twice their evaluation time)."""
    runs = [_run("v/s", 0.1, start=1.6e9 + i * DAY, evals=5.0) for i in range(4)]
    store = _store(tmp_path, runs)
    fit_store_all(store, backtest=False)
    fc = Forecaster(store)
    dataset = 256 * 500  # 500 steps an epoch: two epochs are the runs' 1000 steps
    ask = dict(network="resnet50", deployment="8x NVIDIA A100-SXM4-40GB", batch_size=256,
               system="v/s", epochs=2, dataset_size=dataset)
    as_runs = fc.forecast(JobRequest(**ask))
    asked = fc.forecast(JobRequest(**ask, eval_every=1, eval_size=50 * 256))
    assert as_runs.ok and asked.ok
    _assert_one_total(as_runs)
    _assert_one_total(asked)
    assert "not asked" in _parts(as_runs)["test"]["source"]
    assert _parts(as_runs)["test"]["seconds"] == pytest.approx(5.0, rel=0.05)
    test = _parts(asked)["test"]
    assert test["steps"] == 100  # two passes of 50 steps
    assert test["seconds"] == pytest.approx(10.0, rel=0.05)
    assert asked.details["summary"]["epoch"]["seconds"] == pytest.approx(asked.seconds / 2)


def test_evaluations_no_route_prices_leave_training_standing(tmp_path):
    """History of training only, on a GPU the layerwise route does not know: the asked
    evaluations are not priced, and the training history still answers (with a warning)."""
    runs = [_run("v/s", 0.1, start=1.6e9 + i * DAY, gpu="Acme Zeta 9") for i in range(3)]
    store = _store(tmp_path, runs)
    fit_store_all(store, backtest=False)
    out = Forecaster(store).forecast(JobRequest(
        network="resnet50", deployment="8x Acme Zeta 9", batch_size=256, system="v/s",
        epochs=2, dataset_size=256 * 500, eval_every=1, eval_size=10_000))
    assert out.ok, out
    _assert_one_total(out)
    assert _parts(out)["test"]["seconds"] == 0.0
    assert any("evaluations asked but no route prices them" in w
               for w in out.details["warnings"])
    assert out.details["candidate"].startswith("own-")


def test_epochs_without_a_dataset_take_the_usual_one_and_say_so():
    out = Forecaster().forecast(JobRequest(**LAYERWISE, epochs=1))
    assert out.ok
    assert out.job.dataset_size == 1_281_167
    assert any("ImageNet-1k" in a for a in out.details["assumptions"])


def test_the_text_reads_step_epoch_and_job_in_one_unit_each(tmp_path):
    from jobcast.cli.views import forecast_text

    out = Forecaster().forecast(JobRequest(**LAYERWISE, epochs=2, dataset_size=20_000,
                                           eval_every=1, eval_size=5_000)).to_dict()
    text = forecast_text(out).plain
    for label in ("per step", "per epoch", "whole job", "training", "evaluation", "route:",
                  "why:", "Tesla T4"):
        assert label in text, label
    for line in text.splitlines():
        if line.strip().startswith(("per step", "per epoch", "whole job")):
            value_unit = line.split("(")[0].split()[-1]
            interval_unit = line.rstrip(")").split()[-1]
            assert value_unit == interval_unit, line


def test_a_job_that_does_not_fit_is_refused_with_the_largest_batch_that_does():
    fc = Forecaster()
    fits = fc.forecast(JobRequest(**{**LAYERWISE, "batch_size": 32}, iterations=10))
    assert fits.ok and fits.details["memory"]["fits"] and fits.details["summary"]["fits"]
    largest = fits.details["memory"]["max_batch"]
    assert largest >= 32
    ok = fc.forecast(JobRequest(**{**LAYERWISE, "batch_size": largest}, iterations=10))
    near = fc.forecast(JobRequest(**{**LAYERWISE, "batch_size": largest + 1}, iterations=10))
    too_big = fc.forecast(JobRequest(**{**LAYERWISE, "batch_size": 3 * largest},
                                     iterations=10))
    assert ok.ok and near.ok and not too_big.ok  # within the estimate's error: a warning
    assert any("may not fit" in w for w in near.details["warnings"])
    assert "will not fit" in too_big.error and f"largest batch that fits: {largest}" \
        in too_big.error
    split = fc.forecast(JobRequest(network="resnet50", deployment="2x Tesla T4",
                                   batch_size=largest + 1,
                                   iterations=10))
    assert split.ok  # two GPUs share the batch


def test_history_that_ran_the_batch_outranks_the_memory_estimate(tmp_path):
    """A system's runs at a batch the estimate says cannot fit: the history answers, and
    the answer warns that the estimate disagrees."""
    runs = [_run("v/s", 0.5, start=1.6e9 + i * DAY, batch=4096, gpu="Tesla T4", count=1)
            for i in range(3)]
    store = _store(tmp_path, runs)
    fit_store_all(store, backtest=False)
    out = Forecaster(store).forecast(JobRequest(
        network="resnet50", deployment="1x Tesla T4", batch_size=4096, system="v/s",
        iterations=1000, phase="train"))
    assert out.ok, out
    assert out.details["memory"]["fits"] is False
    assert any("ran this batch size" in w for w in out.details["warnings"])


def test_a_flag_the_route_cannot_use_is_said_not_dropped():
    out = Forecaster().forecast(JobRequest(**LAYERWISE, iterations=10, stack="MXNet 22.05"))
    assert out.ok and any("--stack 'MXNet 22.05'" in a for a in out.details["assumptions"])


def test_a_job_known_to_run_is_answered_even_where_the_estimate_says_it_cannot_fit():
    """ETA and check forecast jobs that ran (and compare ranks rows): refuse_unfit=False."""
    fc = Forecaster()
    req = JobRequest(**{**LAYERWISE, "batch_size": 4096}, iterations=10)
    assert not fc.forecast(req).ok
    out = fc.forecast(req, refuse_unfit=False)
    assert out.ok and out.details["memory"]["fits"] is False
    assert out.details["summary"]["fits"] is False
    assert any("marked fits: false" in w for w in out.details["warnings"])


def test_a_system_named_without_a_deployment_takes_the_one_its_history_names(tmp_path):
    """The forecaster (so the CLI, a jobs CSV and REST alike) fills the deployment."""
    runs = [_run("v/s", 0.1, start=1.6e9 + i * DAY) for i in range(3)]
    store = _store(tmp_path, runs)
    fit_store_all(store, backtest=False)
    fc = Forecaster(store)
    out = fc.forecast(JobRequest(network="resnet50", system="V/S ", batch_size=256,
                                 iterations=1000))
    assert out.ok, out
    assert out.job.deployment and out.details["candidate"].startswith("own-")
    assert any("newest run" in a and out.job.deployment in a
               for a in out.details["assumptions"])
    unknown = fc.forecast(JobRequest(network="resnet50", system="nowhere", batch_size=256,
                                     iterations=1000))
    assert not unknown.ok and "jobs in the store: v/s" in unknown.error
