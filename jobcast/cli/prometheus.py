"""``jobcast ingest-prometheus`` and ``jobcast eta``: learn from and watch Prometheus traces.

Rules: ``ingest-prometheus`` checks its limits (``--max-chunks`` requests, ``--max-points``
samples) before it asks for samples, shows a progress bar over the requests on a terminal
(never with ``--json``), and creates a new SQLite store only after the fetch succeeded: a
failed ingest leaves no file behind.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import typer

from jobcast.cli.check import JOB_KEY, job_key_rule
from jobcast.cli.options import (
    AS_JSON,
    BASIC_AUTH,
    BEARER_TOKEN,
    CA_FILE,
    DEPLOYMENT_LABEL,
    INSECURE,
    JOB_LABEL,
    NETWORK_LABEL,
    PREFIX,
    PROMETHEUS_URL,
    RETRIES,
    STORE,
    TIMEOUT,
    metric_names,
    open_prometheus,
    open_store,
    open_store_later,
)
from jobcast.cli.output import emit_json, fail, note, progress_bar

if TYPE_CHECKING:
    from jobcast.service.features.cluster import ClusterIngestResult


def register(app: typer.Typer) -> None:
    """Add the ``ingest-prometheus`` and ``eta`` commands to ``app``."""
    app.command("ingest-prometheus")(ingest_prometheus)
    app.command("eta")(eta)


def _when(t: float | None) -> str:
    if t is None:
        return "?"
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def _span(seconds: float) -> str:
    """``45s``, ``12m05s``, ``3h07m`` (whole seconds below 90 s)."""
    from jobcast.service.features.diagnosis import span

    return span(seconds, tenths_below=0.0)


def ingest_prometheus(
    url: str = PROMETHEUS_URL,
    since: str = typer.Option("7d", "--since",
                              help="Start: a duration ago (2h, 7d), unix seconds or ISO 8601."),
    until: str = typer.Option("now", "--until", help="End (same forms as --since)."),
    selector: list[str] = typer.Option(
        [], "--selector",
        help="Only jobs whose series match LABEL=VALUE (also !=, =~, !~); repeatable. "
             "Values are escaped, not PromQL."),
    chunk: str = typer.Option("6h", "--chunk", help="Time span asked per request."),
    max_chunks: int = typer.Option(
        10_000, "--max-chunks", min=1,
        help="Refuse a range that needs more requests than this (checked before asking)."),
    max_points: int = typer.Option(
        5_000_000, "--max-points", min=1,
        help="Refuse a range whose selected series hold more samples than this (counted "
             "first, then checked while fetching)."),
    stale_after: str = typer.Option(
        "5m", "--stale-after",
        help="A job without samples this long before --until and no end is lost (kept)."),
    store: str | None = STORE,
    timeout: float = TIMEOUT,
    retries: int = RETRIES,
    bearer_token: str | None = BEARER_TOKEN,
    basic_auth: str | None = BASIC_AUTH,
    ca_file: str | None = CA_FILE,
    insecure: bool = INSECURE,
    prefix: str = PREFIX,
    job_label: str = JOB_LABEL,
    network_label: str = NETWORK_LABEL,
    deployment_label: str = DEPLOYMENT_LABEL,
    source: str = typer.Option(
        "jobcast", "--source",
        help="jobcast: the jobcast exporter's series; kubernetes: Jobs from kube-state-metrics "
             "and DCGM (docs/cluster-history.md)."),
    namespace: str | None = typer.Option(None, "--namespace",
                                         help="kubernetes: only this namespace."),
    max_series: int = typer.Option(
        200_000, "--max-series", min=1,
        help="kubernetes: refuse a range holding more series than this (counted first)."),
    traces: bool = typer.Option(True, "--traces/--no-traces",
                                help="kubernetes: store each Job's DCGM trace (bounded)."),
    job_key: str | None = JOB_KEY,
    iterations: int | None = typer.Option(
        None, min=1, help="kubernetes: training iterations each Job had (predict --job then "
        "scales to other --iterations)."),
    epochs: int | None = typer.Option(
        None, min=1, help="kubernetes: training epochs each Job had (as --iterations)."),
    as_json: bool = AS_JSON,
) -> None:
    """Read training jobs' traces from Prometheus into the store (finished jobs, idempotent)."""
    from jobcast.service.features.cluster import (
        ClusterError,
        fetch_jobcast_jobs,
        iso_time,
        parse_duration,
        parse_matcher,
        parse_time,
    )

    try:
        start, end = parse_time(since), parse_time(until)
        chunk_s, stale_s = parse_duration(chunk), parse_duration(stale_after)
        matchers = [parse_matcher(s) for s in selector]
    except ClusterError as exc:
        fail(exc)
    if chunk_s <= 0:
        fail("--chunk must be positive")
    if not end > start:
        fail(f"--since {since} ({iso_time(start)}) is not before --until {until} "
             f"({iso_time(end)})")
    if source not in ("jobcast", "kubernetes"):
        fail(f"--source must be jobcast or kubernetes, got {source!r}")
    names = metric_names(prefix, job_label, network_label, deployment_label)
    client = open_prometheus(url, timeout=timeout, retries=retries, bearer_token=bearer_token,
                             basic_auth=basic_auth, ca_file=ca_file, insecure=insecure)
    opener = open_store_later(store)
    from jobcast.service.features.ingesting import IngestOptionError, length_option

    try:
        length = length_option(iterations, epochs)
    except IngestOptionError as exc:
        fail(exc)
    if length and source != "kubernetes":
        fail("--iterations/--epochs are for --source kubernetes (the jobcast exporter's "
             "series count their own steps)")
    if source == "kubernetes":
        ingest_kubernetes(client, opener, start, end, namespace=namespace,
                          max_series=max_series, max_points=max_points, traces=traces,
                          job_key=job_key_rule(job_key), as_json=as_json, length=length)
    result = _fetch_then_store(opener, "prometheus", as_json, lambda advance: fetch_jobcast_jobs(
        client, start, end, matchers=matchers, names=names, chunk=chunk_s,
        stale_after=stale_s, max_chunks=max_chunks, max_points=max_points,
        progress=lambda done, total: advance(done, total, "requests")))
    if as_json:
        emit_json(result.as_dict())
    else:
        runs = sum(a["runs"] for a in result.added)
        read = result.read
        note("", f"added {len(result.added)} jobs ({runs} runs), {len(result.duplicates)} "
             f"already in the store, {len(result.skipped)} skipped, {len(result.rejected)} "
             f"rejected (read {read['series']} series, {read['samples']} samples in "
             f"{read['requests']} requests)")
        for item in result.skipped:
            note("skipped", f"{item['job_id']}: {item['reason']}")
        for item in result.rejected:
            note("rejected", f"{item['source']}: {item['reason']}", "red")
    raise typer.Exit(1 if result.rejected else 0)


def _fetch_then_store(opener, label: str, as_json: bool, fetch) -> ClusterIngestResult:
    """``fetch(advance)`` (a door fetch, which closes its client; a Prometheus error writes
    nothing) under a progress bar named ``label``, then the fetched jobs stored into the store
    ``opener`` opens only then; an error of either fails the command."""
    from jobcast.service.features.cluster import ClusterFetchError, ClusterStoreError, store_fetched

    try:
        with progress_bar(label, disable=as_json) as advance:
            fetched = fetch(advance)
    except ClusterFetchError as exc:
        fail(exc)
    try:
        return store_fetched(opener, fetched)[1]
    except ClusterStoreError as exc:
        fail(exc)


def ingest_kubernetes(client, opener, start: float, end: float, *, namespace: str | None,
                      max_series: int, max_points: int, traces: bool, job_key: str | None,
                      as_json: bool, length: tuple[str, int] | None = None) -> None:
    """``ingest-prometheus --source kubernetes``: Jobs -> whole-job runs; exits."""
    from jobcast.service.features.cluster import fetch_kubernetes_jobs

    result = _fetch_then_store(opener, "kubernetes", as_json, lambda advance: (
        fetch_kubernetes_jobs(
            client, start, end, namespace=namespace, job_key=job_key, traces=traces,
            max_series=max_series, max_points=max_points, length=length,
            progress=lambda done, total: advance(done, total, "jobs"))))
    if as_json:
        emit_json(result.as_dict())
    else:
        read = result.read
        note("", f"added {len(result.added)} Jobs, {len(result.duplicates)} already in "
                 f"the store, {len(result.skipped)} skipped, {len(result.rejected)} rejected "
                 f"(read {read['series']} series in {read['requests']} requests)")
        for item in result.added:
            note("added", f"{item['job']} ({item['key']}): {item['state']}, "
                          f"{_span(item['seconds'])} on {item['deployment']}")
        for item in result.skipped:
            note("skipped", f"{item['job']}: {item['reason']}")
        for item in result.rejected:
            note("rejected", f"{item['source']}: {item['reason']}", "red")
    raise typer.Exit(1 if result.rejected else 0)


def eta(
    url: str = PROMETHEUS_URL,
    job_id: str = typer.Option(..., "--job-id", help="The job's id label value."),
    iterations: int | None = typer.Option(
        None, "--iterations", min=1, help="Train steps in total (if the job does not say)."),
    test_iterations: int | None = typer.Option(
        None, "--test-iterations", min=0, help="Validation steps in total (if not exported)."),
    lookback: str = typer.Option("30d", "--lookback", help="How far back to look for the job."),
    store: str | None = STORE,
    timeout: float = TIMEOUT,
    retries: int = RETRIES,
    bearer_token: str | None = BEARER_TOKEN,
    basic_auth: str | None = BASIC_AUTH,
    ca_file: str | None = CA_FILE,
    insecure: bool = INSECURE,
    prefix: str = PREFIX,
    job_label: str = JOB_LABEL,
    network_label: str = NETWORK_LABEL,
    deployment_label: str = DEPLOYMENT_LABEL,
    as_json: bool = AS_JSON,
) -> None:
    """When will a running job finish? Its progress in Prometheus plus its fitted model."""
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.features.cluster import ClusterError, PrometheusError, parse_duration
    from jobcast.service.features.eta import EtaError, estimate_eta, fetch_job

    try:
        lookback_s = parse_duration(lookback)
    except ClusterError as exc:
        fail(exc)
    names = metric_names(prefix, job_label, network_label, deployment_label)
    client = open_prometheus(url, timeout=timeout, retries=retries, bearer_token=bearer_token,
                             basic_auth=basic_auth, ca_file=ca_file, insecure=insecure)
    try:
        trace = fetch_job(client, job_id, names, lookback=lookback_s)
    except PrometheusError as exc:
        fail(str(exc))
    finally:
        client.close()
    try:
        forecaster = Forecaster(open_store(store, create=False))
        result = estimate_eta(trace, forecaster, iterations=iterations,
                              test_iterations=test_iterations)
    except EtaError as exc:
        fail(str(exc))
    if as_json:
        emit_json(result)
        return
    label = f"job {result['job_id']} ({result['network']} on {result['deployment']})"
    if result["status"] == "finished":
        note("", f"{label} finished at {_when(result['finished_at'])} after "
                 f"{_span(result['elapsed_seconds'])}")
        return
    train = result["phases"]["train"]
    note("",
         f"{label}: {train['fraction']:.0%} of {train['planned']:.0f} train steps done; "
         f"expected finish {_when(result['finish_time'])} (in "
         f"{_span(result['remaining_seconds'])}, 90% interval {_span(result['remaining_low'])}"
         f" - {_span(result['remaining_high'])}); route {result['route']}"
         + (f", model {result['model']}" if result.get("model") else ""))
    for warning in result["warnings"]:
        note("note", warning)
