"""Ray ingest on a real local Ray: the same runs, report and guarantees as local ingest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import DATA
from typer.testing import CliRunner

from ingest.parsers import register, unregister
from ingest.pipeline import IngestOptions, IngestReport, ingest_paths
from ingest.ray_ingest import ingest_paths_ray, parse_batch, stored_runs
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.cli.demo import sample_batches

ray = pytest.importorskip("ray")

MLPERF = DATA / "mlperf"


pytestmark = pytest.mark.usefixtures("local_ray")


def _store(tmp_path: Path, name: str) -> Store:
    return Store(f"sqlite:///{tmp_path / name}.db")


def _summary(report: IngestReport) -> tuple:
    return (
        report.added,
        report.duplicates,
        [(e.source, e.line, e.reason) for e in report.rejected],
        report.skipped,
    )


def test_bundled_samples_store_the_same_runs_as_local_ingest(tmp_path):
    local, remote = _store(tmp_path, "local"), _store(tmp_path, "ray")
    # The demo's groups (with the overrides their logs need), then all of tests/data, whose
    # CSV slices and metadata files are rejected the same way by both.
    batches = [*sample_batches(DATA), ([str(DATA)], IngestOptions())]
    for paths, overrides in batches:
        ticks: list[tuple[int, int, str]] = []
        want = ingest_paths(local, paths, overrides)
        got = ingest_paths_ray(
            remote, paths, overrides, files_per_task=3, progress=lambda *a, t=ticks: t.append(a)
        )
        assert _summary(got) == _summary(want)
        total = len(want.added) + len(want.duplicates) + len(want.rejected)
        assert [t[0] for t in ticks] == list(range(1, total + 1))
        assert {t[1] for t in ticks} == {total}
    assert remote.counts() == local.counts() and remote.counts()["runs"] >= 10
    assert stored_runs(remote) == stored_runs(local)


def test_second_ray_ingest_adds_nothing(tmp_path):
    store = _store(tmp_path, "again")
    first = ingest_paths_ray(store, [str(MLPERF)])
    assert first.added and not first.rejected
    counts = store.counts()
    second = ingest_paths_ray(store, [str(MLPERF)])
    assert second.added == [] and not second.rejected
    assert second.duplicates == [(source, source) for source, _ in first.added]
    assert store.counts() == counts


def test_bad_file_is_rejected_with_line_and_the_others_land(tmp_path):
    folder = tmp_path / "lake"
    shutil.copytree(MLPERF, folder)
    src = next(p for p in sorted(folder.rglob("result_*.txt")) if ":::MLLOG" in p.read_text())
    lines = src.read_text().splitlines()
    target = next(i for i, line in enumerate(lines) if '"epoch_stop"' in line)
    lines[target] = lines[target][: len(lines[target]) // 2]  # cut a JSON record in half
    (src.parent / "result_garbled.txt").write_text("\n".join(lines) + "\n")
    (folder / "notes.log").write_text("hello\nnot a training log\n")
    shutil.copy(src, src.parent / "result_copy.txt")  # same content under a second path
    local, remote = _store(tmp_path, "local"), _store(tmp_path, "ray")
    want = ingest_paths(local, [str(folder)])
    got = ingest_paths_ray(remote, [str(folder)], files_per_task=2)
    assert _summary(got) == _summary(want)
    reasons = {e.source: (e.line, e.reason) for e in got.rejected}
    assert reasons[str(src.parent / "result_garbled.txt")][0] == target + 1
    assert "unrecognised format" in reasons[str(folder / "notes.log")][1]
    assert got.duplicates == [(str(src.parent / "result_copy.txt"), str(src))]
    assert len(got.added) == len(list(MLPERF.rglob("result_*.txt")))
    assert stored_runs(remote) == stored_runs(local)
    # the Ray ingest records its rejections itself, as the local one does
    assert sorted((r.source, r.line, r.reason) for r in remote.rejections()) == sorted(
        (r.source, r.line, r.reason) for r in local.rejections())
    assert len(remote.rejections(current=False)) == len(got.rejected)


def test_a_task_that_kills_its_worker_rejects_only_its_file(tmp_path):
    folder = tmp_path / "lake"
    shutil.copytree(DATA / "tf_cnn", folder)
    for log in sorted((DATA / "caffe").glob("ethanhe42_*.log")):
        shutil.copy(log, folder)
    (folder / "poison.log").write_text("this file kills whichever worker parses it\n")

    def crashing(items, overrides):
        if any(Path(path).name == "poison.log" for _, path in items):
            os._exit(1)  # a real worker death, as a segfault or the OOM killer would cause
        return parse_batch(items, overrides)

    store = _store(tmp_path, "crash")
    report = ingest_paths_ray(
        store,
        [str(folder)],
        IngestOptions(network="resnet20"),
        files_per_task=4,
        max_retries=1,
        task=crashing,
    )
    [err] = report.rejected
    assert err.source == str(folder / "poison.log")
    assert "parse task failed after 1 retries" in err.reason
    assert len(report.added) == 3 and store.counts()["files"] == 3


def test_a_format_registered_at_run_time_parses_in_ray_tasks(tmp_path):
    """The toy CSV format (tests/ingest/test_toy_log_format.py), registered here only, is
    parsed by Ray's workers: they take the driver's registry and import it by name."""
    import test_toy_log_format as toy

    logs = toy.toy_tree(tmp_path / "logs")
    store = _store(tmp_path, "toy")
    register(toy.ME, first=True)
    try:
        report = ingest_paths_ray(store, [str(tmp_path / "logs")], files_per_task=2)
    finally:
        unregister(toy.ME)
    assert sorted(s for s, _ in report.added) == sorted(str(p) for p in logs)
    assert [(e.line, e.source) for e in report.rejected] == [(2, str(tmp_path / "logs" /
                                                                    "bad.csv"))]
    assert {r.format for r in store.runs()} == {toy.FORMAT}
    assert os.getpid() not in {r.meta["parsed_in"] for r in store.runs()}


def test_cli_ingest_ray_json(tmp_path):
    runner = CliRunner()
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    args = ["ingest", str(MLPERF), "--store", url, "--ray", "--json"]
    first = runner.invoke(app, args, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    payload = json.loads(first.stdout)
    assert payload["added"] and not payload["rejected"]
    second = json.loads(runner.invoke(app, args, catch_exceptions=False).stdout)
    assert second["added"] == [] and len(second["duplicates"]) == len(payload["added"])
    assert second["store"] == payload["store"]


def test_cli_ray_address_joins_a_running_cluster(tmp_path):
    address = ray.get_runtime_context().gcs_address  # the module's Ray, joined by a 2nd driver
    url = f"sqlite:///{tmp_path / 'joined.db'}"
    args = ["ingest", str(DATA / "tf_cnn"), "--store", url, "--ray-address", address, "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "jobcast", *args], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert len(payload["added"]) == 1 and payload["store"]["files"] == 1


def test_cli_without_ray_says_how_to_install_it(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None; "  # as if ray were not installed
        "from jobcast.cli.app import main; "
        f"sys.argv = ['jobcast', 'ingest', {str(MLPERF)!r}, '--store', "
        f"'sqlite:///{tmp_path / 'x.db'}', '--ray']; main()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert "pip install ray" in out.stderr and "Traceback" not in out.stderr
