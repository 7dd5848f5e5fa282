"""Ingest pipeline on real sample logs: idempotent, transactional, clear rejections."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import DATA

from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store

MLPERF = DATA / "mlperf"
CAFFE = DATA / "caffe"


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'jobcast.db'}")


def _mlperf_logs() -> list[Path]:
    return sorted(MLPERF.rglob("result_*.txt"))


def test_ingest_is_idempotent(store):
    first = ingest_paths(store, [str(MLPERF)])
    assert not first.rejected
    assert len(first.added) == len(_mlperf_logs())
    assert all(s.endswith(".json") for s in first.skipped)  # system descriptions, not logs
    counts = store.counts()
    again = ingest_paths(store, [str(MLPERF)])
    assert again.added == []
    assert len(again.duplicates) == len(first.added)
    assert store.counts() == counts


def test_same_content_elsewhere_is_a_duplicate(store, tmp_path):
    log = _mlperf_logs()[0]
    ingest_paths(store, [str(log)])
    copy = tmp_path / "renamed log.txt"
    shutil.copy(log, copy)
    report = ingest_paths(store, [str(copy)], IngestOptions(deployment="nvidia-v100-x8"))
    assert report.duplicates == [(str(copy), str(log))]
    assert store.counts()["files"] == 1


def test_garbled_log_is_rejected_with_line_and_nothing_stored(store, tmp_path):
    src = next(p for p in _mlperf_logs() if ":::MLLOG" in p.read_text())
    lines = src.read_text().splitlines()
    target = next(
        i for i, line in enumerate(lines) if '"epoch_stop"' in line or "block_stop" in line
    )
    lines[target] = lines[target][: len(lines[target]) // 2]  # cut a JSON record in half
    bad = tmp_path / "garbled.txt"
    bad.write_text("\n".join(lines) + "\n")
    report = ingest_paths(store, [str(bad)], IngestOptions(deployment="nvidia-a100-x8"))
    [err] = report.rejected
    assert err.source == str(bad)
    assert err.line == target + 1
    assert store.counts() == {"files": 0, "runs": 0, "segments": 0}


def test_unknown_format_and_missing_path(store, tmp_path):
    junk = tmp_path / "notes.log"
    junk.write_text("hello\nthis is not a training log\n")
    report = ingest_paths(store, [str(junk), str(tmp_path / "absent.log")])
    reasons = {e.source: e.reason for e in report.rejected}
    assert "unrecognised format" in reasons[str(junk)]
    assert "no such file" in reasons[str(tmp_path / "absent.log")]
    assert store.counts()["files"] == 0


def test_binary_file_is_rejected(store, tmp_path):
    blob = tmp_path / "weights.bin"
    blob.write_bytes(b"\x00\x01\x02" * 100)
    [err] = ingest_paths(store, [str(blob)]).rejected
    assert "binary" in err.reason


def test_overrides_supply_what_the_log_lacks(store):
    logs = sorted(CAFFE.glob("*.log"))
    assert logs, "caffe samples missing"
    lacking = ingest_paths(store, [str(p) for p in logs])
    no_gpu = [e for e in lacking.rejected if "--deployment" in e.reason]
    if not no_gpu:
        pytest.skip("every caffe sample names its GPU")
    fixed = ingest_paths(
        store, [e.source for e in no_gpu],
        IngestOptions(deployment="2x Tesla K40", network="CaffeNet"),
    )
    assert not fixed.rejected
    runs = [r for r in store.runs() if r.source in {e.source for e in no_gpu}]
    assert runs and {r.deployment for r in runs} == {"nvidia-k40-x2"}
    assert {r.network for r in runs} == {"caffenet"}


def test_kill_during_ingest_leaves_only_whole_files(tmp_path):
    """SIGKILL an ingest once k files are in: every stored file has all its runs and segments."""
    folder = tmp_path / "logs"
    shutil.copytree(MLPERF, folder)
    reference = Store(f"sqlite:///{tmp_path / 'reference.db'}")
    ingest_paths(reference, [str(folder)])
    want = _per_file_counts(reference)
    partial_seen = False
    for attempt in range(3):
        db = tmp_path / f"killed-{attempt}.db"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobcast",
                "ingest",
                str(folder),
                "--store",
                f"sqlite:///{db}",
                "--json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        _wait_for_files(db, attempt + 1, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not db.exists():
            continue
        got = _per_file_counts(Store(f"sqlite:///{db}"))
        for source, counts in got.items():
            assert counts == want[source], f"{source} stored partially"
        partial_seen |= 0 < len(got) < len(want)
        # Resuming completes the store without duplicates.
        ingest_paths(Store(f"sqlite:///{db}"), [str(folder)])
        assert _per_file_counts(Store(f"sqlite:///{db}")) == want
        if partial_seen:
            break
    assert partial_seen, "no kill landed in the middle of an ingest; widen the delays"


def _wait_for_files(db: Path, k: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Return once the store at ``db`` holds ``k`` files (or the process ended)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=0.1) as conn:
                    if conn.execute("select count(*) from files").fetchone()[0] >= k:
                        return
            except sqlite3.OperationalError:
                pass  # table not created yet, or locked by the writer
        time.sleep(0.005)


def _per_file_counts(store: Store) -> dict[str, tuple[int, int]]:
    runs = store.runs()
    segs = store.segments()
    out: dict[str, tuple[int, int]] = {}
    for r in runs:
        n_seg = sum(1 for s in segs if s["run_id"] == r.id)
        prev = out.get(r.source, (0, 0))
        out[r.source] = (prev[0] + 1, prev[1] + n_seg)
    return out
