"""Ingest throughput: MLPerf result logs (MB/s) and the Lambda tf_cnn_benchmarks tree (files/s).

Variants, run interleaved in one process (CPU timings on a shared machine drift between
processes), each repetition into a fresh SQLite store, medians reported:

* ``per-file commits``: one transaction per file, parsed in this process (``workers=1,
  batch_files=1``: the write path before batching);
* ``batched``: many files per transaction, parsed in this process (``workers=1``);
* ``batched, N workers``: many files per transaction, a pool of N parsing processes (the
  ``jobcast ingest`` default, N = CPUs up to 4).

Besides wall seconds it reports CPU seconds of this process and of the pool's processes (read
from /proc: the forkserver and the workers it reaped), so a loaded machine can be told apart
from a slow ingest. Results go to stdout as Markdown and, with ``--write``, replace the
results section of docs/lab/ingest-throughput.md.

    .venv/bin/python benchmarks/ingest_throughput.py [--mlperf PATH ...] [--lambda PATH ...]
        [--only mlperf|lambda] [--reps 3] [--workers N] [--skip-per-file] [--write]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lib import REPO as ROOT
from lib import SHARED

from ingest.parallel import default_workers
from ingest.parsers import side_file
from ingest.pipeline import discover, ingest_paths
from ingest.store import Store

DEFAULT_MLPERF = SHARED / "logs" / "mlperf"
CORPUS_LAMBDA = Path("/work/corpora/lambda/logs")
DEFAULT_LAMBDA = CORPUS_LAMBDA if CORPUS_LAMBDA.is_dir() else SHARED / "lambda"
DOC = ROOT / "docs" / "lab" / "ingest-throughput.md"
MARK = "<!-- results: written by benchmarks/ingest_throughput.py --write -->"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Timing:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    stored: set[tuple[int, int, int]] = field(default_factory=set)


def _pool_cpu() -> float:
    """CPU seconds of the forkserver and the workers it has reaped (0 without one)."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / TICK  # utime, stime, cutime, cstime


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + _pool_cpu()


def run_variant(paths: list[str], workers: int, batch_files: int | None) -> tuple[float, float,
                                                                               tuple]:
    """One ingest into a fresh store: (wall s, CPU s, (files, runs, segments) stored)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/bench.db")
        cpu0, t0 = _cpu(), time.perf_counter()
        ingest_paths(store, paths, workers=workers, batch_files=batch_files)
        wall = time.perf_counter() - t0
        time.sleep(0.05)  # let the forkserver reap its workers
        cpu = _cpu() - cpu0
        counts = store.counts()
        store.engine.dispose()
    return wall, cpu, (counts["files"], counts["runs"], counts["segments"])


def measure(paths: list[str], variants: dict[str, tuple[int, int | None]], reps: int
            ) -> dict[str, Timing]:
    out = {name: Timing() for name in variants}
    for _ in range(reps):
        for name, (workers, batch) in variants.items():
            wall, cpu, stored = run_variant(paths, workers, batch)
            out[name].wall.append(wall)
            out[name].cpu.append(cpu)
            out[name].stored.add(stored)
    return out


def table(title: str, timings: dict[str, Timing], files: int, megabytes: float) -> list[str]:
    base = statistics.median(next(iter(timings.values())).wall)
    lines = [f"### {title}", "",
             f"{files} log files, {megabytes:.1f} MB; medians of "
             f"{len(next(iter(timings.values())).wall)} interleaved repetitions.", "",
             "| variant | wall s (median) | min-max s | MB/s | files/s | CPU s (median) | "
             "speed-up | stored (files, runs, segments) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, t in timings.items():
        med = statistics.median(t.wall)
        lines.append(
            f"| {name} | {med:.2f} | {min(t.wall):.2f}-{max(t.wall):.2f} | "
            f"{megabytes / med:.1f} | {files / med:.0f} | {statistics.median(t.cpu):.2f} | "
            f"{base / med:.1f}x | {', '.join(str(s) for s in sorted(t.stored))} |")
    return [*lines, ""]


def corpus(path: Path) -> tuple[int, float]:
    found, _, _ = discover([str(path)])
    logs = [p for _, p in found if not side_file(p)]
    return len(logs), sum(p.stat().st_size for p in logs) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlperf", type=Path, action="append",
                    help=f"MLPerf tree (repeatable; default {DEFAULT_MLPERF})")
    ap.add_argument("--lambda", dest="lambda_", type=Path, action="append",
                    help=f"Lambda tree (repeatable; default {DEFAULT_LAMBDA})")
    ap.add_argument("--only", choices=("mlperf", "lambda"), help="measure one kind of tree")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=default_workers())
    ap.add_argument("--skip-per-file", action="store_true",
                    help="leave out the per-file-commit variant (slow on big corpora)")
    ap.add_argument("--write", action="store_true", help=f"write the results into {DOC}")
    args = ap.parse_args()
    variants: dict[str, tuple[int, int | None]] = {}
    if not args.skip_per_file:
        variants["per-file commits (workers=1, batch_files=1)"] = (1, 1)
    variants["batched (workers=1)"] = (1, None)
    variants[f"batched, {args.workers} workers"] = (args.workers, None)
    load = os.getloadavg()
    out = [f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
           f"{platform.python_version()}; load average at start {load[0]:.1f}.", ""]
    trees = [("MLPerf", p) for p in args.mlperf or [DEFAULT_MLPERF] if args.only != "lambda"]
    trees += [("Lambda tf_cnn_benchmarks", p) for p in args.lambda_ or [DEFAULT_LAMBDA]
              if args.only != "mlperf"]
    for title, path in trees:
        if not path.is_dir():
            out += [f"### {title}", "", f"{path} not found: skipped.", ""]
            continue
        files, megabytes = corpus(path)
        timings = measure([str(path)], variants, args.reps)
        out += table(f"{title}: {path}", timings, files, megabytes)
    command = " ".join([".venv/bin/python", "benchmarks/ingest_throughput.py", *sys.argv[1:]])
    out.append(f"Load average at the end {os.getloadavg()[0]:.1f}. Command: `{command}`")
    text = "\n".join(out)
    print(text)
    if args.write:
        head = DOC.read_text().split(MARK)[0] if DOC.exists() else ""
        DOC.write_text(f"{head}{MARK}\n\n{text}\n")


if __name__ == "__main__":
    main()
