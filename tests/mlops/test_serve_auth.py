"""``jobcast serve`` with bearer tokens and TLS (issue 27): the token file and its commands,
refusals before start, and a real served model on 127.0.0.1 over HTTPS with a certificate
made here. The rules: :mod:`jobcast.mlops.auth`, :mod:`jobcast.mlops.gate`."""

from __future__ import annotations

import datetime
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobcast.cli.app import app
from jobcast.mlops.auth import TokenError, TokenVerifier, create_token, read_tokens, revoke_token
from jobcast.mlops.gate import AuthLimits, FailureLimiter
from jobcast.mlops.serving import ServeError, is_loopback, plan_exposure

RUNNER = CliRunner()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _invoke(*args: str):
    return RUNNER.invoke(app, list(args))


# -- the token file and `jobcast token` -------------------------------------------------------


def test_token_create_list_revoke(tmp_path):
    path = tmp_path / "tokens.json"
    made = _invoke("token", "create", "--name", "alice", "--tokens", str(path), "--json")
    assert made.exit_code == 0, made.output
    alice = json.loads(made.stdout)
    assert re.fullmatch(r"jct_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", alice["token"])
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert alice["token"] not in text and alice["token"].split("_")[-1] not in text
    plain = _invoke("token", "create", "--name", "bob", "--tokens", str(path))
    assert plain.exit_code == 0
    bob_token = plain.stdout.strip().splitlines()[-1]
    assert bob_token.startswith("jct_")
    twice = _invoke("token", "create", "--name", "bob", "--tokens", str(path))
    assert twice.exit_code == 2 and "exists" in twice.output

    listed = _invoke("token", "list", "--tokens", str(path), "--json")
    assert listed.exit_code == 0
    assert [t["name"] for t in json.loads(listed.stdout)["tokens"]] == ["alice", "bob"]
    for shown in (listed.stdout, _invoke("token", "list", "--tokens", str(path)).stdout):
        assert alice["token"] not in shown and bob_token not in shown and "sha256" not in shown

    by_name = json.loads(_invoke("token", "revoke", "alice", "--tokens", str(path),
                                 "--json").stdout)
    assert by_name["id"] == alice["id"] and by_name["revoked"]
    bob_id = bob_token.split("_")[1]
    assert _invoke("token", "revoke", bob_id, "--tokens", str(path)).exit_code == 0
    assert all(r.revoked for r in read_tokens(path))
    missing = _invoke("token", "revoke", "carol", "--tokens", str(path))
    assert missing.exit_code == 2 and "no token" in missing.output
    assert path.stat().st_mode & 0o777 == 0o600  # rewritten, still private


def test_token_file_open_to_others_is_refused(tmp_path):
    path = tmp_path / "tokens.json"
    create_token(path, "alice")
    for mode in (0o640, 0o604, 0o660):
        path.chmod(mode)
        with pytest.raises(TokenError, match="chmod 600"):
            read_tokens(path)
        out = _invoke("token", "list", "--tokens", str(path))
        assert out.exit_code == 2 and "lets group or others read" in out.output
        with pytest.raises(ServeError, match="lets group or others read"):
            plan_exposure("127.0.0.1", path)
    path.chmod(0o600)
    path.write_text("{not json")
    with pytest.raises(TokenError, match="not a jobcast token file"):
        read_tokens(path)


def test_verifier_verdicts(tmp_path):
    path = tmp_path / "tokens.json"
    _, good = create_token(path, "alice")
    _, gone = create_token(path, "bob")
    revoke_token(path, "bob")
    check = TokenVerifier(path).check
    assert check(f"Bearer {good}".encode()) == "ok"
    assert check(f"bearer  {good} ".encode()) == "ok"
    assert check(None) == "missing"
    for bad in (b"", b"Bearer", f"Basic {good}".encode(), good.encode(), b"Bearer jct_x_y",
                f"Bearer {good} {good}".encode()):
        assert check(bad) == "malformed", bad
    forged = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    assert check(f"Bearer {forged}".encode()) == "invalid"
    assert check(f"Bearer {gone}".encode()) == "revoked"


def test_failure_limiter_refills_over_the_window():
    now = [0.0]
    limiter = FailureLimiter(AuthLimits(max_failures=3, window_s=30.0), clock=lambda: now[0])
    for _ in range(3):
        assert limiter.retry_after("10.0.0.1") == 0
        limiter.fail("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 10  # one attempt refills in 30/3 s
    assert limiter.retry_after("10.0.0.2") == 0  # per client
    now[0] = 10.0
    assert limiter.retry_after("10.0.0.1") == 0


def test_serve_refuses_an_open_non_loopback_host(tmp_path):
    tokens = tmp_path / "tokens.json"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    out = _invoke("serve", "--host", "0.0.0.0", "--port", str(_free_port()), "--tokens",
                  str(tokens))
    assert out.exit_code == 2 and "--insecure-no-auth" in out.output
    create_token(tokens, "alice")
    revoke_token(tokens, "alice")  # only revoked tokens: still refused
    with pytest.raises(ServeError, match="not loopback"):
        plan_exposure("0.0.0.0", tokens)
    assert plan_exposure("0.0.0.0", tokens, insecure_no_auth=True).tokens is None
    create_token(tokens, "bob")
    assert plan_exposure("0.0.0.0", tokens).tokens == tokens
    assert plan_exposure("127.0.0.1", tmp_path / "absent.json").tokens is None  # as before
    with pytest.raises(ServeError, match="both --tls-cert and --tls-key"):
        plan_exposure("127.0.0.1", tokens, tls_cert=tmp_path / "cert.pem")


# -- a real server: tokens + TLS --------------------------------------------------------------


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the client's CA too) and its 0600 key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jobcast test")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def secure(registered_samples, tmp_path_factory):
    """The session's registered forecaster (tests/conftest.py) served by the real CLI over
    HTTPS with two tokens, 3 failed attempts per client per hour, a 1 s body timeout."""
    folder = tmp_path_factory.mktemp("auth")
    uri, reg = registered_samples["uri"], registered_samples["registration"]
    tokens = folder / "tokens.json"
    _, good = create_token(tokens, "alice")
    _, doomed = create_token(tokens, "bob")
    cert, key = _certificate(folder)
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MLFLOW_", "JOBCAST_TOKENS"))}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", TF_CPP_MIN_LOG_LEVEL="2")
    log_path = folder / "serve.log"
    log = open(log_path, "w+")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcast", "serve", "--port", str(port), "--tracking-uri", uri,
         "--tokens", str(tokens), "--tls-cert", str(cert), "--tls-key", str(key),
         "--max-auth-failures", "3", "--auth-failure-window", "3600", "--body-timeout", "1"],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "serving models:/" not in log_path.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"server did not start: {log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        context = ssl.create_default_context(cafile=str(cert))
        yield {"port": port, "proc": proc, "log": log_path, "tokens": tokens, "good": good,
               "doomed": doomed, "context": context, "registration": reg, "uri": uri}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        log.close()


def _call(server, method: str, path: str, token: str | None = None, body: bytes | None = None,
          header: str | None = None, source: str = "127.0.0.1") -> tuple[int, dict, dict]:
    conn = http.client.HTTPSConnection("127.0.0.1", server["port"], timeout=120,
                                       context=server["context"], source_address=(source, 0))
    headers = {"Content-Type": "application/json"}
    if header is not None or token is not None:
        headers["Authorization"] = header if header is not None else f"Bearer {token}"
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        try:
            payload = json.loads(data)
        except ValueError:
            payload = {"text": data.decode()}
        return resp.status, payload, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


ROWS = [{"network": "resnet50", "device": "V100", "batch_size": 64, "iterations": 500},
        {"network": "vgg16", "device": "T4", "batch_size": 32, "iterations": 200}]


def _records(rows) -> bytes:
    return json.dumps({"dataframe_records": rows}).encode()


slow = pytest.mark.slow


@slow
def test_open_paths_and_refusals(secure):
    for path in ("/ping", "/health"):
        assert _call(secure, "GET", path)[0] == 200
    # each failure from its own loopback address: the limit (3 per client) stays out of it
    missing = _call(secure, "POST", "/invocations", body=_records(ROWS), source="127.0.0.5")
    malformed = _call(secure, "POST", "/invocations", header="Basic YWxhZGRpbg==",
                      body=_records(ROWS), source="127.0.0.6")
    assert missing[0] == malformed[0] == 401
    assert missing[1] == malformed[1]  # nothing says which part failed
    assert missing[1]["error_code"] == "UNAUTHENTICATED"
    assert missing[2]["www-authenticate"].startswith("Bearer")
    assert missing[2]["connection"] == "close"
    good = secure["good"]
    wrong = _call(secure, "POST", "/invocations", token=good[:-3] + "abc", body=_records(ROWS),
                  source="127.0.0.7")
    assert wrong[0] == 403 and wrong[1]["error_code"] == "PERMISSION_DENIED"
    for path in ("/ready", "/version", "/metrics"):
        assert _call(secure, "GET", path, source="127.0.0.3")[0] == 401
        assert _call(secure, "GET", path, token=good)[0] == 200


@slow
def test_authorised_answers_are_the_models(secure):
    import mlflow

    from jobcast.mlops.rest_app import _plain
    from jobcast.service.engine.request import requests_from_rows

    status, payload, _ = _call(secure, "POST", "/invocations", token=secure["good"],
                               body=_records(ROWS))
    assert status == 200
    mlflow.set_tracking_uri(secure["uri"])  # a model version's source is a tracked run:
    mlflow.set_registry_uri(secure["uri"])  # MLflow's default would be ./mlflow.db
    try:
        model = mlflow.pyfunc.load_model(secure["registration"].model_uri,
                                         suppress_warnings=True).unwrap_python_model()
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
        mlflow.set_registry_uri(None)  # type: ignore[arg-type]
    local = json.loads(json.dumps(model.forecast_rows(requests_from_rows(ROWS)),
                                  default=_plain))
    assert payload["predictions"] == local


@slow
def test_limits_still_apply_under_auth(secure):
    token = secure["good"]
    big = _records([{**ROWS[0], "colour": "x" * 2_000_000}])
    assert _call(secure, "POST", "/invocations", token=token, body=big)[0] == 413
    rows = _records([ROWS[0]] * 1001)
    assert _call(secure, "POST", "/invocations", token=token, body=rows)[1]["reason"] == \
        "too_many_rows"
    # a slow client: headers and 5 of 100 bytes, then nothing; --body-timeout 1 answers 408
    raw = socket.create_connection(("127.0.0.1", secure["port"]), timeout=120)
    with secure["context"].wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\nAuthorization: Bearer " + token.encode()
                     + b"\r\n\r\n{\"dat")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408")


@slow
def test_revoked_token_is_refused_while_serving(secure):
    doomed = secure["doomed"]
    assert _call(secure, "POST", "/invocations", token=doomed, body=_records(ROWS))[0] == 200
    revoke_token(secure["tokens"], "bob")
    deadline = time.monotonic() + 60  # the server re-reads the file within about a second
    while True:
        status = _call(secure, "GET", "/version", token=doomed, source="127.0.0.4")[0]
        if status == 403 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status == 403
    assert _call(secure, "GET", "/version", token=secure["good"])[0] == 200


@slow
def test_failed_attempts_are_limited_and_counted(secure):
    good, client = secure["good"], "127.0.0.2"
    for _ in range(3):
        assert _call(secure, "GET", "/ready", token="jct_00000000_" + "A" * 43,
                     source=client)[0] == 403
    status, payload, headers = _call(secure, "GET", "/ready", token=good, source=client)
    assert status == 429 and payload["error_code"] == "RESOURCE_EXHAUSTED"
    assert int(headers["retry-after"]) >= 1
    assert _call(secure, "GET", "/health", source=client)[0] == 200  # liveness stays open
    assert _call(secure, "GET", "/ready", token=good)[0] == 200  # other clients unaffected
    metrics = _call(secure, "GET", "/metrics", token=good)[1]["text"]
    counts = dict(re.findall(r'jobcast_serve_auth_failures_total\{reason="(\w+)"\} (\S+)',
                             metrics))
    assert float(counts["invalid"]) >= 3 and float(counts["rate_limited"]) >= 1


@slow
def test_tokens_never_reach_the_log(secure):
    assert _call(secure, "GET", "/version", token=secure["good"])[0] == 200
    log = secure["log"].read_text()
    for token in (secure["good"], secure["doomed"]):
        assert token not in log and token.split("_")[-1] not in log
    assert "Traceback" not in log
    assert "tokens from" in log and "https://" in log


@slow
def test_insecure_no_auth_says_so_out_loud(tmp_path, monkeypatch):
    """Beyond loopback without tokens: the warning comes before the start (which fails here:
    the tracking database holds no model)."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    out = _invoke("serve", "--host", "0.0.0.0", "--port", str(_free_port()), "--tokens",
                  str(tmp_path / "none.json"), "--insecure-no-auth", "--tracking-uri",
                  f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert out.exit_code == 2
    assert "WARNING: --insecure-no-auth: no token is checked" in out.stderr
    assert "anyone who can reach" in out.stderr
