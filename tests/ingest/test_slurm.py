"""Slurm accounting (``sacct --json`` in both number shapes, ``--parsable2``) -> whole-job runs.

Real public samples (tests/data/slurm, from mila-iqia/SARC's tests: Slurm 21.08, 22.05, 23.02
and 23.11) are parsed as they are; the same jobs in the 23.11 shape, and a recurring job's
history in both shapes and as text, give identical stored runs.
"""

from __future__ import annotations

import json

import pytest
from slurm_shapes import DATA, document, history, parsable2, to_new_shape
from typer.testing import CliRunner

from ingest.events import ParseContext, ParseError
from ingest.parsers import detect, registered, slurm
from ingest.store import Store
from ingest.whole_job import job_key, whole_job_runs
from jobcast.cli.app import app
from models.whole_job_estimator import WholeJobModel

runner = CliRunner()
T0 = 1_714_000_000
RUNS = [{"start": T0 + i * 86400, "seconds": 1700 + 25 * (i % 3)} for i in range(5)] + [
    {"start": T0 + 5 * 86400, "seconds": 400, "state": "FAILED"},
    {"start": T0 + 6 * 86400, "seconds": 3600, "state": "TIMEOUT"},
    {"start": T0 + 7 * 86400, "seconds": 900, "state": "CANCELLED by 1234"},
    {"start": T0 + 8 * 86400, "seconds": 1200, "state": "PREEMPTED"},
    {"start": T0 + 9 * 86400, "seconds": 1710, "task": 3, "gpus": 16, "nodes": 2},
]


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def ingest(tmp_path, *files, extra=()) -> tuple[dict, Store]:
    url = f"sqlite:///{tmp_path / 'slurm.db'}"
    result = cli("ingest", *map(str, files), "--store", url, "--json", *extra)
    return json.loads(result.stdout) | {"exit": result.exit_code}, Store(url)


def stored(store: Store) -> list[tuple]:
    """Everything of the stored runs but where they came from."""
    return sorted((r.network, r.deployment, r.batch_size, r.start_time,
                   json.dumps(r.meta, sort_keys=True)) for r in store.runs())


def test_real_samples_of_four_slurm_versions():
    by_file = {p.name: slurm.read_jobs(p.read_text().splitlines())
               for p in sorted(DATA.glob("sacct-*.json"))}
    for name, path in ((p.name, p) for p in DATA.glob("sacct-*.json")):
        assert detect(path.read_text().splitlines()[:200], registered()) is slurm, name
    (requeued,) = by_file["sacct-21.08.8.json"]  # its elapsed (86301 s) is not End - Start
    assert (requeued.state, requeued.gpus, requeued.gpu_type, requeued.seconds) == (
        "requeued", 1, None, requeued.end - requeued.start)
    assert "86301 s contradicts End - Start = 94363 s" in requeued.elapsed_conflict()
    (failed,) = by_file["sacct-22.05.9.json"]  # an array task on 4 nodes x 4 GPUs
    assert (failed.job_id, failed.state, failed.gpus, failed.nodes) == (
        "20247445_100", "failed", 16, 4)
    assert failed.end - failed.start == failed.seconds == 124403.0
    for name in ("sacct-23.02.6.json", "sacct-23.11.5.json"):  # bare vs {"set", "number"}
        (running,) = by_file[name]
        assert (running.job_id, running.state, running.gpus, running.end) == ("4", "running",
                                                                               2, None)
    with pytest.raises(ParseError, match="no ended job in the file .*running"):
        slurm.parse((DATA / "sacct-23.11.5.json").read_text().splitlines(), ParseContext())


def test_the_real_22_05_job_reads_the_same_in_the_23_11_shape(tmp_path):
    doc = json.loads((DATA / "sacct-22.05.9.json").read_text())
    (tmp_path / "new.json").write_text(document(doc["jobs"], "new"))
    old_runs = slurm.parse((DATA / "sacct-22.05.9.json").read_text().splitlines(),
                           ParseContext())
    new_runs = slurm.parse((tmp_path / "new.json").read_text().splitlines(), ParseContext())
    assert [r.meta for r in old_runs] == [r.meta for r in new_runs]
    record = old_runs[0].meta["whole_job"]
    assert record["state"] == "failed" and old_runs[0].meta["deployment_key"] == "gpu-x4-n4"
    assert "pass --deployment" in old_runs[0].meta["warnings"][0]


@pytest.mark.parametrize("form", ["new", "parsable2"])
def test_both_json_shapes_and_text_store_the_same_runs(tmp_path, form):
    jobs = history("resnet50-nightly", RUNS)
    (tmp_path / "old").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "old" / "sacct.json").write_text(document(jobs, "old"))
    other = tmp_path / "other" / ("sacct.json" if form == "new" else "sacct.txt")
    other.write_text(document(jobs, "new") if form == "new" else parsable2(jobs))
    first, old_store = ingest(tmp_path / "old", tmp_path / "old" / "sacct.json")
    second, new_store = ingest(tmp_path / "other", other)
    assert first["exit"] == second["exit"] == 0 and first["stored"] == 1
    assert stored(old_store) == stored(new_store)
    runs = whole_job_runs(old_store)
    assert [r.state for r in runs] == ["completed"] * 5 + [
        "failed", "timeout", "cancelled", "preempted", "completed"]
    assert {r.deployment for r in runs} == {"nvidia-a100-sxm4-40gb-x8",
                                            "nvidia-a100-sxm4-40gb-x8-n2"}
    assert [r.seconds for r in runs] == [float(r["seconds"]) for r in RUNS]
    assert runs[-1].job_id == "4242000_3"
    # the per-step models never see these runs: no segments, nothing to fit
    assert old_store.counts()["segments"] == 0


def test_unfinished_jobs_are_kept_apart_and_never_fitted(tmp_path):
    (tmp_path / "a.json").write_text(document(history("resnet50-nightly", RUNS), "new"))
    _, store = ingest(tmp_path, tmp_path / "a.json")
    model = WholeJobModel().fit(whole_job_runs(store))
    assert model.skipped_ == 4 and model.n_runs_ == 6
    fit = model.group("resnet50-nightly", "8x A100")
    assert fit.n == 5 and fit.mean_seconds == pytest.approx(
        sum(r["seconds"] for r in RUNS[:5]) / 5)


def test_job_key_rules_on_the_name_and_the_submit_line(tmp_path):
    runs = [{**r, "submit_line": f"sbatch --comment=nightly/resnet50 job{i}.sh"}
            for i, r in enumerate(RUNS[:3])]
    jobs = history("x", runs)
    for i, job in enumerate(jobs):
        job["name"] = f"resnet50-nightly-2024-05-0{i + 1}"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "s.json").write_text(document(jobs, "old"))
    (tmp_path / "b" / "s.json").write_text(document(jobs, "new"))
    _, by_name = ingest(tmp_path / "a", tmp_path / "a" / "s.json",
                        extra=("--job-key", r"^(.*)-\d{4}-\d\d-\d\d$"))
    _, by_submit = ingest(tmp_path / "b", tmp_path / "b" / "s.json",
                          extra=("--job-key", r"submit:--comment=(?P<key>\S+)"))
    assert {r.key for r in whole_job_runs(by_name)} == {"resnet50-nightly"}
    assert {r.key for r in whole_job_runs(by_submit)} == {"nightly/resnet50"}
    assert job_key("Train  ResNet") == "train resnet"
    bad = cli("ingest", str(tmp_path / "a" / "s.json"), "--job-key", "(",
              "--store", f"sqlite:///{tmp_path / 'x.db'}")
    assert bad.exit_code == 2 and "--job-key '(': not a regular expression" in bad.output


def test_reingest_and_overlapping_dumps_count_each_job_once(tmp_path):
    jobs = history("resnet50-nightly", RUNS[:4])
    (tmp_path / "week1.json").write_text(document(jobs[:3], "old"))
    (tmp_path / "week2.json").write_text(document(jobs[1:], "new"))  # overlaps week1
    report, store = ingest(tmp_path, tmp_path / "week1.json", tmp_path / "week2.json")
    again, _ = ingest(tmp_path, tmp_path / "week1.json")
    assert report["stored"] == 2 and len(again["duplicates"]) == 1
    assert len(store.runs()) == 4 and len(whole_job_runs(store)) == 4
    (note,) = [w["warning"] for w in report["warnings"] if w["source"].endswith("week2.json")]
    assert note.startswith("2 jobs already in the store, not stored again: 4242001, 4242002 (from")


@pytest.mark.parametrize("change, reason", [
    (lambda j: j["state"].update(current="EXPLODED"), "unknown job state 'EXPLODED'"),
    (lambda j: j["time"].update(elapsed="soon"), "not a number"),
    (lambda j: j["tres"]["allocated"].append({"type": "gres", "name": "gpu", "count": -3}),
     "GPU count -3"),
    (lambda j: j["time"].update(elapsed=10**400), "time.elapsed: not a finite number"),
    (lambda j: j["time"].update(start=5, end=10), "start time 5.0"),
])
def test_bad_jobs_reject_the_file_with_the_job_line(tmp_path, change, reason):
    jobs = history("resnet50-nightly", RUNS[:3])
    change(jobs[1])
    path = tmp_path / "bad.json"
    path.write_text(document(jobs, "old"))
    report, store = ingest(tmp_path, path)
    (err,) = report["rejected"]
    assert report["exit"] == 1 and reason in err["reason"] and store.counts()["runs"] == 0
    lines = path.read_text().splitlines()
    assert err["line"] and '"job_id"' in lines[err["line"] - 1]


def test_parsable2_errors_name_the_line(tmp_path):
    text = parsable2(history("resnet50-nightly", RUNS[:3])).splitlines()
    text[3] = text[3].replace("00:28:", "bogus:")  # the second job's Elapsed
    (tmp_path / "a.txt").write_text("\n".join(text) + "\n")
    (tmp_path / "b.txt").write_text("JobID|JobName|State\n1|x|COMPLETED\n")
    report, _ = ingest(tmp_path, tmp_path / "a.txt", tmp_path / "b.txt")
    errors = {e["source"].rsplit("/", 1)[-1]: e for e in report["rejected"]}
    assert errors["a.txt"]["line"] == 4 and "is not [D-][HH:]MM:SS" in errors["a.txt"]["reason"]
    assert "neither Elapsed nor Start and End" in errors["b.txt"]["reason"]


def test_to_new_shape_writes_what_23_11_prints():
    real_new = json.loads((DATA / "sacct-23.11.5.json").read_text())["jobs"][0]
    converted = to_new_shape(json.loads((DATA / "sacct-22.05.9.json").read_text())["jobs"][0])
    for field in ("array", "priority", "state", "exit_code", "het"):
        assert set(converted[field]) <= set(real_new[field]) | {"reason"}, field
    assert converted["array"]["task_id"] == {"set": True, "infinite": False, "number": 100}
    assert slurm.number(real_new["time"]["limit"]) == 7200.0
    assert slurm.number({"set": False, "infinite": False, "number": 0}) is None
    assert slurm.number({"set": True, "infinite": True, "number": 0}) is None
