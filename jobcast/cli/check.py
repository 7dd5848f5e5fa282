"""``jobcast check``: is this job slower than it should be? (rules:
jobcast.service.features.diagnosis).

One of: ``--sacct FILE --job-id ID`` (Slurm), ``--k8s-job NAME --url URL`` (Kubernetes via
Prometheus), ``--log FILE`` (a training log). Traces: ``--trace FILE`` (DCGM-like JSON
lines), or for a Slurm job with ``--url`` its nodes' DCGM series. Exit status: 0 normal (or
faster, or on track so far), 1 slower than ``--threshold``, 2 an error, 3 nothing to compare
with (no forecast, no history).
"""

from __future__ import annotations

import typer

from jobcast.cli.options import (
    AS_JSON,
    BASIC_AUTH,
    BEARER_TOKEN,
    CA_FILE,
    INSECURE,
    RETRIES,
    STORE,
    TIMEOUT,
    open_prometheus,
    open_store,
)
from jobcast.cli.output import emit_json, fail, note

EXIT_SLOW = 1
EXIT_UNKNOWN = 3
JOB_KEY_HELP = ("Identity of whole jobs (Slurm, Kubernetes) for history: REGEX on the name, "
                "name:REGEX or submit:REGEX; the group 'key', else group 1, else the match.")
JOB_KEY = typer.Option(None, "--job-key", help=JOB_KEY_HELP)


def job_key_rule(text: str | None) -> str | None:
    """``--job-key`` checked (a bad expression fails the command), or None."""
    if not text:
        return None
    from jobcast.service.features.cluster import ClusterError
    from jobcast.service.features.cluster import job_key_rule as checked

    try:
        return checked(text)
    except ClusterError as exc:
        fail(exc)


def register(app: typer.Typer) -> None:
    """Add the ``check`` command to ``app``."""
    app.command("check")(check)


def check(
    sacct: str | None = typer.Option(None, "--sacct", help="sacct --json or --parsable2 file "
                                     "holding the Slurm job (with --job-id)."),
    job_id: str | None = typer.Option(None, "--job-id", help="Slurm job id (123, 123_4)."),
    k8s_job: str | None = typer.Option(None, "--k8s-job",
                                       help="Kubernetes Job name (with --url)."),
    namespace: str | None = typer.Option(None, "--namespace", help="Its namespace."),
    log: str | None = typer.Option(None, "--log", help="A training log (any format "
                                   "`jobcast ingest` reads; not stored)."),
    trace: str | None = typer.Option(None, "--trace", help="DCGM-like JSON-lines trace of "
                                     "the job (time + DCGM field names)."),
    url: str | None = typer.Option(None, "--url", envvar="JOBCAST_PROMETHEUS_URL",
                                   help="Prometheus (Kubernetes Jobs; DCGM of Slurm nodes)."),
    job_key: str | None = JOB_KEY,
    deployment: str | None = typer.Option(None, "--deployment",
                                          help="Where a log ran, if it does not say."),
    network: str | None = typer.Option(None, "--network", help="A log's network, if needed."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1,
                                          help="A log's batch size, if it does not say."),
    threshold: float = typer.Option(0.2, "--threshold", min=0.0, help="Slow when more than "
                                    "this share slower than expected (0.2 = 20 %)."),
    lookback: str = typer.Option("30d", "--lookback", help="How far back to find the Job."),
    store: str | None = STORE,
    timeout: float = TIMEOUT,
    retries: int = RETRIES,
    bearer_token: str | None = BEARER_TOKEN,
    basic_auth: str | None = BASIC_AUTH,
    ca_file: str | None = CA_FILE,
    insecure: bool = INSECURE,
    as_json: bool = AS_JSON,
) -> None:
    """Is a job slower than it should be? Compares it with its forecast and its history."""
    from jobcast.service.features import diagnosis_sources as src
    from jobcast.service.features.cluster import ClusterError, PrometheusError, parse_duration
    from jobcast.service.features.diagnosis import CheckError, check_log, check_whole_job

    given = [name for name, value in (("--sacct", sacct), ("--k8s-job", k8s_job),
                                      ("--log", log)) if value]
    if len(given) != 1:
        fail("give one job: --sacct FILE --job-id ID, --k8s-job NAME --url URL, or --log FILE"
             + (f" (got {' and '.join(given)})" if given else ""))
    if sacct and not job_id:
        fail("--sacct needs --job-id")
    if k8s_job and not url:
        fail("--k8s-job needs --url (the Prometheus that scrapes kube-state-metrics)")
    job_key = job_key_rule(job_key)
    try:
        lookback_s = parse_duration(lookback)
    except ClusterError as exc:
        fail(exc)
    client = None
    if url and (k8s_job or sacct):
        client = open_prometheus(url, timeout=timeout, retries=retries,
                                 bearer_token=bearer_token, basic_auth=basic_auth,
                                 ca_file=ca_file, insecure=insecure)
    st = open_store(store, create=False)
    try:
        if log:
            obs, start, end = src.observe_log(log, network=network, deployment=deployment,
                                              batch_size=batch_size, key=job_key)
            if trace:
                src.attach_trace_file(obs, trace, start, end)
            try:
                from jobcast.service.engine.forecaster import Forecaster

                forecaster = Forecaster(st)
            except Exception as exc:  # noqa: BLE001 - whatever failed: compare with the history alone
                forecaster = None
                obs.notes.append(f"the forecaster could not be loaded ({type(exc).__name__}:"
                                 f" {exc}); compared with the history only")
            result = check_log(obs, st, forecaster, threshold=threshold)
        else:
            if sacct:
                obs, job = src.observe_slurm(sacct, str(job_id), rule=job_key)
                if trace:
                    src.attach_trace_file(obs, trace, job.start, job.end)
                elif client is not None:
                    src.attach_slurm_trace(obs, client, job)
            else:
                obs = src.observe_kubernetes(client, str(k8s_job), namespace=namespace,
                                             lookback=lookback_s, rule=job_key)
            result = check_whole_job(obs, st, threshold=threshold)
    except (CheckError, PrometheusError) as exc:
        fail(str(exc))
    finally:
        if client is not None:
            client.close()
    if as_json:
        emit_json(result)
    else:
        note("", result["message"])
        for text in result["notes"]:
            note("note", text)
    code = {"slow": EXIT_SLOW, "unknown": EXIT_UNKNOWN}.get(result["status"], 0)
    raise typer.Exit(code)
