"""Ingest the runs of an MLflow tracking server or store: ``mlflow+http://HOST:PORT``,
``mlflow+https://...``, ``mlflow+sqlite:///path/mlflow.db``, ``mlflow+file:///path/mlruns``
(or ``mlflow+postgresql://...``: any tracking URI MLflow accepts, behind ``mlflow+``).

Rules
-----
* Credentials never travel in the URI: one with a user or password is refused (without
  echoing it); MLflow reads ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD`` (or
  ``MLFLOW_TRACKING_TOKEN``) from the environment itself. Sources and messages show the URI
  without a query or fragment.
* ``experiments``: the names to read (each must exist, else that name is rejected); none:
  every active experiment. Active runs only (deleted ones are not read).
* Each run is one stored "file": source ``mlflow://<uri>/<run_id>`` (``http(s)://`` left out),
  content hash the SHA-256 of ``mlflow-run:<run_id>`` (MLflow run ids are UUIDs, so the same
  run reached through another URI is the same run). Runs already in the store are skipped
  before their histories are fetched (``duplicates``): a second ingest adds nothing and a
  new run is picked up. A run still running is reported in ``running`` and not stored.
* Each run is converted by :func:`ingest.mlflow_run.parse_run`, given the flags and checked as
  a log's run is (:func:`ingest.pipeline.apply_overrides`, :func:`ingest.pipeline.check_run`);
  a run that fails is rejected with its source and reason, the other runs go on. A server
  that cannot be reached, an unknown store or any MLflow error is one rejection naming the
  URI; nothing raises to the caller, and every rejection is recorded in the store (as a
  file ingest records its own).
* MLflow is imported here, inside the functions (heavy), its telemetry off
  (:func:`fleet.telemetry.no_telemetry`, when this module is imported);
  ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` defaults to 2 for this process (MLflow's own default
  waits minutes on a dead server), and a server's port is tried first (5 s). A ``file:``
  store (an old ``mlruns`` folder) is read with ``MLFLOW_ALLOW_FILE_STORE=true`` (MLflow 3
  refuses file stores without it; reading is all this does).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from fleet.telemetry import no_telemetry
from ingest.events import ParseContext, ParseError
from ingest.mlflow_run import FORMAT, Unfinished, parse_run
from ingest.parsers.steps import is_eval

no_telemetry()  # before MLflow is first imported (fleet.telemetry rules)

PREFIX = "mlflow+"
PAGE = 1000
CONNECT_TIMEOUT_S = 5.0
MAX_HISTORY_METRICS = 20  # non-system metrics fetched per run (train-loss-like ones first)


@dataclass
class TrackerReport:
    """What one tracking source gave: as :class:`ingest.pipeline.IngestReport`, plus the runs
    not stored because they are still running (``running``: (source, why))."""

    added: list[tuple[str, int]] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[ParseError] = field(default_factory=list)
    running: list[tuple[str, str]] = field(default_factory=list)


def is_tracking_source(text: str) -> bool:
    """Whether a path argument names an MLflow tracking source (``mlflow+<uri>``)."""
    return str(text).startswith(PREFIX)


def tracking_uri(text: str) -> tuple[str, str]:
    """``(uri for MLflow, uri to show)`` of ``mlflow+<uri>``; ParseError (naming the source
    without credentials) for a URI with credentials or of no known form."""
    uri = str(text)[len(PREFIX):].strip()
    parts = urlsplit(uri)
    if parts.netloc:
        host = f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or "")
        shown = urlunsplit((parts.scheme, host, parts.path, "", ""))
    else:  # sqlite:///path, file:///path: as given, less any query or fragment
        shown = uri.split("#", 1)[0].split("?", 1)[0]
    if parts.username or parts.password:
        raise ParseError("credentials in the tracking URI are refused (they would be shown and "
                         "stored): set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD "
                         "for a tracking server, the database's own (PGPASSWORD, ~/.pgpass) for "
                         "a database store", source=PREFIX + shown)
    if not parts.scheme or (parts.scheme in ("http", "https") and not parts.hostname):
        raise ParseError("not a tracking URI (want mlflow+http://HOST:PORT, "
                         "mlflow+sqlite:///PATH or mlflow+file:///PATH)", source=PREFIX + shown)
    return uri, shown


def run_source(shown: str, run_id: str) -> str:
    """The stored source of one run (module doc)."""
    base = shown.split("://", 1)[1] if shown.startswith(("http://", "https://")) else shown
    return f"mlflow://{base.rstrip('/')}/{run_id}"


def run_hash(run_id: str) -> str:
    """The stored content hash of one run (module doc)."""
    return hashlib.sha256(f"mlflow-run:{run_id}".encode()).hexdigest()


def _reachable(uri: str) -> str | None:
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as exc:
        return f"cannot reach the tracking server ({exc.strerror or exc})"


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _experiments(client, names: list[str], report: TrackerReport, shown: str) -> dict:
    """experiment id -> name, for ``names`` (each must exist) or all active ones."""
    from mlflow.entities import ViewType

    if names:
        found = {}
        for name in names:
            exp = client.get_experiment_by_name(name)
            if exp is None or exp.lifecycle_stage != "active":
                report.rejected.append(ParseError(f"no active experiment named {name!r}",
                                                  source=PREFIX + shown))
            else:
                found[exp.experiment_id] = exp.name
        return found
    found, token = {}, None
    while True:
        page = client.search_experiments(view_type=ViewType.ACTIVE_ONLY, max_results=PAGE,
                                         page_token=token)
        found.update((e.experiment_id, e.name) for e in page)
        token = page.token
        if not token:
            return found


def _runs(client, experiment_ids: list[str]) -> Iterable:
    from mlflow.entities import ViewType

    token = None
    while True:
        page = client.search_runs(experiment_ids, run_view_type=ViewType.ACTIVE_ONLY,
                                  max_results=PAGE, page_token=token,
                                  order_by=["attributes.start_time ASC"])
        yield from page
        token = page.token
        if not token:
            return


def _history_keys(keys: Iterable[str]) -> list[str]:
    """The metrics worth fetching a history of: not system, not evaluation; loss-like first."""
    usable = [k for k in keys if not k.startswith("system/") and not is_eval(k)]
    usable.sort(key=lambda k: ("loss" not in k.lower(), k))
    return usable[:MAX_HISTORY_METRICS]


def snapshot(client, run, experiment: str) -> dict:
    """The JSON-able snapshot :func:`ingest.mlflow_run.parse_run` reads (its module doc)."""
    info, data = run.info, run.data
    metrics = {}
    if info.status not in ("RUNNING", "SCHEDULED"):
        for key in _history_keys(data.metrics):
            history = client.get_metric_history(info.run_id, key)
            metrics[key] = [[m.step, m.timestamp, m.value] for m in history]
    return {
        "run_id": info.run_id, "run_name": info.run_name, "experiment": experiment,
        "status": info.status,
        "start_time": info.start_time / 1000.0 if info.start_time else None,
        "end_time": info.end_time / 1000.0 if info.end_time else None,
        "params": dict(data.params), "tags": dict(data.tags),
        "latest": dict(data.metrics), "metrics": metrics,
    }


def _store_run(store, source: str, snap: dict, overrides, report: TrackerReport) -> None:
    from ingest.parsers import with_overrides
    from ingest.pipeline import apply_overrides, check_run
    from ingest.store import FileRecord

    ctx: ParseContext = with_overrides(ParseContext(), source, overrides)
    try:
        run = parse_run(snap, ctx)
        run = apply_overrides(run, overrides, 0, [], ctx)
        check_run(run, 0)
    except Unfinished as exc:
        report.running.append((source, str(exc)))
        return
    except ParseError as exc:
        report.rejected.append(exc.with_source(source))
        return
    except Exception as exc:  # noqa: BLE001 - one run's bug never stops the others
        report.rejected.append(ParseError(f"run failed to convert: {_short(exc)}",
                                          source=source))
        return
    size = len(json.dumps(snap, default=str))
    record = FileRecord(run_hash(snap["run_id"]), source, FORMAT, size, [run])
    try:
        [file_id] = store.add_files([record])
    except Exception as exc:  # noqa: BLE001 - e.g. meta that JSON cannot hold
        report.rejected.append(ParseError(f"store refused: {_short(exc)}", source=source))
        return
    if file_id is None:
        report.duplicates.append((source, store.has_content(record.content_hash) or source))
    else:
        report.added.append((source, 1))


def ingest_tracking(store, text: str, experiments: list[str] | None = None, overrides=None,
                    progress: Callable[[int, int, str], None] | None = None) -> TrackerReport:
    """Ingest the runs of ``mlflow+<uri>`` into ``store`` (rules in the module doc); the
    rejections are recorded in the store, as a file ingest records its own."""
    report = _ingest_tracking(store, text, experiments, overrides, progress)
    store.add_rejections(report.rejected)
    return report


def _ingest_tracking(store, text: str, experiments: list[str] | None, overrides,
                     progress: Callable[[int, int, str], None] | None) -> TrackerReport:
    from ingest.pipeline import IngestOptions

    overrides = overrides or IngestOptions()
    report = TrackerReport()
    try:
        uri, shown = tracking_uri(text)
    except ParseError as exc:
        report.rejected.append(exc)
        return report
    problem = _reachable(uri)
    if problem:
        report.rejected.append(ParseError(problem, source=PREFIX + shown))
        return report
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if uri.startswith("file:"):  # MLflow 3 keeps file stores readable behind this switch
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        exps = _experiments(client, list(experiments or []), report, shown)
        runs = list(_runs(client, list(exps))) if exps else []
    except Exception as exc:  # noqa: BLE001 - MLflow's own errors, reported as one rejection
        report.rejected.append(ParseError(f"cannot read the tracking store: {_short(exc)}",
                                          source=PREFIX + shown))
        return report
    known = store.known_contents(run_hash(r.info.run_id) for r in runs)
    for index, run in enumerate(runs, start=1):
        source = run_source(shown, run.info.run_id)
        if progress is not None:
            progress(index, len(runs), source)
        first = known.get(run_hash(run.info.run_id))
        if first is not None:
            report.duplicates.append((source, first))
            continue
        try:
            snap = snapshot(client, run, exps.get(run.info.experiment_id, ""))
        except Exception as exc:  # noqa: BLE001 - one run's history failing stops only it
            report.rejected.append(ParseError(f"cannot read the run: {_short(exc)}",
                                              source=source))
            continue
        _store_run(store, source, snap, overrides, report)
    return report
