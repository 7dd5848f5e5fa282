"""The whole-job index (issue 35, "at a cluster's scale"): a job's runs read from
``whole_jobs`` by its key are exactly what decoding every run's JSON gives (but the traces),
whatever ``--network``/``--system``/``--iterations`` said; a store made by the code before
the index (commit 014e1ec, schema 0004) is refused until ``jobcast store upgrade``, which fills
the index from the runs already stored."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import sqlalchemy as sa
from paths import code_at
from slurm_shapes import document, history
from typer.testing import CliRunner

from ingest import migrations
from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import SchemaVersionError, Store, make_engine
from ingest.whole_job import normal_key, whole_job_runs

BEFORE_INDEX = "014e1ec"  # the last commit whose store had no whole-job index (schema 0004)
T0 = 1_714_000_000
NAMES = ("resnet50-nightly", "vit_sweep 100%", 'say "hi"\\now')


def _runs(n: int, offset: int) -> list[dict]:
    return [{"start": T0 + offset * 600 + i * 86400, "seconds": 1700 + 30 * i,
             "state": "FAILED" if i == 2 else "COMPLETED"} for i in range(n)]


def _exports(folder) -> list[str]:
    paths, first = [], 7_000_000
    for i, name in enumerate(NAMES):
        path = folder / f"jobs{i}.json"
        path.write_text(document(history(name, _runs(4, i), first_id=first), "old"))
        paths.append(str(path))
        first += 100
    return paths


def _untraced(runs: list) -> list:
    return [dataclasses.replace(r, trace=None) for r in runs]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    tmp = tmp_path_factory.mktemp("index")
    store = Store(f"sqlite:///{tmp / 'jobs.db'}")
    assert ingest_paths(store, _exports(tmp)).ok
    flagged = tmp / "flagged.json"
    flagged.write_text(document(history("resnet50-nightly", _runs(3, 9), first_id=9_000_000),
                                "new"))
    options = IngestOptions(system="Team  ResNet", network="my-net", length=("iterations", 900))
    assert ingest_paths(store, [str(flagged)], options).ok
    return store


@pytest.mark.parametrize("key", [*NAMES, "RESNET50-Nightly", "team resnet", "my-net", "nobody",
                                 None])
def test_the_index_reads_what_the_json_says(store, key):
    indexed = whole_job_runs(store, key, traces=False)
    assert indexed == _untraced(whole_job_runs(store, key))
    if key is not None:
        assert all(r.key == normal_key(key) for r in indexed)


def test_the_index_keeps_the_length_and_the_system(store):
    [*team] = whole_job_runs(store, "team resnet", traces=False)
    assert len(team) == 3 and {r.length for r in team} == {("iterations", 900)}
    assert {r.network for r in team} == {"my-net"}


def test_a_store_before_the_index_upgrades_with_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    tree = code_at(BEFORE_INDEX, tmp_path)
    code = ("import sys; from ingest.store import Store; from ingest.pipeline import "
            "ingest_paths; r = ingest_paths(Store(sys.argv[1]), sys.argv[2:]); "
            "print(len(r.added))")
    made = subprocess.run([sys.executable, "-c", code, url, *_exports(tmp_path)], cwd=tree,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    assert made.returncode == 0, made.stderr[-2000:]
    assert int(made.stdout) == len(NAMES)
    with pytest.raises(SchemaVersionError, match="jobcast store upgrade"):
        Store(url)
    from jobcast.cli.app import app
    upgraded = CliRunner().invoke(app, ["store", "upgrade", "--store", url, "--json"])
    assert upgraded.exit_code == 0, upgraded.output
    store = Store(url)
    with make_engine(url).connect() as conn:
        indexed = conn.execute(sa.text("SELECT count(*) FROM whole_jobs")).scalar()
    assert indexed == 4 * len(NAMES) == len(store.runs())
    assert whole_job_runs(store, traces=False) == _untraced(whole_job_runs(store))
    assert migrations.state(store.engine).status == "current"
