"""The doors the commands and notebooks use to ingest and open stores
(jobcast/service/features/{ingesting,stores}.py): checked options, one typed result on every
path, store errors as StoreError, nothing created by a reader."""

from __future__ import annotations

import pytest
from paths import DATA

from fleet import credentials
from fleet.errors import JobcastError
from jobcast.service.features import ingesting, stores
from jobcast.service.features.ingesting import IngestOptionError, ingest, ingest_options

CAFFE = sorted(str(p) for p in (DATA / "caffe").glob("ducha_*.log"))


@pytest.mark.parametrize("flags, field, words", [
    ({"override": True}, "override", "--override needs --deployment"),
    ({"deployment": "8x"}, "deployment", "--deployment '8x'"),
    ({"tags": ["precision"]}, "tag", "key=value"),
    ({"system": "  "}, "system", "--system must name a system"),
    ({"job_key": "name:("}, "job_key", "not a regular expression"),
])
def test_ingest_options_name_the_bad_flag(flags, field, words):
    with pytest.raises(IngestOptionError) as caught:
        ingest_options(**flags)
    assert isinstance(caught.value, JobcastError) and isinstance(caught.value, ValueError)
    assert words in str(caught.value) and caught.value.info().field == field


def test_ingest_options_are_normalised():
    options = ingest_options(deployment="V100", override=True, tags=["Precision=FP16"],
                             system="  dgx   one ", job_key="name:(?P<key>\\w+)")
    assert options.system == "dgx one" and options.override and options.job_key
    assert dict(options.tags)  # canonical pairs, as the variant keys read them


def test_experiments_need_a_tracking_source(tmp_path):
    opened = []
    with pytest.raises(IngestOptionError, match="--experiment"):
        ingest(lambda: opened.append(1), [str(tmp_path)], experiments=["x"])
    assert not opened  # the store is opened only once the sources are checked


def test_ingest_records_rejections_and_counts(tmp_path):
    st = stores.open_store(f"sqlite:///{tmp_path / 's.db'}")
    bad = tmp_path / "bad.log"
    bad.write_text("I0101 00:00:00.000 solver.cpp:218] Iteration 0 (0 iter/s)\n")
    result = ingest(st, [*CAFFE, str(bad)], ingest_options(deployment="unknown-gpu-x1"),
                    workers=1)
    assert result.stored == len(CAFFE) and result.counts["runs"] >= len(CAFFE)
    assert [e.source for e in result.rejected] == [str(bad)]
    assert [r.source for r in st.rejections()] == [str(bad)]  # recorded on this path too
    payload = result.to_dict()
    (rejected,) = payload["rejected"]
    assert rejected["problem"]["kind"] == "parse" and rejected["problem"]["file"] == str(bad)
    assert rejected["problem"]["message"] and rejected["reason"]  # reason kept one release
    assert set(payload) == {"stored", "added", "duplicates", "rejected", "warnings",
                            "skipped", "store"}
    again = ingest(st, CAFFE, ingest_options(deployment="unknown-gpu-x1"), workers=1)
    assert again.stored == 0 and len(again.duplicates) == len(CAFFE)


def test_readers_create_nothing_and_fail_as_store_errors(tmp_path, monkeypatch):
    missing = f"sqlite:///{tmp_path / 'nowhere.db'}"
    with pytest.raises(stores.StoreError, match="no store at"):
        stores.open_store(missing, create=False)
    with pytest.raises(stores.StoreError, match="no store at"):
        stores.history_store(missing)  # a named store that is not there: misspelled
    status = stores.store_status(missing)
    assert (status.status, status.exists, status.usable) == ("empty", False, True)
    assert status.to_dict()["exists"] is False
    with pytest.raises(stores.StoreError, match="cannot open store"):
        stores.open_store("nosuchdialect://nowhere")
    with pytest.raises(stores.StoreError, match="does not exist"):
        stores.open_store_later(f"sqlite:///{tmp_path / 'no' / 'such' / 'x.db'}")
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("JOBCAST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("JOBCAST_STORE", raising=False)
    assert stores.open_store(None, create=False).counts()["runs"] == 0  # the empty default
    assert stores.history_store(None) is None  # nothing to read history from
    assert not (tmp_path / "home").exists()


def test_upgrade_builds_a_new_store_and_status_reads_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'u.db'}"
    done = stores.upgrade_store(url)
    assert done.before is None and done.changed and done.to_dict()["to"] == done.after
    assert stores.store_status(url).status == "current"
    assert not stores.upgrade_store(url).changed


def test_there_is_no_secrets_door():
    """Secret files are ``fleet.credentials``' alone: the service re-exports nothing of it."""
    import importlib.util

    assert importlib.util.find_spec("jobcast.service.secrets") is None
    assert credentials.write_secret is not None and ingesting.IngestOptions is not None
