"""A Slurm job is its scheduler's id: re-ingest never stores it twice, whatever the file.

Issue 35: a file that differed by one newline doubled the store (duplicates were found by
file content, not by job). Files are written by ``tests/slurm_shapes.py`` from the real
public sacct samples. Each test runs on SQLite and on a private PostgreSQL (skipped where
there is none).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from slurm_shapes import document, history, parsable2
from typer.testing import CliRunner

from ingest.parsers import registered
from ingest.pipeline import IngestOptions, ingest_file
from ingest.store import Store
from ingest.whole_job import whole_job_runs
from jobcast.cli.app import app

runner = CliRunner()
T0 = 1_714_000_000
RUNS = [{"start": T0 + i * 86400, "seconds": 1700 + 25 * i} for i in range(5)]


def ingest(url: str, *files: Path) -> dict:
    result = runner.invoke(app, ["ingest", *map(str, files), "--store", url, "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def job_ids(store: Store) -> list[str]:
    return sorted(r.meta["whole_job"]["job_id"] for r in store.runs())


def test_a_file_that_differs_by_a_newline_is_the_same_jobs(tmp_path, empty_url):
    text = document(history("resnet50-nightly", RUNS), "new")
    (tmp_path / "a.json").write_text(text)
    (tmp_path / "b.json").write_text(text + "\n")
    (tmp_path / "c.json").write_text(text + "\n\n")
    url = empty_url
    both = ingest(url, tmp_path / "a.json", tmp_path / "b.json")
    later = ingest(url, tmp_path / "c.json")
    assert [d["first_source"] for d in both["duplicates"] + later["duplicates"]] == [
        str(tmp_path / "a.json")] * 2
    assert both["stored"] == 1 and later["stored"] == 0
    store = Store(url)
    assert job_ids(store) == [str(4242000 + i) for i in range(5)]
    assert store.counts()["files"] == 1


def test_json_then_text_of_the_same_jobs_stores_each_job_once(tmp_path, empty_url):
    jobs = history("resnet50-nightly", RUNS)
    (tmp_path / "s.json").write_text(document(jobs, "old"))
    (tmp_path / "s.txt").write_text(parsable2(jobs[2:]) + parsable2(
        history("resnet50-nightly", [{"start": T0 + 9 * 86400, "seconds": 1800}],
                first_id=4242009)).split("\n", 1)[1])
    url = empty_url
    ingest(url, tmp_path / "s.json")
    text = ingest(url, tmp_path / "s.txt")
    assert job_ids(Store(url)) == [str(4242000 + i) for i in range(5)] + ["4242009"]
    (note,) = [w["warning"] for w in text["warnings"]]
    assert note.startswith("3 jobs already in the store, not stored again: 4242002, 4242003, "
                           "4242004 (from ")


def test_one_id_that_started_twice_is_two_runs(tmp_path, empty_url):
    """``sacct --duplicates`` lists a requeued job's attempts under one id, and Slurm reuses
    ids once its counter wraps: the same id with another start is another run."""
    first = history("resnet50-nightly", RUNS[:1])
    again = history("resnet50-nightly", [{"start": T0 + 400 * 86400, "seconds": 1650}])
    first[0]["state"]["current"] = "REQUEUED"
    (tmp_path / "a.json").write_text(document(first + again, "new"))
    (tmp_path / "b.json").write_text(document(again + first, "new"))
    url = empty_url
    ingest(url, tmp_path / "a.json", tmp_path / "b.json")
    store = Store(url)
    assert job_ids(store) == ["4242000", "4242000"]
    assert sorted(r.meta["whole_job"]["start"] for r in store.runs()) == [
        T0, T0 + 400 * 86400]


def test_every_ingest_path_keeps_a_job_once(tmp_path, empty_url):
    """One file at a time (what Ray's writer calls) as well as the batched writer."""
    jobs = history("resnet50-nightly", RUNS)
    (tmp_path / "a.json").write_text(document(jobs[:3], "new"))
    (tmp_path / "b.json").write_text(document(jobs, "old"))
    (tmp_path / "c.json").write_text(document(jobs[3:], "new") + "\n")
    url = empty_url
    ingest(url, tmp_path / "a.json")
    a_source = str(tmp_path / "a.json")
    store = Store(url)
    parsers, options = registered(), IngestOptions()
    status, runs = ingest_file(store, "b.json", tmp_path / "b.json", options, parsers)
    assert (status, runs) == ("added", 2)
    assert ingest_file(store, "c.json", tmp_path / "c.json", options, parsers) == (
        "duplicate", "b.json")
    assert job_ids(store) == [str(4242000 + i) for i in range(5)]
    assert len(whole_job_runs(store)) == 5
    (first_of_b, _) = [r for r in store.runs() if r.source == "b.json"]
    assert first_of_b.meta["warnings"] == ["3 jobs already in the store, not stored again: "
                                           f"4242000, 4242001, 4242002 (from {a_source})"]


def test_ingests_at_once_store_each_job_once(tmp_path, empty_url):
    """Four ``jobcast ingest`` processes, each with the same 300 jobs in its own file: the
    writers take turns, so none reads "not stored" while another stores the jobs."""
    text = document(history("resnet50-nightly", [{"start": T0 + 60 * i, "seconds": 1700}
                                                 for i in range(300)]), "new")
    paths = []
    for i in range(4):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(text + "\n" * i)
    procs = [subprocess.Popen([sys.executable, "-m", "jobcast", "ingest", str(path), "--store",
                               empty_url, "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for path in paths]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0 and "Traceback" not in err, err
    reports = [json.loads(out) for out, _ in outputs]
    assert sum(r["stored"] for r in reports) == 1
    assert sum(len(r["duplicates"]) for r in reports) == 3
    assert len(job_ids(Store(empty_url))) == 300
