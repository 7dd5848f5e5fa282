"""Batched and parallel ingest: the same store as one file at a time, one bad file never
spoils a batch, a killed ingest leaves whole files only."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lambda_tree import SYSTEM, make_tree
from paths import DATA

from ingest import parallel
from ingest.parsers import _REGISTRY, register
from ingest.pipeline import ingest_paths
from ingest.ray_ingest import stored_runs
from ingest.store import Store


def store(tmp_path: Path, name: str) -> Store:
    return Store(f"sqlite:///{tmp_path / name}")


def test_batched_pooled_and_per_file_ingests_store_the_same(tmp_path, monkeypatch):
    logs = make_tree(tmp_path / "logs", 8)
    folder = [str(tmp_path / "logs")]
    per_file = store(tmp_path, "per_file.db")
    one = ingest_paths(per_file, folder, batch_files=1)
    batched = store(tmp_path, "batched.db")
    two = ingest_paths(batched, folder)
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # a pool even for this small tree
    pooled = store(tmp_path, "pooled.db")
    three = ingest_paths(pooled, folder, workers=2, batch_files=5)
    assert len(one.added) == len(logs) and not one.rejected
    assert one.added == two.added == three.added  # discovery order
    assert one.skipped == two.skipped == three.skipped == [str(tmp_path / "logs" / SYSTEM /
                                                                "metadata")]
    assert stored_runs(per_file) == stored_runs(batched) == stored_runs(pooled)
    again = ingest_paths(pooled, folder, workers=2)
    assert again.added == [] and len(again.duplicates) == len(logs)
    assert store(tmp_path, "pooled.db").counts() == per_file.counts()


def test_same_content_twice_in_one_ingest(tmp_path):
    logs = make_tree(tmp_path / "logs", 2)
    copy = tmp_path / "logs" / "zz-copy.log"
    shutil.copy(logs[0], copy)
    report = ingest_paths(store(tmp_path, "s.db"), [str(tmp_path / "logs")])
    assert (str(copy), str(logs[0])) in report.duplicates
    assert len(report.added) == len(logs)


def test_a_rejected_first_copy_lets_the_next_one_be_parsed(tmp_path):
    """The first path of a content sits in a folder that contradicts it (its name says two
    GPUs, the log ran on one): rejected; the same content in a correct folder is then stored."""
    logs = make_tree(tmp_path / "logs", 1)
    inside = str(logs[0].relative_to(tmp_path / "logs" / SYSTEM)).replace("-1gpus", "-2gpus")
    assert "-2gpus" in inside
    wrong = tmp_path / "logs" / "A.logs" / inside
    wrong.parent.mkdir(parents=True)
    shutil.copy(logs[0], wrong)
    report = ingest_paths(store(tmp_path, "s.db"), [str(tmp_path / "logs")])
    assert [e.source for e in report.rejected] == [str(wrong)]
    assert str(logs[0]) in {source for source, _ in report.added}


@pytest.fixture
def crashing_parser(tmp_path, monkeypatch):
    """A registered format whose parser raises the exception a file names, at line 3."""
    module = tmp_path / "pkg" / "crashing_format.py"
    module.parent.mkdir()
    module.write_text(textwrap.dedent('''
        FORMAT = "crashing"

        def sniff(head):
            return bool(head) and head[0].startswith("CRASH ")

        def parse(lines, ctx):
            for number, line in enumerate(lines, start=1):
                if number == 3:
                    kind = lines[0].split()[1]
                    if kind == "RecursionError":
                        def deep(n):
                            return deep(n + 1)
                        deep(0)
                    raise {"OverflowError": OverflowError, "AttributeError": AttributeError,
                           "ValueError": ValueError}[kind]("boom " + "9" * 500)
            return []
    '''))
    monkeypatch.syspath_prepend(str(module.parent))
    register("crashing_format")
    yield
    _REGISTRY.remove("crashing_format")


@pytest.mark.parametrize("kind", ["OverflowError", "RecursionError", "AttributeError",
                                  "ValueError"])
def test_a_crashing_parser_rejects_its_file_only(tmp_path, crashing_parser, kind):
    logs = make_tree(tmp_path / "logs", 3)
    bad = tmp_path / "logs" / "bad.log"
    bad.write_text(f"CRASH {kind}\nsecond\nthird\nfourth\n")
    report = ingest_paths(store(tmp_path, "s.db"), [str(tmp_path / "logs")])
    [err] = report.rejected
    assert err.source == str(bad) and err.line == 3
    assert err.reason.startswith(f"parser failed: {kind}")
    assert len(err.reason) < 300  # a 500-digit message is cut
    assert len(report.added) == len(logs)


def test_a_file_the_store_refuses_spoils_no_batch(tmp_path):
    """A file name that is not UTF-8 cannot be stored: that file is rejected, its batch
    mates are stored."""
    logs = make_tree(tmp_path / "logs", 3)
    odd = os.fsdecode(bytes(tmp_path / "logs") + b"/odd\xff.log")
    shutil.copy(DATA / "tf_cnn" / "lambda_7742-8xA100_real_fp16_resnet50-448.txt", odd)
    st = store(tmp_path, "s.db")
    report = ingest_paths(st, [str(tmp_path / "logs")])
    [err] = report.rejected
    assert err.source == odd and err.reason.startswith("store refused: UnicodeEncodeError")
    assert len(report.added) == len(logs) == st.counts()["files"]


def _per_file(db: Path) -> dict[str, tuple[int, int]]:
    """(runs, segments) per stored source, read with plain sqlite3."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select f.source, count(distinct r.id), count(s.id) from files f "
            "left join runs r on r.file_id = f.id left join segments s on s.run_id = r.id "
            "group by f.id").fetchall()
    return {source: (n_runs, n_segments) for source, n_runs, n_segments in rows}


def _stored(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=0.1) as conn:
            return conn.execute("select count(*) from files").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet, or locked by the writer
        return 0


def test_kill_9_leaves_whole_files_and_a_rerun_completes(tmp_path):
    logs = make_tree(tmp_path / "logs", 100)  # 300 files, about 7 MB: a pool of 2 parses
    folder = str(tmp_path / "logs")
    reference = tmp_path / "reference.db"
    ingest_paths(Store(f"sqlite:///{reference}"), [folder])
    want = _per_file(reference)
    assert len(want) == len(logs)
    partial = False
    for attempt in range(3):
        db = tmp_path / f"killed-{attempt}.db"
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobcast", "ingest", folder, "--store", f"sqlite:///{db}",
             "--json", "--workers", "2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and _stored(db) < 1:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = _per_file(db) if db.exists() else {}
        for source, counts in got.items():
            assert counts == want[source], f"{source} stored partially"
        partial |= 0 < len(got) < len(want)
        ingest_paths(Store(f"sqlite:///{db}"), [folder])  # the rerun completes the store
        assert _per_file(db) == want
        if partial:
            break
    assert partial, "no kill landed in the middle of an ingest"
