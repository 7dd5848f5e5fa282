"""``jobcast serve``: the registered forecaster over REST, with limits, deadlines and a clean stop.

Rules (numbers measured in ``docs/lab/rest-robustness.md``):

* **Processes.** ``jobcast serve`` is a supervisor: it starts ``--workers`` server processes
  (``python -m jobcast.mlops.serving``), each in its own session, sharing the port
  (``SO_REUSEPORT``). SIGTERM, SIGINT or SIGHUP to it send SIGTERM to every worker's process
  group, wait ``grace_s`` (10 s) and then SIGKILL what is left; a worker also gets SIGTERM
  when its parent dies (Linux ``PR_SET_PDEATHSIG``). When one worker exits, all stop.
* **Ready means warm.** Each worker resolves the model (an alias becomes the version it names;
  all workers must agree), loads it, forecasts a few jobs, and only then listens: ``/ping``,
  ``/health`` and ``/ready`` answer 200 only from a warm worker. TensorFlow and Keras are
  never imported by a worker (the shipped layerwise networks need neither): a job that
  would need them (a network that is not shipped, another image size) is a row error.
* **Requests** (limits, deadline, formats, answers): :mod:`jobcast.mlops.rest_app`; in front
  of it the token check, failed-attempt limits and ``/metrics``: :mod:`jobcast.mlops.gate`.
* **Exposure.** With a token file (:mod:`jobcast.mlops.auth`) every worker checks tokens.
  A host that is not loopback is refused unless the token file holds a token that is not
  revoked, or ``--insecure-no-auth`` is given (then no token is checked and ``serve`` says
  so loudly). ``--tls-cert``/``--tls-key``: HTTPS (the key file must be private, 0600).
  The workers share one ``$PROMETHEUS_MULTIPROC_DIR`` (a temporary folder of the
  supervisor's, removed at the end) so that ``/metrics`` counts all of them.
* The server runs the installed jobcast's code with the registered version's artifacts.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.abc
import ipaddress
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from jobcast.mlops.errors import MlopsError
from jobcast.mlops.gate import AuthLimits
from jobcast.mlops.rest_app import RestApp, ServedModel, ServeLimits

BLOCKED_MODULES = ("tensorflow", "keras", "tf_keras")
GRACE_S = 10.0  # after SIGTERM, the workers' time to finish before SIGKILL


class ServeError(MlopsError, RuntimeError):
    """The server could not start, for a reason the user can act on."""

    kind: ClassVar[str] = "serve"


def model_uri_of(name: str, alias: str | None, version: str | None) -> str:
    """``models:/NAME/VERSION`` when a version is given, else ``models:/NAME@ALIAS``."""
    return f"models:/{name}/{version}" if version else f"models:/{name}@{alias or 'champion'}"


def pinned_model_uri(model_uri: str, tracking_uri: str) -> str:
    """``models:/NAME@ALIAS`` as the version the alias names now (``models:/NAME/VERSION``),
    checked to exist; other URIs as given. Raises :class:`ServeError` naming what is missing."""
    if not model_uri.startswith("models:/"):
        return model_uri
    import mlflow
    from mlflow.exceptions import MlflowException

    from fleet.credentials import hide_password

    ref = model_uri[len("models:/"):]
    name, has_alias, alias = ref.partition("@")
    version = ""
    if not has_alias:
        name, _, version = ref.rpartition("/")
    client = mlflow.MlflowClient(tracking_uri, registry_uri=tracking_uri)
    try:
        if has_alias:
            return f"models:/{name}/{client.get_model_version_by_alias(name, alias).version}"
        client.get_model_version(name, version)
        return model_uri
    except MlflowException as exc:
        what = f"alias {alias!r}" if has_alias else f"version {version}"
        raise ServeError(
            f"registered model {name!r} has no {what} in {hide_password(tracking_uri)} "
            f"({exc.message.splitlines()[0]}); run `jobcast register` first"
        ) from None


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP socket can bind ``host:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class Exposure:
    """Who may ask and how (module rules): ``tokens`` None means no token is checked."""

    tokens: Path | None = None
    limits: AuthLimits = AuthLimits()
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def scheme(self) -> str:
        """``https`` with a TLS certificate, else ``http``."""
        return "https" if self.tls_cert else "http"


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plan_exposure(host: str, tokens: Path, *, insecure_no_auth: bool = False,
                  limits: AuthLimits | None = None, tls_cert: Path | None = None,
                  tls_key: Path | None = None) -> Exposure:
    """The :class:`Exposure` of a server on ``host`` with token file ``tokens`` (module rules);
    :class:`ServeError` when it must not start (unsafe files, an open non-loopback host)."""
    from jobcast.mlops.auth import TokenError, TokenVerifier, check_private

    lim = limits or AuthLimits()
    if (tls_cert is None) != (tls_key is None):
        raise ServeError("give both --tls-cert and --tls-key (or neither)")
    try:
        if tls_key is not None and tls_cert is not None:  # both or neither (checked above)
            check_private(tls_key)
            if not tls_cert.is_file():
                raise ServeError(f"the TLS certificate file {tls_cert} does not exist")
        if insecure_no_auth:
            return Exposure(None, lim, tls_cert, tls_key)
        verifier = TokenVerifier(tokens) if tokens.exists() else None
    except TokenError as exc:
        raise ServeError(str(exc)) from None
    if not is_loopback(host) and (verifier is None or not verifier.active_count()):
        raise ServeError(
            f"refusing to serve on {host} (not loopback) without tokens: {tokens} holds no "
            "token that is not revoked. Create one with `jobcast token create --name NAME` "
            "(or point --tokens at a token file), or pass --insecure-no-auth to serve "
            "anyone who can reach the port")
    return Exposure(tokens if verifier is not None else None, lim, tls_cert, tls_key)


def serve_env(tracking_uri: str | None) -> dict[str, str]:
    """The workers' environment: the caller's, pointed at the tracking/registry URI if given."""
    env = dict(os.environ)
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
        env["MLFLOW_REGISTRY_URI"] = tracking_uri
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def serve_argv(model_uri: str, port: int, host: str = "127.0.0.1", timeout: float = 60,
               limits: ServeLimits | None = None, *, store: str | None = None,
               tracking_uri: str | None = None, reuse_port: bool = False,
               status_fd: int | None = None, exposure: Exposure | None = None) -> list[str]:
    """One worker's command line (``model_uri``: ``models:/NAME@ALIAS`` or ``/VERSION``).
    It names files (token file, TLS), never a secret."""
    lim = limits or ServeLimits(timeout_s=float(timeout))
    exp = exposure or Exposure()
    argv = [sys.executable, "-m", "jobcast.mlops.serving", "--model-uri", model_uri,
            "--host", host, "--port", str(port), "--timeout", str(lim.timeout_s),
            "--max-body-bytes", str(lim.max_body_bytes), "--max-rows", str(lim.max_rows),
            "--max-waiting", str(lim.max_waiting), "--body-timeout", str(lim.body_timeout_s),
            "--max-auth-failures", str(exp.limits.max_failures),
            "--auth-failure-window", str(exp.limits.window_s)]
    for flag, value in (("--store", store), ("--tracking-uri", tracking_uri),
                        ("--tokens", exp.tokens), ("--tls-cert", exp.tls_cert),
                        ("--tls-key", exp.tls_key)):
        if value:
            argv += [flag, str(value)]
    if reuse_port:
        argv.append("--reuse-port")
    if status_fd is not None:
        argv += ["--status-fd", str(status_fd)]
    return argv


# -- the worker: load, warm, serve --------------------------------------------------------


class NotServed(MlopsError, ModuleNotFoundError):
    """A job the server does not forecast because it would load TensorFlow or Keras (module
    rules): that row's ordinary error, not a bug."""

    kind: ClassVar[str] = "not_served"


class _NoTensorFlow(importlib.abc.MetaPathFinder):
    """Refuses TensorFlow and Keras in a worker (module rules)."""

    def find_spec(self, name, path=None, target=None):  # finder protocol
        """No spec for the blocked modules: :class:`NotServed` says which networks are."""
        if name.split(".")[0] in BLOCKED_MODULES:
            from layerwise.zoo import known_networks

            raise NotServed(
                f"jobcast serve does not load {name.split('.')[0]}: its layerwise forecasts "
                f"cover the shipped networks ({', '.join(sorted(known_networks()))}) at their "
                "own image size; forecast others with `jobcast predict`", name=name)
        return None


def load_served_model(model_uri: str, tracking_uri: str) -> ServedModel:
    """Resolve ``model_uri`` to a version, load it with ``mlflow.pyfunc`` and warm it."""
    import mlflow

    shown = warnings.showwarning  # MLflow forces its advice on type hints ("once") at import

    def quiet(message, *args, **kwargs) -> None:
        if "type hint" not in str(message):
            shown(message, *args, **kwargs)

    warnings.showwarning = quiet
    try:
        from jobcast.mlops.pyfunc_model import JobcastForecaster
    finally:
        warnings.showwarning = shown

    start = time.perf_counter()
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    pinned = pinned_model_uri(model_uri, tracking_uri)
    # suppress_warnings: no scan of the installed packages against the model's pins (~2 s)
    model = mlflow.pyfunc.load_model(pinned, suppress_warnings=True).unwrap_python_model()
    if not isinstance(model, JobcastForecaster):
        raise ServeError(f"{pinned} is not a jobcast forecaster ({type(model).__name__})")
    loaded = time.perf_counter()
    rows = model.forecast_rows(warm_up_jobs(model))
    return ServedModel(model, pinned, round(loaded - start, 3),
                       round(time.perf_counter() - loaded, 3), len(rows))


def warm_up_jobs(model) -> list:
    """An end-to-end job of the packaged models and a layerwise job (when a predictor ships)."""
    from jobcast.service.engine.request import JobRequest

    jobs = []
    for m in sorted(model.forecaster.models, key=lambda m: m.model_id):
        if m.phase == "train":
            jobs.append(JobRequest(network=m.network, deployment=m.deployment,
                                   batch_size=int(m.estimator.batch_range_[1]),
                                   iterations=int(m.estimator.iteration_range_[1])))
            break
    jobs.append(JobRequest(network="resnet50", device="V100", batch_size=64, iterations=100))
    return jobs


def _listen(host: str, port: int, reuse_port: bool) -> socket.socket:
    """The listening socket. ``IPPROTO_TCP`` explicitly: asyncio turns Nagle off (TCP_NODELAY)
    only on sockets that say so, and with Nagle on every keep-alive answer waits ~40 ms for
    the client's delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM when the parent dies (a SIGKILLed supervisor leaves no worker)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _report(fd: int | None, message: dict) -> None:
    if fd is None:
        if "error" in message:
            print(f"error: {message['error']}", file=sys.stderr)
        return
    with contextlib.suppress(OSError):
        os.write(fd, (json.dumps(message) + "\n").encode())
        os.close(fd)


def worker_main(argv: list[str] | None = None) -> int:
    """One worker process (``python -m jobcast.mlops.serving``): see the module rules."""
    import uvicorn

    ap = argparse.ArgumentParser(prog="python -m jobcast.mlops.serving")
    ap.add_argument("--model-uri", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--max-body-bytes", type=int, default=ServeLimits.max_body_bytes)
    ap.add_argument("--max-rows", type=int, default=ServeLimits.max_rows)
    ap.add_argument("--max-waiting", type=int, default=ServeLimits.max_waiting)
    ap.add_argument("--body-timeout", type=float, default=ServeLimits.body_timeout_s)
    ap.add_argument("--tokens", type=Path)
    ap.add_argument("--max-auth-failures", type=int, default=AuthLimits.max_failures)
    ap.add_argument("--auth-failure-window", type=float, default=AuthLimits.window_s)
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--store")
    ap.add_argument("--tracking-uri")
    ap.add_argument("--reuse-port", action="store_true")
    ap.add_argument("--status-fd", type=int)
    args = ap.parse_args(argv)
    _die_with_parent()
    sys.meta_path.insert(0, _NoTensorFlow())
    started = time.perf_counter()
    try:
        from jobcast.mlops.auth import TokenError, TokenVerifier
        from jobcast.mlops.tracking import resolve_tracking_uri

        try:
            verifier = TokenVerifier(args.tokens) if args.tokens else None
        except TokenError as exc:
            raise ServeError(str(exc)) from None
        if args.tls_cert:  # a bad certificate or key: one line now, not a traceback later
            import ssl

            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                args.tls_cert, args.tls_key)
        uri = resolve_tracking_uri(args.tracking_uri, args.store)
        served = load_served_model(args.model_uri, uri)
        sock = _listen(args.host, args.port, args.reuse_port)
    except ServeError as exc:
        _report(args.status_fd, {"error": str(exc).splitlines()[0]})
        return 2
    except Exception as exc:  # noqa: BLE001 - any load failure ends in one line, no traceback
        reason = (str(exc).splitlines() or [""])[0][:500]
        _report(args.status_fd, {"error": f"cannot serve {args.model_uri} on "
                                          f"{args.host}:{args.port}: {type(exc).__name__}: "
                                          f"{reason}"})
        return 2
    from jobcast.mlops.gate import AuthGate

    limits = ServeLimits(args.max_body_bytes, args.max_rows, args.timeout, args.max_waiting,
                         args.body_timeout)
    app = RestApp(served, limits)
    gate = AuthGate(app, verifier, AuthLimits(args.max_auth_failures, args.auth_failure_window))
    # proxy_headers off: the client address (failed-attempt limits) is the TCP peer's
    config = uvicorn.Config(gate, log_level="warning", access_log=False, lifespan="on",
                            timeout_keep_alive=5, timeout_graceful_shutdown=5,
                            limit_concurrency=4 * limits.max_waiting + 16, proxy_headers=False,
                            ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            _report(args.status_fd, {"ready": True, "pid": os.getpid(),
                                     "ready_s": round(time.perf_counter() - started, 3),
                                     **served.info()})

        def handle_exit(self, sig, frame) -> None:
            app.stopping.set()  # rows in flight stop at the next row
            super().handle_exit(sig, frame)

    Server(config).run(sockets=[sock])
    return 0


# -- the supervisor: ``jobcast serve`` ------------------------------------------------------


class _Stop(Exception):
    """A signal asked the supervisor to stop."""


def run_server(argv_for: Callable[[str, int], list[str]], model_uri: str, env: dict[str, str],
               workers: int = 1, grace_s: float = GRACE_S,
               on_ready: Callable[[list[dict]], None] | None = None) -> int:
    """Start ``workers`` workers (``argv_for(model_uri, status_fd)``) together, report them
    ready (all on one version), wait; stop them all on a signal or when one exits (module
    rules). Raises :class:`ServeError` when a worker cannot start. Returns 0 after a signal,
    else the exit code of the worker that ended first."""
    procs: list[subprocess.Popen] = []
    metrics_dir = tempfile.mkdtemp(prefix="jobcast-serve-metrics-")
    env = {**env, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}

    def on_signal(*_args) -> None:
        raise _Stop

    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    if threading.current_thread() is not threading.main_thread():
        signals = ()  # only the main thread may take signals; the caller stops us then
    previous = {s: signal.signal(s, on_signal) for s in signals}
    try:
        pipes = []
        for _ in range(workers):  # all at once: each loads and warms on its own
            read_fd, write_fd = os.pipe()
            pipes.append(read_fd)
            try:
                procs.append(subprocess.Popen(argv_for(model_uri, write_fd), env=env,
                                              pass_fds=(write_fd,), start_new_session=True))
            finally:
                os.close(write_fd)
        statuses = [_await_status(fd, proc) for fd, proc in zip(pipes, procs, strict=True)]
        for status in statuses:
            if "error" in status:
                raise ServeError(status["error"])
        pinned = sorted({status["model_uri"] for status in statuses})
        if len(pinned) > 1:
            raise ServeError(f"{model_uri} moved while the workers started (they loaded "
                             f"{', '.join(pinned)}); start the server again")
        if on_ready is not None:
            on_ready(statuses)
        while all(p.poll() is None for p in procs):
            time.sleep(0.2)
        return next(p.returncode for p in procs if p.returncode is not None)
    except _Stop:
        return 0
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut the clean-up
        stop_groups(procs, grace_s)
        shutil.rmtree(metrics_dir, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _await_status(fd: int, proc: subprocess.Popen) -> dict:
    """The worker's one status line; an error when it exits without one."""
    data = b""
    try:
        while b"\n" not in data:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(fd)
    try:
        return json.loads(data.split(b"\n")[0])
    except ValueError:
        code = proc.wait()
        return {"error": f"the server process exited with code {code} before it was ready "
                         "(its output is above)"}


def stop_groups(procs: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM each process's group, wait up to ``grace_s``, SIGKILL the groups left."""
    groups = [p.pid for p in procs]
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for pgid in groups:  # the leader may be gone while a child of it lives on
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for p in procs:
        p.wait()


if __name__ == "__main__":
    raise SystemExit(worker_main())
