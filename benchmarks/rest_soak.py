"""REST soak of ``jobcast serve``: 10,000 mixed valid and malformed requests on 127.0.0.1.

Builds a store from the bundled MLPerf logs, fits, registers the forecaster (the shipped layer
predictor, no calibration) in a temporary tracking database, starts the real CLI
``jobcast serve --workers W --timeout T`` and measures:

* **time to ready** (``--ready-trials``, one worker): from starting ``jobcast serve`` to the
  first ``GET /ping`` answered 200 (polled every 50 ms; the server answers only once its model
  is loaded and warm), and the latency of the first forecast after it; with ``--baseline``
  interleaved with ``mlflow models serve`` on the same model (the server used before);
  medians. Then the soak server's own start (``--workers``) is timed the same way;
* **soak**: ``--requests`` requests from ``--clients`` threads (keep-alive connections), a
  seeded mix of kinds (see ``KINDS``): valid end-to-end and layerwise tables (1-5 rows from a
  pool of distinct jobs), per-row error mode, wrong types, huge numbers (``1e30``, ``1e400``,
  a 5,000-digit integer), unknown columns, networks that are not shipped or are paths,
  oversize bodies (a 5 MB row with an unknown column), a 10,000-row table, invalid JSON
  (cut, 200,000 levels deep, not UTF-8), NaN, a wrong content type, malformed tables, wrong
  paths and methods. Every kind has one expected
  status; the report counts statuses and ``reason``s, 5xx, connection errors, answers other
  than expected, and p50/p99 latency overall and per kind;
* **CPU after the load**: the server's processes' CPU seconds over ``--idle`` seconds after the
  last answer (as % of one core);
* **deadline**: one request of 1,000 distinct layerwise jobs (far more than ``T`` seconds of
  work) must get 504 at about ``T`` s; then the CPU over ``--idle`` seconds again: the rows
  really stopped;
* **stop**: SIGTERM to ``jobcast serve``; seconds until it exits, and processes of its tree
  still alive afterwards (must be 0).

``--auth`` (issue 27): the soak server has a token file (two tokens, one more revoked) and
every request above carries a valid token; ``AUTH_KINDS`` add requests with no token, a
malformed ``Authorization`` header, a wrong token and the revoked one (401/403 expected). A
second server without tokens (same ``--workers``) gets every request but the ``AUTH_KINDS``,
interleaved (which server first alternating; the one with tokens also answers the refusals),
so the authorised p50 is compared with auth off in the same process and moment. Each client
thread sends the valid requests on one keep-alive connection per server and the rest on
another (a refusal closes its connection; the next request on it would time a reconnect).
The failed-attempt limit is raised out of the way (``--max-auth-failures 10**9``: all
requests come from one address); the 429 path is tested in ``tests/mlops/test_serve_auth.py``.

Usage:
    .venv/bin/python benchmarks/rest_soak.py --requests 10000 --clients 8 --workers 2 \
        --ready-trials 3 --baseline --json benchmarks/results/rest_soak.json
    .venv/bin/python benchmarks/rest_soak.py --auth --requests 10000 --clients 8 \
        --workers 2 --ready-trials 0 --json benchmarks/results/rest_soak_auth.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import psutil
from lib import REPO

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.mlops.auth import create_token, revoke_token
from jobcast.mlops.registry import register_forecaster
from models.e2e import fit_store, load_models

NETWORKS = ("resnet50", "vgg16", "mobilenetv2", "inceptionv3", "alexnet", "googlenet")
DEVICES = ("V100", "T4", "A100", "H100")
VALID = ("valid_e2e", "valid_layerwise")  # the kinds timed against the server without tokens
# kind -> (weight, expected status, which Authorization header): bodies of valid_e2e
AUTH_KINDS = {"no_token": (10, 401, None), "malformed_header": (5, 401, "malformed"),
              "wrong_token": (10, 403, "wrong"), "revoked_token": (5, 403, "revoked")}


class Tokens:
    """The soak's token file: two valid tokens, one revoked; the headers each kind sends."""

    def __init__(self, folder: Path, rng: random.Random):
        self.path, self.rng = folder / "tokens.json", rng
        self.valid = [create_token(self.path, name)[1] for name in ("alice", "bob")]
        self.revoked = create_token(self.path, "carol")[1]
        revoke_token(self.path, "carol")

    def header(self, kind: str) -> str | None:
        how = AUTH_KINDS[kind][2] if kind in AUTH_KINDS else "valid"
        good = self.rng.choice(self.valid)
        return {None: None, "valid": f"Bearer {good}",
                "malformed": self.rng.choice([f"Basic {good}", good, "Bearer", "Bearer a b"]),
                "wrong": f"Bearer {good[:-6]}{self.rng.randrange(16**6):06x}",
                "revoked": f"Bearer {self.revoked}"}[how]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def records(rows: list[dict], **extra) -> bytes:
    return json.dumps({"dataframe_records": rows, **extra}).encode()


class Mix:
    """Seeded request bodies of every kind, with the status each must get."""

    def __init__(self, models, seed: int):
        self.rng = random.Random(seed)
        train = [m for m in models if m.phase == "train"]
        self.e2e = [{"network": m.network, "deployment": m.deployment, "phase": "train",
                     "batch_size": int(m.estimator.batch_range_[1]),
                     "iterations": int(self.rng.randint(100, 2 * m.estimator.iteration_range_[1]))}
                    for m in train for _ in range(10)]
        self.layerwise = [{"network": n, "device": d, "batch_size": b, "iterations": 1000}
                          for n in NETWORKS for d in DEVICES for b in (16, 32, 64, 128, 256)]

    def pick(self, pool: list[dict]) -> list[dict]:
        return [dict(self.rng.choice(pool)) for _ in range(self.rng.randint(1, 5))]

    # kind -> (weight, expected status, builder returning (method, path, body, content type))
    def kinds(self) -> dict:
        r = self.rng
        good = lambda: self.pick(self.e2e)  # noqa: E731
        return {
            "valid_e2e": (28, 200, lambda: ("POST", "/invocations", records(good()), None)),
            "valid_layerwise": (26, 200, lambda: (
                "POST", "/invocations", records(self.pick(self.layerwise)), None)),
            "row_mode_with_bad_rows": (5, 200, lambda: ("POST", "/invocations", records(
                good() + [{**good()[0], "batch_size": -1}], params={"errors": "row"}), None)),
            "wrong_type": (5, 400, lambda: ("POST", "/invocations", records(
                [{**good()[0], "batch_size": r.choice(["big", True, [1], {"a": 1}])}]), None)),
            "huge_1e30": (2, 400, lambda: ("POST", "/invocations", records(
                [{**good()[0], "iterations": 1e30}]), None)),
            "huge_1e400": (2, 400, lambda: ("POST", "/invocations", records(
                [{**good()[0], "iterations": 0}]).replace(b'"iterations": 0',
                                                         b'"iterations": 1e400'), None)),
            "huge_5000_digits": (2, 400, lambda: ("POST", "/invocations", records(
                [{**good()[0], "iterations": 0}]).replace(b'"iterations": 0',
                                                         b'"iterations": ' + b"9" * 5000), None)),
            "unknown_column": (5, 400, lambda: ("POST", "/invocations", records(
                [{**good()[0], "colour": "red"}]), None)),
            "network_not_shipped": (3, 400, lambda: ("POST", "/invocations", records(
                [{"network": "convnext_xlarge", "device": "V100", "batch_size": 8,
                  "iterations": 10}]), None)),
            "network_is_a_path": (2, 400, lambda: ("POST", "/invocations", records(
                [{"network": "/etc/passwd.json", "device": "V100", "batch_size": 8,
                  "iterations": 10}]), None)),
            "oversize_body": (2, 413, lambda: ("POST", "/invocations", records(
                [{**good()[0], "colour": "x" * 5_000_000}]), None)),
            "ten_thousand_rows": (1, 413, lambda: ("POST", "/invocations", records(
                [{"network": "vgg16", "device": "V100", "batch_size": b % 500 + 1,
                  "iterations": 10} for b in range(10_000)]), None)),
            "invalid_json": (3, 400, lambda: ("POST", "/invocations", r.choice([
                b'{"dataframe_records": [{"network": ', b"[" * 200_000, b"\xff\xfe\x00"]),
                None)),
            "nan_json": (2, 400, lambda: ("POST", "/invocations", records(
                [good()[0]]).replace(b'"phase": "train"', b'"epochs": NaN'), None)),
            "empty_body": (1, 400, lambda: ("POST", "/invocations", b"", None)),
            "wrong_content_type": (2, 415, lambda: (
                "POST", "/invocations", b"network,batch_size\nvgg16,32\n", "text/csv")),
            "not_a_table": (3, 400, lambda: ("POST", "/invocations", r.choice([
                b"[1, 2, 3]", b'{"dataframe_records": []}', b'{"rows": []}',
                json.dumps({"dataframe_split": {"columns": ["network", "batch_size"],
                                                "data": [["vgg16"]]}}).encode()]), None)),
            "wrong_path": (1, 404, lambda: ("POST", "/predict", records(good()), None)),
            "wrong_method": (1, 405, lambda: ("GET", "/invocations", None, None)),
        }

    def auth_kinds(self) -> dict:
        """The kinds of :meth:`kinds` plus :data:`AUTH_KINDS` (valid end-to-end bodies)."""
        out = self.kinds()
        body = out["valid_e2e"][2]
        out.update({k: (w, status, body) for k, (w, status, _) in AUTH_KINDS.items()})
        return out


class Client:
    """One keep-alive connection; reconnects after the server closes it."""

    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def send(self, method: str, path: str, body: bytes | None, ctype: str | None,
             authorization: str | None = None) -> tuple[int | str, str | None, float]:
        headers = {"Content-Type": ctype or "application/json"}
        if authorization is not None:
            headers["Authorization"] = authorization
        start = time.perf_counter()
        try:
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
            data = resp.read()
            if resp.getheader("connection", "").lower() == "close":
                self.conn.close()
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            return f"conn:{type(exc).__name__}", None, time.perf_counter() - start
        reason = None
        if resp.status != 200:
            try:
                reason = json.loads(data).get("reason")
            except (ValueError, AttributeError):
                reason = "not-json"
        return resp.status, reason, time.perf_counter() - start


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def idle_cpu(procs: list[psutil.Process], seconds: float) -> float:
    """The server's CPU use over ``seconds`` of no requests, in % of one core."""
    before = cpu_seconds(procs)
    time.sleep(seconds)
    return 100.0 * (cpu_seconds(procs) - before) / seconds


def soak(port: int, mix: Mix, n: int, clients: int, seed: int, tokens: Tokens | None = None,
         twin_port: int | None = None) -> dict:
    """``n`` requests of the mix; with ``tokens`` each carries its kind's header, and with
    ``twin_port`` each valid one is also sent (no header) to that server, interleaved."""
    kinds = mix.auth_kinds() if tokens else mix.kinds()
    names = list(kinds)
    plan = random.Random(seed).choices(names, weights=[kinds[k][0] for k in names], k=n)
    bodies = [(kind, kinds[kind][2](), tokens.header(kind) if tokens else None)
              for kind in plan]  # built before the clock starts
    results: list[tuple[str, int | str, str | None, float]] = [None] * n  # type: ignore[list-item]
    twin: list[tuple[str, int | str, float]] = []
    next_i = iter(range(n))
    lock = threading.Lock()

    def work() -> None:
        # with a twin, the timed valid requests keep their own keep-alive connection on each
        # server: a refusal closes its connection (401/403/429, 413) and the reconnect would
        # be timed on the next request
        client = Client(port)
        rest = Client(port) if twin_port else client
        other = (Client(twin_port), Client(twin_port)) if twin_port else None

        def to_twin(kind: str, request: tuple) -> None:
            status, _, seconds = other[kind not in VALID].send(*request)
            twin.append((kind, status, seconds))

        while True:
            with lock:
                i = next(next_i, None)
            if i is None:
                return
            kind, request, authorization = bodies[i]
            both = other is not None and kind not in AUTH_KINDS
            if both and i % 2:
                to_twin(kind, request)
            results[i] = (kind, *(client if kind in VALID else rest).send(*request,
                                                                          authorization))
            if both and not i % 2:
                to_twin(kind, request)

    threads = [threading.Thread(target=work) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    by_status = Counter(str(r[1]) for r in results)
    by_reason = Counter(f"{r[1]} {r[2]}" for r in results if r[1] != 200)
    unexpected = Counter(f"{r[0]} -> {r[1]} {r[2] or ''}".strip() for r in results
                         if r[1] != kinds[r[0]][1])
    latency = defaultdict(list)
    for kind, _, _, seconds in results:
        latency[kind].append(seconds * 1000)
    every = np.concatenate([np.asarray(v) for v in latency.values()])
    pct = lambda a, q: round(float(np.percentile(a, q)), 2)  # noqa: E731
    extra = {}
    if tokens:
        unauthorised = [r for r in results if r[0] in AUTH_KINDS]
        extra["auth"] = {
            "unauthorised": len(unauthorised),
            "unauthorised_status": dict(sorted(Counter(str(r[1]) for r in unauthorised)
                                               .items())),
            "unauthorised_not_401_403": sum(r[1] not in (401, 403) for r in unauthorised),
            "rate_limited_429": sum(r[1] == 429 for r in results),
        }
    if twin:
        on = [r[3] * 1000 for r in results if r[0] in VALID and r[1] == 200]
        off = [s * 1000 for kind, status, s in twin if kind in VALID and status == 200]
        extra["auth_on_vs_off"] = {
            "authorised_valid_n": len(on), "auth_off_valid_n": len(off),
            "auth_off_requests": len(twin),
            "auth_off_unexpected": sum(status != kinds[kind][1] for kind, status, _ in twin),
            "authorised_p50_ms": pct(on, 50), "auth_off_p50_ms": pct(off, 50),
            "authorised_p99_ms": pct(on, 99), "auth_off_p99_ms": pct(off, 99),
            "p50_ratio_on_over_off": round(float(np.percentile(on, 50)
                                                 / np.percentile(off, 50)), 3)}
    return {**extra,
        "requests": n, "clients": clients, "wall_s": round(wall, 2),
        "requests_per_s": round(n / wall, 1),
        "status": dict(sorted(by_status.items())),
        "server_errors_5xx": sum(v for k, v in by_status.items() if k.startswith("5")),
        "connection_errors": sum(v for k, v in by_status.items() if k.startswith("conn")),
        "refusals_by_status_and_reason": dict(sorted(by_reason.items())),
        "unexpected": dict(sorted(unexpected.items())),
        "latency_ms": {"p50": pct(every, 50), "p99": pct(every, 99), "max": pct(every, 100)},
        "latency_ms_by_kind": {k: {"n": len(v), "p50": pct(v, 50), "p99": pct(v, 99)}
                               for k, v in sorted(latency.items())},
    }


def deadline_phase(port: int, procs: list[psutil.Process], timeout_s: float,
                   idle_s: float, authorization: str | None = None) -> dict:
    rows = [{"network": net, "device": "V100", "batch_size": b, "iterations": 100}
            for net in ("densenet201", "inceptionv3", "resnet50", "vgg16")
            for b in range(300, 550)]
    status, reason, seconds = Client(port).send("POST", "/invocations", records(rows), None,
                                                authorization)
    return {"rows": len(rows), "status": status, "reason": reason,
            "answered_after_s": round(seconds, 2), "timeout_s": timeout_s,
            "cpu_pct_after": round(idle_cpu(procs, idle_s), 2)}


def start_and_time(argv: list[str], port: int, env: dict, folder: Path) -> dict:
    """Start a server, time its first ``/ping`` 200 and its first forecast, stop its group."""
    log = open(folder / "ready.log", "w")  # noqa: SIM115 - closed below
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/ping")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                if proc.poll() is not None:
                    sys.exit(f"server exited: {(folder / 'ready.log').read_text()[-2000:]}")
                time.sleep(0.05)
        ready = time.perf_counter() - start
        status, _, first = Client(port).send("POST", "/invocations", records(
            [{"network": "vgg16", "deployment": None, "device": "T4", "batch_size": 48,
              "iterations": 500, "phase": "train"}]), None)
        return {"ready_s": round(ready, 2), "first_forecast_s": round(first, 3),
                "first_status": status}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def ready_trials(uri: str, model_uri: str, env: dict, folder: Path, trials: int,
                 baseline: bool) -> dict:
    """Time to ready of ``jobcast serve`` (one worker), interleaved with ``mlflow models
    serve`` on the same model (the server jobcast used before) when ``baseline``."""
    out: dict[str, list[dict]] = {"jobcast serve": []}
    if baseline:
        out["mlflow models serve"] = []
    for _ in range(trials):
        port = free_port()
        out["jobcast serve"].append(start_and_time(
            [sys.executable, "-m", "jobcast", "serve", "--port", str(port), "--tracking-uri",
             uri], port, env, folder))
        if baseline:
            port = free_port()
            out["mlflow models serve"].append(start_and_time(
                [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri,
                 "--env-manager", "local", "-p", str(port), "--host", "127.0.0.1", "-w", "1"],
                port, {**env, "MLFLOW_TRACKING_URI": uri,  # it starts `uvicorn` by name
                       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"},
                folder))
    return {name: {"trials": runs,
                   "ready_s_median": round(float(np.median([r["ready_s"] for r in runs])), 2),
                   "first_forecast_s_median": round(float(np.median(
                       [r["first_forecast_s"] for r in runs])), 3)}
            for name, runs in out.items()}


def wait_ping(port: int, proc: subprocess.Popen) -> None:
    """Until ``GET /ping`` answers 200 (the server is warm); exit when it died."""
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/ping")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            if proc.poll() is not None:
                sys.exit("the server without tokens exited")
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=20.0, help="Server --timeout (s).")
    parser.add_argument("--idle", type=float, default=5.0, help="Seconds of CPU watching.")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--ready-trials", type=int, default=3,
                        help="Starts timed to ready (one worker) before the soak.")
    parser.add_argument("--baseline", action="store_true",
                        help="Interleave `mlflow models serve` starts with the timed ones.")
    parser.add_argument("--auth", action="store_true",
                        help="Tokens on, auth failures in the mix, a twin server without "
                             "tokens for the p50 comparison (module docstring).")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.nice(10)

    with tempfile.TemporaryDirectory(prefix="jobcast-soak-") as tmp:
        folder = Path(tmp)
        store = Store(f"sqlite:///{folder / 'jobcast.db'}")
        ingest_paths(store, [str(REPO / "tests" / "data" / "mlperf")])
        fit_store(store)
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        reg = register_forecaster(store, tracking_uri=uri, calibrate=False)
        mix = Mix(load_models(store), args.seed)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env.update(MLFLOW_DISABLE_TELEMETRY="true", TF_CPP_MIN_LOG_LEVEL="2")
        readiness = ready_trials(uri, reg.model_uri, env, folder, args.ready_trials,
                                 args.baseline) if args.ready_trials else {}
        port = free_port()
        log = open(folder / "serve.log", "w+")  # noqa: SIM115 - closed below
        base = [sys.executable, "-m", "jobcast", "serve", "--tracking-uri", uri, "--workers",
                str(args.workers), "--timeout", str(args.timeout)]
        tokens = twin = None
        if args.auth:
            tokens = Tokens(folder, random.Random(args.seed))
            twin_port = free_port()
            twin = subprocess.Popen(base + ["--port", str(twin_port)], cwd=folder, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        start = time.perf_counter()
        proc = subprocess.Popen(
            base + ["--port", str(port)] + (["--tokens", str(tokens.path),
                                             "--max-auth-failures", str(10**9)] if tokens
                                            else []),
            cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
        report: dict = {"command": " ".join(sys.argv), "workers": args.workers,
                        "time_to_ready": readiness}
        valid = tokens.header("valid_e2e") if tokens else None
        try:
            ping = None
            while ping is None:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    conn.request("GET", "/ping")
                    if conn.getresponse().status == 200:
                        ping = time.perf_counter() - start
                    conn.close()
                except OSError:
                    if proc.poll() is not None:
                        sys.exit(f"server exited: {(folder / 'serve.log').read_text()[-2000:]}")
                    time.sleep(0.05)
            while "serving models:/" not in (folder / "serve.log").read_text():
                time.sleep(0.05)  # every worker warm
            report["first_ping_s"] = round(ping, 2)
            report["all_workers_ready_s"] = round(time.perf_counter() - start, 2)
            report["server_line"] = next(line for line in (folder / "serve.log").read_text()
                                         .splitlines() if "serving models:/" in line)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/ready", headers={"Authorization": valid} if valid else {})
            report["ready_endpoint"] = json.loads(conn.getresponse().read())
            conn.close()
            if twin is not None:
                wait_ping(twin_port, twin)
            procs = tree(proc.pid)
            cpu_before = cpu_seconds(procs)
            report["soak"] = soak(port, mix, args.requests, args.clients, args.seed, tokens,
                                  twin_port if twin is not None else None)
            report["soak"]["server_cpu_s"] = round(cpu_seconds(procs) - cpu_before, 1)
            report["cpu_pct_after_load"] = round(idle_cpu(procs, args.idle), 2)
            report["deadline"] = deadline_phase(port, procs, args.timeout, args.idle, valid)
            pids = [p.pid for p in tree(proc.pid)]
            stop = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=120)
            time.sleep(0.5)
            alive = [p for p in pids if psutil.pid_exists(p)
                     and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
            report["sigterm"] = {"processes": len(pids), "exit_code": code,
                                 "exit_s": round(time.perf_counter() - stop - 0.5, 2),
                                 "alive_after": len(alive)}
            server_log = (folder / "serve.log").read_text()
            report["tracebacks_in_server_log"] = server_log.count("Traceback")
            if tokens:
                report["tokens_in_server_log"] = sum(t in server_log for t in
                                                     [*tokens.valid, tokens.revoked])
        finally:
            for p in (proc, twin):
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
            log.close()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
