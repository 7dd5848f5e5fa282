"""A timing backend is one registration (issue 26): a toy "toy-numpy" backend, defined and
registered by this test module alone, times dense layers with numpy matmuls; ``jobcast bench
--backend toy-numpy --in-process`` writes its rows, an isolated (spawned) campaign finds it by
importing this module, a layer predictor is trained on the rows (the cheapest model), and it
forecasts a network. No test here asserts a timing or a forecast's value.
"""

from __future__ import annotations

import csv
import json
import math
import platform
import time

import numpy as np
import pytest

from layerwise.backends import (
    BACKENDS,
    Backend,
    BackendError,
    TimingPlan,
    ensure_backend,
    get_backend,
    register_backend,
    resolve_backend,
    unregister_backend,
)
from layerwise.backends.base import adapt_runs, summarise

NAME = "toy-numpy"
MLP = {"input_shape": [64], "layers": [{"type": "dense", "units": 128},
                                       {"type": "dense", "units": 10}]}


def time_dense(row: dict, device: str, plan: TimingPlan) -> dict:
    """A dense row's forward (and, when it trains, weight and input gradient) matmuls."""
    if row["layer"] != "dense" or device != "cpu":
        raise ValueError(f"{NAME} times dense rows on the cpu only")
    rng = np.random.default_rng(int(row.get("index", 0)))
    x = rng.standard_normal((int(row["batchsize"]), int(row["dim_input"])), dtype=np.float32)
    w = rng.standard_normal((int(row["dim_input"]), int(row["dim_output"])), dtype=np.float32)
    training = str(row.get("optimizer", "none")) != "none"

    def call() -> object:
        y = x @ w
        return (x.T @ y, y @ w.T) if training else y

    runs = adapt_runs(plan, call, lambda _: None)
    for _ in range(plan.warmup):
        call()
    times = []
    for _ in range(plan.reps):
        start = time.perf_counter()
        for _ in range(runs):
            call()
        times.append((time.perf_counter() - start) * 1e3 / runs)
    return summarise(times, runs)


def detect(device: str) -> dict:
    """This machine's CPU, as the built-in backends describe it."""
    from layerwise.local_device import cpu_features

    return {"device": "cpu", **cpu_features(), "sw_python": platform.python_version()}


TOY = Backend(name=NAME, framework="pytorch", time_config=time_dense, detect=detect,
              precisions=("fp32",), module="numpy")
FAST = ["--reps", "2", "--warmup", "1", "--target-ms", "1"]


@pytest.fixture(scope="module")
def toy_backend():
    """The toy registered for this module's tests and removed after them."""
    register_backend(TOY)
    yield TOY
    unregister_backend(NAME)


@pytest.fixture(scope="module")
def bench_rows(toy_backend, tmp_path_factory):
    """30 dense rows timed by the toy, written by ``jobcast bench`` in this process."""
    from typer.testing import CliRunner

    from jobcast.cli.app import app

    out = tmp_path_factory.mktemp("toy") / "rows.csv"
    result = CliRunner().invoke(app, ["bench", "--backend", NAME, "--in-process", "--layers",
                                      "dense", "--samples", "30", "--out", str(out), *FAST,
                                      "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["backend"], summary["written"], summary["failed"]) == (NAME, 30, 0)
    return out


def test_the_registry_checks_what_it_is_given(toy_backend):
    assert get_backend(" TOY-NUMPY ") is TOY and resolve_backend(NAME) == NAME
    assert TOY.home == __name__
    assert resolve_backend("auto") in ("tensorflow", "torch")
    with pytest.raises(BackendError, match="already registered"):
        register_backend(TOY)
    with pytest.raises(BackendError, match="framework 'numpy' is not one of tensorflow, "
                                           "pytorch"):
        register_backend(Backend(name="toy-bad", framework="numpy", time_config=time_dense,
                                 detect=detect, precisions=("fp32",), module="numpy"))
    register_backend(Backend(name="toy-missing", framework="pytorch", time_config=time_dense,
                             detect=detect, precisions=("fp32",), module="no_such_pkg"))
    try:
        with pytest.raises(BackendError, match="needs the Python package 'no_such_pkg'"):
            resolve_backend("toy-missing")
        assert resolve_backend("toy-missing", installed=False) == "toy-missing"
    finally:
        unregister_backend("toy-missing")
    assert "toy-bad" not in BACKENDS and "toy-missing" not in BACKENDS
    with pytest.raises(BackendError, match="unknown backend 'nope'"):
        unregister_backend("nope")


def test_another_process_finds_the_toy_by_its_module(toy_backend):
    removed = unregister_backend(NAME)  # as a fresh process: only the built-ins
    try:
        assert ensure_backend(NAME, removed.home) is TOY  # found as this module's Backend
    finally:
        BACKENDS.setdefault(NAME, TOY)
    with pytest.raises(BackendError, match="defined in module 'no_such_toy_module', which "
                                           "this process cannot import"):
        ensure_backend("toy-elsewhere", "no_such_toy_module")


def test_bench_rows_of_the_toy_are_campaign_rows(bench_rows):
    with open(bench_rows, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 30 and {r["layer"] for r in rows} == {"dense"}
    assert {r["status"] for r in rows} == {"ok"} and {r["framework"] for r in rows} == {"pytorch"}
    assert all(float(r["time_ms_median"]) > 0 and r["hw_kind"] == "cpu" for r in rows)


def test_an_isolated_campaign_imports_the_toy_in_its_child(toy_backend, tmp_path):
    from layerwise.bench import run_campaign

    out = tmp_path / "isolated.csv"
    result = run_campaign(out, ["dense"], 2, space="cpu", backend=NAME, isolate=True,
                          plan=TimingPlan(warmup=1, reps=2, target_rep_ms=1.0))
    assert (result.written, result.ok) == (2, 2)


def test_a_layer_predictor_trained_on_the_toy_rows_forecasts(bench_rows, tmp_path):
    from typer.testing import CliRunner

    from jobcast.cli.app import app
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest
    from layerwise.forecast import forecast_network
    from layerwise.shipped import load_predictor

    model = tmp_path / "pred"
    result = CliRunner().invoke(app, ["layerwise", "train", "--data", str(bench_rows), "--out",
                                      str(model), "--models", "linear", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["layer"] for r in json.loads(result.stdout)["validation"]] == ["dense"]
    predictor = load_predictor(model)
    here = forecast_network(MLP, device="cpu", batch_size=32, predictor=predictor)
    assert math.isfinite(here["batch_seconds"]) and here["batch_seconds"] > 0
    spec = tmp_path / "mlp.json"
    spec.write_text(json.dumps(MLP))
    # the service takes the trained predictor too (its forecasts are on catalog GPUs; the
    # rows are from this CPU, so only that it answers is checked)
    outcome = Forecaster(None, layer_predictor=predictor).forecast(
        JobRequest(network=str(spec), device="T4", batch_size=32, iterations=10))
    assert outcome.ok, outcome.error
    assert str(outcome.route).startswith("layerwise") and outcome.seconds > 0
