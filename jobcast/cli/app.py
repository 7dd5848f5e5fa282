"""The ``jobcast`` command line. Heavy imports happen inside the commands that need them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from jobcast.cli import bench as cli_bench
from jobcast.cli import build as cli_build
from jobcast.cli import catalog as cli_catalog
from jobcast.cli import check as cli_check
from jobcast.cli import history as cli_history
from jobcast.cli import layerwise as cli_layerwise
from jobcast.cli import mlops as cli_mlflow
from jobcast.cli import prometheus as cli_prometheus
from jobcast.cli import stack as cli_stack
from jobcast.cli import store as cli_store
from jobcast.cli.options import (
    AS_JSON,
    DATA_PARALLEL,
    FRAMEWORK,
    IMAGE_SIZE,
    RAY_ADDRESS,
    STORE,
    TRACKING_URI,
    VERBOSE,
    above_zero,
    history_store,
    json_option,
    open_store,
    precision_option,
    quiet_libraries,
    ray_option,
)
from jobcast.cli.output import (
    RICH_MARKUP_MODE,
    JsonUsageErrors,
    console,
    emit_json,
    fail,
    note,
    progress_bar,
    set_json_mode,
)

if TYPE_CHECKING:
    pass

app = typer.Typer(
    cls=JsonUsageErrors,
    help="Forecast how long a CNN training job will take, before it runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=RICH_MARKUP_MODE,
)


def _show_version(value: bool) -> None:
    if value:
        from jobcast.cli.store import shown
        from jobcast.service.features.known import jobcast_version
        from jobcast.service.features.stores import data_home, store_url

        note("", f"jobcast {jobcast_version()}; data dir {data_home()}; store "
                 f"{shown(store_url())} (`jobcast info` for more)")
        raise typer.Exit()


@app.callback()
def app_options(
    verbose: bool = VERBOSE,
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                 help="Show the version, the data directory and the store."),
) -> None:
    """Forecast how long a CNN training job will take, before it runs."""
    set_json_mode(False)  # a command's --json sets it again (output.py rules)
    quiet_libraries(verbose)

@app.command()
def ingest(
    paths: list[str] = typer.Argument(..., help="Log files or folders (searched recursively), "
                                      "or mlflow+URI tracking sources."),
    store: str | None = STORE,
    network: str | None = typer.Option(
        None, help="Network name, where the logs lack or misname it."
    ),
    deployment: str | None = typer.Option(
        None,
        help="Deployment key or '8x V100' form, where the logs lack it. A log naming other "
        "accelerators is rejected (see --override).",
    ),
    override: bool = typer.Option(
        False,
        "--override",
        help="Let --deployment win over accelerators a log names (each such run keeps a "
        "warning) instead of rejecting the file.",
    ),
    batch_size: int | None = typer.Option(
        None, min=1, help="Global batch size, where logs lack it."
    ),
    as_json: bool = json_option("Print a JSON report."),
    use_ray: bool = ray_option("Parse"),
    ray_address: str | None = RAY_ADDRESS,
    tag: list[str] | None = typer.Option(
        None, "--tag", help="Variant key=value of every run (repeat), e.g. precision=fp16 or "
        "compiler=xla; wins over what a log or its folder says."),
    system: str | None = typer.Option(
        None, help="The system (machine) every run ran on; wins over what the logs say."),
    workers: int | None = typer.Option(
        None, min=1, help="Parsing processes (default: CPUs, at most 4; 1: in this process)."),
    experiment: list[str] | None = cli_history.EXPERIMENT,
    job_key: str | None = cli_check.JOB_KEY,
    iterations: int | None = typer.Option(
        None, min=1, help="Training iterations each run had, for scheduler records (Slurm, "
        "Kubernetes) that do not know it: predict --job then scales to other --iterations."),
    epochs: int | None = typer.Option(
        None, min=1, help="Training epochs each run had, as --iterations (one of the two)."),
) -> None:
    """Parse training logs into the store (idempotent; each file whole or not at all).

    --deployment fills in logs that name no accelerators; a log that names others is
    rejected with its line and both deployments, unless --override is given. Many files
    share a transaction; several ingests may write to one store at once.
    """
    from fleet.errors import JobcastError
    from jobcast.service.features.ingesting import ingest as run_ingest
    from jobcast.service.features.ingesting import ingest_options

    try:
        options = ingest_options(network=network, deployment=deployment, batch_size=batch_size,
                                 override=override, tags=tag or [], system=system,
                                 job_key=job_key, iterations=iterations, epochs=epochs)
        with progress_bar("ingest", disable=as_json) as advance:
            result = run_ingest(lambda: open_store(store), paths, options, workers=workers,
                                use_ray=use_ray, ray_address=ray_address,
                                experiments=experiment, progress=advance)
    except JobcastError as exc:
        fail(exc)
    if as_json:
        emit_json(result.to_dict())
    else:
        for source, why in result.running:
            note("running", f"{source}: {why}")
        note("", f"added {len(result.added)} files ({sum(n for _, n in result.added)} runs), "
             f"{len(result.duplicates)} already in the store, {len(result.rejected)} rejected, "
             f"{len(result.skipped)} side files skipped")
        for source, number, text in result.warnings:
            note("warning", f"{source} run {number}: {text}")
        for err in result.rejected:
            note("rejected", str(err), "red")
    raise typer.Exit(1 if result.rejected else 0)


@app.command()
def runs(
    store: str | None = STORE,
    network: str | None = typer.Option(None, help="Only runs of this network."),
    deployment: str | None = typer.Option(None, help="Only runs on this deployment."),
    as_json: bool = json_option("Print a JSON list of runs."),
) -> None:
    """List the runs in the store with their system and phase segments."""
    from jobcast.cli.views import runs_empty_hint, runs_payload, runs_table

    st = open_store(store, create=False)
    payload = runs_payload(st, network, deployment)
    if as_json:
        emit_json(payload)
    elif not payload:
        for line in runs_empty_hint(st.url, network, deployment):
            note("", line)
    else:
        console.print(runs_table(payload))


@app.command()
def fit(
    store: str | None = STORE,
    form: str = typer.Option("auto", help="auto, per_sample, per_iteration, iteration_and_sample."),
    tracking_uri: str | None = TRACKING_URI,
    track: bool = typer.Option(True, "--track/--no-track", help="Log the fit as an MLflow run."),
    backtest: bool = typer.Option(
        True, "--backtest/--no-backtest",
        help="Backtest the store (fit on each system's earlier runs, forecast its later ones) "
        "to learn which candidate answer to trust; without it the shipped prior decides."),
    as_json: bool = json_option(
        "Print the fitted models as JSON; keys that could not be fitted are entries with "
        "'error'."
    ),
) -> None:
    """Fit the end-to-end models (one per network x deployment x phase x stack x variant, pooled
    over systems, plus one per system where several share a key), the run summaries, and the
    selector that says which candidate answer to trust, from the store's own backtest.

    A key that cannot be fitted is reported with its reason and the others are fitted
    (exit 0); the command fails only when no model could be fitted.
    """
    from collections import Counter

    from fleet.errors import BUG_KIND
    from jobcast.cli.views import models_payload, models_table
    from jobcast.service.engine.fitting import fit_store_all
    from jobcast.service.features.stores import StoreError

    st = open_store(store, create=False)
    try:
        with progress_bar("backtest", disable=as_json or not backtest) as advance:
            outcome = fit_store_all(st, form=form, backtest=backtest,
                                    progress=lambda done, total: advance(done, total, ""))
    except (ValueError, StoreError) as exc:
        fail(exc)
    report = outcome.report
    models, failures = report.models, report.failures
    whole = outcome.whole_jobs
    if whole.jobs and not models:  # a store of scheduler history alone
        if as_json:
            emit_json([{"whole_job": whole.as_dict()}])
        else:
            note("whole-job", _whole_job_line(whole))
        return
    if not models and failures:
        shown = "; ".join(str(f) for f in failures[:5])
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        fail(f"no models fitted: {len(failures)} keys could not be fitted: {shown}{more}")
    if not models:
        fail("no models fitted: the store holds no runs (run `jobcast ingest PATH` first)")
    payload = models_payload(models)
    if track:
        from jobcast.mlops.tracking import log_fit_run

        run_id = log_fit_run(st, models, tracking_uri=tracking_uri, form=form)
        note("", f"MLflow run {run_id}", err=True)
    if as_json:
        emit_json(payload + [f.to_dict() for f in failures]
                  + [r.to_dict() for r in report.skipped_elsewhere()]
                  + ([{"whole_job": whole.as_dict()}] if whole.jobs else []))
    else:
        console.print(models_table(payload))
        summary = outcome.backtest
        if summary.rows:
            kinds = ", ".join(f"{k} {v['mape']:.2g} % ({v['forecasts']})"
                              for k, v in sorted(summary.kinds.items(),
                                                 key=lambda kv: kv[1]["mape"]))
            note("backtest", f"{summary.rows} forecasts of {summary.systems} systems' later "
                 f"runs; mean error by candidate kind: {kinds}")
        if whole.jobs:
            note("whole-job", _whole_job_line(whole))
        for message, times in Counter(b.message for b in summary.bugs).items():
            note("backtest bug", message + (f" ({times} asks)" if times > 1 else ""), "red")
        for failure in failures:
            if failure.kind == BUG_KIND:
                note("not fitted, a bug", str(failure), "red")
            else:
                note("not fitted", str(failure))
        for run in report.skipped:
            note("skipped run", str(run))


def _whole_job_line(whole: Any) -> str:
    """One line on the recurring jobs' own backtests (``jobcast fit``)."""
    return (f"{whole.jobs} recurring job{'s' * (whole.jobs != 1)}: {whole.forecasts} of their "
            f"runs forecast from the runs before them, mean error {whole.mape:.3g} % (the mean "
            f"of the runs before: {whole.naive_mape:.3g} %)")


@app.command()
def predict(
    network: str | None = typer.Option(
        None, help="Network: a name (resnet50, a Keras app name), a JSON spec, or your own "
        "PyTorch model as ./mynet.py:build or pkg.module:build(num_classes=10)."),
    deployment: str | None = typer.Option(None, help="Deployment key (see `jobcast runs`)."),
    batch_size: int | None = typer.Option(None, min=1, help="Global batch size."),
    iterations: int | None = typer.Option(None, min=1, help="Steps of the phase."),
    phase: str = typer.Option(
        "job", help="job (the whole run: start-up, training, evaluation, gaps; phases beside "
        "it), train or test."),
    epochs: float | None = typer.Option(None, callback=above_zero,
                                         help="Epochs (with --dataset-size).  [x>0]"),
    dataset_size: int | None = typer.Option(None, min=1, help="Training samples per epoch."),
    eval_every: float | None = typer.Option(None, callback=above_zero,
                                             help="Epochs between evaluations.  [x>0]"),
    eval_size: int | None = typer.Option(None, min=1, help="Samples per evaluation pass."),
    stack: str | None = typer.Option(None, help="Software stack (default: the newest seen)."),
    system: str | None = typer.Option(
        None, "--job", "--system",
        help="The recurring job (or system) by its name, as `jobcast runs` shows it: alone, "
        "the next run from its own history (network, GPUs, batch and length taken from it, "
        "and said); any other flag overrides that part."),
    gpus: int | None = typer.Option(
        None, min=1, help="With --job: the job's own GPU at this many GPUs per node."),
    tag: list[str] | None = typer.Option(
        None, "--tag", help="End-to-end variant key=value (repeat), e.g. compiler=xla."),
    device: str | None = typer.Option(None, help="GPU for a layerwise forecast, e.g. V100."),
    optimizer: str = typer.Option("sgd", help="Layerwise: sgd, adam, ... or none (inference)."),
    image_size: int | None = IMAGE_SIZE,
    precision: str | None = precision_option(
        what="Layerwise default fp32; end-to-end: only history of this precision (unstated: "
        "the history's own)."),
    framework: str = FRAMEWORK,
    data_parallel: str | None = DATA_PARALLEL,
    jobs: Path | None = typer.Option(
        None,
        help="CSV of jobs (network, deployment, batch_size, iterations, phase) for batch mode.",
    ),
    layers: bool = typer.Option(False, "--layers", help="With --json: each layer's "
                                "forecast too (layerwise answers)."),
    store: str | None = STORE,
    as_json: bool = AS_JSON,
) -> None:
    """Forecast seconds (with an interval) for a phase, a job, or a CSV of jobs."""
    from fleet.errors import error_info
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest, JobRequestError, read_jobs_rows

    if phase not in ("job", "train", "test"):
        fail(f"--phase must be job, train or test, got {phase!r}")
    if jobs is not None:
        try:
            requests = read_jobs_rows(jobs)
        except JobRequestError as exc:
            fail(exc)
        fc = Forecaster(history_store(store))
        results = [{"job": {}, "error": str(r), "problem": error_info(r).as_dict()}
                   if isinstance(r, JobRequestError) else fc.forecast(r).to_dict()
                   for r in requests]
        if as_json:
            emit_json(results)
        else:
            from jobcast.cli.views import forecasts_table

            console.print(forecasts_table(results))
        raise typer.Exit(1 if any("error" in r for r in results) else 0)
    if not network and not system:
        fail("give --network, --job NAME (a job in the store) or --jobs FILE.csv")
    st = history_store(store)  # a system's deployment: the forecaster's to find
    flags = dict(network=network, deployment=deployment, batch_size=batch_size,
                 iterations=iterations, phase=phase, epochs=epochs, dataset_size=dataset_size,
                 eval_every=eval_every, eval_size=eval_size, stack=stack, device=device,
                 optimizer=optimizer, image_size=image_size, precision=precision,
                 framework=framework, data_parallel=data_parallel, system=system,
                 gpus=gpus, tags=",".join(tag or []) or None)
    try:
        req = JobRequest.from_mapping(flags)
    except JobRequestError as exc:
        fail(exc)
    result = Forecaster(st).forecast(req).to_dict()
    if not layers:
        result.pop("layers", None)
    if "error" in result:
        fail(result.get("problem") or result["error"])
    if as_json:
        emit_json(result)
    else:
        from jobcast.cli.views import forecast_text

        console.print(forecast_text(result))


@app.command()
def compare(
    network: str = typer.Option(..., help="Network, e.g. resnet50."),
    batch_size: int = typer.Option(..., min=1, help="Global batch size."),
    epochs: float = typer.Option(..., callback=above_zero, help="Epochs to train.  [x>0]"),
    dataset_size: int | None = typer.Option(
        None, min=1, help="Samples per epoch (default: the network's usual dataset)."
    ),
    device: list[str] | None = typer.Option(
        None, "--device", help="GPUs to consider (repeat), e.g. A100 (at each --gpus count) or "
        "'8x A100' (that count); default: every GPU with a price."
    ),
    deployment: list[str] | None = typer.Option(
        None, "--deployment", help="Deployments to rank, as predict takes them: '8x A100' or a "
        "key (repeat; each at its own count)."),
    prices: Path | None = typer.Option(
        None, help="Price table CSV (gpu,usd_per_gpu_hour); default $JOBCAST_PRICES or bundled."
    ),
    optimizer: str = typer.Option("sgd", help="Layerwise: optimizer of the training step."),
    image_size: int | None = IMAGE_SIZE,
    precision: list[str] | None = precision_option(
        repeat=True, what="Default fp32; several are ranked each on its own."),
    framework: str = FRAMEWORK,
    data_parallel: str | None = DATA_PARALLEL,
    gpus: str | None = typer.Option(
        None, help="GPU counts to rank each bare --device at, e.g. 1,2,4,8 (the global batch "
        "is split over them); default 1."),
    include_history: bool = typer.Option(
        False, "--include-history", help="Also rank every deployment the store has history "
        "of for this network (at the precisions asked; history that states none apart)."),
    store: str | None = STORE,
    as_json: bool = AS_JSON,
) -> None:
    """Rank devices x GPU counts for a job by forecast time and by cost, one ranking per
    precision; exit 1 when any row could not be forecast (the others are still shown)."""
    from fleet.data_parallel import parse_data_parallel
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.features.compare import compare as run_compare
    from jobcast.service.features.prices import PriceTableError, load_prices

    try:
        counts = None if gpus is None else [int(v) for v in gpus.split(",") if v.strip()]
    except ValueError:
        fail(f"--gpus must be comma-separated whole numbers, got {gpus!r}")
    try:
        data_parallel = parse_data_parallel(data_parallel) if data_parallel else None
    except ValueError as exc:
        fail(exc)
    try:
        table = load_prices(prices)
        result = run_compare(
            Forecaster(history_store(store)),  # None: no history (no pandas, SQLAlchemy)
            table,
            network,
            batch_size,
            epochs,
            dataset_size,
            devices=[*(device or []), *(deployment or [])] or None,
            optimizer=optimizer,
            image_size=image_size,
            precision=precision or ["fp32"],
            framework=framework,
            data_parallel=data_parallel,
            counts=counts,
            include_history=include_history,
        )
    except (PriceTableError, ValueError) as exc:
        fail(exc)
    if as_json:
        emit_json(result)
    else:
        from jobcast.cli.views import compare_table

        console.print(compare_table(result))
    if result["failed"]:
        note("error:", f"{result['failed']} of {len(result['candidates'])} rows could not be "
             "forecast (shown with their reason)", "red", err=True)
        raise typer.Exit(1)


@app.command()
def report(
    out: Path = typer.Option(Path("jobcast-report"), help="Folder for report.html."),
    store: str | None = STORE,
) -> None:
    """Write a self-contained HTML report of the store and every fitted model."""
    from jobcast.cli.report import write_report
    from jobcast.service.features.report_data import EmptyStoreError

    try:
        path = write_report(open_store(store, create=False), out)
    except EmptyStoreError as exc:
        fail(exc)
    note("", f"wrote {path}")


@app.command()
def demo(
    workdir: Path = typer.Option(
        Path("demo-out"), help="Folder for the demo's store (created; reused if present)."
    ),
) -> None:
    """The main job: ingest the bundled sample logs, fit, forecast a few jobs (offline)."""
    from jobcast.cli.demo import run_demo

    sys.exit(run_demo(workdir))


cli_layerwise.register(app)
cli_prometheus.register(app)
cli_mlflow.register(app)
cli_bench.register(app)
cli_store.register(app)
cli_stack.register(app)
cli_check.register(app)
cli_catalog.register(app)
cli_build.register(app)


REFUSED = ("permission denied", "insufficientprivilege", "readonly database",
           "read-only", "read only")
EX_SOFTWARE = 70  # a bug in jobcast (sysexits.h)


def _refused_write(exc: BaseException) -> str | None:
    """The first line of a store's refusal to write (a read-only role or file), else None."""
    from sqlalchemy.exc import DBAPIError

    if not isinstance(exc, DBAPIError):
        return None
    first = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
    return first if any(word in first.lower() for word in REFUSED) else None


def main() -> None:
    """Run the CLI with its exit codes (``cli/output.py``: 0 ok, 1 partial, 2 a user error,
    70 a bug). A :class:`fleet.errors.JobcastError` that reaches here, or a store that refuses
    a write, is one ``error:`` line (and the JSON error with ``--json``), exit 2; any other
    exception is a bug in jobcast: one line naming it, exit 70, the traceback only with
    ``JOBCAST_DEBUG=1``. Never a bare traceback."""
    import os

    from fleet.errors import JobcastError, bug_info
    from jobcast.cli.output import report_error

    try:
        app()
    except JobcastError as exc:
        report_error(exc)
        sys.exit(2)
    except Exception as exc:  # noqa: BLE001 - the one place a bug becomes exit 70
        if "sqlalchemy" in sys.modules and (first := _refused_write(exc)) is not None:
            report_error(f"the store refused to write ({first}): this command writes; use a "
                         "role or file that may (a team stack: `source D/env`, not "
                         "D/reader.env)", kind="store")
            sys.exit(2)
        if os.environ.get("JOBCAST_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        report_error(bug_info(exc))
        sys.exit(EX_SOFTWARE)


if __name__ == "__main__":
    main()
