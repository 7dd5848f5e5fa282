"""Options and openers the commands share: each option is defined here once.

Rules:

- A shared option is a typer ``OptionInfo`` used as the parameter's default
  (``store: str | None = STORE``), so its flag, default and help are written once; an option
  whose help depends on the command comes from a factory (``json_option("Print a JSON report.")``).
- Openers turn option values into objects and ``fail`` (exit 2, ``error: ...``) on bad ones.
- Importing this module imports typer and rich only; the openers import what they open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from ingest.credentials import hide_password
from jobcast.cli.output import fail

if TYPE_CHECKING:
    from ingest.prometheus import MetricNames, PrometheusClient
    from ingest.store import Store

STORE_HELP = ("Store URL (any SQLAlchemy URL); default $JOBCAST_STORE, else jobcast.db in the "
              "data directory (`jobcast info`).")


def json_option(text: str = "Print JSON.") -> Any:
    """The ``--json`` flag (off by default); ``text``: its help, saying what it prints."""
    return typer.Option(False, "--json", help=text)


AS_JSON = json_option()

# -- the store and MLflow ---------------------------------------------------------------------

STORE = typer.Option(None, "--store", help=STORE_HELP)
TRACKING_URI = typer.Option(
    None, "--tracking-uri",
    help="MLflow tracking/registry URI; default $MLFLOW_TRACKING_URI, else mlflow.db beside "
         "a SQLite store (else in the data directory).",
)


def open_store(url: str | None, *, create: bool = True) -> Store:
    """The store at ``url`` (``None``: ``$JOBCAST_STORE``, else the default); fails on a bad
    URL or unreachable store.

    ``create=False`` (every command that only uses history: runs, predict, compare, report,
    fit, register, ...) never creates a SQLite file: a default store that does not exist yet
    reads as an empty one (a fresh machine still forecasts from the shipped data), and a named
    one (``--store``, ``$JOBCAST_STORE``) that does not exist fails with exit 2 (a misspelled
    name). ``ingest`` (and set-up commands) create the store on first use."""
    import os

    from ingest.home import sqlite_path
    from ingest.store import Store, store_url

    if not create:
        full = store_url(url)
        path = sqlite_path(full)
        if path is not None and not path.exists():
            if url or os.environ.get("JOBCAST_STORE"):
                where = "--store" if url else "$JOBCAST_STORE"
                fail(f"no store at {path.resolve()}; ingest first (`jobcast ingest LOGS...`) "
                     f"or check {where}")
            return empty_store(full)
    try:
        return Store(url)
    except Exception as exc:  # bad URL, unreachable server, unreadable file
        fail(f"cannot open store {hide_password(url) if url else '(default)'}: {exc}")


def empty_store(url: str) -> Store:
    """An empty store in memory that names itself ``url``: the history of a store that does
    not exist yet, read without creating it."""
    import sqlalchemy as sa
    from sqlalchemy.pool import StaticPool

    from ingest.migrations import ensure_head
    from ingest.store import Store, metadata

    store = Store.__new__(Store)
    store.url = url
    store.engine = sa.create_engine("sqlite://", poolclass=StaticPool,
                                    connect_args={"check_same_thread": False})
    ensure_head(store.engine, metadata, "sqlite://")
    return store


def open_store_later(url: str | None) -> Callable[[], Store]:
    """An opener for a command that may fail before it writes: an existing store (or a
    server) is opened and checked now; a SQLite file that does not exist yet is created only
    when the opener is called, so a failed command leaves no empty file behind. Fails now on a
    bad URL or a missing folder."""
    from pathlib import Path

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from ingest.home import data_home
    from ingest.store import store_url

    full = store_url(url)
    try:
        parsed = make_url(full)
    except ArgumentError as exc:
        fail(f"cannot open store {hide_password(url) if url else '(default)'}: {exc}")
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if not path or path == ":memory:" or path.startswith("file:") or Path(path).exists():
        st = open_store(url)
        return lambda: st
    folder = Path(path).resolve().parent
    if not folder.is_dir() and folder != data_home().resolve():  # the data dir is made
        fail(f"cannot open store {full}: folder {Path(path).resolve().parent} does not exist")
    return lambda: open_store(url)


# -- layerwise forecasts (predict, compare) ---------------------------------------------------

IMAGE_SIZE = typer.Option(None, min=8, help="Layerwise: input image side (default: the "
                          "network's own, e.g. 224, or 299 for Inception).")
PRECISION = typer.Option("fp32", help="Layerwise: fp32, tf32, fp16 or bf16 (mixed precision "
                         "on tensor cores).")
FRAMEWORK = typer.Option("tensorflow", help="Layerwise: tensorflow or pytorch (eager PyTorch's "
                         "per-op costs).")
DATA_PARALLEL = typer.Option(
    None, "--data-parallel", help="Layerwise on N GPUs: how they share a step: auto (default: "
    "pytorch ddp, tensorflow allreduce; replicated when --stack names TensorFlow 1.x), ddp "
    "(all-reduce overlapped with the backward pass: PyTorch DDP, Horovod), allreduce (after the "
    "backward pass: TF2 MirroredStrategy), replicated (TF 1.x variables) or dp (nn.DataParallel).")

# -- Prometheus (ingest-prometheus, eta) ------------------------------------------------------

PROMETHEUS_URL = typer.Option(..., "--url", envvar="JOBCAST_PROMETHEUS_URL",
                              help="Prometheus base URL, e.g. http://prometheus:9090.")
TIMEOUT = typer.Option(30.0, "--timeout", min=0.1, help="Seconds to wait for each answer.")
RETRIES = typer.Option(3, "--retries", min=0,
                       help="Retries of a failed request (refused, timed out, cut, 5xx).")
BEARER_TOKEN = typer.Option(None, "--bearer-token", envvar="JOBCAST_PROMETHEUS_TOKEN",
                            help="Bearer token (or $JOBCAST_PROMETHEUS_TOKEN).")
BASIC_AUTH = typer.Option(
    None, "--basic-auth", envvar="JOBCAST_PROMETHEUS_BASIC_AUTH",
    help="USER:PASSWORD for basic auth (or $JOBCAST_PROMETHEUS_BASIC_AUTH).",
)
CA_FILE = typer.Option(None, "--ca-file", help="PEM CA bundle to verify the server with.")
INSECURE = typer.Option(False, "--insecure", help="Do not verify the server's certificate.")
PREFIX = typer.Option("jobcast", "--prefix", help="Metric name prefix the exporter used.")
JOB_LABEL = typer.Option("job_id", "--job-label", help="Label holding the job id.")
NETWORK_LABEL = typer.Option("network", "--network-label", help="Label holding the network.")
DEPLOYMENT_LABEL = typer.Option("deployment", "--deployment-label",
                                help="Label holding the deployment.")


def open_prometheus(url: str, *, timeout: float, retries: int, bearer_token: str | None,
                    basic_auth: str | None, ca_file: str | None,
                    insecure: bool) -> PrometheusClient:
    """A client for ``url``; fails on a malformed ``--basic-auth`` or a missing ``--ca-file``."""
    from pathlib import Path

    from ingest.prometheus import PrometheusClient, PrometheusError

    auth = None
    if basic_auth:
        user, sep, password = basic_auth.partition(":")
        if not sep or not user:
            fail("--basic-auth must be USER:PASSWORD")
        auth = (user, password)
    if ca_file is not None and not Path(ca_file).is_file():
        fail(f"--ca-file {ca_file}: no such file")
    try:
        return PrometheusClient(url, timeout=timeout, retries=retries,
                                bearer_token=bearer_token, basic_auth=auth,
                                ca_file=ca_file, insecure=insecure)
    except PrometheusError as exc:
        fail(str(exc))


def metric_names(prefix: str, job_label: str, network_label: str,
                 deployment_label: str) -> MetricNames:
    """The exporter's metric and label names, validated; fails on an unusable name."""
    from ingest.prometheus import MetricNames

    try:
        return MetricNames(prefix=prefix, job_label=job_label, network_label=network_label,
                           deployment_label=deployment_label).validate()
    except ValueError as exc:
        fail(str(exc))


# -- the app's own options (jobcast -v, --version) ----------------------------------------------

VERBOSE = typer.Option(False, "--verbose", "-v",
                       help="Show the libraries' own log lines and warnings (MLflow, ...).")


def quiet_libraries(verbose: bool) -> None:
    """Unless ``verbose``: MLflow logs warnings and errors only (its INFO lines about creating
    tables and the like stay out of the output) and the libraries' User-, Future- and
    DeprecationWarnings (hints about inferred schemas, type hints, ...) are not shown;
    jobcast's own warnings, notes and errors are unchanged."""
    import logging
    import os
    import warnings

    if verbose:
        logging.basicConfig(level=logging.INFO)
        return
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when MLflow is imported
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # if it is imported already
    logging.getLogger("alembic").setLevel(logging.WARNING)
    for category in (UserWarning, FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    # jobcast's own warnings still show (a filter added later is checked first)
    warnings.filterwarnings("default", module=r"(jobcast|ingest|models|layerwise|fleet)\b")
