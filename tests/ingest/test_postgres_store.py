"""The store on a real, private PostgreSQL: the same answers as SQLite, for every command, and
concurrent ingest processes that lose nothing and store nothing twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from paths import DATA, REPO
from typer.testing import CliRunner

from fleet.deployment import Deployment
from ingest.events import ParsedRun, ParseError, Segment
from ingest.store import Store, StoreError

runner = CliRunner()
SAMPLES = [DATA / "mlperf", DATA / "tf_cnn", DATA / "caffe", DATA / "keras"]


def _run(meta: dict | None = None) -> ParsedRun:
    segs = [Segment("train", iterations=50, seconds=100.0 + e, batch_size=256, epoch_start=e,
                    epoch_end=e, points=((25, 50.0), (50, 100.0 + e))) for e in range(3)]
    return ParsedRun(format="jsonl", network="resnet50",
                     deployment=Deployment("NVIDIA A100-SXM4-80GB", 8, 1),
                     stack="MXNet NGC 20.06", batch_size=256, start_time=1_600_000_000.0,
                     segments=segs, meta=meta or {})


def _cli(*args: str, env: dict | None = None):
    from jobcast.cli.app import app

    return runner.invoke(app, list(args), catch_exceptions=False, env=env)


def test_round_trip_duplicates_warnings_models_rejections(pg_url):
    store = Store(pg_url)
    assert store.engine.dialect.name == "postgresql"
    meta = {"warnings": ["clock stepped back at line 7"], "system": "x/y"}
    assert store.add_file(content_hash="a" * 64, source="a.log", fmt="jsonl", size=10,
                          parsed=[_run(meta), _run()]) is not None
    assert store.add_file(content_hash="a" * 64, source="copy.log", fmt="jsonl", size=10,
                          parsed=[_run()]) is None
    assert store.has_content("a" * 64) == "a.log"
    runs = store.runs()
    assert [r.meta for r in runs] == [meta, {}]
    assert store.segments([runs[0].id])[1]["points"] == [(25.0, 50.0), (50.0, 101.0)]
    assert store.counts() == {"files": 1, "runs": 2, "segments": 6}
    # meta.contains is LIKE on both dialects
    assert store.run_warnings(["a.log"]) == [("a.log", 1, "clock stepped back at line 7")]

    bad = _run()
    bad.network = None  # NOT NULL fails on the second run: the file is not stored at all
    with pytest.raises(sa.exc.IntegrityError):
        store.add_file(content_hash="c" * 64, source="bad.log", fmt="jsonl", size=1,
                       parsed=[_run(), bad])
    assert store.counts() == {"files": 1, "runs": 2, "segments": 6}

    models = [{"model_id": "m1", "network": "resnet50", "deployment": "d", "phase": "train",
               "stack": "s", "params": {"slope": 0.5}}]
    store.save_models(models)
    assert [m["params"] for m in store.load_models()] == [{"slope": 0.5}]
    with pytest.raises(StoreError, match="cannot save the fitted models"):
        store.save_models(models * 2)  # one model_id twice: refused, the old ones stay
    assert [m["model_id"] for m in store.load_models()] == ["m1"]

    assert store.add_rejections([ParseError("no network", line=5, source="k.txt")]) == 1
    [rejection] = store.rejections()
    assert (rejection.source, rejection.line, rejection.reason) == ("k.txt", 5, "no network")
    store.engine.dispose()


def _without_ids(payload: list[dict]) -> list[dict]:
    return [{k: v for k, v in run.items() if k not in ("id", "run_id")} for run in payload]


def test_every_store_command_gives_the_sqlite_answers(pg_url, tmp_path):
    lite = f"sqlite:///{tmp_path / 'jobcast.db'}"
    paths = [str(DATA / "mlperf"), str(DATA / "keras")]
    out = {}
    for name, url in (("sqlite", lite), ("postgresql", pg_url)):
        ingested = _cli("ingest", *paths, "--store", url, "--json")
        assert ingested.exit_code == 1, ingested.output  # the samples include rejected logs
        report = json.loads(ingested.stdout)
        assert report["added"] and report["rejected"]
        runs = _cli("runs", "--json", env={"JOBCAST_STORE": url})  # the variable works too
        assert runs.exit_code == 0, runs.output
        fitted = _cli("fit", "--store", url, "--no-track", "--json")
        assert fitted.exit_code == 0, fitted.output
        predicted = _cli("predict", "--store", url, "--network", "resnet50", "--deployment",
                         "nvidia-a100-sxm4-40gb-x8", "--batch-size", "2048", "--iterations",
                         "20000", "--json")
        assert predicted.exit_code == 0, predicted.output
        out[name] = {"store": report["store"], "rejected": report["rejected"],
                     "runs": _without_ids(json.loads(runs.stdout)),
                     "fit": json.loads(fitted.stdout), "predict": json.loads(predicted.stdout)}
    assert out["postgresql"] == out["sqlite"]
    report = _cli("report", "--store", pg_url, "--out", str(tmp_path / "report"))
    assert report.exit_code == 0, report.output
    html = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    assert out["sqlite"]["runs"][0]["network"] in html


def _ingest_argv(url: str, folders: list[Path]) -> list[str]:
    return [sys.executable, "-m", "jobcast", "ingest", *map(str, folders), "--store", url,
            "--json"]


def _stored(url: str) -> list[tuple]:
    store = Store(url)
    runs = store.runs()
    segments = store.segments()
    per_run = {r.id: 0 for r in runs}
    for s in segments:
        per_run[s["run_id"]] += 1
    rows = sorted((r.content_hash, r.run_index, r.network, r.deployment, r.batch_size,
                   per_run[r.id]) for r in runs)
    store.engine.dispose()
    return rows


def test_concurrent_ingest_processes_lose_and_duplicate_nothing(pg_server, tmp_path):
    """Four `jobcast ingest` processes at once over the same logs (each in another order)
    store exactly what one clean ingest stores; each file is added by exactly one of them."""
    from pg_server import new_database

    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": str(REPO)}
    with new_database(pg_server) as clean, new_database(pg_server) as shared:
        single = subprocess.run(_ingest_argv(clean, SAMPLES), capture_output=True, text=True,
                                env=env, cwd=tmp_path, timeout=300)
        expected = json.loads(single.stdout)
        assert expected["added"] and expected["rejected"]
        Store(shared).engine.dispose()  # created once here; the writers race on rows only
        procs = [subprocess.Popen(_ingest_argv(shared, SAMPLES[i:] + SAMPLES[:i]), env=env,
                                  cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for i in range(4)]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        for code, _, stderr in results:
            assert code == single.returncode, stderr[-2000:]
            assert "Traceback" not in stderr, stderr[-2000:]
        reports = [json.loads(stdout) for _, stdout, _ in results]
        added = sorted(a["source"] for r in reports for a in r["added"])
        assert added == sorted(a["source"] for a in expected["added"])
        files = len(expected["added"]) + len(expected["duplicates"])
        for report in reports:
            assert len(report["added"]) + len(report["duplicates"]) == files
            assert sorted(map(str, report["rejected"])) == sorted(map(str, expected["rejected"]))
        assert _stored(shared) == _stored(clean)
