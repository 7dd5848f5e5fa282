"""Routes named once (issue 38): the route registry's spec is the only definition of a route's
name and candidate kinds; every forecast's ``route`` is the registered name of the route that
made it; README.md lists every candidate kind the registry has.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from paths import DATA

from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store
from jobcast.service.engine import e2e_route, hybrid, rates, routes, whole_job_route
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import (
    BUILT_IN_ROUTES,
    RegisteredRoute,
    kinds,
    route_names,
    route_spec,
)
from models.e2e import fit_store

ROOT = Path(__file__).resolve().parents[2]
ROUTE_CLASSES = (rates.RateRoute, whole_job_route.WholeJobRoute, e2e_route.EndToEndRoute,
                 hybrid.HybridRoute, routes.LayerwiseRoute, routes.ScaleCalibratedRoute)
CAFFENET_128 = DATA / "caffe" / "ducha_caffenet128_lsuv_bs128_lr002.log"


def test_route_classes_take_their_name_and_kinds_from_the_registry():
    for cls in ROUTE_CLASSES:
        assert issubclass(cls, RegisteredRoute), cls
        assert cls.route in route_names(), cls
        tree = ast.parse(Path(__import__(cls.__module__, fromlist=["x"]).__file__).read_text())
        (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                   and n.name == cls.__name__]
        written = {t.id for n in node.body if isinstance(n, ast.Assign | ast.AnnAssign)
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                   if isinstance(t, ast.Name)}
        assert not written & {"name", "kinds"}, f"{cls.__name__} writes {written}"
    built = {spec.name for spec in BUILT_IN_ROUTES}
    assert {cls.route for cls in ROUTE_CLASSES} == built


def test_a_routes_kinds_are_its_specs():
    lw = routes.ScaleCalibratedRoute(routes.LayerwiseRoute(), None)
    assert lw.name == "layerwise" and lw.kinds == tuple(route_spec("layerwise").kinds)
    assert "layerwise-calibrated" in lw.kinds


@pytest.fixture(scope="module")
def caffe_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('names')}/store.db")
    report = ingest_paths(store, [str(CAFFENET_128)],
                          IngestOptions(network="caffenet128", deployment="1x GTX Titan X"))
    assert not report.rejected, report.rejected
    fit_store(store)
    return store


def test_every_candidate_and_answer_carries_its_registered_route(caffe_store: Store):
    (run,) = caffe_store.runs()
    fc = Forecaster(store=caffe_store)
    seen: set[str] = set()
    for batch in (64, 128, 512):
        req = JobRequest("caffenet128", run.deployment, batch_size=batch, iterations=2000,
                         phase="train")
        _, judged, _ = fc.candidates(req, exhaustive=True)
        for cand, _ in judged:
            spec = next(s for s in BUILT_IN_ROUTES if cand.kind in s.kinds)
            assert cand.forecast.route == spec.name, (cand.kind, cand.forecast.route)
            seen.add(cand.forecast.route)
        out = fc.forecast(req)
        assert out.ok and out.route in route_names()
        assert out.details["candidate"] in route_spec(out.route).kinds
    assert {"rate", "end-to-end", "hybrid", "layerwise"} <= seen


def test_readme_lists_every_candidate_kind():
    text = (ROOT / "README.md").read_text()
    start = text.index("The candidate kinds (`candidate`)")
    listed = re.findall(r"^- `([a-z-]+)`: ", text[start:].split("\n\n")[1], flags=re.M)
    assert tuple(listed) == kinds()
