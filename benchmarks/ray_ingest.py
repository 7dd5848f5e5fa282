"""Bulk ingest of a log lake: local (one process) vs Ray (parse in tasks, one writer).

Each repetition ingests the whole lake into a fresh SQLite store, local and Ray interleaved,
and checks that the two stores hold the same runs (``ingest.ray_ingest.stored_runs``) and
the same report. Ray is started once before the repetitions; its start-up is reported apart
and is not in the Ray timings (a long-lived driver or a cluster pays it once).

    .venv/bin/python benchmarks/ray_ingest.py [--logs ../shared/data/logs] [--reps 5] \
        [--num-cpus N] [--files-per-task 8]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lib import REPO

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from ingest.pipeline import IngestReport, discover, ingest_paths
from ingest.ray_ingest import FILES_PER_TASK, ingest_paths_ray, stored_runs
from ingest.store import Store

DEFAULT_LOGS = REPO.parent / "shared" / "data" / "logs"


def summary(report: IngestReport) -> tuple:
    rejected = [(e.source, e.line, e.reason) for e in report.rejected]
    return report.added, report.duplicates, rejected, report.skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--num-cpus", type=int, default=os.cpu_count())
    ap.add_argument("--files-per-task", type=int, default=FILES_PER_TASK)
    args = ap.parse_args()

    import ray

    found, _, _ = discover([str(args.logs)])
    megabytes = sum(p.stat().st_size for _, p in found) / 1e6
    t0 = time.perf_counter()
    ray.init(
        num_cpus=args.num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    startup = time.perf_counter() - t0
    times: dict[str, list[float]] = {"local": [], "ray": []}
    same = True
    report = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(args.reps):
                stores = {name: Store(f"sqlite:///{tmp}/{name}-{rep}.db") for name in times}
                reports = {}
                for name in times:
                    t0 = time.perf_counter()
                    if name == "local":
                        reports[name] = ingest_paths(stores[name], [str(args.logs)])
                    else:
                        reports[name] = ingest_paths_ray(
                            stores[name], [str(args.logs)], files_per_task=args.files_per_task
                        )
                    times[name].append(time.perf_counter() - t0)
                same &= summary(reports["local"]) == summary(reports["ray"])
                same &= stored_runs(stores["local"]) == stored_runs(stores["ray"])
                report = reports["ray"]
    finally:
        ray.shutdown()

    assert report is not None
    runs = sum(n for _, n in report.added)
    print(
        f"{len(found)} files, {megabytes:.2f} MB; {len(report.added)} added ({runs} runs), "
        f"{len(report.rejected)} rejected; {args.reps} interleaved repetitions; "
        f"Ray: {args.num_cpus} CPUs, {args.files_per_task} files per task, "
        f"start-up {startup:.1f} s (not in the timings); {os.cpu_count()} cores here"
    )
    print("| ingest | median s | MB/s (median) | min s | max s |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.3f} | {megabytes / med:.2f} | {min(ts):.3f} | {max(ts):.3f} |")
    print(f"same runs and report in both stores, every repetition: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
