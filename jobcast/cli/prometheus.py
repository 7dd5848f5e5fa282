"""``jobcast ingest-prometheus`` and ``jobcast eta``: learn from and watch Prometheus traces."""

from __future__ import annotations

from datetime import datetime

import typer

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
)
from jobcast.cli.output import console, emit_json, fail


def register(app: typer.Typer) -> None:
    """Add the ``ingest-prometheus`` and ``eta`` commands to ``app``."""
    app.command("ingest-prometheus")(ingest_prometheus)
    app.command("eta")(eta)


def _when(t: float | None) -> str:
    if t is None:
        return "?"
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="seconds")


def _span(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 90:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


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
    as_json: bool = AS_JSON,
) -> None:
    """Read training jobs' traces from Prometheus into the store (finished jobs, idempotent)."""
    from ingest.prometheus import (
        PrometheusError,
        ingest_prometheus,
        parse_duration,
        parse_matcher,
        parse_time,
    )

    try:
        start, end = parse_time(since), parse_time(until)
        chunk_s, stale_s = parse_duration(chunk), parse_duration(stale_after)
        matchers = [parse_matcher(s) for s in selector]
    except ValueError as exc:
        fail(str(exc))
    if chunk_s <= 0:
        fail("--chunk must be positive")
    names = metric_names(prefix, job_label, network_label, deployment_label)
    client = open_prometheus(url, timeout=timeout, retries=retries, bearer_token=bearer_token,
                             basic_auth=basic_auth, ca_file=ca_file, insecure=insecure)
    st = open_store(store)
    try:
        report = ingest_prometheus(st, client, start, end, matchers=matchers, names=names,
                                   chunk=chunk_s, stale_after=stale_s)
    except PrometheusError as exc:
        fail(f"{exc} (nothing was written)")
    finally:
        client.close()
    rejected = [{"source": e.source, "reason": e.reason} for e in report.rejected]
    if as_json:
        emit_json({
            "added": report.added, "duplicates": report.duplicates,
            "skipped": report.skipped, "rejected": rejected,
            "read": {"series": report.series, "samples": report.samples,
                     "requests": report.requests},
            "store": st.counts(),
        })
    else:
        runs = sum(a["runs"] for a in report.added)
        console.print(
            f"added {len(report.added)} jobs ({runs} runs), {len(report.duplicates)} already "
            f"in the store, {len(report.skipped)} skipped, {len(report.rejected)} rejected "
            f"(read {report.series} series, {report.samples} samples in {report.requests} "
            "requests)")
        for item in report.skipped:
            console.print(f"skipped {item['job_id']}: {item['reason']}", highlight=False)
        for item in rejected:
            console.print(f"[red]rejected[/red] {item['source']}: {item['reason']}",
                          highlight=False)
    raise typer.Exit(1 if report.rejected else 0)


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
    from ingest.prometheus import PrometheusError, parse_duration
    from jobcast.service.eta import EtaError, estimate_eta, fetch_job
    from jobcast.service.forecaster import Forecaster

    try:
        lookback_s = parse_duration(lookback)
    except ValueError as exc:
        fail(str(exc))
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
        result = estimate_eta(trace, Forecaster(open_store(store)), iterations=iterations,
                              test_iterations=test_iterations)
    except EtaError as exc:
        fail(str(exc))
    if as_json:
        emit_json(result)
        return
    label = f"job {result['job_id']} ({result['network']} on {result['deployment']})"
    if result["status"] == "finished":
        console.print(f"{label} finished at {_when(result['finished_at'])} after "
                      f"{_span(result['elapsed_seconds'])}", highlight=False)
        return
    train = result["phases"]["train"]
    console.print(
        f"{label}: {train['fraction']:.0%} of {train['planned']:.0f} train steps done; "
        f"expected finish {_when(result['finish_time'])} (in "
        f"{_span(result['remaining_seconds'])}, 90% interval {_span(result['remaining_low'])}"
        f" - {_span(result['remaining_high'])}); route {result['route']}"
        + (f", model {result['model']}" if result.get("model") else ""),
        highlight=False)
    for warning in result["warnings"]:
        console.print(f"[yellow]note[/yellow] {warning}", highlight=False)
