"""A new route is one registration: a toy route registered from this test alone flows through
every door that answers forecasts.

The toy ``toy-flat`` prices every step at a flat 50 ms, with a fallback error of 0.001. It is
registered with
:func:`jobcast.service.engine.route_registry.register_route` before the layerwise route (so the
costly layerwise route is skipped once the toy has answered) and removed again after each
test. Nothing in jobcast names it: the forecaster's choice and its reason, a whole job composed
phase by phase, ``compare``'s notes, the ETA's "is it history?" test, a served row of the
MLflow pyfunc model and the backtest's candidate kinds all read it from the registry.

How it wins: without a selector (``prior=False``) every candidate ranks by its kind's fallback
error, where the toy's 0.001 beats the rest. The shipped prior judges a kind it has never seen
by its catch-all cell (the mean error over every kind), so there a new route wins only once a
backtest has seen it: the served row is answered by a forecaster whose selector was fitted on
the backtest rows of the toy, as ``jobcast fit`` does for a store.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from jobcast.service.engine.candidates import Ask, Candidate, own_scale, to_job
from jobcast.service.engine.forecast import Forecast
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import (
    RouteRegistryError,
    RouteSpec,
    fallback_errors,
    history_routes,
    kinds,
    register_route,
    route_names,
    unregister_route,
)
from models.relation import Relation

SECONDS_PER_STEP = 0.05
REASON = "toy-flat: every step a flat 50 ms (a test's toy route)"


class ToyFlatRoute:
    """One candidate of kind ``toy-flat``: the asked steps at a flat pace."""

    name = "toy-flat"
    kinds = ("toy-flat",)
    costly = False

    def propose(self, ask: Ask) -> list[Candidate]:
        """The flat answer of the asked phase's steps (none when the request gives none)."""
        if ask.iterations is None:
            return []
        seconds = SECONDS_PER_STEP * ask.iterations
        f = Forecast(job=ask.req, seconds=seconds, low=0.9 * seconds, high=1.1 * seconds,
                     route=self.name, model="toy/flat", details={"chosen": REASON},
                     why=REASON)
        relation = Relation(kind="toy-flat", target=ask.phase, devices=ask.devices)
        cand = Candidate(f, relation, own_scale(f.seconds, f.low, f.high), REASON)
        return [to_job(cand, ask, None) if ask.target == "job" else cand]


@pytest.fixture
def toy_route():
    """The toy registered for one test (the only registration a new route needs)."""
    spec = register_route(RouteSpec("toy-flat", lambda fc: ToyFlatRoute(),
                                    kinds={"toy-flat": 0.001}, before="layerwise"))
    try:
        yield spec
    finally:
        unregister_route("toy-flat")


JOB = dict(network="resnet50", device="V100", batch_size=32, iterations=200)


def test_the_registry_knows_the_toy_only_while_registered(toy_route):
    assert route_names()[-2:] == ("toy-flat", "layerwise")
    assert kinds()[0] == "toy-flat" and fallback_errors()["toy-flat"] == 0.001
    assert "toy-flat" not in history_routes()
    from jobcast.service.engine import candidates, forecaster  # the deprecated names read it live
    with pytest.deprecated_call():
        assert candidates.KINDS[0] == "toy-flat" and "toy-flat" in candidates.FALLBACK_ERROR
    with pytest.deprecated_call(match="route_specs"):
        assert ("toy-flat", toy_route.build, False) in forecaster.ROUTES
    with pytest.raises(RouteRegistryError, match="registered already"):
        register_route(RouteSpec("toy-flat", toy_route.build, kinds={"toy-flat2": 1.0}))
    with pytest.raises(RouteRegistryError, match="belong to route 'layerwise'"):
        register_route(RouteSpec("toy-2", toy_route.build, kinds={"layerwise": 1.0}))


def test_the_toy_is_gone_after_unregistering():
    assert "toy-flat" not in route_names() and "toy-flat" not in kinds()
    with pytest.raises(RouteRegistryError, match="no route named"):
        unregister_route("toy-flat")


def test_the_forecaster_chooses_the_toy_and_says_why(toy_route):
    out = Forecaster(None, prior=False).forecast(JobRequest(**JOB, phase="train"))
    assert out.ok, out
    assert out.route == "toy-flat" and out.details["candidate"] == "toy-flat"
    assert out.why == REASON and out.details["why"] == REASON
    assert out.chosen[0] == REASON and out.details["chosen"] == "; ".join(out.chosen)
    assert "no backtest of its kind" in out.chosen[1]
    assert math.isclose(out.seconds, SECONDS_PER_STEP * JOB["iterations"])
    assert out.low <= out.seconds <= out.high
    assert out.to_dict()["route"] == "toy-flat" and out.details["summary"]["route"] == "toy-flat"
    assert not [c for c in out.details["candidates"] if c["kind"].startswith("layerwise")]


def test_a_whole_job_is_composed_from_the_toy(toy_route):
    req = JobRequest(network="resnet50", device="V100", batch_size=32, epochs=2,
                     dataset_size=3200, eval_every=1, eval_size=640, phase="job")
    out = Forecaster(None, prior=False).forecast(req)
    assert out.ok and out.route == "toy-flat", out
    parts = {p["phase"]: p for p in out.details["breakdown"]}
    assert parts["train"]["steps"] == 200 and parts["test"]["steps"] == 2 * 20
    assert parts["test"]["source"].startswith("toy-flat:")
    assert math.isclose(out.seconds, sum(p["seconds"] for p in parts.values()))
    assert out.details["summary"]["candidate"] == "toy-flat"
    assert out.details["summary"]["job"]["seconds"] == out.seconds


def test_compare_notes_show_the_toys_reason(toy_route):
    from jobcast.service.features.compare import compare
    from jobcast.service.features.prices import load_prices

    result = compare(Forecaster(None, prior=False), load_prices(), "resnet50", batch_size=32,
                     epochs=1, dataset_size=3200, devices=["V100"])
    (row,) = result["candidates"]
    notes = {n["id"]: n["text"] for n in result["notes"]}
    assert row["route"] == "toy-flat" and row["model"] == "toy/flat"
    assert REASON in [notes[i] for i in row["notes"]]


def test_eta_does_not_take_the_toy_for_history(toy_route):
    from jobcast.service.features.eta import _from_history

    out = Forecaster(None, prior=False).forecast(JobRequest(**JOB, phase="train"))
    assert out.ok and out.route == "toy-flat" and not _from_history(out)


def test_with_the_shipped_prior_the_toy_is_judged_among_the_candidates(toy_route):
    _, judged, _ = Forecaster(None).candidates(JobRequest(**JOB, phase="train"))
    assert "toy-flat" in [c.kind for c, _ in judged]


def test_the_backtest_lists_the_toys_kind_and_a_served_row_names_it(toy_route):
    from jobcast.mlops.pyfunc_model import JobcastForecaster, jobs_frame
    from jobcast.service.engine.backtest import backtest, fit_selector
    from models.history import from_records

    columns = list(from_records(None).columns)
    runs = [{"run_id": i, "source": f"run{i}.log", "network": "resnet50",
             "deployment": "nvidia-v100-x1", "system": "toybox", "stack": "", "stack_key": "",
             "variant": "", "batch_size": 32, "start_time": 1.7e9 + i * 3600.0,
             "train_iterations": 200, "train_seconds": 10.0, "test_iterations": 0,
             "test_seconds": 0.0, "evals": 0, "wall_seconds": 0.0, "init_seconds": math.nan,
             "overlap_seconds": 0, "gap_seconds": 0.0} for i in range(1, 8)]
    history = pd.DataFrame(runs, columns=columns)
    points = pd.DataFrame({"run_id": pd.Series([], dtype=int)})
    rows = backtest(points, history)
    toy = rows[rows["kind"] == "toy-flat"]
    assert len(toy) >= 8 and (toy["seconds"] == SECONDS_PER_STEP * 200).all()

    served = JobcastForecaster()
    served.selector = fit_selector(rows)  # as jobcast fit packages the store's own
    served.setup([], None, None)
    out = served.predict(None, jobs_frame([JobRequest(**JOB, phase="train")]))
    assert out["error"].isna().all(), out["error"].tolist()
    assert out["route"].tolist() == ["toy-flat"] and out["candidate"].tolist() == ["toy-flat"]
    assert out["chosen"][0].startswith(REASON)
