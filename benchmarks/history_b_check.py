"""Issue 24 (part 2) figures: real Lightning / Hugging Face runs against what jobcast stores,
a forecast of a longer run from that history against the measured longer run, and one
``jobcast ingest`` of a folder mixing every format.

For each library: two history runs (tests/framework_runs.py: tiny CNN, random data, this
CPU), ingested with ``--deployment "1x cpu" --network tinycnn --system <lib>``; printed: the
steps and train seconds each run measured itself against the stored ones (and the relative
difference), the warm-up reported; then ``jobcast fit`` and the service's forecast of a longer
run (``--iterations``) and that run, measured. Last, the folder of tests/data/frameworks plus
the history runs, the Keras samples and, where present, tests/data/history (TensorBoard, W&B
and MLflow samples of the other half of issue 24) is ingested with ``--deployment "1x cpu"`` only:
files stored per format, rejections with their reasons.

    .venv/bin/python benchmarks/history_b_check.py [--long 60] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import sqlalchemy as sa  # noqa: E402
from framework_runs import hf_run, lightning_run  # noqa: E402

from ingest.parsers import registered  # noqa: E402
from ingest.pipeline import IngestOptions, ingest_paths, parse_file  # noqa: E402
from ingest.store import Store, files  # noqa: E402

CPU = "1x cpu"


def stored_vs_measured(folder: Path, measured, name: str) -> dict:
    log = folder / ("train.log" if (folder / "train.log").is_file() else "trainer_state.json")
    [run] = parse_file(str(log), log, IngestOptions(deployment=CPU, network="tinycnn"),
                       registered()).runs
    train = [s for s in run.segments if s.phase == "train"]
    steps, seconds = sum(s.iterations for s in train), sum(s.seconds for s in train)
    total = sum(s.seconds for s in run.segments)
    return {"run": name, "measured_steps": measured.train_steps, "stored_steps": steps,
            "measured_s": round(measured.train_seconds, 4), "stored_s": round(seconds, 4),
            "rel_diff": round(seconds / measured.train_seconds - 1, 5),
            "measured_wall_s": round(measured.wall_seconds, 4),
            "stored_train_and_test_s": round(total, 4),
            "rel_diff_total": round(total / measured.wall_seconds - 1, 5),
            "warmup": run.meta.get("warmup")}


def library(which: str, work: Path, long_steps: int) -> dict:
    from jobcast.service.forecaster import Forecaster
    from jobcast.service.request import JobRequest
    from models.e2e import fit_store_report

    root = work / which
    if which == "lightning":
        runs = {"a": lightning_run(root / "a", epochs=2, steps=12),
                "b": lightning_run(root / "b", epochs=1, steps=18)}
    else:
        runs = {"a": hf_run(root / "a", max_steps=40), "b": hf_run(root / "b", max_steps=30)}
    store = Store(f"sqlite:///{root / 'store.db'}")
    report = ingest_paths(store, [str(root / n) for n in runs],
                          IngestOptions(deployment=CPU, network="tinycnn", system=which))
    rows = [stored_vs_measured(root / n, m, n) for n, m in runs.items()]
    fit_store_report(store)
    forecast = Forecaster(store).forecast(JobRequest(
        network="tinycnn", deployment=CPU, batch_size=16, iterations=long_steps, phase="train",
        system=which)).to_dict()
    if which == "lightning":
        actual = lightning_run(root / "long", epochs=1, steps=long_steps).train_seconds
    else:
        actual = hf_run(root / "long", max_steps=long_steps, evaluate=False,
                        save=False).train_seconds
    return {"stored": report.stored, "skipped": len(report.skipped), "runs": rows,
            "forecast": {k: forecast.get(k) for k in ("seconds", "low", "high", "route",
                                                      "model", "chosen")},
            "long_steps": long_steps, "actual_s": round(actual, 3),
            "actual_over_forecast": round(actual / forecast["seconds"], 3)}


def mixed(work: Path) -> dict:
    folder = work / "mixed"
    shutil.copytree(REPO / "tests" / "data" / "frameworks", folder / "public",
                    ignore=shutil.ignore_patterns("*.py", "*.md"))
    shutil.copytree(REPO / "tests" / "data" / "keras", folder / "keras",
                    ignore=shutil.ignore_patterns("*.py"))
    other = REPO / "tests" / "data" / "history"  # the other half of issue 24 (TB, W&B, MLflow)
    if other.is_dir():
        shutil.copytree(other, folder / "history_a", ignore=shutil.ignore_patterns("*.md"))
    for which in ("lightning", "hf"):
        if (work / which / "a").is_dir():
            shutil.copytree(work / which / "a", folder / f"{which}_run")
    url = f"sqlite:///{work / 'mixed.db'}"
    out = subprocess.run([sys.executable, "-m", "jobcast", "ingest", str(folder), "--deployment",
                          CPU, "--store", url, "--workers", "1", "--json"], capture_output=True,
                         text=True, cwd=REPO)
    report = json.loads(out.stdout)
    with Store(url).engine.connect() as conn:
        per_format = dict(conn.execute(sa.select(files.c.format, sa.func.count())
                                       .group_by(files.c.format)).all())
    return {"command": f"jobcast ingest {folder} --deployment '{CPU}' --json",
            "stored_per_format": per_format, "skipped": len(report["skipped"]),
            "rejected": [{"file": str(Path(r["source"]).relative_to(folder)),
                          "line": r["line"], "reason": r["reason"]}
                         for r in report["rejected"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=60, help="steps of the forecast run")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="history_b_"))
    result = {"lightning": library("lightning", work, args.long),
              "hf": library("hf", work, args.long)}
    result["mixed_folder"] = mixed(work)
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
