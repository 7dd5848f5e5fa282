"""Issue 26 renames in the ingest room: each new name, and its old one kept for one release.

* ``ParsedRun.stack`` / ``StoredRun.stack`` (the software stack); ``framework`` is the
  deprecated alias (attribute, and ``ParsedRun``'s constructor keyword). The database column
  is still ``framework``.
* ``ingest.parsers.ParseOverrides`` (alias ``Overrides``), ``ingest.pipeline.IngestOptions``
  (alias ``Overrides``).
* ``ParsedRun.stored_key()``: the one rule for a run's deployment key (the key an ingest set
  in ``meta["deployment_key"]`` wins, as the store's column does).
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from fleet.deployment import Deployment
from ingest import parsers, pipeline
from ingest.events import ParsedRun, Segment
from ingest.store import Store


def _run(**changes: object) -> ParsedRun:
    run = ParsedRun(format="jsonl", network="resnet50", deployment=Deployment("V100", 8),
                    stack="MXNet 22.05", batch_size=256, start_time=1.6e9,
                    segments=[Segment("train", 100, 20.0, batch_size=256, start_time=1.6e9)])
    return replace(run, **changes)


def test_stack_and_its_framework_alias():
    run = _run()
    with pytest.deprecated_call(match="use ParsedRun.stack"):
        assert run.stack == run.framework == "MXNet 22.05"
    with pytest.deprecated_call(match=r"use ParsedRun\(stack=...\)"):
        old = ParsedRun(format="jsonl", framework="Caffe")  # the old keyword
    assert old.stack == "Caffe"
    with pytest.deprecated_call():
        assert _run(framework="TF 1.15").stack == "TF 1.15"  # replace() with the old name
    with pytest.deprecated_call():
        run.framework = "PyTorch 2.1"
    assert run.stack == "PyTorch 2.1"


def test_stored_run_reads_the_stack_from_the_framework_column(tmp_path):
    db = tmp_path / "s.db"
    store = Store(f"sqlite:///{db}")
    store.add_file(content_hash="0" * 64, source="a.jsonl", fmt="jsonl", size=1,
                   parsed=[_run()])
    [stored] = store.runs()
    with pytest.deprecated_call(match="use StoredRun.stack"):
        assert stored.stack == stored.framework == "MXNet 22.05"
    with sqlite3.connect(db) as conn:
        assert conn.execute("select framework from runs").fetchall() == [("MXNet 22.05",)]


def test_overrides_aliases():
    with pytest.deprecated_call(match="use ingest.parsers.ParseOverrides"):
        assert parsers.Overrides is parsers.ParseOverrides
    with pytest.deprecated_call(match="use ingest.pipeline.IngestOptions"):
        assert pipeline.Overrides is pipeline.IngestOptions
    assert issubclass(pipeline.IngestOptions, parsers.ParseOverrides)
    assert pipeline.IngestOptions(deployment="8x V100", override=True).override


def test_stored_key_prefers_the_key_an_ingest_set(tmp_path):
    logged = _run()
    assert logged.stored_key() == Deployment("V100", 8).key
    flagged = _run(meta={"deployment_key": "nvidia-a100-x4"})  # --override, or gpu-x<n>
    assert flagged.stored_key() == "nvidia-a100-x4"
    assert _run(deployment=None).stored_key() is None
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.add_file(content_hash="1" * 64, source="b.jsonl", fmt="jsonl", size=1,
                   parsed=[flagged])
    assert [r.deployment for r in store.runs()] == [flagged.stored_key()]
