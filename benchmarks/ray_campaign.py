"""A CPU layer campaign of >= 2,000 configurations on Ray, with a killed driver and worker.

One local Ray (``--num-cpus``) is started here. Then:

1. a second process drives the campaign (``run_ray_campaign`` joining this Ray) and is
   SIGKILLed once about half the rows are in the CSV (a pre-empted or crashed driver);
2. this process resumes the campaign on the same file and, a third of the way through the rest,
   SIGKILLs one Ray worker process that is running a chunk (found by its process title,
   ``ray::_run_chunk``): Ray retries that task;
3. the file is checked: one row per configuration, no ``config_id`` twice, exactly the
   campaign's ids; and a rerun times nothing.

Every task also appends the ids it timed to a measurement log, so the script can show that no
configuration already in the file was timed again (only those in flight when something was
killed are timed twice, and only one of their timings is written).

    .venv/bin/python benchmarks/ray_campaign.py [--samples 2400] [--num-cpus 2] \
        [--configs-per-task 16] [--baseline] [--json benchmarks/results/ray_campaign.json]
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from layerwise.bench import TimingPlan, campaign_configs
from layerwise.layers import KINDS, FeatureSpace
from layerwise.ray_campaign import bench_chunk, run_ray_campaign

# Small shapes: a row takes ~5-30 ms on one core, so 2,400 rows fit in a few minutes on 2.
SMALL = FeatureSpace(name="ray-small", batchsize=(1, 16), matsize=(1, 64), log_matsize=True,
                     kernelsize=(1, 5), pool_kernelsize=(1, 3), strides=(1, 2),
                     channels=(1, 128), dense_dim=(1, 1024), log_dense_dim=True,
                     max_flops=1e8, max_bytes=5e7)
PLAN = TimingPlan(warmup=1, reps=3, runs=2)
LAYERS = list(KINDS)
SEED = 0


def logged_task(log: str):
    """A task body that times its chunk row by row, appending each timed id to ``log``."""

    def task(rows: list[dict], device: str, plan: TimingPlan, backend: str) -> list[dict]:
        records = []
        for row in rows:
            records += bench_chunk([row], device, plan, backend)
            with open(log, "a") as handle:  # one short append per row: whole lines
                handle.write(f"{row['config_id']} {os.getpid()} {time.time():.3f}\n")
        return records

    return task


def campaign(out: Path, samples: int, log: str, args: argparse.Namespace, **kw) -> object:
    return run_ray_campaign(out, LAYERS, samples, seed=SEED, space=SMALL, device="cpu",
                            plan=PLAN, backend="torch", configs_per_task=args.configs_per_task,
                            task=logged_task(log), **kw)


def rows_in(path: Path) -> int:
    """Whole data lines in the CSV (a partial last line does not count)."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    return max(0, data.count(b"\n") - 1)


def read_log(path: str) -> list[tuple[str, int, float]]:
    """(config_id, worker pid, unix time) of each timing a task logged."""
    if not Path(path).exists():
        return []
    return [(c, int(p), float(t)) for c, p, t in
            (line.split() for line in Path(path).read_text().splitlines())]


def child_driver(out: Path, log: str, address: str, args: argparse.Namespace) -> subprocess.Popen:
    """Start a second driver process running the campaign on the Ray at ``address``."""
    return subprocess.Popen(
        [sys.executable, __file__, "--drive", address, "--out", str(out), "--log", log,
         "--samples", str(args.samples), "--configs-per-task", str(args.configs_per_task)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read_ids(path: Path) -> list[str]:
    with open(path, newline="") as handle:
        return [row["config_id"] for row in csv.DictReader(handle)]


def running_chunk_workers() -> list[int]:
    """PIDs of Ray worker processes executing a campaign chunk right now."""
    import psutil

    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if cmd.startswith("ray::_run_chunk"):
            pids.append(proc.info["pid"])
    return pids


def drive(args: argparse.Namespace) -> None:
    """Phase 1's child: a driver joining the Ray at ``args.drive``; it is killed mid-run."""
    campaign(args.out, args.samples, args.log, args, address=args.drive)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=2400)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--configs-per-task", type=int, default=16)
    ap.add_argument("--out", type=Path, default=None, help="campaign CSV (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--baseline", action="store_true",
                    help="also time the same campaign uninterrupted (a second file)")
    ap.add_argument("--drive", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--log", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        drive(args)
        return

    import ray

    work = Path(tempfile.mkdtemp(prefix="ray-campaign-"))
    out = args.out or work / "campaign.csv"
    out.unlink(missing_ok=True)
    log1, log2 = str(work / "measured-1.log"), str(work / "measured-2.log")
    t0 = time.perf_counter()
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    startup = time.perf_counter() - t0
    address = ray.get_runtime_context().gcs_address

    figures: dict = {"samples": args.samples, "configs_per_task": args.configs_per_task,
                     "num_cpus": args.num_cpus, "ray_startup_s": round(startup, 1)}
    if args.baseline:  # the same campaign, uninterrupted, by a driver process of its own
        base_out = work / "baseline.csv"
        t0, wall0 = time.perf_counter(), time.time()
        base = child_driver(base_out, str(work / "measured-b.log"), address, args)
        if base.wait() != 0:
            raise SystemExit(f"baseline driver failed (exit {base.returncode})")
        figures["baseline_uninterrupted_s"] = round(time.perf_counter() - t0, 1)
        base_log = read_log(str(work / "measured-b.log"))
        figures["baseline_first_row_after_s"] = round(min(t for _, _, t in base_log) - wall0, 1)
        assert len(read_ids(base_out)) == args.samples

    # 1. a driver killed at about half way
    t1 = time.perf_counter()
    child = child_driver(out, log1, address, args)
    while rows_in(out) < args.samples // 2:
        if child.poll() is not None:
            raise SystemExit(f"phase 1 driver ended early (exit {child.returncode})")
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.wait()
    phase1 = time.perf_counter() - t1
    before = read_ids(out)  # whole rows written by the killed driver

    # 2. resume here; kill one worker a third of the way through the rest
    killed: list[int] = []

    def progress(done: int, total: int, row: dict | None) -> None:
        if row is None or killed or done - len(before) < (total - len(before)) // 3:
            return
        for pid in running_chunk_workers():
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            break

    t2, wall2 = time.perf_counter(), time.time()
    result = campaign(out, args.samples, log2, args, progress=progress)
    phase2 = time.perf_counter() - t2

    # 3. checks
    ids = read_ids(out)
    want = [r["config_id"] for r in campaign_configs(LAYERS, args.samples, SEED, SMALL,
                                                     ("fp32",), "torch")]
    assert len(ids) == args.samples, (len(ids), args.samples)
    assert len(set(ids)) == len(ids), "a config_id appears twice"
    assert set(ids) == set(want)
    assert killed, "no worker was running a chunk when the kill was due"
    assert result.retried_tasks >= 1, "the killed worker's task was not retried"
    log = read_log(log2)
    timed2 = collections.Counter(c for c, _, _ in log)
    again_from_file = set(before) & set(timed2)
    assert not again_from_file, f"{len(again_from_file)} rows already in the file re-timed"
    timed1 = {c for c, _, _ in read_log(log1)}
    lost_at_driver_kill = len(timed1 - set(before))
    twice_in_phase2 = sum(1 for n in timed2.values() if n > 1)
    t3 = time.perf_counter()
    rerun = campaign(out, args.samples, log2, args)
    assert rerun.written == 0 and rerun.tasks == 0
    rerun_s = time.perf_counter() - t3

    statuses = collections.Counter()
    with open(out, newline="") as handle:
        for row in csv.DictReader(handle):
            statuses[(row["layer"], row["status"])] += 1
    figures.update({
        "phase1_driver_killed_after_s": round(phase1, 1),
        "rows_before_kill": len(before),
        "timed_but_unwritten_at_driver_kill": lost_at_driver_kill,
        "phase2_resume_s": round(phase2, 1),
        "phase2_first_row_after_s": round(min(t for _, _, t in log) - wall2, 1),
        "phase2_worker_pids": len({p for _, p, _ in log}),
        "resumed_skipped_existing": result.skipped_existing,
        "phase2_written": result.written, "phase2_tasks": result.tasks,
        "worker_killed_pid": killed[0], "retried_tasks": result.retried_tasks,
        "failed_tasks": result.failed_tasks, "rows_timed_twice_in_phase2": twice_in_phase2,
        "rows_in_file_retimed": len(again_from_file),
        "rows": len(ids), "unique_config_ids": len(set(ids)),
        "ok": sum(n for (_, s), n in statuses.items() if s == "ok"),
        "failed": sum(n for (_, s), n in statuses.items() if s == "failed"),
        "failed_by_kind": {k: n for (k, s), n in sorted(statuses.items()) if s == "failed"},
        "wall_s": round(phase1 + phase2, 1),
        "rows_per_s": round(args.samples / (phase1 + phase2), 1),
        "rerun_s": round(rerun_s, 2), "rerun_written": rerun.written,
    })
    ray.shutdown()
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
