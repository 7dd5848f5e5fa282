"""``jobcast demo``: ingest the bundled sample logs, fit, and forecast a few jobs, offline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from jobcast.cli.output import console, note, progress_bar

if TYPE_CHECKING:
    from jobcast.service.features.ingesting import IngestOptions

SAMPLES = Path(__file__).resolve().parents[2] / "tests" / "data"
UNKNOWN_GPU = "unknown-gpu-x1"


def sample_batches(samples: Path) -> list[tuple[list[str], IngestOptions]]:
    """The bundled logs, each group with what its logs lack (as one would pass on the CLI)."""
    from jobcast.service.features.ingesting import ingest_options

    caffe = samples / "caffe"

    def logs(folder: Path, pattern: str) -> list[str]:
        return [str(p) for p in sorted(folder.glob(pattern))]

    return [
        ([str(samples / "mlperf"), str(samples / "tf_cnn")], ingest_options()),
        (logs(samples / "keras", "*.jsonl"), ingest_options()),
        # ethanhe42's prototxts call ResNet-20 "resnet3-cifar10".
        (logs(caffe, "ethanhe42_*.log"), ingest_options(network="resnet20")),
        # The CaffeNet benchmark logs never print their GPU.
        (logs(caffe, "ducha_*.log"), ingest_options(deployment=UNKNOWN_GPU)),
    ]


IMAGENET_TRAIN, IMAGENET_VAL = 1_281_167, 50_000


def _demo_jobs(models) -> list:
    """Jobs worth showing: every fitted ResNet-50 deployment, CaffeNet at an unseen batch, VGG16."""
    from jobcast.service.engine.request import JobRequest

    jobs = []
    seen = set()
    for m in sorted(models, key=lambda m: m.deployment):
        if m.phase != "train" or m.network != "resnet50" or m.deployment in seen:
            continue
        seen.add(m.deployment)
        batch = int(m.estimator.batch_range_[1])
        jobs.append(
            JobRequest(
                network="resnet50",
                deployment=m.deployment,
                batch_size=batch,
                epochs=40,
                dataset_size=IMAGENET_TRAIN,
                eval_every=4 if _has_test(models, m) else None,
                eval_size=IMAGENET_VAL,
            )
        )
    for m in models:
        if m.network == "caffenet" and m.phase == "train":
            jobs.append(
                JobRequest(
                    network="caffenet", deployment=m.deployment, batch_size=256, iterations=10_000
                )
            )
            break
    jobs.append(JobRequest(network="vgg16", device="V100", batch_size=32, iterations=1000))
    jobs.append(JobRequest(network="resnet50", device="T4", batch_size=64, iterations=1000))
    return jobs


def _has_test(models, train) -> bool:
    return any(
        m.phase == "test" and m.network == train.network and m.deployment == train.deployment
        for m in models
    )


def _jobcast() -> str:
    """How to run jobcast again from this shell: the venv's ``jobcast`` (``.venv/bin/jobcast``
    relative to the working directory where it lies under it), else ``jobcast``."""
    import os
    import sys

    script = Path(sys.executable).parent / "jobcast"
    if not script.exists():
        return "jobcast"
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else str(script)


def _upgrade_own_store(url: str) -> None:
    """The demo's own store, left by an older jobcast, migrated to this one's schema (a
    user's store is never migrated implicitly; this one is the demo's scratch)."""
    from jobcast.service.features.stores import store_status, upgrade_store

    if store_status(url).status == "outdated":
        done = upgrade_store(url)
        note("", f"the demo's store was at schema {done.before}: upgraded to {done.after}")


def run_demo(workdir: Path, samples: Path = SAMPLES) -> int:
    """Ingest the sample logs into ``workdir/jobcast.db``, fit, forecast a few jobs; returns
    the exit code (1: a file rejected or a job not forecast, 2: no samples)."""
    from jobcast.cli.views import forecasts_table, models_payload, models_table
    from jobcast.service.engine.fitting import fit_store_all
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.features.ingesting import IngestResult, ingest
    from jobcast.service.features.stores import open_store

    workdir.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{workdir / 'jobcast.db'}"
    _upgrade_own_store(url)
    store = open_store(url)
    if not (samples / "mlperf").is_dir():
        note("error:", f"no sample logs under {samples}", "red", err=True)
        return 2
    console.rule("1. ingest the bundled real training logs")
    t0 = time.perf_counter()
    report = IngestResult()
    with progress_bar("ingest") as advance:
        for paths, overrides in sample_batches(samples):
            part = ingest(store, paths, overrides, workers=1, progress=advance)
            report.added += part.added
            report.duplicates += part.duplicates
            report.rejected += part.rejected
    counts = store.counts()
    console.print(
        f"{len(report.added)} files added, {len(report.duplicates)} already stored, "
        f"{len(report.rejected)} rejected; store holds {counts['runs']} runs, "
        f"{counts['segments']} phase segments ({time.perf_counter() - t0:.1f} s)"
    )
    for err in report.rejected:
        note("rejected", str(err), "red")

    console.rule("2. fit end-to-end models, and backtest which candidate answer to trust")
    outcome = fit_store_all(store)
    models = outcome.report.models
    console.print(models_table(models_payload(models)))
    if outcome.backtest.rows:
        kinds = ", ".join(f"{k} {v['mape']:.2g} %" for k, v in
                          sorted(outcome.backtest.kinds.items(), key=lambda kv: kv[1]["mape"]))
        console.print(f"backtest of {outcome.backtest.systems} systems' later runs "
                      f"({outcome.backtest.rows} forecasts), mean error by candidate: {kinds}")

    console.rule("3. forecast jobs (each route proposes; the backtest picks; layerwise "
                 "where there is no history)")
    forecaster = Forecaster(store)
    results = [forecaster.forecast(job).to_dict() for job in _demo_jobs(models)]
    table: Table = forecasts_table(results)
    console.print(table)
    for r in results:
        for w in r.get("warnings", []):
            note("note", f"{r['job']['network']}: {w}")
    note("", f"store: {store.url}  (try: {_jobcast()} runs --store {store.url}; or "
             "`source .venv/bin/activate` to type just `jobcast`)")
    return 1 if report.rejected or any("error" in r for r in results) else 0
