"""One JSON error shape at the edges (issue 26): REST refusals, the token gate, a bad served
row, a fit failure; and a bug in one served row is reported as a bug, never as an ordinary
"cannot forecast", without ending the request.

The REST application is the real one (:class:`jobcast.mlops.rest_app.RestApp`), called
in-process over ASGI, in front of the real pyfunc model wired with the shipped layerwise
predictor (no history: every answer is a layerwise one). Bugs are injected by replacing one
function with one that raises (fault injection, not a stand-in for a real part).
"""

from __future__ import annotations

import asyncio
import json

import pandas as pd
import pytest

from fleet.errors import ErrorInfo
from jobcast.mlops.auth import TokenVerifier, create_token
from jobcast.mlops.gate import AuthGate
from jobcast.mlops.limits import ServeLimits
from jobcast.mlops.pyfunc_model import OUTPUT_COLUMNS, JobcastForecaster, jobs_frame
from jobcast.mlops.registry import default_predictor_dir
from jobcast.mlops.rest_app import RestApp, ServedModel
from jobcast.service.engine.request import JobRequestError, requests_from_rows
from layerwise.shipped import load_predictor
from models.dataset import SkippedRun
from models.e2e import fit_report
from models.scale_calibration import ScaleCalibrator

SHAPE = {"kind", "message", "file", "line", "field", "row"}
DEPLOYMENT = "1xA100-SXM4-80GB"
BUG_TEXT = "internal error (a bug in jobcast"


def _job(batch_size: int = 64, deployment: str = DEPLOYMENT) -> dict:
    return {"network": "vgg16", "deployment": deployment, "batch_size": batch_size,
            "iterations": 100, "phase": "train"}


@pytest.fixture(scope="module")
def model() -> JobcastForecaster:
    """The pyfunc model with the shipped layerwise predictor and no end-to-end models."""
    forecaster = JobcastForecaster()
    forecaster.setup([], ScaleCalibrator.empty(), load_predictor(default_predictor_dir()))
    return forecaster


@pytest.fixture
def app(model) -> RestApp:
    return RestApp(ServedModel(model, "models:/jobcast-forecaster/1", 0.0, 0.0, 0),
                   ServeLimits())


def _call(asgi, method: str, path: str, body: bytes = b"",
          headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, dict]:
    """One HTTP request through an ASGI application: (status, JSON body)."""
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": method, "client": ("127.0.0.1", 5000),
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode()), *(headers or [])]}
    asyncio.run(asgi(scope, receive, send))
    return sent[0]["status"], json.loads(sent[1]["body"])


def _post(asgi, payload: dict) -> tuple[int, dict]:
    return _call(asgi, "POST", "/invocations", json.dumps(payload).encode())


def _assert_refusal(body: dict) -> dict:
    """MLflow's keys, the error object, and the deprecated flat keys: the problem."""
    assert {"error_code", "message", "problem", "error", "reason", "row", "field"} <= set(body)
    problem = body["problem"]
    assert set(problem) == SHAPE and problem["message"] and problem["kind"]
    assert isinstance(body["error"], str) and body["error"] == problem["message"]
    assert (body["row"], body["field"]) == (problem["row"], problem["field"])
    for entry in body.get("errors", []):
        assert set(entry) == SHAPE | {"error"} and entry["error"] == entry["message"]
    return problem


def test_rest_refusals_carry_the_error_object(app):
    status, body = _call(app, "POST", "/invocations", b"{not json")
    assert status == 400 and _assert_refusal(body)["kind"] == "invalid_json"
    assert body["reason"] == "invalid_json" and body["error_code"] == "INVALID_PARAMETER_VALUE"

    status, body = _call(app, "GET", "/nowhere")
    assert status == 404 and _assert_refusal(body)["kind"] == "not_found"

    status, body = _post(app, {"dataframe_records": [_job(), _job(-1), _job(0)]})
    problem = _assert_refusal(body)
    assert status == 400 and body["reason"] == "invalid_row"
    assert (problem["kind"], problem["row"], problem["field"]) == ("request", 1, "batch_size")
    assert [e["row"] for e in body["errors"]] == [1, 2]
    assert all(e["kind"] == "request" and e["field"] == "batch_size" for e in body["errors"])

    status, body = _post(app, {"dataframe_records": [{**_job(), "colour": "red"}]})
    assert status == 400 and body["reason"] == "unknown_column"
    assert "unknown column" in _assert_refusal(body)["message"]


def test_a_row_no_route_answers_is_an_ordinary_miss(app):
    rows = [_job(), _job(deployment="1xBanana-9000")]  # a GPU the catalog does not know
    status, body = _post(app, {"dataframe_records": rows})
    problem = _assert_refusal(body)
    assert status == 400 and body["reason"] == "cannot_forecast"
    # an ordinary miss, of the kind of what stopped it (not "bug")
    assert (problem["kind"], problem["row"]) == ("unknown_gpu", 1)
    assert "Banana-9000" in problem["message"] and BUG_TEXT not in problem["message"]
    assert [e["row"] for e in body["errors"]] == [1]

    status, body = _post(app, {"dataframe_records": rows, "params": {"errors": "row"}})
    good, bad = body["predictions"]
    assert status == 200 and set(bad) == set(OUTPUT_COLUMNS)  # the signature's columns only
    assert good["error"] is None and good["seconds"] > 0
    assert isinstance(bad["error"], str) and "Banana-9000" in bad["error"]


@pytest.fixture
def buggy(model, monkeypatch):
    """The model's forecaster raises ZeroDivisionError for batch size 13, and a
    JobcastError (a JobRequestError) for batch size 17; other jobs are answered."""
    real = model.forecaster.forecast

    def forecast(req, *args, **kwargs):
        if req.batch_size == 13:
            raise ZeroDivisionError("injected")
        if req.batch_size == 17:
            raise JobRequestError("injected miss", field="batch_size")
        return real(req, *args, **kwargs)

    monkeypatch.setattr(model.forecaster, "forecast", forecast)
    return model


def test_a_bug_in_one_served_row_says_so_and_the_others_are_answered(app, buggy):
    rows = [_job(), _job(13), _job(17)]
    status, body = _post(app, {"dataframe_records": rows})
    problem = _assert_refusal(body)
    assert status == 400 and body["reason"] == "cannot_forecast"
    assert (problem["kind"], problem["row"]) == ("bug", 1)
    assert BUG_TEXT in problem["message"] and "ZeroDivisionError: injected" in problem["message"]
    assert [(e["row"], e["kind"]) for e in body["errors"]] == [(1, "bug"), (2, "request")]
    assert body["errors"][1]["message"] == "injected miss"

    status, body = _post(app, {"dataframe_records": rows, "params": {"errors": "row"}})
    ok, bug, miss = body["predictions"]
    assert status == 200 and ok["error"] is None and ok["seconds"] > 0
    assert bug["error"].startswith(BUG_TEXT) and "ZeroDivisionError: injected" in bug["error"]
    assert miss["error"] == "injected miss"

    # the pyfunc's own predict (MLflow's door): the same rows, the same errors
    frame = buggy.predict(None, jobs_frame(rows), params={"errors": "row"})
    assert frame["error"].tolist() == [None, bug["error"], "injected miss"]


def test_a_bug_is_not_remembered(model, monkeypatch):
    row = _job(13)
    real = model.forecaster.forecast
    monkeypatch.setattr(model.forecaster, "forecast",
                        lambda req, *a, **k: 1 / 0 if req.batch_size == 13 else real(req))
    [(first, info)] = model.answer_rows(requests_from_rows([row]))
    assert info is not None and info.kind == "bug" and first["error"].startswith(BUG_TEXT)
    monkeypatch.setattr(model.forecaster, "forecast", real)
    [(second, info)] = model.answer_rows(requests_from_rows([row]))
    assert info is None and second["error"] is None and second["seconds"] > 0


def test_a_bug_outside_the_rows_is_a_500_without_a_traceback(app, monkeypatch):
    from jobcast.mlops import rest_app

    def broken(*_args):
        raise ZeroDivisionError("secret detail")

    monkeypatch.setattr(rest_app, "table_records", broken)
    status, body = _post(app, {"dataframe_records": [_job()]})
    problem = _assert_refusal(body)
    assert status == 500 and body["error_code"] == "INTERNAL_ERROR"
    assert problem["kind"] == "bug" and "a bug in jobcast" in problem["message"]
    assert "secret detail" not in json.dumps(body) and "Traceback" not in json.dumps(body)


def test_the_token_gate_refuses_in_the_same_shape(app, tmp_path):
    path = tmp_path / "tokens.json"
    _, token = create_token(path, "ci")
    gate = AuthGate(app, TokenVerifier(path))
    status, body = _call(gate, "GET", "/ready")
    problem = _assert_refusal({**body, "row": None, "field": None})
    assert status == 401 and body["error_code"] == "UNAUTHENTICATED"
    assert problem["kind"] == body["reason"] == "unauthorized"
    status, body = _call(gate, "GET", "/ready",
                         headers=[(b"authorization", f"Bearer {token}".encode())])
    assert status == 200 and body["ready"]


def test_a_fit_failure_and_a_skipped_run_carry_the_error_object():
    points = pd.DataFrame([{
        "run_id": 1, "source": "a.log", "network": "lonelynet", "deployment": "cpu-x1",
        "stack": "Keras 3", "phase": "train", "batch_size": 32, "iterations": 100.0,
        "seconds": 12.0, "final": True, "start_time": 1.0, "variant": "", "system": "",
        "clock_resolution_s": None}])
    skipped = SkippedRun(source="b.log", run=2, network="othernet", deployment="cpu-x2",
                         stack="Keras 3", variant="", system="", phases=("train",),
                         reason="train batch size 0 is not positive")
    report = fit_report(points, skipped=[skipped])
    failures = {f.network: f.to_dict() for f in report.failures}
    lonely = failures["lonelynet"]
    assert isinstance(lonely["error"], str) and lonely["problem"] == ErrorInfo(
        "fit", lonely["error"]).as_dict()
    assert failures["othernet"]["problem"]["kind"] == "fit"
    [run] = [r.to_dict() for r in report.skipped]
    assert run["error"].startswith("run skipped") and run["skipped"] == skipped.reason
    assert run["problem"] == {"kind": "skipped_run", "message": skipped.reason,
                              "file": "b.log", "line": None, "field": None, "row": None}


def test_a_bug_in_a_backtest_ask_is_recorded_as_a_bug_or_raised(monkeypatch):
    """Fault injection in the forecaster a backtest asks: a JobcastError is a miss (no
    candidates); any other exception is raised, or recorded as a bug when asked to be."""
    from jobcast.service.engine import backtest
    from jobcast.service.engine.fitting import BacktestSummary
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest

    forecaster, req = Forecaster(models=[]), JobRequest.from_mapping(_job())

    def bug(*_args, **_kwargs):
        raise ZeroDivisionError("injected")

    def miss(*_args, **_kwargs):
        raise JobRequestError("injected miss")

    monkeypatch.setattr(forecaster, "candidates", miss)
    bugs: list[ErrorInfo] = []
    assert backtest._candidates(forecaster, req, 0.0, bugs)[1] == [] and bugs == []
    monkeypatch.setattr(forecaster, "candidates", bug)
    with pytest.raises(ZeroDivisionError):
        backtest._candidates(forecaster, req, 0.0)
    with pytest.warns(RuntimeWarning, match="a bug in jobcast"):
        assert backtest._candidates(forecaster, req, 0.0, bugs)[1] == []
    [info] = bugs
    assert info.kind == "bug" and "ZeroDivisionError: injected" in info.message
    # a fit's backtest summary shows them; without any, its JSON is as before
    assert BacktestSummary.of(pd.DataFrame(), bugs).as_dict()["bugs"] == [info.as_dict()]
    assert "bugs" not in BacktestSummary.of(pd.DataFrame()).as_dict()


def test_a_bad_price_table_names_its_file_and_line(tmp_path):
    from jobcast.service.features.prices import PriceTableError, load_prices

    path = tmp_path / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour\nV100,2.5\nV100,cheap\n")
    with pytest.raises(PriceTableError) as caught:
        load_prices(path)
    assert caught.value.info().as_dict() == {
        "kind": "prices", "message": str(caught.value), "file": str(path), "line": 3,
        "field": None, "row": None}
