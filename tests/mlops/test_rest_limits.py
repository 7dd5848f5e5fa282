"""``jobcast serve`` under hostile requests: size limits, range checks, deadlines, SIGTERM.

One real registered model, served by the real CLI on 127.0.0.1 (``--timeout 3``); the last
test stops it with SIGTERM. Also: the pyfunc model takes an int64 ``iterations`` column.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from models.e2e import load_models

pytestmark = pytest.mark.slow

TIMEOUT_S = 3.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def registered(registered_samples):
    """The MLPerf samples fitted and registered (the session's, tests/conftest.py)."""
    return registered_samples


@pytest.fixture(scope="module")
def server(registered, tmp_path_factory):
    """``jobcast serve`` (the real CLI) with a 3 s request deadline."""
    folder, port = tmp_path_factory.mktemp("rest"), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", TF_CPP_MIN_LOG_LEVEL="2")
    log = open(folder / "serve.log", "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcast", "serve", "--port", str(port), "--tracking-uri",
         registered["uri"], "--timeout", str(TIMEOUT_S)],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "serving models:/" not in (folder / "serve.log").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"server did not start: {(folder / 'serve.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield {**registered, "port": port, "proc": proc, "log": folder / "serve.log"}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        log.close()


def _request(port: int, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None, timeout: float = 120) -> tuple[int, dict | str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json",
                                                       **(headers or {})})
        resp = conn.getresponse()
        data = resp.read().decode()
    finally:
        conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, data


def _post(port: int, payload: dict, **kw) -> tuple[int, dict]:
    return _request(port, "POST", "/invocations", json.dumps(payload).encode(), **kw)


def _e2e_row(store) -> dict:
    m = next(m for m in sorted(load_models(store), key=lambda m: m.model_id)
             if m.phase == "train")
    return {"network": m.network, "deployment": m.deployment,
            "batch_size": int(m.estimator.batch_range_[1]),
            "iterations": int(m.estimator.iteration_range_[1]), "phase": "train"}


def test_ready_means_warm_and_valid_rows_answer(server):
    status, ready = _request(server["port"], "GET", "/ready")
    assert status == 200 and ready["ready"] and ready["warm_rows"] >= 1
    assert ready["model_uri"] == f"models:/{server['registration'].name}/1"  # pinned version
    assert ready["limits"]["timeout_s"] == TIMEOUT_S
    row = _e2e_row(server["store"])
    status, body = _post(server["port"], {"dataframe_records": [row]})
    assert status == 200, body
    pred = body["predictions"][0]
    assert pred["route"] in ("rate", "end-to-end")
    assert 0 < pred["low"] <= pred["seconds"] <= pred["high"]


def test_huge_and_unknown_values_name_row_and_field(server):
    row = _e2e_row(server["store"])
    status, body = _post(server["port"], {"dataframe_records": [row, {**row, "iterations": 1e30}]})
    assert status == 400 and body["row"] == 1 and body["field"] == "iterations"
    assert "iterations must be" in body["error"] and "1e+30" in body["error"]
    status, body = _post(server["port"], {"dataframe_records": [row, {**row, "colour": "x" * 99}]})
    assert status == 400 and body["row"] == 1 and body["field"] == "colour"
    assert body["reason"] == "unknown_column" and "unknown column" in body["error"]
    status, body = _post(server["port"], {"dataframe_records": [{**row, "batch_size": True}]})
    assert status == 400 and body["field"] == "batch_size"
    status, body = _post(server["port"], {"dataframe_records": [row, {**row, "batch_size": 2e9}],
                                          "params": {"errors": "row"}})
    assert status == 200 and body["predictions"][0]["error"] is None
    assert "batch_size" in body["predictions"][1]["error"]
    status, body = _request(server["port"], "POST", "/invocations",
                            b'{"dataframe_records": [{"network": "vgg16", "batch_size": NaN}]}')
    assert status == 400 and body["reason"] == "invalid_json"


def test_networks_that_need_tensorflow_or_files_are_row_errors(server):
    base = {"batch_size": 32, "iterations": 10, "device": "V100", "deployment": None,
            "phase": "train"}
    status, body = _post(server["port"], {"dataframe_records": [
        {**base, "network": "no-such-net"}, {**base, "network": "/etc/passwd.json"}],
        "params": {"errors": "row"}})
    assert status == 200
    unknown, path = body["predictions"]
    assert "does not load keras" in unknown["error"] and "resnet50" in unknown["error"]
    assert "a bug in jobcast" not in unknown["error"]  # a refusal (NotServed), not a bug
    assert "network must be a network's name" in path["error"]
    status, body = _post(server["port"],
                         {"dataframe_records": [{**base, "network": "no-such-net"}]})
    assert status == 400 and body["problem"]["kind"] in ("not_served", "no_forecast")


def test_oversize_body_and_too_many_rows_get_413(server):
    row = {"network": "vgg16", "batch_size": 1, "iterations": 1, "device": "V100"}
    big = json.dumps({"dataframe_records": [{**row, "colour": "x" * 2_000_000}]}).encode()
    status, body = _request(server["port"], "POST", "/invocations", big)
    assert status == 413 and body["reason"] == "body_too_large"
    status, body = _post(server["port"], {"dataframe_records": [row] * 1001})
    assert status == 413 and body["reason"] == "too_many_rows" and "1001 rows" in body["error"]
    # A chunked body (no Content-Length) is cut off at the limit as well.
    conn = http.client.HTTPConnection("127.0.0.1", server["port"], timeout=60)
    chunks = (b"x" * 65536 for _ in range(40))
    conn.request("POST", "/invocations", body=chunks, encode_chunked=True,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["reason"] == "body_too_large"
    conn.close()
    assert _request(server["port"], "GET", "/ping")[0] == 200


def test_deadline_stops_the_rows_and_frees_the_worker(server):
    rows = [{"network": net, "batch_size": b, "iterations": 100, "device": "V100"}
            for net in ("resnet50", "vgg16", "mobilenetv2", "inceptionv3")
            for b in range(1, 251)]  # 1000 distinct layerwise jobs: far more than 3 s of work
    status, body = _post(server["port"], {"dataframe_records": rows})
    assert status == 504 and body["reason"] == "timeout"
    assert 0 <= body["row"] < len(rows) and f"of {len(rows)} rows" in body["error"]
    # Had the rows gone on, this request would wait behind them past its own deadline.
    status, body = _post(server["port"], {"dataframe_records": [_e2e_row(server["store"])]})
    assert status == 200, body


def test_int64_iterations_through_the_pyfunc_api(registered):
    import mlflow

    reg = registered["registration"]
    mlflow.set_tracking_uri(registered["uri"])
    try:
        model = mlflow.pyfunc.load_model(reg.model_uri)
    finally:
        mlflow.set_tracking_uri(None)
    row = _e2e_row(registered["store"])
    frame = pd.DataFrame([row, {**row, "iterations": row["iterations"] // 2}])
    frame["iterations"] = frame["iterations"].astype("int64")
    assert frame["iterations"].dtype == "int64"
    out = model.predict(frame)
    assert out["error"].isna().all() and out["seconds"][1] < out["seconds"][0]
    huge = frame.assign(iterations=[10, 10**12])
    rows = model.predict(huge, params={"errors": "row"})
    assert rows["error"][0] is None and "iterations must be" in rows["error"][1]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigterm_stops_every_server_process(server):
    proc = server["proc"]
    tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) >= 2  # the supervisor and its worker
    rows = [{"network": "densenet201", "batch_size": b, "iterations": 10, "device": "V100"}
            for b in range(1, 1001)]
    answers: list = []

    def busy() -> None:
        try:
            answers.append(_post(server["port"], {"dataframe_records": rows})[0])
        except OSError as exc:
            answers.append(exc)

    client = threading.Thread(target=busy)
    client.start()
    time.sleep(0.5)  # let the request reach the worker (the assertions hold either way)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    client.join(timeout=60)
    assert [p for p in tree if _running(p)] == []
    assert answers and answers[0] != 200
    assert "Traceback" not in Path(server["log"]).read_text()
