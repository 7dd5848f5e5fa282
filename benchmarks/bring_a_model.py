"""Bring a model: cold vs warm `jobcast predict --network ./mynet.py:build` (issue 36).

    nice .venv/bin/python benchmarks/bring_a_model.py [--repeats 5] [--json out.json]

In a fresh temporary folder holding only the README's ``mynet.py`` (read from the README's
"Bring your own network" section), with its own ``JOBCAST_HOME``, each round runs, interleaved:
``python -c "import numpy"`` (the reference: a bare interpreter with numpy), a **cold**
``jobcast predict`` (the spec cache emptied first: the model is traced with torch) and a
**warm** one (the cached spec: no torch import). Wall seconds of each process; medians and
ranges printed (and written as JSON). Results: docs/bring-a-model.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lib import REPO as ROOT


def readme_example() -> tuple[str, list[str]]:
    """(mynet.py, the predict command's arguments) from the README's section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Bring your own network", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shell = re.search(r"```sh\n(.*?)```", section, re.S)
    if code is None or shell is None:
        raise SystemExit("README.md: the 'Bring your own network' example is missing")
    line = next(x for x in shell.group(1).splitlines() if x.startswith("jobcast predict"))
    return code.group(1), shlex.split(line)[1:]


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{out.stdout}{out.stderr}")
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    source, predict = readme_example()
    work = Path(tempfile.mkdtemp(prefix="bring-a-model-"))
    try:
        (work / "mynet.py").write_text(source, encoding="utf-8")
        env = {**os.environ, "JOBCAST_HOME": str(work / "home"), "PYTHONPATH": ""}
        cache = work / "home" / "cache"
        jobcast = [sys.executable, "-m", "jobcast", *predict, "--json"]
        times: dict[str, list[float]] = {"import numpy": [], "cold": [], "warm": []}
        for _ in range(args.repeats):
            times["import numpy"].append(timed([sys.executable, "-c", "import numpy"], work,
                                               env))
            shutil.rmtree(cache, ignore_errors=True)
            times["cold"].append(timed(jobcast, work, env))
            times["warm"].append(timed(jobcast, work, env))
        summary = {k: {"median_s": round(statistics.median(v), 3),
                       "min_s": round(min(v), 3), "max_s": round(max(v), 3), "runs": len(v)}
                   for k, v in times.items()}
        for name, row in summary.items():
            print(f"{name:>13}: median {row['median_s']:.2f} s "
                  f"({row['min_s']:.2f}-{row['max_s']:.2f}, {row['runs']} runs)")
        if args.json:
            args.json.write_text(json.dumps({"command": predict, "summary": summary,
                                             "times": times}, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
