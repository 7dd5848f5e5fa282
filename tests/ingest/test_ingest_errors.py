"""The ingest room's error family (issue 26, plan section 2.1): a framing error is a
ParseError, a store at another schema revision is a StoreError, and both keep their old
built-in bases, messages, attributes and import paths."""

from __future__ import annotations

import pickle

import pytest

from fleet.errors import JobcastError
from ingest.errors import IngestError
from ingest.events import ParseError
from ingest.migrations import SchemaVersionError
from ingest.parsers import wire
from ingest.store import StoreError


def test_wire_error_is_a_parse_error_with_its_old_message_and_record():
    exc = wire.WireError("record 3: length checksum does not match (corrupt)", 3)
    assert isinstance(exc, ParseError) and isinstance(exc, ValueError)
    assert isinstance(exc, IngestError) and isinstance(exc, JobcastError)
    assert str(exc) == exc.reason == exc.args[0]  # the reason alone, as before
    assert (exc.record, exc.line, exc.source, exc.kind) == (3, 3, None, "parse")
    assert str(exc.with_source("run.wandb")) == "run.wandb:3: " + exc.reason
    again = pickle.loads(pickle.dumps(exc))
    assert (type(again), again.reason, again.record) == (wire.WireError, exc.reason, 3)


def test_a_real_framing_error_is_still_caught_as_wire_error():
    with pytest.raises(wire.WireError, match="no ':W&B' header") as caught:
        wire.leveldb_records(b"not a wandb log")
    assert caught.value.record == 1 and caught.value.line == 1


def test_schema_version_error_is_a_store_error_and_keeps_runtime_error():
    exc = SchemaVersionError("store x is at revision 0009, newer than this jobcast")
    assert isinstance(exc, StoreError) and isinstance(exc, RuntimeError)
    assert isinstance(exc, IngestError) and exc.kind == "store"
    assert exc.info().as_dict()["kind"] == "store" and str(exc) == exc.args[0]


def test_old_import_paths_name_the_same_classes():
    import ingest.errors
    import ingest.store
    from jobcast.service.features import stores

    assert ingest.store.StoreError is ingest.errors.StoreError is stores.StoreError
    assert ingest.store.SchemaVersionError is SchemaVersionError is stores.SchemaVersionError
