"""``jobcast register`` and ``jobcast serve``: the MLflow Model Registry side of jobcast.

MLflow is imported inside the commands only, so ``jobcast --help`` stays light. ``serve``
takes the shared ``--store`` (its folder holds the default ``mlflow.db`` and token file).
``register --calibrate/--no-calibrate`` is the deprecated spelling of
``--scale-calibration/--no-scale-calibration`` (hidden, warns on stderr, for one release).
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from jobcast.cli.options import STORE, TRACKING_URI, deprecated_alias, json_option, open_store
from jobcast.cli.output import emit_json, fail, note
from jobcast.mlops.limits import AuthLimits, ServeLimits

NAME = typer.Option("jobcast-forecaster", "--name", help="Registered model name.")


def register(app: typer.Typer) -> None:
    """Add the ``register``, ``serve`` and ``token`` commands to ``app``."""
    from jobcast.cli import tokens as cli_tokens

    app.command("register")(register_command)
    app.command("serve")(serve_command)
    cli_tokens.register(app)


def register_command(
    store: str | None = STORE,
    name: str = NAME,
    alias: str = typer.Option(
        "champion", "--alias", help="Alias moved to the new version when it is not worse."
    ),
    tracking_uri: str | None = TRACKING_URI,
    predictor: Path | None = typer.Option(
        None, "--predictor", help="Layer predictor folder (default: the shipped one)."
    ),
    scale_calibration: bool | None = typer.Option(
        None, "--scale-calibration/--no-scale-calibration",
        help="Fit layerwise scale factors on the store's runs (imports TensorFlow); on unless "
             "--no-scale-calibration.",
    ),
    calibrate_old: bool | None = typer.Option(None, "--calibrate/--no-calibrate", hidden=True),
    shrinkage: float = typer.Option(
        0.0, "--shrinkage", min=0.0,
        help="Calibration: pull a network's factor towards its hardware's (pseudo-runs).",
    ),
    as_json: bool = json_option("Print a JSON report."),
) -> None:
    """Log the forecaster (end-to-end models + layerwise predictor + calibration), register it."""
    from jobcast.mlops.registry import RegistryError, register_forecaster

    calibrate = deprecated_alias(scale_calibration, calibrate_old, "--calibrate/--no-calibrate",
                                 "--scale-calibration/--no-scale-calibration", default=True)
    st = open_store(store, create=False)
    try:
        result = register_forecaster(
            st, name=name, alias=alias, tracking_uri=tracking_uri, predictor_dir=predictor,
            calibrate=calibrate, shrinkage=shrinkage,
        )
    except (RegistryError, ValueError, OSError) as exc:
        fail(str(exc))
    if as_json:
        emit_json(result.as_dict())
        return
    score = "n/a" if result.validation_mape is None else f"{result.validation_mape:.3g} %"
    moved = "moved to" if result.promoted else "kept on"
    holder = result.version if result.promoted else result.previous_version
    note("", f"registered {result.name} version {result.version} (validation MAPE {score}); "
             f"alias {result.alias!r} {moved} version {holder}: {result.reason}")


def serve_command(
    port: int = typer.Option(5001, "--port", "-p", min=1, max=65535, help="Port to listen on."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Interface to bind (loopback by default; 0.0.0.0 exposes it)."
    ),
    name: str = NAME,
    alias: str = typer.Option("champion", "--alias", help="Serve the version with this alias."),
    version: str | None = typer.Option(None, "--version", help="Serve this version instead."),
    tracking_uri: str | None = TRACKING_URI,
    store: str | None = STORE,
    workers: int = typer.Option(1, "--workers", min=1, max=64, help="Server worker processes."),
    timeout: float = typer.Option(
        60.0, "--timeout", min=0.1, max=86400.0,
        help="Seconds a request may take; its rows stop there (504).",
    ),
    max_body_bytes: int = typer.Option(
        ServeLimits.max_body_bytes, "--max-body-bytes", min=1, max=2**31,
        help="Largest request body; a larger one gets 413 before it is parsed.",
    ),
    max_rows: int = typer.Option(
        ServeLimits.max_rows, "--max-rows", min=1, max=10**6,
        help="Most rows (jobs) in one request; more get 413.",
    ),
    body_timeout: float = typer.Option(
        ServeLimits.body_timeout_s, "--body-timeout", min=0.1, max=86400.0,
        help="Seconds a request's whole body may take to arrive; slower gets 408.",
    ),
    tokens: Path | None = typer.Option(
        None, "--tokens", envvar="JOBCAST_TOKENS",
        help="Token file (default: jobcast-tokens.json in the store's folder). When it exists, "
             "every request but GET /ping and /health needs a bearer token.",
    ),
    insecure_no_auth: bool = typer.Option(
        False, "--insecure-no-auth",
        help="Check no token, even on a host that is not loopback (anyone may ask).",
    ),
    max_auth_failures: int = typer.Option(
        AuthLimits.max_failures, "--max-auth-failures", min=1, max=10**9,
        help="Failed token checks a client may make per --auth-failure-window; then 429.",
    ),
    auth_failure_window: float = typer.Option(
        AuthLimits.window_s, "--auth-failure-window", min=0.001, max=86400.0,
        help="Seconds over which a client's failed attempts refill.",
    ),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="TLS certificate (PEM): HTTPS."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="TLS private key (PEM, 0600)."),
) -> None:
    """Serve the registered forecaster over REST (POST /invocations; GET /ping, /ready, /version,
    /metrics).

    Ready means warm: the model is loaded and has answered before the port is opened.
    SIGTERM or Ctrl-C stops every worker process. With a token file (`jobcast token create`)
    requests need `Authorization: Bearer <token>`; a host that is not loopback needs one.
    """
    from jobcast.mlops.auth import default_token_path
    from jobcast.mlops.serving import (
        ServeError,
        model_uri_of,
        plan_exposure,
        port_is_free,
        run_server,
        serve_argv,
        serve_env,
    )

    if not port_is_free(host, port):
        fail(f"cannot serve on {host}:{port}: the port is in use or the address is not local")
    try:
        exposure = plan_exposure(
            host, tokens or default_token_path(store), insecure_no_auth=insecure_no_auth,
            limits=AuthLimits(max_auth_failures, auth_failure_window), tls_cert=tls_cert,
            tls_key=tls_key)
    except ServeError as exc:
        fail(str(exc))
    if insecure_no_auth:
        note("WARNING:", f"--insecure-no-auth: no token is checked; anyone who can reach "
             f"{host}:{port} can run forecasts and read what the model holds", "bold red",
             err=True)
    limits = ServeLimits(max_body_bytes=max_body_bytes, max_rows=max_rows, timeout_s=timeout,
                         body_timeout_s=body_timeout)
    started = time.monotonic()

    def argv_for(model_uri: str, status_fd: int) -> list[str]:
        return serve_argv(model_uri, port, host, limits=limits, store=store,
                          tracking_uri=tracking_uri, reuse_port=workers > 1,
                          status_fd=status_fd, exposure=exposure)

    def on_ready(statuses: list[dict]) -> None:
        auth = f"tokens from {exposure.tokens}" if exposure.tokens else "no tokens checked"
        note("", f"serving {statuses[0]['model_uri']} on {exposure.scheme}://{host}:{port} "
                 f"({len(statuses)} worker(s), ready in {time.monotonic() - started:.1f} s; "
                 f"{auth}; POST /invocations, GET /ping /ready /version /metrics; Ctrl-C stops)")

    try:
        code = run_server(argv_for, model_uri_of(name, alias, version), serve_env(tracking_uri),
                          workers=workers, on_ready=on_ready)
    except ServeError as exc:
        fail(str(exc))
    raise typer.Exit(code)
