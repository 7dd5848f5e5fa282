"""REST latency and throughput of the served forecaster (``mlflow models serve``, local env).

Builds a store from the bundled MLPerf logs, fits, registers the forecaster (calibrated when
a layer predictor ships) into a temporary tracking database, serves it on 127.0.0.1 with one
worker, then times, interleaved round-robin in one client process over one keep-alive
connection:

* ``e2e x1``: one end-to-end job per request (iterations vary: no result-cache hits);
* ``e2e x100``: a 100-job end-to-end table per request (all distinct);
* ``in-process x1`` / ``in-process x100``: the same tables through ``model.predict`` in this
  process (what REST adds is the difference);
* ``layerwise x1 cached``: the same layerwise job every time (served from the model's cache);
* ``layerwise x1 cold``: a layerwise job at a new batch size every time (builds the Keras
  network and prices every layer), fewer repetitions.

Then ``--clients`` threads send ``e2e x1`` requests for ``--seconds`` for a concurrent
requests/s. Prints a Markdown table; ``--json`` writes the numbers.

Usage:
    .venv/bin/python benchmarks/rest_latency.py --reps 200 \
        --json benchmarks/results/rest_latency.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
from lib import REPO

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.mlops.pyfunc_model import jobs_frame
from jobcast.mlops.registry import default_predictor_dir, register_forecaster
from jobcast.mlops.serving import serve_argv, serve_env
from models.e2e import fit_store, load_models


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Client:
    """One keep-alive HTTP connection to the server."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def post(self, payload: bytes) -> tuple[int, bytes]:
        self.conn.request("POST", "/invocations", body=payload,
                          headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        return resp.status, resp.read()


def split_payload(frame: pd.DataFrame) -> bytes:
    records = json.loads(frame.to_json(orient="split", index=False))
    return json.dumps({"dataframe_split": {"columns": records["columns"],
                                           "data": records["data"]}}).encode()


def e2e_table(models, n: int, rng: np.random.Generator) -> pd.DataFrame:
    train = [m for m in models if m.phase == "train"]
    rows = []
    for i in range(n):
        m = train[i % len(train)]
        top = m.estimator.iteration_range_[1]
        rows.append({"network": m.network, "deployment": m.deployment,
                     "batch_size": int(m.estimator.batch_range_[1]),
                     "iterations": int(rng.integers(1, 2 * top)), "phase": "train"})
    return jobs_frame(rows)


def layerwise_table(batch: int) -> pd.DataFrame:
    return jobs_frame([{"network": "mobilenetv2", "deployment": None, "batch_size": batch,
                        "iterations": 1000, "phase": "train", "device": "V100",
                        "image_size": 96}])


def summary(ms: list[float], jobs: int) -> dict:
    arr = np.asarray(ms)
    mean_s = float(arr.mean()) / 1000
    return {"n": len(ms), "p50_ms": float(np.percentile(arr, 50)),
            "p99_ms": float(np.percentile(arr, 99)), "mean_ms": float(arr.mean()),
            "requests_per_s": 1 / mean_s, "jobs_per_s": jobs / mean_s}


def concurrent_rps(port: int, payloads: list[bytes], clients: int, seconds: float) -> dict:
    counts = [0] * clients
    errors = [0] * clients
    stop = time.monotonic() + seconds

    def work(k: int) -> None:
        client = Client(port)
        i = k
        while time.monotonic() < stop:
            status, _ = client.post(payloads[i % len(payloads)])
            counts[k] += status == 200
            errors[k] += status != 200
            i += clients

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    return {"clients": clients, "seconds": elapsed, "requests": sum(counts),
            "errors": sum(errors), "requests_per_s": sum(counts) / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="Requests per fast variant.")
    parser.add_argument("--cold-reps", type=int, default=8, help="Cold layerwise requests.")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--predictor", type=Path, default=None,
                        help="Layer predictor folder (default: the shipped one, if any).")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import mlflow

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = Store(f"sqlite:///{folder / 'jobcast.db'}")
        ingest_paths(store, [str(REPO / "tests" / "data" / "mlperf")])
        fit_store(store)
        models = load_models(store)
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        predictor_dir = args.predictor or default_predictor_dir()
        has_predictor = predictor_dir is not None
        t0 = time.perf_counter()
        reg = register_forecaster(store, tracking_uri=uri, predictor_dir=predictor_dir,
                                  calibrate=has_predictor)
        register_s = time.perf_counter() - t0
        port = free_port()
        log = open(folder / "server.log", "w")  # noqa: SIM115 - closed below
        t0 = time.perf_counter()
        proc = subprocess.Popen(serve_argv(reg.model_uri, port), env=serve_env(uri), cwd=folder,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            client = None
            while client is None:
                if proc.poll() is not None:
                    raise SystemExit((folder / "server.log").read_text()[-3000:])
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    c.request("GET", "/ping")
                    if c.getresponse().status == 200:
                        client = Client(port)
                except OSError:
                    time.sleep(0.2)
            ready_s = time.perf_counter() - t0

            mlflow.set_tracking_uri(uri)
            local = mlflow.pyfunc.load_model(reg.model_uri)
            singles = [e2e_table(models, 1, rng) for _ in range(args.reps)]
            tables = [e2e_table(models, 100, rng) for _ in range(args.reps)]
            variants: dict[str, list[float]] = {k: [] for k in (
                "e2e x1", "e2e x100", "in-process x1", "in-process x100")}
            single_payloads = [split_payload(t) for t in singles]
            table_payloads = [split_payload(t) for t in tables]
            lw_first_ms = None
            if has_predictor:
                variants["layerwise x1 cached"] = []
                lw_payload = split_payload(layerwise_table(16))
                t = time.perf_counter()
                status, body = client.post(lw_payload)  # first: imports TensorFlow
                lw_first_ms = 1000 * (time.perf_counter() - t)
                assert status == 200, body
            for i in range(args.reps):  # interleaved round-robin
                for name, payload in (("e2e x1", single_payloads[i]),
                                      ("e2e x100", table_payloads[i])):
                    t = time.perf_counter()
                    status, body = client.post(payload)
                    variants[name].append(1000 * (time.perf_counter() - t))
                    assert status == 200, body
                for name, frame in (("in-process x1", singles[i]),
                                    ("in-process x100", tables[i])):
                    t = time.perf_counter()
                    local.predict(frame)
                    variants[name].append(1000 * (time.perf_counter() - t))
                if has_predictor:
                    t = time.perf_counter()
                    status, body = client.post(lw_payload)
                    variants["layerwise x1 cached"].append(1000 * (time.perf_counter() - t))
            if has_predictor:
                variants["layerwise x1 cold"] = []
                for k in range(args.cold_reps):
                    payload = split_payload(layerwise_table(17 + k))
                    t = time.perf_counter()
                    status, body = client.post(payload)
                    variants["layerwise x1 cold"].append(1000 * (time.perf_counter() - t))
                    assert status == 200, body
            conc = concurrent_rps(port, single_payloads, args.clients, args.seconds)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            log.close()

    results = {name: summary(ms, 100 if "x100" in name else 1) for name, ms in variants.items()}
    cpu = os.cpu_count()
    print(f"register {register_s:.1f} s, server ready {ready_s:.1f} s after start; "
          f"{cpu} CPUs; first layerwise request {lw_first_ms and round(lw_first_ms)} ms")
    print("| variant | n | p50 ms | p99 ms | mean ms | requests/s | jobs/s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['n']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{r['mean_ms']:.1f} | {r['requests_per_s']:.1f} | {r['jobs_per_s']:.0f} |")
    print(f"concurrent e2e x1: {conc['clients']} clients, {conc['requests_per_s']:.1f} "
          f"requests/s over {conc['seconds']:.1f} s ({conc['errors']} errors)")
    rest, local_ = results["e2e x1"]["p50_ms"], results["in-process x1"]["p50_ms"]
    print(f"REST adds {rest - local_:.1f} ms at p50 to a single job "
          f"(p50 ratio REST / in-process {rest / max(local_, 1e-9):.1f}x)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "predictor": str(predictor_dir), "register_s": register_s,
            "server_ready_s": ready_s, "cpus": cpu,
            "first_layerwise_ms": lw_first_ms, "variants": results, "concurrent": conc,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
