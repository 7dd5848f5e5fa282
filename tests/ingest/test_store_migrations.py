"""Schema versions: a store made by the released code (git a059d72) is refused until
``jobcast store upgrade`` migrates it with its data intact; a newer store is refused; a new
store is created at the newest revision, with the schema the migrations build; SQLite and a
real PostgreSQL alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa
from paths import DATA, REPO, code_at
from typer.testing import CliRunner

from fleet.deployment import Deployment
from ingest import migrations
from ingest.events import ParsedRun, ParseError, Segment
from ingest.store import SchemaVersionError, Store, make_engine, metadata

runner = CliRunner()
RELEASED = "a059d72"  # the last commit whose store had no schema versions


def _cli(*args: str):
    from jobcast.cli.app import app

    return runner.invoke(app, list(args), catch_exceptions=False)


def _tables(url: str) -> dict[str, list[tuple]]:
    """Every row of every table (but the version table), sorted: the data, as stored."""
    engine = make_engine(url)
    with engine.connect() as conn:
        names = [t for t in sa.inspect(conn).get_table_names() if t != migrations.VERSION_TABLE]
        out = {name: sorted(tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {name}")))
               for name in names}
    engine.dispose()
    return out


def _schema_diff(url: str) -> list:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = make_engine(url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table":
                                                         migrations.VERSION_TABLE})
        diff = compare_metadata(context, metadata)
    engine.dispose()
    return diff


def test_the_revision_list_is_the_script_chain():
    assert list(migrations.REVISIONS) == migrations.script_revisions()
    assert migrations.REVISIONS[-1] == migrations.HEAD


def test_a_new_store_is_created_at_head_with_the_migrated_schema(empty_url, tmp_path):
    Store(empty_url).engine.dispose()
    assert migrations.state(make_engine(empty_url)).status == "current"
    assert _schema_diff(empty_url) == []
    # the same schema, built by running every revision on another empty database
    other = f"sqlite:///{tmp_path / 'migrated.db'}"
    assert migrations.upgrade(make_engine(other)) == (None, migrations.HEAD)
    assert _schema_diff(other) == []
    assert set(_tables(other)) == set(_tables(empty_url))


def test_a_store_made_by_the_released_code_upgrades_with_its_data(empty_url, tmp_path):
    tree = code_at(RELEASED, tmp_path)
    code = ("import sys; from ingest.store import Store; from ingest.pipeline import "
            "ingest_paths; r = ingest_paths(Store(sys.argv[1]), sys.argv[2:]); "
            "print(len(r.added))")
    made = subprocess.run([sys.executable, "-c", code, empty_url, str(DATA / "mlperf"),
                           str(DATA / "tf_cnn")], cwd=tree, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(tree)})
    assert made.returncode == 0, made.stderr[-2000:]
    assert int(made.stdout) > 0
    before = _tables(empty_url)
    assert before["schema_info"] == [(1,)] and before["runs"]

    with pytest.raises(SchemaVersionError, match="jobcast store upgrade"):
        Store(empty_url)
    refused = _cli("runs", "--store", empty_url, "--json")
    assert refused.exit_code == 2 and "jobcast store upgrade" in refused.output
    version = _cli("store", "version", "--store", empty_url, "--json")
    assert version.exit_code == 1
    assert json.loads(version.stdout)["status"] == "outdated"
    assert _tables(empty_url) == before  # refusing changed nothing

    upgraded = _cli("store", "upgrade", "--store", empty_url, "--json")
    assert upgraded.exit_code == 0, upgraded.output
    assert json.loads(upgraded.stdout) == {
        "store": sa.engine.make_url(empty_url).render_as_string(hide_password=True),
        "from": "0001", "to": migrations.HEAD, "changed": True}
    after = _tables(empty_url)
    assert "schema_info" not in after and after["rejections"] == []
    assert {k: v for k, v in after.items() if k in before} == \
        {k: v for k, v in before.items() if k != "schema_info"}
    assert _schema_diff(empty_url) == []

    again = _cli("store", "upgrade", "--store", empty_url, "--json")
    assert json.loads(again.stdout)["changed"] is False
    runs = _cli("runs", "--store", empty_url, "--json")
    assert runs.exit_code == 0
    assert len(json.loads(runs.stdout)) == len(before["runs"])
    store = Store(empty_url)
    store.add_rejections([ParseError("unrecognised format", line=1, source="x.log")])
    assert [r.source for r in store.rejections()] == ["x.log"]
    store.engine.dispose()


def test_a_store_newer_than_the_code_is_refused(empty_url):
    store = Store(empty_url)
    store.add_rejections([ParseError("bad", line=2, source="a.log")])
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '9999'"))
    store.engine.dispose()
    before = _tables(empty_url)
    with pytest.raises(SchemaVersionError, match="newer than this jobcast"):
        Store(empty_url)
    for args in (("store", "upgrade"), ("ingest", str(DATA / "tf_cnn")), ("fit",)):
        result = _cli(*args, "--store", empty_url)
        assert result.exit_code == 2, (args, result.output)
        assert "9999, newer than this jobcast" in result.output
        assert "Traceback" not in result.output
    assert _cli("store", "version", "--store", empty_url).exit_code == 1
    assert _tables(empty_url) == before


def test_processes_opening_a_new_store_at_once_create_it_once(empty_url, tmp_path):
    code = "import sys; from ingest.store import Store; Store(sys.argv[1]).engine.dispose()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", code, empty_url], env=env, cwd=tmp_path,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
    engine = make_engine(empty_url)
    with engine.connect() as conn:
        versions = conn.execute(sa.text(f"SELECT version_num FROM {migrations.VERSION_TABLE}"))
        assert list(versions.scalars()) == [migrations.HEAD]
    engine.dispose()


def test_a_database_with_foreign_tables_is_not_taken_for_a_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'mlflow-like.db'}"
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE runs (run_uuid VARCHAR(32) PRIMARY KEY)"))
    engine.dispose()
    with pytest.raises(SchemaVersionError, match="not a jobcast store"):
        Store(url)


def _one_run() -> ParsedRun:
    return ParsedRun(format="jsonl", network="resnet50", deployment=Deployment("V100", 1, 1),
                     stack=None, batch_size=32, start_time=None,
                     segments=[Segment("train", iterations=10, seconds=5.0)], meta={})


def test_rejections_stand_until_the_file_is_stored(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    first = ParseError("no deployment", line=1, source="a.log")
    first.content_hash = "a" * 64
    store.add_rejections([first, ParseError("unreadable", source="b.log")])
    store.add_rejections([first])  # the same file refused again by a later ingest
    assert [(r.source, r.line, r.reason) for r in store.rejections()] == [
        ("a.log", 1, "no deployment"), ("b.log", None, "unreadable")]
    assert len(store.rejections(current=False)) == 3
    # the same content stored (e.g. with --deployment): a.log stands no more
    store.add_file(content_hash="a" * 64, source="other.log", fmt="jsonl", size=1,
                   parsed=[_one_run()])
    assert [r.source for r in store.rejections()] == ["b.log"]
    # b.log fixed (other content, same source) and stored after its rejection
    store.add_file(content_hash="b" * 64, source="b.log", fmt="jsonl", size=1,
                   parsed=[_one_run()])
    assert store.rejections() == []
    assert len(store.rejections(current=False)) == 3
