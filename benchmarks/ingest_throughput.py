"""Ingest throughput (MB/s) on the MLPerf sample logs: parse only vs parse + store.

The two variants run interleaved in one process, each repetition on a fresh SQLite store,
and the medians are reported (CPU timings on a shared machine drift between processes).

    .venv/bin/python benchmarks/ingest_throughput.py [--logs ../shared/data/logs/mlperf] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ingest.parsers import Overrides, context_for, detect
from ingest.parsers import registered as parsers
from ingest.pipeline import discover, ingest_paths, read_lines
from ingest.store import Store

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOGS = ROOT.parent / "shared" / "data" / "logs" / "mlperf"


def parse_only(files) -> int:
    modules = parsers()
    runs = 0
    for source, path in files:
        lines = read_lines(path.read_bytes(), source)
        module = detect(lines[:200], modules)
        runs += len(module.parse(lines, context_for(path, source, module, Overrides())))
    return runs


def parse_and_store(folder: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/bench.db")
        report = ingest_paths(store, [str(folder)])
        assert not report.rejected, report.rejected
        return sum(n for _, n in report.added)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    files, _, _ = discover([str(args.logs)])
    megabytes = sum(p.stat().st_size for _, p in files) / 1e6
    times: dict[str, list[float]] = {"parse only": [], "parse + store": []}
    for _ in range(args.reps):
        for name, fn in (
            ("parse only", lambda: parse_only(files)),
            ("parse + store", lambda: parse_and_store(args.logs)),
        ):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(f"{len(files)} files, {megabytes:.2f} MB, {args.reps} interleaved repetitions")
    print("| variant | median s | MB/s (median) | min s | max s |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.3f} | {megabytes / med:.1f} | {min(ts):.3f} | {max(ts):.3f} |")
    ratio = statistics.median(times["parse + store"]) / statistics.median(times["parse only"])
    print(f"store overhead: parse + store takes {ratio:.2f}x the parse-only time")


if __name__ == "__main__":
    main()
