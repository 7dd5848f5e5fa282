"""The store keeps files whole, once, and reads back what was written."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from fleet.deployment import Deployment
from ingest.events import ParsedRun, Segment
from ingest.store import Store, store_url


def _run(n_epochs: int = 3, seconds: float = 100.0) -> ParsedRun:
    segs = [
        Segment(
            "train",
            iterations=50,
            seconds=seconds + e,
            batch_size=256,
            epoch_start=e,
            epoch_end=e,
            points=((25, seconds / 2), (50, seconds + e)),
        )
        for e in range(n_epochs)
    ]
    segs.append(Segment("test", iterations=10, seconds=5.0, batch_size=256))
    return ParsedRun(
        format="jsonl",
        network="resnet50",
        deployment=Deployment("NVIDIA A100-SXM4-80GB", 8, 1),
        stack="MXNet NGC 20.06",
        batch_size=256,
        start_time=1_600_000_000.0,
        segments=segs,
        meta={"submitter": "x"},
    )


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'jobcast.db'}")


def test_round_trip(store):
    file_id = store.add_file(
        content_hash="a" * 64, source="a.log", fmt="jsonl", size=10, parsed=[_run()]
    )
    assert file_id is not None
    [run] = store.runs()
    assert run.network == "resnet50"
    assert run.deployment == "nvidia-a100-sxm4-80gb-x8"
    assert run.meta == {"submitter": "x"}
    segs = store.segments([run.id])
    assert [s["phase"] for s in segs] == ["train"] * 3 + ["test"]
    assert segs[1]["points"] == [(25.0, 50.0), (50.0, 101.0)]
    assert store.counts() == {"files": 1, "runs": 1, "segments": 4}


def test_same_content_is_stored_once(store):
    assert (
        store.add_file(
            content_hash="b" * 64, source="one.log", fmt="jsonl", size=1, parsed=[_run()]
        )
        is not None
    )
    assert (
        store.add_file(
            content_hash="b" * 64, source="copy.log", fmt="jsonl", size=1, parsed=[_run()]
        )
        is None
    )
    assert store.has_content("b" * 64) == "one.log"
    assert store.counts()["runs"] == 1


def test_failed_write_leaves_nothing(store):
    bad = _run()
    bad.network = None  # violates NOT NULL on the second run's insert
    with pytest.raises(sa.exc.IntegrityError):
        store.add_file(
            content_hash="c" * 64, source="bad.log", fmt="jsonl", size=1, parsed=[_run(), bad]
        )
    assert store.counts() == {"files": 0, "runs": 0, "segments": 0}


def test_store_url_precedence(monkeypatch):
    monkeypatch.setenv("JOBCAST_STORE", "sqlite:///env.db")
    assert store_url("sqlite:///flag.db") == "sqlite:///flag.db"
    assert store_url(None) == "sqlite:///env.db"
    monkeypatch.delenv("JOBCAST_STORE")
    monkeypatch.setenv("JOBCAST_HOME", "/srv/jobcast-data")  # the data directory's store
    assert store_url(None) == "sqlite:////srv/jobcast-data/jobcast.db"
