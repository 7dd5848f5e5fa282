"""Property-based fuzzing (hypothesis, derandomized, bounded) of the issue-24 history sources
of part A: TensorBoard event files, W&B transaction logs and exported history, and MLflow
runs, through the real ingest path into a real SQLite store (the style and harness of
test_fuzz_parsers.py).

Samples: the real files in tests/data/history (README there: written by the real libraries).
Properties, as for every parser:

* nothing but a :class:`~ingest.events.ParseError` escapes decode + parse + check + store, and
  nothing fails inside (the ``parser failed: ...`` safety net is never needed; for MLflow its
  ``run failed to convert`` is never needed);
* a rejection names the file (the run, for MLflow) and gives a reason;
* every run that is stored reads back with finite, positive, in-range values only.

Mutations: the byte mutations of tests/fuzz_cases.py (which mostly break the framing's
checksums), and, to reach the parsers behind the checksums, structure-aware ones: a hostile
value in one protobuf field of one record (wall time, step, scalar, tag, file version; a W&B
history value, the run's start time), records dropped, duplicated or swapped, then the file
re-framed with valid checksums (TFRecord; W&B's LevelDB log). MLflow: hostile values in a real
run's snapshot (params, steps, timestamps, status, system metrics).
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import struct
import zlib
from collections import Counter

import fuzz_cases as FUZZ
import pytest
from fuzz_cases import assert_sane, sample_of
from history_checks import report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import DATA

from ingest.parsers import wire
from ingest.store import Store

HISTORY = DATA / "history"


FLAGS = {"deployment": "1x cpu"}
SAMPLES = {
    # the tensorboardX add_hparams sub-folder's file holds the hparams plugin records
    "tensorboard": [sample_of(p, **FLAGS) for p in sorted(HISTORY.glob("tb/*/events.out.*"))
                    + sorted(HISTORY.glob("tb/keras/train/events.out.*"))
                    + sorted(HISTORY.glob("tb/tbx/1*/events.out.*"))],
    "wandb": [sample_of(p, **FLAGS) for p in sorted(HISTORY.glob("wandb/*/run-*.wandb"))],
    "wandb_history": [sample_of(HISTORY / "wandb_export" / "history.csv", network="tinycnn",
                              batch_size=16, **FLAGS)],
}
ORIGINALS = {s: s.path.read_bytes() for samples in SAMPLES.values() for s in samples}
SNAPSHOT = json.loads((HISTORY / "mlflow" / "run_snapshot.json").read_text())

# JOBCAST_FUZZ_EXAMPLES: more cases per test for a longer run (the counts are reported)
FUZZ_SETTINGS = settings(
    derandomize=True, database=None, deadline=None,
    max_examples=int(os.environ.get("JOBCAST_FUZZ_EXAMPLES", "40")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture])

HOSTILE_DOUBLES = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e308, 5e-324,
                     1e10, 4.1e9, 1.8e9, 631152000.0]),
    st.floats(allow_nan=True, allow_infinity=True))
HOSTILE_INTS = st.one_of(
    st.sampled_from([-1, 0, 1, 2**63 - 1, -(2**63), 2**62, 10**15 + 1, 10**9]),
    st.integers(-(2**63), 2**63 - 1))
HOSTILE_TEXT = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1", "0", "null", "true", "[1]",
                     "{}", '"text"', "9" * 400, "1.7956e9", "-1.7956e9", "", "{", "1e-400"]),
    st.text(max_size=20))


RUN_IDS = itertools.count()
TALLY: Counter = Counter()  # (format, outcome) over the module's cases, reported at its end


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-history")
    made = {name: Store(f"sqlite:///{folder / (name + '.db')}")
            for name in ("tensorboard", "wandb", "wandb_history", "mlflow")}
    yield made
    for store in made.values():
        store.engine.dispose()
    report("fuzz history a", {f"{fmt} {kind}": n for (fmt, kind), n in sorted(TALLY.items())})


def _assert_sane(outcome, sample) -> None:
    fmt = next(f for f, samples in SAMPLES.items() if sample in samples)
    TALLY[fmt, outcome.kind] += 1
    assert_sane(outcome, sample)


# --- encoders (the harness's; checked against the real files below) -----------------------------

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes) -> list[list]:
    return [[n, w, data[v[0]:v[1]] if w == 2 else v] for n, w, v in wire.fields(data)]


def _encode(fields: list[list]) -> bytes:
    out = bytearray()
    for number, kind, value in fields:
        out += _varint(number << 3 | kind)
        if kind == 0:
            out += _varint(value)
        elif kind == 1:
            out += struct.pack("<Q", value & (2**64 - 1))
        elif kind == 5:
            out += struct.pack("<I", value & (2**32 - 1))
        else:
            out += _varint(len(value)) + value
    return bytes(out)


def tfrecord_frame(records: list[bytes]) -> bytes:
    out = bytearray()
    for data in records:
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", wire.masked_crc32c(length)) + data
        out += struct.pack("<I", wire.masked_crc32c(data))
    return bytes(out)


def tfrecord_split(data: bytes) -> list[bytes]:
    return [data[s:e] for _, s, e in wire.tfrecords(data)]


def leveldb_frame(records: list[bytes]) -> bytes:
    out = bytearray(wire.WANDB_HEADER)
    for data in records:
        first = True
        while True:
            left = wire.LEVELDB_BLOCK - len(out) % wire.LEVELDB_BLOCK
            if left < wire.LEVELDB_CHUNK_HEADER:
                out += b"\0" * left
                continue
            piece, data = data[:left - 7], data[left - 7:]
            kind = (1 if not data else 2) if first else (4 if not data else 3)
            crc = zlib.crc32(piece, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
            out += struct.pack("<IHB", crc, len(piece), kind) + piece
            first = False
            if not data:
                break
    return bytes(out)


def test_the_harness_reframes_the_real_files_exactly():
    for sample in SAMPLES["tensorboard"]:
        data = ORIGINALS[sample]
        records = tfrecord_split(data)
        assert tfrecord_frame(records) == data
        assert [_encode(_fields(r)) for r in records] == records
    for sample in SAMPLES["wandb"]:
        records, _ = wire.leveldb_records(ORIGINALS[sample])
        assert wire.leveldb_records(leveldb_frame(records))[0] == records
        assert [_encode(_fields(r)) for r in records] == records


# --- byte mutations ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", list(SAMPLES))
@FUZZ_SETTINGS
@given(data=st.data())
def test_byte_mutations_are_stored_sanely_or_rejected(fmt, data, stores):
    sample = data.draw(st.sampled_from(SAMPLES[fmt]), label="sample")
    rnd = data.draw(st.randoms(use_true_random=False), label="random")
    mutated, _ = FUZZ.mutate(rnd, ORIGINALS[sample])
    _assert_sane(FUZZ.run_log_case(sample, mutated, stores[fmt]), sample)


# --- structure-aware mutations ----------------------------------------------------------------

def _hostile_field(draw, fields: list[list], path: tuple[int, ...]) -> list[list]:
    """``fields`` with one field along ``path`` (numbers of nested messages) made hostile."""
    fields = copy.deepcopy(fields)
    if path:
        inner = [f for f in fields if f[0] == path[0] and f[1] == 2]
        if inner:
            target = draw(st.sampled_from(inner), label=f"nested {path[0]}")
            try:
                nested = _fields(target[2])
            except wire.WireError:  # an earlier mutation made it garbage: mutate it as bytes
                nested = None
            if nested is not None:
                target[2] = _encode(_hostile_field(draw, nested, path[1:]))
                return fields
    if not fields:
        return fields
    target = draw(st.sampled_from(fields), label="field")
    if target[1] == 0:
        target[2] = draw(HOSTILE_INTS, label="int")
    elif target[1] == 1:
        target[2] = struct.unpack("<Q", struct.pack("<d", draw(HOSTILE_DOUBLES, label="d")))[0]
    elif target[1] == 5:
        value = draw(HOSTILE_DOUBLES, label="f")
        try:
            target[2] = struct.unpack("<I", struct.pack("<f", value))[0]
        except OverflowError:
            target[2] = 0x7F800000
    else:
        target[2] = draw(HOSTILE_TEXT, label="bytes").encode("utf-8", "surrogatepass")[:400]
    return fields


def _reorder(draw, records: list[bytes]) -> list[bytes]:
    records = list(records)
    how = draw(st.sampled_from(["drop", "duplicate", "swap", "cut"]), label="order")
    i = draw(st.integers(0, len(records) - 1), label="at")
    j = draw(st.integers(0, len(records) - 1), label="with")
    if how == "drop":
        del records[i]
    elif how == "duplicate":
        records.insert(j, records[i])
    elif how == "swap":
        records[i], records[j] = records[j], records[i]
    else:
        records = records[:i + 1]
    return records


@FUZZ_SETTINGS
@given(data=st.data())
def test_tensorboard_record_mutations_are_stored_sanely_or_rejected(data, stores):
    sample = data.draw(st.sampled_from(SAMPLES["tensorboard"]), label="sample")
    records = tfrecord_split(ORIGINALS[sample])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        if data.draw(st.booleans(), label="reorder"):
            records = _reorder(data.draw, records)
            continue
        index = data.draw(st.integers(0, len(records) - 1), label="record")
        # an Event's own fields, its summary value's (tag, simple_value, tensor content), its
        # metadata's plugin data, down to the hparams plugin's session values
        path = data.draw(st.sampled_from([(), (5, 1), (5, 1, 8), (5, 1, 9), (5, 1, 9, 1),
                                          (5, 1, 9, 1, 2), (5, 1, 9, 1, 2, 3, 1)]),
                          label="path")
        records[index] = _encode(_hostile_field(data.draw, _fields(records[index]), path))
    outcome = FUZZ.run_log_case(sample, tfrecord_frame(records), stores["tensorboard"])
    _assert_sane(outcome, sample)


@FUZZ_SETTINGS
@given(data=st.data())
def test_wandb_record_mutations_are_stored_sanely_or_rejected(data, stores):
    sample = data.draw(st.sampled_from(SAMPLES["wandb"]), label="sample")
    records, _ = wire.leveldb_records(ORIGINALS[sample])
    history = [i for i, r in enumerate(records) if any(f[0] == 2 for f in _fields(r))]
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        how = data.draw(st.sampled_from(["history", "history", "run", "env", "any", "order"]),
                        label="how")
        if how == "order":
            records = _reorder(data.draw, records)
            continue
        if how == "history" and history:
            index = data.draw(st.sampled_from(history), label="record")
            path: tuple[int, ...] = (2, 1)  # Record.history -> HistoryItem (key, value_json)
        elif how == "run":
            index = next((i for i, r in enumerate(records)
                          if any(f[0] == 17 for f in _fields(r))), 0)
            # Record.run -> start_time (seconds, nanos) or its config items
            path = data.draw(st.sampled_from([(17, 17), (17, 4, 1), (17,)]), label="path")
        elif how == "env":
            index = next((i for i, r in enumerate(records)
                          if any(f[0] == 26 for f in _fields(r))), 0)
            path = data.draw(st.sampled_from([(26,), (26, 24)]), label="path")
        else:
            index = data.draw(st.integers(0, len(records) - 1), label="record")
            path = ()
        if index < len(records):
            records[index] = _encode(_hostile_field(data.draw, _fields(records[index]), path))
    outcome = FUZZ.run_log_case(sample, leveldb_frame(records), stores["wandb"])
    _assert_sane(outcome, sample)


# --- MLflow snapshots -------------------------------------------------------------------------

HOSTILE_VALUES = st.one_of(HOSTILE_INTS, HOSTILE_DOUBLES, HOSTILE_TEXT, st.none(), st.booleans(),
                           st.just([1, 2]), st.just({"a": 1}))


def _mutate_snapshot(draw, snap: dict) -> dict:
    snap = copy.deepcopy(snap)
    where = draw(st.sampled_from(["param", "metric", "history", "top", "latest"]), label="where")
    metrics = snap.get("metrics")
    if where in ("metric", "history") and not (isinstance(metrics, dict) and isinstance(
            metrics.get("loss"), list) and metrics["loss"]):
        where = "top"  # an earlier mutation took the history away
    if where == "param" and not isinstance(snap.get("params"), dict):
        snap["params"] = {}
    if where == "latest" and not isinstance(snap.get("latest"), dict):
        snap["latest"] = {}
    if where == "param":
        key = draw(st.sampled_from(sorted(snap["params"]) + ["per_device_train_batch_size",
                                                             "gpu", "num_gpus"]), label="key")
        snap["params"][key] = str(draw(HOSTILE_VALUES, label="value"))
    elif where == "metric":
        history = snap["metrics"]["loss"]
        entry = draw(st.integers(0, len(history) - 1), label="entry")
        slot = draw(st.integers(0, 2), label="slot")
        history[entry] = list(history[entry])
        history[entry][slot] = draw(HOSTILE_VALUES, label="value")
    elif where == "history":
        history = snap["metrics"]["loss"]
        how = draw(st.sampled_from(["reverse", "cut", "duplicate", "empty", "not-a-list"]),
                   label="how")
        snap["metrics"]["loss"] = {"reverse": history[::-1], "cut": history[:1],
                                   "duplicate": history + history, "empty": [],
                                   "not-a-list": "x"}[how]
    elif where == "top":
        key = draw(st.sampled_from(["start_time", "status", "params", "metrics", "run_id"]),
                   label="key")
        snap[key] = draw(HOSTILE_VALUES, label="value")
    else:
        snap["latest"]["system/gpu_0_utilization_percentage"] = draw(HOSTILE_VALUES, label="v")
    return snap


@FUZZ_SETTINGS
@given(data=st.data())
def test_mlflow_snapshot_mutations_are_stored_sanely_or_rejected(data, stores):
    from ingest.mlflow_source import TrackerReport, _store_run, run_hash
    from ingest.pipeline import IngestOptions

    store = stores["mlflow"]
    snap = SNAPSHOT
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        snap = _mutate_snapshot(data.draw, snap)
    snap["run_id"] = f"fuzz-{next(RUN_IDS)}"  # a new run each case: none is a duplicate
    got = TrackerReport()
    _store_run(store, "mlflow://fuzz/" + snap["run_id"], snap, IngestOptions(**FLAGS), got)
    for err in got.rejected:
        crash = err.reason.startswith(("run failed to convert", "store refused"))
        TALLY["mlflow", "crash" if crash else "rejected"] += 1
        assert not crash, err
        assert err.source.startswith("mlflow://fuzz/") and err.reason
    if got.added:
        bad = FUZZ.stored_nonsense(store, run_hash(snap["run_id"]))
        TALLY["mlflow", "nonsense" if bad else "accepted"] += 1
        assert bad == []
    TALLY["mlflow", "not stored (still running)"] += bool(got.running)


def test_the_real_samples_are_stored():
    """Unmutated, every sample is stored (so the mutations start from a good file)."""
    store = Store("sqlite://")
    for samples in SAMPLES.values():
        for sample in samples:
            outcome = FUZZ.run_log_case(sample, ORIGINALS[sample], store)
            if sample.path.parent.name.startswith("1"):  # add_hparams: hparams, no progress
                assert "no metric logged at two or more" in outcome.detail
                continue
            assert outcome.kind == "accepted", outcome.detail
    assert len(SAMPLES["tensorboard"]) == 4 and len(SAMPLES["wandb"]) == 1
    assert len(SAMPLES["wandb_history"]) == 1
