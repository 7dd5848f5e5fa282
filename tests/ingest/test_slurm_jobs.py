"""What a sacct export says about each job, stored as it was (issue 35).

Files are written by ``tests/slurm_shapes.py`` from the real public sacct samples: jobs that
never started (start 0 or Slurm's NO_VAL 4294967294, as a 24.11 export holds them), an elapsed
time that contradicts Start/End, failed and cancelled runs, values no reader should take
(``Infinity``, ``1e999``, JSON nested 100,000 deep), and a recurring job's export.
"""

from __future__ import annotations

import json
import re
import statistics

import pytest
from slurm_shapes import (
    NO_VAL,
    deeply_nested,
    document,
    history,
    never_started,
    parsable2,
    recurring_job_export,
    with_elapsed,
)
from typer.testing import CliRunner

from jobcast.cli.app import app

runner = CliRunner()
T0 = 1_714_000_000
PYTHON_WORDS = re.compile(r"Error\b|invalid literal|could not convert|cannot convert|"
                          r"object has no attribute|parser failed")


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def ingest(tmp_path, *files) -> dict:
    url = f"sqlite:///{tmp_path / 'slurm.db'}"
    result = cli("ingest", *map(str, files), "--store", url, "--json")
    return json.loads(result.stdout) | {"exit": result.exit_code, "url": url}


def stored_jobs(url: str) -> dict[str, dict]:
    """``job id -> meta["whole_job"]`` as ``jobcast runs --json`` shows them."""
    result = cli("runs", "--store", url, "--json")
    assert result.exit_code == 0, result.output
    return {r["meta"]["whole_job"]["job_id"]: r["meta"]["whole_job"]
            for r in json.loads(result.stdout)}


def jobs_with_seven_never_started(start: int) -> list[dict]:
    ran = history("resnet50-nightly", [{"start": T0 + i * 86400, "seconds": 1700 + i}
                                       for i in range(5)])
    never = history("prep", [{"start": T0 + i * 3600, "seconds": 60} for i in range(7)],
                    first_id=4243000)
    return ran[:2] + [never_started(job, start) for job in never] + ran[2:]


@pytest.mark.parametrize("form, start", [("new", NO_VAL), ("old", 0), ("parsable2", NO_VAL)])
def test_never_started_jobs_are_skipped_with_a_warning_naming_each(tmp_path, form, start):
    jobs = jobs_with_seven_never_started(start)
    path = tmp_path / ("sacct.txt" if form == "parsable2" else "sacct.json")
    path.write_text(parsable2(jobs) if form == "parsable2"
                    else document(jobs, form, release="24.11.1"))
    report = ingest(tmp_path, path)
    assert report["exit"] == 0 and not report["rejected"]
    assert sorted(stored_jobs(report["url"])) == [str(4242000 + i) for i in range(5)]
    warnings = " | ".join(w["warning"] for w in report["warnings"])
    for i in range(7):
        assert f"job {4243000 + i} (prep, cancelled) never started" in warnings
    if form == "new":
        assert "start 4294967294 (Slurm's 'no value')" in warnings


def test_a_file_of_jobs_that_never_started_is_refused_in_words(tmp_path):
    jobs = [never_started(j) for j in history("prep", [{"start": T0, "seconds": 60}] * 3)]
    (tmp_path / "s.json").write_text(document(jobs, "new", release="24.11.1"))
    (err,) = ingest(tmp_path, tmp_path / "s.json")["rejected"]
    assert err["reason"].startswith("no ended job in the file (3 jobs: 3 never started)")


def test_an_elapsed_time_against_start_and_end_is_a_warning_and_end_minus_start_is_kept(
        tmp_path):
    jobs = history("resnet50-nightly", [{"start": T0 + i * 86400, "seconds": 1700}
                                        for i in range(3)])
    with_elapsed(jobs[1], 1000)
    (tmp_path / "s.json").write_text(document(jobs, "new"))
    report = ingest(tmp_path, tmp_path / "s.json")
    record = stored_jobs(report["url"])["4242001"]
    assert record["seconds"] == record["end"] - record["start"] == 1700
    (warning,) = [w["warning"] for w in report["warnings"]]
    assert warning == ("job 4242001: sacct's elapsed time 1000 s contradicts End - Start = "
                       "1700 s; stored End - Start")


@pytest.mark.parametrize("form", ["new", "parsable2"])
def test_failed_cancelled_and_timed_out_runs_keep_state_and_real_time(tmp_path, form):
    runs = [{"start": T0, "seconds": 1700}, {"start": T0 + 86400, "seconds": 400,
                                             "state": "FAILED"},
            {"start": T0 + 2 * 86400, "seconds": 900, "state": "CANCELLED by 1234"},
            {"start": T0 + 3 * 86400, "seconds": 3600, "state": "TIMEOUT"}]
    jobs = history("resnet50-nightly", runs)
    for job in jobs[1:]:
        with_elapsed(job, 0)  # a broken accounting field must not make them 0 s runs
    path = tmp_path / ("s.txt" if form == "parsable2" else "s.json")
    path.write_text(parsable2(jobs) if form == "parsable2" else document(jobs, form))
    records = stored_jobs(ingest(tmp_path, path)["url"])
    got = [(records[str(4242000 + i)]["state"], records[str(4242000 + i)]["seconds"])
           for i in range(4)]
    assert got == [("completed", 1700), ("failed", 400), ("cancelled", 900), ("timeout", 3600)]


def _job_line(text: str, index: int) -> int:
    """The line of the ``index``-th job's first ``"job_id"`` key."""
    lines = [n for n, line in enumerate(text.splitlines(), 1) if '"job_id"' in line]
    return lines[2 * index]  # each job: its array's "job_id", then its own


@pytest.mark.parametrize("change, reason", [
    (lambda t: t.replace('"count": 8', '"count": Infinity', 1),
     "TRES gres/gpu:a100 count: not a finite number: inf"),
    (lambda t: t.replace('"count": 8', '"count": 1e999', 1),
     "TRES gres/gpu:a100 count: not a finite number: inf"),
    (lambda t: t.replace('"allocation_nodes": 1', '"allocation_nodes": Infinity', 1),
     "allocation_nodes: not a finite number: inf"),
    (lambda t: t.replace('"allocation_nodes": 1', '"allocation_nodes": 2.5', 1),
     "allocation_nodes 2.5 is not a whole number"),
    (lambda t: t.replace('"allocated": [', '"allocated": 7, "was": [', 1),
     "tres.allocated is 7, not a list"),
])
def test_bad_numbers_are_refused_in_words_with_the_job_line(tmp_path, change, reason):
    jobs = history("resnet50-nightly", [{"start": T0 + i * 86400, "seconds": 1700}
                                        for i in range(2)])
    text = change(document(jobs, "old"))
    (tmp_path / "s.json").write_text(text)
    report = ingest(tmp_path, tmp_path / "s.json")
    (err,) = report["rejected"]
    assert reason in err["reason"] and err["reason"].startswith("job 1 (JobID 4242000): ")
    assert not PYTHON_WORDS.search(err["reason"]) and err["line"] == _job_line(text, 0)


@pytest.mark.parametrize("cell, value, reason", [
    ("AllocTRES", "cpu=8,gres/gpu:a100=inf,gres/gpu=inf,node=1",
     "AllocTRES gres/gpu:a100 'inf' is not a finite number"),
    ("AllocTRES", "cpu=8,gres/gpu=8,node=lots", "AllocTRES node 'lots' is not a number"),
    ("NNodes", "two", "NNodes 'two' is not a number"),
    ("JobID", "12x", "JobID '12x' is not a job id (123 or 123_4)"),
])
def test_bad_text_cells_are_refused_in_words_with_the_line(tmp_path, cell, value, reason):
    text = parsable2(history("resnet50-nightly", [{"start": T0, "seconds": 1700}] * 2))
    lines = text.splitlines()
    header = lines[0].split("|")
    row = lines[3].split("|")  # the second job (after the first one's batch step)
    row[header.index(cell)] = value
    lines[3] = "|".join(row)
    (tmp_path / "s.txt").write_text("\n".join(lines) + "\n")
    (err,) = ingest(tmp_path, tmp_path / "s.txt")["rejected"]
    assert reason in err["reason"] and err["line"] == 4
    assert not PYTHON_WORDS.search(err["reason"])


def test_json_nested_past_any_reader_is_refused_in_words(tmp_path):
    jobs = history("resnet50-nightly", [{"start": T0, "seconds": 1700}])
    (tmp_path / "s.json").write_text(deeply_nested(jobs, "new"))
    (err,) = ingest(tmp_path, tmp_path / "s.json")["rejected"]
    assert err["reason"] == "the JSON nests deeper than a reader can follow: not sacct output"


def test_a_recurring_jobs_export_lists_each_run_with_its_time_and_state(tmp_path):
    path = recurring_job_export(tmp_path / "sacct.json")
    report = ingest(tmp_path, path)
    assert report["exit"] == 0 and report["added"][0]["runs"] == 7 and not report["warnings"]
    records = sorted(stored_jobs(report["url"]).values(), key=lambda r: r["start"])
    assert {r["name"] for r in records} == {"resnet50-imagenet"}
    assert all(r["seconds"] == r["end"] - r["start"] for r in records)
    failed = [r for r in records if r["state"] != "completed"]
    assert [r["state"] for r in failed] == ["failed"] and failed[0]["seconds"] > 0
    done = [r["seconds"] for r in records if r["state"] == "completed"]
    slowest = max(done)
    typical = statistics.median(s for s in done if s != slowest)
    assert 1.5 * typical < slowest < 1.7 * typical and failed[0]["seconds"] < min(done)
    days = [b["start"] - a["start"] for a, b in zip(records, records[1:], strict=False)]
    assert set(days) == {86400}
    assert {(r["gpus"], r["gpu_type"]) for r in records} == {(8, "a100")}
