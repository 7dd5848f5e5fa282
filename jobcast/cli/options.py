"""Options and openers the commands share: each option is defined here once.

Rules:

- A shared option is a typer ``OptionInfo`` used as the parameter's default
  (``store: str | None = STORE``), so its flag, default and help are written once; an option
  whose help depends on the command comes from a factory (``json_option("Print a JSON report.")``).
- Openers turn option values into objects and ``fail`` (exit 2, ``error: ...``) on bad ones.
- ``--json`` (:func:`json_option`) also switches :mod:`jobcast.cli.output` to JSON mode, so a
  failure prints ``{"error": {...}}`` on stdout.
- A renamed flag keeps its old spelling for one release as a separate hidden option, merged
  with :func:`deprecated_alias` (a warning on stderr; both spellings with different values:
  exit 2).
- Importing this module imports typer and rich only; the openers import what they open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from jobcast.cli.output import fail, note, set_json_mode

if TYPE_CHECKING:
    from jobcast.service.features.cluster import MetricNames, PrometheusClient
    from jobcast.service.features.stores import Store

STORE_HELP = ("Store URL (any SQLAlchemy URL); default $JOBCAST_STORE, else jobcast.db in the "
              "data directory (`jobcast info`).")


def _json_mode(value: bool) -> bool:
    """``--json``'s callback: a failure of this command answers in JSON too (module rules)."""
    set_json_mode(value)
    return value


def json_option(text: str = "Print JSON.") -> Any:
    """The ``--json`` flag (off by default); ``text``: its help, saying what it prints. Given,
    a failure prints ``{"error": {...}}`` on stdout as well (:func:`output.fail`)."""
    return typer.Option(False, "--json", help=text, callback=_json_mode)


def deprecated_alias(new: Any, old: Any, old_flag: str, new_flag: str, *,
                     default: Any = None) -> Any:
    """The value of a renamed flag: ``new`` (the new spelling's value, None when not given)
    or, when only the old spelling was given, ``old`` with ``warning: OLD is deprecated; use
    NEW`` on stderr (stdout stays clean for ``--json``); ``default`` when neither was given.
    Both given with different values fail (exit 2)."""
    if old is None:
        return default if new is None else new
    note("warning:", f"{old_flag} is deprecated; use {new_flag}", err=True)
    if new is not None and new != old:
        fail(f"{old_flag} is the old spelling of {new_flag}; give one of them, not both "
             f"({new_flag} {new!r}, {old_flag} {old!r})", kind="usage")
    return old


def above_zero(value: float | None) -> float | None:
    """A float flag's callback that refuses 0 and below as a usage error (exit 2); its help
    says ``[x>0]`` (typer's own ranges are closed: ``min=0`` would show ``x>=0``)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be greater than 0, got {value:g}")
    return value


AS_JSON = json_option()

# -- the store and MLflow ---------------------------------------------------------------------

STORE = typer.Option(None, "--store", help=STORE_HELP)
TRACKING_URI = typer.Option(
    None, "--tracking-uri",
    help="MLflow tracking/registry URI; default $MLFLOW_TRACKING_URI, else mlflow.db beside "
         "a SQLite store (else in the data directory).",
)


def open_store(url: str | None, *, create: bool = True) -> Store:
    """The store at ``url`` (``None``: ``$JOBCAST_STORE``, else the default); fails (exit 2)
    on a bad URL, an unreachable store or a named store that does not exist.

    ``create=False`` (every command that only uses history: runs, predict, compare, report,
    fit, register, ...) never creates a SQLite file: a default store that does not exist yet
    reads as an empty one (a fresh machine still forecasts from the shipped data), and a named
    one (``--store``, ``$JOBCAST_STORE``) that does not exist fails with exit 2 (a misspelled
    name). ``ingest`` (and set-up commands) create the store on first use. The rules are
    :func:`jobcast.service.features.stores.open_store`'s."""
    from jobcast.service.features import stores

    try:
        return stores.open_store(url, create=create)
    except stores.StoreError as exc:
        fail(exc)


def open_store_later(url: str | None) -> Callable[[], Store]:
    """An opener for a command that may fail before it writes: an existing store (or a
    server) is opened and checked now; a SQLite file that does not exist yet is created only
    when the opener is called, so a failed command leaves no empty file behind. Fails now on a
    bad URL or a missing folder (:func:`jobcast.service.features.stores.open_store_later`)."""
    from jobcast.service.features import stores

    try:
        opener = stores.open_store_later(url)
    except stores.StoreError as exc:
        fail(exc)

    def later() -> Store:
        try:
            return opener()
        except stores.StoreError as exc:
            fail(exc)

    return later


def history_store(url: str | None) -> Store | None:
    """The store a forecast reads history from, None where it certainly holds none, so the
    forecaster builds only the routes that need no history and the command loads neither
    SQLAlchemy nor pandas (:func:`jobcast.service.features.stores.history_store`); fails as
    :func:`open_store` does."""
    from jobcast.service.features import stores

    try:
        return stores.history_store(url)
    except stores.StoreError as exc:
        fail(exc)


# -- layerwise forecasts (predict, compare) ---------------------------------------------------

IMAGE_SIZE = typer.Option(None, min=8, help="Layerwise: input image side (default: the "
                          "network's own, e.g. 224, or 299 for Inception).")


def precision_option(repeat: bool = False, what: str = "") -> Any:
    """``--precision``, the one definition (its choices from :mod:`fleet.precision`): one
    value (``str | None``), or with ``repeat`` a list (repeat the flag); ``what`` ends the
    help with what the command does with it. Values are parsed by the command's library
    (:func:`fleet.precision.parse_precision`), so its spellings (``amp``, ``mixed_float16``)
    work too."""
    from fleet.precision import PRECISIONS

    text = (f"Precision as set in the framework: {', '.join(PRECISIONS)} (fp16/bf16: mixed "
            "precision on tensor cores; fp32-strict: fp32 with TF32 off)"
            + ("; repeat for several" if repeat else "") + (f". {what}" if what else "."))
    return typer.Option(None, "--precision", help=text)


FRAMEWORK = typer.Option("auto", help="auto (default: pytorch, unless --stack, the job's "
                         "history or the network's source says TensorFlow; the answer says "
                         "which and why), pytorch or tensorflow.")
DATA_PARALLEL = typer.Option(
    None, "--data-parallel", help="Layerwise on N GPUs: how they share a step: auto (default: "
    "pytorch ddp, tensorflow allreduce; replicated when --stack names TensorFlow 1.x), ddp "
    "(all-reduce overlapped with the backward pass: PyTorch DDP, Horovod), allreduce (after the "
    "backward pass: TF2 MirroredStrategy), replicated (TF 1.x variables) or dp (nn.DataParallel).")

# -- Ray (ingest, bench) -----------------------------------------------------------------------


def ray_option(what: str = "Work") -> Any:
    """``--ray``: ``what`` (e.g. "Parse") runs in Ray tasks, one writer; see
    :data:`RAY_ADDRESS`."""
    return typer.Option(False, "--ray",
                        help=f"{what} in Ray tasks (local Ray unless --ray-address); one writer.")


RAY_ADDRESS = typer.Option(None, "--ray-address", help="Ray cluster to join (implies --ray), "
                           "e.g. ray://host:10001.")

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
    """A client for ``url``; fails on a malformed ``--basic-auth`` or a missing ``--ca-file``
    (:func:`jobcast.service.features.cluster.prometheus_client`)."""
    from jobcast.service.features.cluster import ClusterError, prometheus_client

    try:
        return prometheus_client(url, timeout=timeout, retries=retries,
                                 bearer_token=bearer_token, basic_auth=basic_auth,
                                 ca_file=ca_file, insecure=insecure)
    except ClusterError as exc:
        fail(exc)


def metric_names(prefix: str, job_label: str, network_label: str,
                 deployment_label: str) -> MetricNames:
    """The exporter's metric and label names, validated; fails on an unusable name
    (:func:`jobcast.service.features.cluster.metric_names`)."""
    from jobcast.service.features.cluster import ClusterError
    from jobcast.service.features.cluster import metric_names as names

    try:
        return names(prefix, job_label, network_label, deployment_label)
    except ClusterError as exc:
        fail(exc)


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
