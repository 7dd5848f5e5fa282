"""jobcast at a cluster's scale (issue 35, cause 5): the figures of docs/lab/cluster-scale.md.

A year (or three) of one cluster's ``sacct --json`` export, built by replicating a real
job: the Slurm 22.05.9 sample in tests/data/slurm (written by tests/slurm_shapes.py's
:func:`history`, which fills that template), each copy with a fresh JobID and a start a few
minutes after the one before. :data:`NAMES` distinct job names recur with Zipf-like counts
(the biggest holds about 20 % of the rows); each name has its own GPU type (A100, V100 or
H100, 8 GPUs), its own duration (lognormal around a per-name median) and fails or is
cancelled now and then.

For each size N (``--sizes``), each CLI step runs as a child process (``.venv/bin/jobcast``)
and its wall time and peak memory (``ru_maxrss`` of the child, from ``os.wait4``) are
reported, with the growth per row (seconds and bytes per job):

* ``ingest FILE --store sqlite:///...``;
* the same into a fresh store with ``--deployment "1x A100" --override`` (every run names
  8 GPUs, so the flag wins over each and leaves a warning naming the log's line);
* ``fit --store ...``;
* ``predict --system <the biggest job> --store ... --json``.

``--profile fit,predict`` also runs those steps under cProfile at each size where they
succeeded and prints, for the largest, the project's top functions by cumulative time (where
the time goes outside the whole-job model).

Run: ``.venv/bin/python benchmarks/cluster_scale.py --sizes 10000,100000 [--write]``
(``--root DIR`` measures a copy of the repository instead, so edits made while it runs do
not change what is measured; ``--write`` replaces the results section of
docs/lab/cluster-scale.md; raw figures go to benchmarks/results/cluster_scale.json).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lib  # noqa: F401  (first: sys.path holds the repository and tests/)
from lib import REPO as ROOT
from slurm_shapes import OLD, history

JOBCAST = ROOT / ".venv" / "bin" / "jobcast"
DOC = ROOT / "docs" / "lab" / "cluster-scale.md"
RESULTS = ROOT / "benchmarks" / "results" / "cluster_scale.json"
MARK = "<!-- results: written by benchmarks/cluster_scale.py --write -->"
CODE = ROOT  # the code measured (``--root``)
NAMES = 300  # distinct job names
ZIPF = 1.1  # count of the k-th name ~ k ** -ZIPF: the first holds about 20 % of the jobs
GPU_TYPES = ("a100", "v100", "h100")
FIRST_START = 1_672_531_200  # 2023-01-01 UTC
BASES = ("roberta-encoder", "submitit", "resnet50-nightly", "vit-sweep", "sh")


def job_names(count: int = NAMES) -> list[str]:
    """``count`` distinct job names (the real samples' names, numbered)."""
    return [f"{BASES[k % len(BASES)]}-{k:03d}" for k in range(count)]


def name_sequence(n: int, seed: int = 0) -> list[int]:
    """The name index of each of ``n`` jobs: Zipf-like counts (the largest rounded so the
    total is exactly ``n``), in a random order."""
    weights = [(k + 1) ** -ZIPF for k in range(NAMES)]
    total = sum(weights)
    counts = [max(1, int(n * w / total)) for w in weights]
    counts[0] += n - sum(counts)
    seq = [k for k, c in enumerate(counts) for _ in range(c)]
    random.Random(seed).shuffle(seq)
    return seq


def _jobs(n: int, seed: int = 0):
    """The ``n`` jobs (old-shape sacct dicts), one at a time, oldest first."""
    rng = random.Random(seed + 1)
    names = job_names()
    medians = [math.exp(rng.uniform(math.log(600), math.log(36_000))) for _ in names]
    start = FIRST_START
    for i, k in enumerate(name_sequence(n, seed)):
        start += rng.randint(2 * 60, 8 * 60)
        seconds = max(30, int(medians[k] * math.exp(rng.gauss(0, 0.15))))
        state = rng.choices(("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"),
                            (90, 5, 3, 2))[0]
        [job] = history(names[k], [{"start": start, "seconds": seconds, "state": state,
                                    "gpu_type": GPU_TYPES[k % len(GPU_TYPES)]}],
                        first_id=30_000_000 + i)
        yield job


def build_export(n: int, path: Path, seed: int = 0) -> dict:
    """Write a ``sacct --json`` document of ``n`` jobs to ``path`` (as sacct indents it),
    streamed job by job; returns its shape (bytes, lines, biggest job and its count)."""
    doc = json.loads(OLD.read_text())
    doc["jobs"] = ["@JOBS@"]
    head, tail = json.dumps(doc, indent=2).split('"@JOBS@"')
    with path.open("w") as out:
        out.write(head)
        for i, job in enumerate(_jobs(n, seed)):
            out.write(",\n    " if i else "")
            out.write(json.dumps(job, indent=2).replace("\n", "\n    "))
        out.write(tail)
    seq = name_sequence(n, seed)
    top = max(set(seq), key=seq.count)
    with path.open("rb") as handle:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    return {"jobs": n, "bytes": path.stat().st_size, "lines": lines + 1,
            "biggest": job_names()[top], "biggest_jobs": seq.count(top)}


def child_env() -> dict[str, str]:
    """The children's environment: the code under ``--root`` (this checkout by default)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if CODE != ROOT:
        env["PYTHONPATH"] = str(CODE)
    return env


def timed(args: list[str], timeout: float) -> dict:
    """Run ``jobcast ARGS`` as a child: wall seconds, peak resident bytes, exit code, and
    the tail of its output."""
    env = child_env()
    begin = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([str(JOBCAST), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
        deadline = begin + timeout
        status, usage = 0, None
        while usage is None:
            pid, status, usage_ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                usage = usage_
            elif time.perf_counter() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                status = -1
            else:
                time.sleep(0.05)
        wall = time.perf_counter() - begin
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    code = -1 if status == -1 else os.waitstatus_to_exitcode(status)
    return {"args": args, "seconds": round(wall, 2), "peak_bytes": usage.ru_maxrss * 1024,
            "exit": code, "timed_out": status == -1, "tail": text[-600:], "output": text}


PROFILE = """
import cProfile, io, pstats, sys
sys.argv = ["jobcast", *sys.argv[1:]]
from jobcast.cli.app import main
profile = cProfile.Profile()
try:
    profile.runcall(main)
except SystemExit:
    pass
out = io.StringIO()
stats = pstats.Stats(profile, stream=out).sort_stats("cumulative")
stats.print_stats(r"(jobcast/service|models|ingest|fleet|layerwise)/[a-z_/]+[.]py", TOP)
sys.stderr.write(out.getvalue())
"""


def profile_step(args: list[str], top: int = 12) -> str:
    """``jobcast ARGS`` under cProfile in a child: its top functions by cumulative time
    (the project's own: the CLI's wrappers left out)."""
    code = PROFILE.replace("TOP", str(top))
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=child_env(), cwd=tempfile.gettempdir(), check=False)
    text = done.stderr
    start = text.find("   ncalls")
    return text[start:] if start >= 0 else text[-3000:]


def steps(export: Path, folder: Path, biggest: str) -> dict[str, list[str]]:
    """The CLI steps of one size: name -> jobcast arguments."""
    store = f"sqlite:///{folder / 'jobs.db'}"
    override = f"sqlite:///{folder / 'override.db'}"
    return {"ingest": ["ingest", str(export), "--store", store],
            "ingest --override": ["ingest", str(export), "--store", override,
                                  "--deployment", "1x A100", "--override"],
            "fit": ["fit", "--store", store],
            "predict --system": ["predict", "--system", biggest, "--store", store, "--json"]}


def measure(n: int, timeout: float, profile: tuple[str, ...] = ()) -> dict:
    """Build the export of ``n`` jobs and time each step (module doc)."""
    with tempfile.TemporaryDirectory(prefix="cluster-scale-") as tmp:
        folder = Path(tmp)
        begin = time.perf_counter()
        shape = build_export(n, folder / "sacct.json")
        shape["build_seconds"] = round(time.perf_counter() - begin, 1)
        print(f"N={n}: export {shape['bytes'] / 1e6:.0f} MB, {shape['lines']:,} lines, "
              f"biggest job {shape['biggest']} ({shape['biggest_jobs']:,} runs)", flush=True)
        results = {}
        for name, args in steps(folder / "sacct.json", folder, shape["biggest"]).items():
            r = results[name] = timed(args, timeout)
            output = r.pop("output")
            print(f"  {name}: {r['seconds']:.1f} s, {r['peak_bytes'] / 2**20:.0f} MiB, exit "
                  f"{r['exit']}{' (timed out)' if r['timed_out'] else ''}", flush=True)
            if name == "predict --system" and r["exit"] == 0:
                answer = json.loads(output)
                r["answer"] = {k: answer.get(k) for k in ("seconds", "low", "high", "chosen",
                                                          "backtest")}
        out: dict = {"n": n, "export": shape, "steps": results, "profiles": {}}
        for name, args in steps(folder / "sacct.json", folder, shape["biggest"]).items():
            if name.split()[0] in profile and results[name]["exit"] == 0:
                out["profiles"][name] = profile_step(args)
        return out


def growth(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per step, seconds and bytes per added job between the smallest and the largest size
    where it succeeded (a step that succeeded at one size only has none)."""
    out = {}
    for name in rows[0]["steps"]:
        ok = [row for row in rows if row["steps"][name]["exit"] == 0]
        if len(ok) < 2:
            continue
        small, large = ok[0], ok[-1]
        base, step = small["steps"][name], large["steps"][name]
        jobs = large["n"] - small["n"]
        out[name] = {"from": small["n"], "to": large["n"],
                     "us_per_job": 1e6 * (step["seconds"] - base["seconds"]) / jobs,
                     "bytes_per_job": (step["peak_bytes"] - base["peak_bytes"]) / jobs,
                     "time_ratio": step["seconds"] / max(base["seconds"], 1e-9)}
    return out


def markdown(rows: list[dict], command: str) -> str:
    """The results section of docs/lab/cluster-scale.md."""
    lines = [f"Command: `{command}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
             f"{platform.python_version()}; SQLite stores in a temporary folder.", "",
             "| jobs | export | step | wall s | peak MiB | exit |",
             "|---:|---:|---|---:|---:|---:|"]
    for row in rows:
        size = f"{row['export']['bytes'] / 1e6:.0f} MB"
        for name, step in row["steps"].items():
            flag = " (timed out)" if step["timed_out"] else ""
            lines.append(f"| {row['n']:,} | {size} | `{name}` | {step['seconds']:.1f}{flag} | "
                         f"{step['peak_bytes'] / 2**20:.0f} | {step['exit']} |")
    if len(rows) > 1:
        lines += ["", "Growth (between the smallest and the largest size where the step "
                  "succeeded):", "",
                  "| step | jobs | rows x | time x | µs per added job | peak bytes per added job |",
                  "|---|---|---:|---:|---:|---:|"]
        for name, g in growth(rows).items():
            lines.append(f"| `{name}` | {g['from']:,} -> {g['to']:,} | {g['to'] / g['from']:g} | "
                         f"{g['time_ratio']:.1f} | {g['us_per_job']:.0f} | "
                         f"{g['bytes_per_job']:,.0f} |")
    for row in rows:
        answer = row["steps"]["predict --system"].get("answer")
        if answer:
            lines += ["", f"`predict --system {row['export']['biggest']}` at {row['n']:,} jobs "
                      f"({row['export']['biggest_jobs']:,} runs of it): {answer['seconds']:.0f} s "
                      f"({answer['low']:.0f}-{answer['high']:.0f}); chosen: {answer['chosen']}"]
    profiled = {name: row for row in rows for name in row.get("profiles", {})}  # the largest
    for name, row in profiled.items():
        lines += ["", f"`{name}` at {row['n']:,} jobs under cProfile (the project's functions, "
                  "top by cumulative time):", "", "```", row["profiles"][name].rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000",
                        help="comma-separated job counts (default 10000,100000)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds each step may run (default 900)")
    parser.add_argument("--profile", default="",
                        help="steps to profile, e.g. fit,predict (at each size they succeed)")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="measure the code of this copy of the repository with this "
                             "checkout's .venv (default: this checkout)")
    parser.add_argument("--write", action="store_true",
                        help="replace the results section of docs/lab/cluster-scale.md")
    args = parser.parse_args()
    global CODE
    CODE = args.root.resolve()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    profile = tuple(p.strip() for p in args.profile.split(",") if p.strip())
    rows = [measure(n, args.timeout, profile) for n in sizes]
    command = "python benchmarks/cluster_scale.py " + " ".join(sys.argv[1:])
    text = markdown(rows, command)
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(rows, indent=1))
    if args.write:
        doc = DOC.read_text()
        DOC.write_text(doc[:doc.index(MARK) + len(MARK)] + "\n\n" + text)


if __name__ == "__main__":
    main()
