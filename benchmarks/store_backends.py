"""Ingest throughput (MB/s of log files) into SQLite vs PostgreSQL, on the MLPerf sample logs.

Both backends run interleaved in one process (which goes first alternates each repetition),
each repetition into a fresh store: a new SQLite file, or a new database on one private
PostgreSQL server (``jobcast.cli.postgres.LocalPostgres``, 127.0.0.1, durable settings: fsync
on, like SQLite's defaults). Medians over repetitions. Two measures:

- ``ingest``: the whole ``ingest_paths`` (read, hash, parse, write), what ``jobcast ingest`` does;
- ``writes``: the store's writes alone (every file parsed once beforehand, then
  ``write_parsed`` per file, one transaction each), where the backends differ.

    .venv/bin/python benchmarks/store_backends.py [--logs ../shared/data/logs/mlperf] \
        [--reps 5] [--out benchmarks/results/store_backends.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from lib import REPO as ROOT
from lib import SHARED

from ingest.parsers import registered
from ingest.pipeline import IngestOptions, discover, ingest_paths, parse_file, write_parsed
from ingest.store import Store
from jobcast.cli.postgres import LocalPostgres

DEFAULT_LOGS = SHARED / "logs" / "mlperf"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backends:
    """Fresh stores on demand: SQLite files in a temp folder, databases on one server."""

    def __init__(self, tmp: Path, server: LocalPostgres):
        self.tmp, self.server, self.made = tmp, server, []

    def fresh(self, backend: str) -> Store:
        name = f"b_{uuid.uuid4().hex[:10]}"
        if backend == "sqlite":
            return Store(f"sqlite:///{self.tmp / name}.db")
        self.server.create_database(name)
        self.made.append(name)
        return Store(self.server.url(name))


def _ingest(store: Store, logs: Path) -> int:
    report = ingest_paths(store, [str(logs)])
    return sum(n for _, n in report.added)


def _writes(store: Store, parsed) -> int:
    outcomes = [write_parsed(store, p) for p in parsed]
    return sum(int(n) for status, n in outcomes if status == "added")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results"
                    / "store_backends.json")
    args = ap.parse_args()
    files, _, _ = discover([str(args.logs)])
    megabytes = sum(p.stat().st_size for _, p in files) / 1e6
    parsers = registered()
    parsed, rejected = [], 0
    for source, path in files:
        try:
            parsed.append(parse_file(source, path, IngestOptions(), parsers))
        except ValueError:
            rejected += 1
    parsed_mb = sum(p.size for p in parsed) / 1e6

    root = Path(tempfile.mkdtemp(prefix="jobcast-bench-pg-"))  # reachable by `postgres`
    server = LocalPostgres(root, _free_port())
    times: dict[tuple[str, str], list[float]] = {}
    runs: dict[tuple[str, str], set[int]] = {}
    try:
        server.start()
        backends = Backends(root, server)
        for rep in range(args.reps):
            order = ("sqlite", "postgresql") if rep % 2 == 0 else ("postgresql", "sqlite")
            for backend in order:
                for measure in ("ingest", "writes"):
                    store = backends.fresh(backend)
                    t0 = time.perf_counter()
                    n = _ingest(store, args.logs) if measure == "ingest" else \
                        _writes(store, parsed)
                    times.setdefault((backend, measure), []).append(time.perf_counter() - t0)
                    runs.setdefault((backend, measure), set()).add(n)
                    store.engine.dispose()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)

    rows = []
    for (backend, measure), ts in sorted(times.items()):
        mb = megabytes if measure == "ingest" else parsed_mb
        med = statistics.median(ts)
        rows.append({"backend": backend, "measure": measure, "median_s": med,
                     "mb_per_s": mb / med, "min_s": min(ts), "max_s": max(ts),
                     "runs_stored": sorted(runs[(backend, measure)])})
    ratios = {m: statistics.median(times[("postgresql", m)])
              / statistics.median(times[("sqlite", m)]) for m in ("ingest", "writes")}
    result = {"logs": str(args.logs), "files": len(files), "megabytes": megabytes,
              "rejected": rejected, "reps": args.reps, "machine": platform.node(),
              "rows": rows, "postgres_over_sqlite_time": ratios}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{len(files)} files, {megabytes:.2f} MB ({rejected} rejected), {args.reps} "
          "interleaved repetitions, fresh store each")
    print("| backend | measure | median s | MB/s (median) | min s | max s | runs stored |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['backend']} | {r['measure']} | {r['median_s']:.3f} | {r['mb_per_s']:.1f} | "
              f"{r['min_s']:.3f} | {r['max_s']:.3f} | {r['runs_stored']} |")
    for measure, ratio in ratios.items():
        print(f"{measure}: PostgreSQL takes {ratio:.2f}x the SQLite time (goal: <= 2x)")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
