"""How long the ``jobcast`` commands a new user types take, against ``import numpy``.

Each command runs as a fresh subprocess (what a user waits for: interpreter start, imports,
the answer), in interleaved rounds: every round runs a fresh ``python -c "import numpy"``
reference and each command once, in an order rotated round by round, so a machine's load
hits all of them alike. Reported per command: the median wall seconds over the rounds, the
spread (min-max) and the median of the per-round ratios to that round's numpy reference
(the figure that compares across machines).

Commands (``docs/lab/cli-latency.md`` has the goals and the results):

* ``--help`` and ``gpus``;
* ``predict layerwise``: resnet50 on one A100, 64 per batch, 100 iterations, with no store
  (``$JOBCAST_HOME`` an empty folder, no ``$JOBCAST_STORE``);
* ``predict store``: a job on the demo store's 8x A100 history (the store built once, as
  ``jobcast demo`` builds it, in a temporary folder unless ``--store-dir`` names one);
* ``compare``: resnet50 at 256 per batch for 40 epochs on ``8x A100`` (no store).

Bytecode is cached as Python does by default (``PYTHONDONTWRITEBYTECODE`` is dropped from
the commands' environment: a user's installed jobcast has its ``.pyc`` files), and every
command runs once untimed before the rounds, so no round compiles sources. A command that
exits other than 0 is reported (its stderr's last line) and its row marked.

Usage:
    .venv/bin/python benchmarks/cli_latency.py --rounds 5 \
        --json benchmarks/results/cli_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lib import REPO

BIN = Path(sys.executable).parent
DEMO_KEY = "nvidia-a100-sxm4-40gb-x8"  # a deployment the demo store has history of


def commands(store_url: str) -> dict[str, list[str]]:
    """The timed commands by name (the numpy reference is added per round)."""
    jc = str(BIN / "jobcast")
    return {
        "--help": [jc, "--help"],
        "gpus": [jc, "gpus"],
        "predict layerwise": [jc, "predict", "--network", "resnet50", "--deployment", "1x A100",
                              "--batch-size", "64", "--iterations", "100"],
        "predict store": [jc, "predict", "--network", "resnet50", "--deployment", DEMO_KEY,
                          "--batch-size", "3264", "--epochs", "40", "--dataset-size",
                          "1281167", "--store", store_url],
        "compare": [jc, "compare", "--network", "resnet50", "--batch-size", "256",
                    "--epochs", "40", "--device", "8x A100"],
    }


def environment(home: Path) -> dict[str, str]:
    """The commands' environment: no telemetry, quiet TensorFlow, an empty data folder,
    bytecode cached (module doc)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("JOBCAST_STORE", "PYTHONDONTWRITEBYTECODE")}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", TF_CPP_MIN_LOG_LEVEL="2",
               JOBCAST_HOME=str(home))
    return env


def build_demo_store(folder: Path, env: dict[str, str]) -> str:
    """The demo store in ``folder`` (``jobcast demo --workdir``; reused if there), its URL."""
    db = folder / "jobcast.db"
    if not db.exists():
        subprocess.run([str(BIN / "jobcast"), "demo", "--workdir", str(folder)], env=env,
                       cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
    if not db.exists():
        sys.exit(f"jobcast demo built no store in {folder}")
    return f"sqlite:///{db}"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Wall seconds of one fresh run, its exit code and its stderr's last line."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    lines = done.stderr.strip().splitlines()
    return time.perf_counter() - t0, done.returncode, lines[-1] if lines else ""


def measure(cmds: dict[str, list[str]], env: dict[str, str], rounds: int) -> dict[str, dict]:
    """Per command (and ``import numpy``): the seconds of each round and the ratios to the
    round's reference; runs are interleaved, the order rotated each round."""
    reference = [sys.executable, "-c", "import numpy"]
    names = list(cmds)
    seconds: dict[str, list[float]] = {n: [] for n in ["import numpy", *names]}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    failures: dict[str, str] = {}
    for argv in [reference, *cmds.values()]:  # warm the file and bytecode caches once
        timed(argv, env)
    for r in range(rounds):
        base, _, _ = timed(reference, env)
        seconds["import numpy"].append(base)
        for name in names[r % len(names):] + names[:r % len(names)]:
            secs, code, last = timed(cmds[name], env)
            seconds[name].append(secs)
            ratios[name].append(secs / base)
            if code != 0:
                failures[name] = f"exit {code}: {last}"
    out = {}
    for name, values in seconds.items():
        row = {"median_s": statistics.median(values), "min_s": min(values),
               "max_s": max(values), "runs": len(values)}
        if name in ratios:
            row["ratio_to_numpy"] = statistics.median(ratios[name])
        if name in failures:
            row["failed"] = failures[name]
        out[name] = row
    return out


def table(rows: dict[str, dict]) -> str:
    """The Markdown table of :func:`measure`'s rows."""
    lines = ["| command | median s | min-max s | x numpy |", "|---|---|---|---|"]
    for name, r in rows.items():
        ratio = f"{r['ratio_to_numpy']:.1f}" if "ratio_to_numpy" in r else "1"
        mark = f" (failed: {r['failed']})" if "failed" in r else ""
        lines.append(f"| `{name}`{mark} | {r['median_s']:.2f} | {r['min_s']:.2f}-"
                     f"{r['max_s']:.2f} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="Interleaved rounds (default 5).")
    parser.add_argument("--store-dir", type=Path, default=None,
                        help="Folder of the demo store (built there when missing).")
    parser.add_argument("--json", type=Path, default=None, help="Write the rows as JSON.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobcast-latency-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = environment(home)
        store = build_demo_store(args.store_dir or Path(tmp) / "demo", env)
        rows = measure(commands(store), env, args.rounds)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"rounds": args.rounds, "cpus": os.cpu_count(),
                                         "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
