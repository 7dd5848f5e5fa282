"""One job's whole-job runs read from a store without decoding every run (issue 35, cause 5):
``whole_job_runs(store, key)`` filters in SQL and gives exactly what filtering every run
would, whatever ``--network``/``--system`` said and whatever the key's characters."""

from __future__ import annotations

import pytest
from slurm_shapes import document, history

from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store
from ingest.whole_job import _stored_runs, normal_key, whole_job_runs

T0 = 1_714_000_000
NAMES = ("resnet50-nightly", "resnet50-nightly-v2", "vit_sweep 100%", 'say "hi"\\now')


def _runs(n: int, offset: int) -> list[dict]:
    return [{"start": T0 + offset * 600 + i * 86400, "seconds": 1700 + 30 * i,
             "state": "FAILED" if i == 2 else "COMPLETED"} for i in range(n)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    tmp = tmp_path_factory.mktemp("by_key")
    store = Store(f"sqlite:///{tmp / 'jobs.db'}")
    first = 5_000_000
    for i, name in enumerate(NAMES):
        path = tmp / f"jobs{i}.json"
        path.write_text(document(history(name, _runs(4, i), first_id=first), "old"))
        first += 100
        assert ingest_paths(store, [str(path)]).ok
    for i, options in enumerate((IngestOptions(network="my-net"),
                                 IngestOptions(system="Team  ResNet"))):
        path = tmp / f"flagged{i}.json"
        path.write_text(document(history("resnet50-nightly", _runs(3, 9 + i),
                                         first_id=first), "new"))
        first += 100
        assert ingest_paths(store, [str(path)], options).ok
    return store


@pytest.mark.parametrize("key", [*NAMES, "RESNET50-Nightly", "team resnet", "TEAM   RESNET",
                                 "my-net", "resnet50", "vit%", "nobody"])
def test_one_key_reads_what_filtering_every_run_would(store, key):
    everything = whole_job_runs(store)
    assert whole_job_runs(store, key) == [r for r in everything if r.key == normal_key(key)]


def _names(run) -> set[str]:
    return {normal_key(n) for n in (run.meta["system"], run.meta["whole_job"]["key"],
                                    run.network)}


def test_the_sql_filter_reads_only_rows_that_name_the_key(store):
    every = store.runs()
    for key in ("resnet50-nightly", "team resnet", "vit_sweep 100%", 'say "hi"\\now'):
        read = _stored_runs(store, key)
        assert read == [r for r in every if key in _names(r)]
        assert 0 < len(read) < len(every)
    assert _stored_runs(store, "nobody") == []
    assert len(_stored_runs(store, None)) == len(every)  # every run here is a whole job
