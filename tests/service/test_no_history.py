"""A forecast from a store without history (issue 23, speed): the store probe and the
forecaster without history routes answer exactly as the empty store opened the normal way.

``jobcast predict`` asks :func:`ingest.store_probe.holds_no_history` first; where it says the
store holds nothing, the forecaster gets no store and builds only the routes that need no
history (``jobcast.service.engine.route_registry.history_routes()``). These tests hold that path to
the normal one: same answers and same failure messages on a spread of requests, the probe's
"unsure" wherever the normal path would do something else (refuse, report, read history),
and no file created.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ingest.migrations as migrations
from fleet.deployment import Deployment
from ingest.events import ParsedRun, Segment
from ingest.store import Store
from ingest.store_probe import (
    LEGACY_TABLE,
    STORE_TABLES,
    VERSION_TABLE,
    head_revision,
    holds_no_history,
)
from jobcast.cli.app import app
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.route_registry import history_routes, route_names

runner = CliRunner()

ASKS = [
    dict(network="resnet50", device="V100", batch_size=64, iterations=100),
    dict(network="resnet50", device="V100", batch_size=64, iterations=100, phase="train"),
    dict(network="vgg16", device="T4", batch_size=16, iterations=50, phase="test"),
    dict(network="resnet50", device="A100", batch_size=128, epochs=2, dataset_size=50_000,
         eval_every=1, eval_size=10_000, precision="fp16", framework="pytorch"),
    dict(network="resnet50", deployment="8x NVIDIA A100-SXM4-40GB", batch_size=512,
         iterations=100),
    dict(network="resnet50", deployment="2x Tesla T4", batch_size=64, iterations=10,
         system="lab/box"),
    dict(network="resnet50", device="V100", batch_size=4096, iterations=10),  # will not fit
    dict(network="resnet50", device="Acme Zeta 9", batch_size=64, iterations=10),
    dict(network="no-such-net", device="V100", batch_size=64, iterations=10),
    dict(network="resnet50", system="lab/box", batch_size=64, iterations=10),
    dict(network="resnet50", device="V100", batch_size=64),
    dict(network="resnet50", batch_size=64, iterations=10),
]


def _answer(fc: Forecaster, ask: dict) -> dict:
    out = fc.forecast(JobRequest(**ask), now=1.7e9).to_dict()
    return json.loads(json.dumps(out, default=str))


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Store:
    return Store(f"sqlite:///{tmp_path_factory.mktemp('empty') / 'store.db'}")


@pytest.mark.parametrize("ask", ASKS, ids=lambda a: "-".join(str(v) for v in a.values())[:60])
def test_without_history_the_answer_is_the_empty_stores(ask, empty_store):
    bare = Forecaster(None)
    assert _answer(bare, ask) == _answer(Forecaster(empty_store), ask)
    assert not bare.has_history
    assert [r.name for r in bare.routes] == [r.name for r in (bare.layerwise,)]
    assert set(route_names()) - set(history_routes()) == {"layerwise"}


def _run() -> ParsedRun:
    segs = [Segment("train", iterations=50, seconds=10.0 + e, batch_size=64, epoch_start=e,
                    epoch_end=e, points=((25, 5.0), (50, 10.0 + e))) for e in range(3)]
    return ParsedRun(format="jsonl", network="resnet50",
                     deployment=Deployment("Tesla V100-SXM2-16GB", 1, 1), stack="x",
                     batch_size=64, start_time=1_600_000_000.0, segments=segs)


def test_probe_says_nothing_only_where_nothing_is(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBCAST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JOBCAST_STORE", raising=False)
    assert holds_no_history(None)  # the default store, not created yet
    assert not holds_no_history(f"sqlite:///{tmp_path / 'missing.db'}")  # named: its opener's
    monkeypatch.setenv("JOBCAST_STORE", f"sqlite:///{tmp_path / 'missing.db'}")
    assert not holds_no_history(None)
    monkeypatch.delenv("JOBCAST_STORE")
    assert not (tmp_path / "home").exists() and not (tmp_path / "missing.db").exists()

    (tmp_path / "zero.db").touch()  # an empty database: the store would create its tables
    assert holds_no_history(f"sqlite:///{tmp_path / 'zero.db'}")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(url)
    assert holds_no_history(url)
    store.add_file(content_hash="a" * 64, source="a.jsonl", fmt="jsonl", size=1,
                   parsed=[_run()])
    assert not holds_no_history(url)

    fitted = f"sqlite:///{tmp_path / 'fitted.db'}"
    Store(fitted).save_models([], extra={"selector": {"cells": {}}})  # an artifact, no run
    assert not holds_no_history(fitted)

    for name in ("notdb.db", "dir.db"):
        path = tmp_path / name
        path.write_text("not a database") if name == "notdb.db" else path.mkdir()
        assert not holds_no_history(f"sqlite:///{path}")
    for url in ("postgresql+psycopg://u:p@127.0.0.1:1/j", "sqlite://", "sqlite:///:memory:",
                f"sqlite:///{tmp_path / 'store.db'}?mode=ro", "sqlite:///~/x.db"):
        assert not holds_no_history(url), url
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dir.db", "fitted.db", "notdb.db", "store.db", "zero.db"]


def test_probe_is_unsure_of_a_store_at_another_revision(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    Store(url)
    with sqlite3.connect(tmp_path / "old.db") as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0001'")
    assert not holds_no_history(url)  # Store() refuses it: the CLI keeps saying so
    result = runner.invoke(app, ["predict", "--network", "resnet50", "--device", "V100",
                                 "--batch-size", "8", "--iterations", "1", "--store", url])
    assert result.exit_code != 0 and "jobcast store upgrade" in " ".join(result.output.split())
    with sqlite3.connect(tmp_path / "legacy.db") as conn:
        conn.execute(f"CREATE TABLE {LEGACY_TABLE} (version INTEGER)")
    assert not holds_no_history(f"sqlite:///{tmp_path / 'legacy.db'}")


def test_probe_names_the_tables_and_revision_the_migrations_do():
    assert head_revision() == migrations.HEAD
    assert (VERSION_TABLE, LEGACY_TABLE, STORE_TABLES) == (
        migrations.VERSION_TABLE, migrations.LEGACY_TABLE, migrations.STORE_TABLES)


def test_cli_predict_reads_history_where_the_store_has_some(tmp_path):
    """A store with runs takes the normal path: the answer comes from them."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).add_file(content_hash="b" * 64, source="b.jsonl", fmt="jsonl", size=1,
                        parsed=[_run()])
    args = ["predict", "--network", "resnet50", "--deployment", "1x Tesla V100-SXM2-16GB",
            "--batch-size", "64", "--iterations", "100", "--store", url, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["candidate"] == "fleet-rate"


def test_cli_predict_of_an_empty_store_file_changes_nothing(tmp_path):
    """A zero-byte store file answers as before (the layerwise forecast) and stays as it was:
    the probe reads it read-only."""
    path = tmp_path / "zero.db"
    path.touch()
    args = ["predict", "--network", "resnet50", "--device", "V100", "--batch-size", "64",
            "--iterations", "100", "--store", f"sqlite:///{path}", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["route"] == "layerwise"
    assert path.stat().st_size == 0 and [p.name for p in Path(tmp_path).iterdir()] == [
        "zero.db"]
