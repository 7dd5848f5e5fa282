"""A real Prometheus server for tests and benchmarks, plus the tiny Keras jobs they watch.

* :func:`ensure_prometheus` finds ``prometheus`` and ``promtool``, installing the Debian
  package (``apt-get install -y prometheus``) when they are missing; it raises
  :class:`PrometheusUnavailable` (tests skip with the reason) if that fails.
* :class:`PromServer` writes a config, starts the server on ``127.0.0.1:<free port>`` with
  a long retention (backfilled history must survive), waits until it is ready, and stops
  it by the PID it started (``start_new_session`` makes that PID the server itself, not a
  short-lived ``setsid``). :func:`backfill` runs ``promtool tsdb create-blocks-from
  openmetrics``.
* :class:`FaultProxy` sits between a client and a real server and misbehaves on purpose:
  ``hang`` (accepts, never answers), ``cut`` (forwards, then cuts the answer short).
* :func:`run_keras_jobs` trains tiny Keras CNNs in a child process with both the JSON-lines
  logger and the Prometheus exporter attached: it writes each job's JSON-lines log and an
  OpenMetrics trace (sampled like scrapes, with jitter) and can serve a job live.

Run ``python tests/prom_server.py keras-jobs --help`` for the child's options.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class PrometheusUnavailable(RuntimeError):
    """prometheus/promtool are missing and could not be installed."""


def ensure_prometheus() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``; installs the Debian package if needed."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if all(found):
        return found  # type: ignore[return-value]
    if not shutil.which("apt-get"):
        raise PrometheusUnavailable("prometheus/promtool not found and no apt-get to install")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        done = subprocess.run(["apt-get", "install", "-y", "prometheus"], env=env,
                              capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PrometheusUnavailable(f"apt-get install -y prometheus failed: {exc}") from None
    found = shutil.which("prometheus"), shutil.which("promtool")
    if done.returncode != 0 or not all(found):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PrometheusUnavailable(
            f"apt-get install -y prometheus failed (exit {done.returncode}): {' | '.join(tail)}")
    return found  # type: ignore[return-value]


@pytest.fixture(scope="session")
def prometheus_bin() -> tuple[str, str]:
    """(prometheus, promtool) paths; skips the tests that need them if they cannot be had."""
    try:
        return ensure_prometheus()
    except PrometheusUnavailable as exc:
        pytest.skip(f"no Prometheus server: {exc}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backfill(promtool: str, openmetrics_text: str, data_dir: Path) -> str:
    """Write ``openmetrics_text`` into TSDB blocks under ``data_dir``; returns promtool's output."""
    data_dir.mkdir(parents=True, exist_ok=True)
    src = data_dir.parent / f"{data_dir.name}-backfill.om"
    src.write_text(openmetrics_text, encoding="utf-8")
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(src),
                           str(data_dir)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {done.stderr or done.stdout}")
    return done.stdout


def make_web_config(workdir: Path, user: str, password: str) -> tuple[Path, Path]:
    """A Prometheus ``--web.config.file`` with TLS (self-signed, 127.0.0.1) and basic auth.

    Returns (web config, CA certificate). Raises PrometheusUnavailable when ``openssl`` or a
    bcrypt-capable ``crypt`` is missing.
    """
    import warnings

    openssl = shutil.which("openssl")
    if not openssl:
        raise PrometheusUnavailable("openssl not found (needed for a TLS test certificate)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt

            hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
        except (ImportError, AttributeError, ValueError) as exc:
            raise PrometheusUnavailable(f"no bcrypt for a basic-auth password: {exc}") from None
    if not hashed or not hashed.startswith("$2"):
        raise PrometheusUnavailable("crypt() does not support bcrypt here")
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    done = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise PrometheusUnavailable(f"openssl failed: {done.stderr[-300:]}")
    config = workdir / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  {user}: '{hashed}'\n", encoding="utf-8")
    return config, cert


class PromServer:
    """One Prometheus server on 127.0.0.1, scraping ``targets`` (host:port strings)."""

    def __init__(self, binary: str, workdir: Path, targets: list[str] = (),
                 scrape_interval: str = "1s", port: int | None = None,
                 web_config: str | None = None, scheme: str = "http"):
        self.binary = binary
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.port = port or free_port()
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.web_config = web_config
        self.scheme = scheme
        self.proc: subprocess.Popen | None = None
        self.log = self.workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        cfg = self.workdir / "prometheus.yml"
        lines = ["global:", f"  scrape_interval: {self.scrape_interval}",
                 f"  scrape_timeout: {self.scrape_interval}", "scrape_configs:"]
        if self.targets:
            lines += ["  - job_name: training", "    static_configs:",
                      f"      - targets: [{', '.join(repr(t) for t in self.targets)}]"]
        else:
            lines[-1] = "scrape_configs: []"
        cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return cfg

    def start(self, timeout: float = 60.0) -> PromServer:
        cfg = self._write_config()
        args = [self.binary, f"--config.file={cfg}", f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=3650d", "--log.level=warn"]
        if self.web_config:
            args.append(f"--web.config.file={self.web_config}")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        import ssl

        deadline = time.monotonic() + timeout
        ctx = ssl._create_unverified_context() if self.scheme == "https" else None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.proc.returncode}): "
                                   f"{self.log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2, context=ctx) as r:
                    if r.status == 200:
                        return
            except OSError as exc:  # not listening yet, or 401 behind basic auth
                if getattr(exc, "code", None) == 401:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after {timeout} s")

    def kill(self) -> None:
        """SIGKILL the server (a crash): only the PID this object started."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def scrapes_of(self, target: str) -> int:
        """How many scrapes of ``target`` are stored (from ``up``)."""
        q = urllib.parse.urlencode({"query": f'count_over_time(up{{instance="{target}"}}[1h])'})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=5) as r:
            result = json.load(r)["data"]["result"]
        return int(float(result[0]["value"][1])) if result else 0

    def __enter__(self) -> PromServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class FaultProxy:
    """A TCP proxy to ``127.0.0.1:target_port`` that misbehaves (``mode``).

    ``hang``: accepts connections and never answers. ``cut``: forwards the request and
    relays only the first ``cut_after`` bytes of the answer, then closes the connection.
    """

    def __init__(self, target_port: int, mode: str, cut_after: int = 300):
        if mode not in ("hang", "cut"):
            raise ValueError(mode)
        self.target_port = target_port
        self.mode = mode
        self.cut_after = cut_after
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.sock.close()
        for conn in self._open:
            conn.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            if self.mode == "cut":
                threading.Thread(target=self._cut, args=(conn,), daemon=True).start()

    def _cut(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(("127.0.0.1", self.target_port)) as up:
            conn.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            up.sendall(request.replace(b"Connection: keep-alive", b"Connection: close"))
            sent = 0
            while sent < self.cut_after:
                chunk = up.recv(self.cut_after - sent)
                if not chunk:
                    break
                conn.sendall(chunk)
                sent += len(chunk)


# -- tiny Keras jobs ----------------------------------------------------------------------


def run_keras_jobs(out: Path, batch_sizes: list[int], *, epochs: int = 3, train: int = 1024,
                   valid: int = 256, image: int = 16, interval: float = 0.25,
                   jitter: float = 0.5, serve_port: int | None = None, network: str = "tinycnn",
                   deployment: str = "1x cpu", job_prefix: str = "job", seed: int = 0,
                   timeout: float = 300.0) -> dict:
    """Train one tiny CNN per batch size in a child process (one TensorFlow start-up).

    Writes ``out/<job>.jsonl`` (JSON-lines log) and ``out/trace.om`` (OpenMetrics trace of
    all jobs, sampled every ``interval`` s +- ``jitter`` x interval). With ``serve_port`` the
    exporter also serves ``/metrics`` there and each job waits for a final scrape. Returns
    the child's summary (jobs, their start and end times).
    """
    out.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, str(Path(__file__).resolve()), "keras-jobs", "--out", str(out),
            "--batch-sizes", ",".join(map(str, batch_sizes)), "--epochs", str(epochs),
            "--train", str(train), "--valid", str(valid), "--image", str(image),
            "--interval", str(interval), "--jitter", str(jitter), "--network", network,
            "--deployment", deployment, "--job-prefix", job_prefix, "--seed", str(seed)]
    if serve_port:
        args += ["--serve-port", str(serve_port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"keras jobs failed: {done.stderr[-3000:]}")
    return json.loads((out / "summary.json").read_text())


def start_keras_jobs(out: Path, batch_sizes: list[int], **kw) -> subprocess.Popen:
    """Like :func:`run_keras_jobs` but returns the running child (for live tests)."""
    out.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, str(Path(__file__).resolve()), "keras-jobs", "--out", str(out),
            "--batch-sizes", ",".join(map(str, batch_sizes))]
    for key, value in kw.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)


def _child(opts: argparse.Namespace) -> None:
    import random

    import keras
    import numpy as np

    from jobcast.instrument.jsonl import JobcastLogger
    from jobcast.instrument.prometheus import PromCallback, PromExporter, TraceRecorder

    out = Path(opts.out)
    keras.utils.set_random_seed(opts.seed)
    rng = np.random.default_rng(opts.seed)
    n = opts.train + opts.valid
    x = rng.random((n, opts.image, opts.image, 3), dtype=np.float32)
    y = rng.integers(0, 4, n)
    recorder = TraceRecorder()
    stop = threading.Event()
    jitter_rng = random.Random(opts.seed)

    def sampler() -> None:
        while not stop.is_set():
            recorder.sample()
            gap = opts.interval * (1 + opts.jitter * (2 * jitter_rng.random() - 1))
            stop.wait(max(0.01, gap))

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    summary = {"jobs": []}
    for i, batch in enumerate(int(b) for b in opts.batch_sizes.split(",")):
        job_id = f"{opts.job_prefix}-{i + 1}-bs{batch}"
        model = keras.Sequential([
            keras.Input((opts.image, opts.image, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(4, activation="softmax"),
        ])
        model.compile("sgd", "sparse_categorical_crossentropy")
        exporter = PromExporter(job_id, network=opts.network, deployment=opts.deployment,
                                batch_size=batch)
        if opts.serve_port:
            exporter.serve(opts.serve_port)
        recorder.watch(exporter.registry)
        jsonl = out / f"{job_id}.jsonl"
        jsonl.unlink(missing_ok=True)
        logger = JobcastLogger(jsonl, every_n_steps=5, network=opts.network,
                               deployment=opts.deployment, batch_size=batch,
                               run_id=job_id)
        valid_steps = -(-opts.valid // batch)
        callback = PromCallback(exporter, validation_steps=valid_steps,
                                final_scrape_timeout=10.0)
        start = time.time()
        model.fit(x[:opts.train], y[:opts.train], batch_size=batch, epochs=opts.epochs,
                  validation_data=(x[opts.train:], y[opts.train:]), verbose=0,
                  callbacks=[logger, callback])
        end = time.time()
        recorder.sample()
        recorder.unwatch(exporter.registry)
        exporter.close()
        summary["jobs"].append({"job_id": job_id, "batch_size": batch, "start": start,
                                "end": end, "jsonl": str(jsonl),
                                "job_end": exporter.job_end,
                                "scrapes": exporter.scrapes})
    stop.set()
    thread.join()
    (out / "trace.om").write_text(recorder.openmetrics(), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keras-jobs", help="train tiny CNNs with both loggers attached")
    k.add_argument("--out", required=True)
    k.add_argument("--batch-sizes", default="32")
    k.add_argument("--epochs", type=int, default=3)
    k.add_argument("--train", type=int, default=1024)
    k.add_argument("--valid", type=int, default=256)
    k.add_argument("--image", type=int, default=16)
    k.add_argument("--interval", type=float, default=0.25)
    k.add_argument("--jitter", type=float, default=0.5)
    k.add_argument("--serve-port", type=int, default=0)
    k.add_argument("--network", default="tinycnn")
    k.add_argument("--deployment", default="1x cpu")
    k.add_argument("--job-prefix", default="job")
    k.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    _child(opts)


if __name__ == "__main__":
    main()
