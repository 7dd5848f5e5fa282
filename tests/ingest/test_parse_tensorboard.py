"""TensorBoard event files written by the real libraries on this CPU: ``torch.utils.tensorboard``,
tensorboardX and Keras's ``TensorBoard`` callback (TF2 tensors), read without TensorFlow.

A tiny CNN is trained a few steps per run by tests/ingest/history_artifacts.py (which times
every step itself); the runs are ingested through the real pipeline into a real SQLite store
and checked against the script's own figures (history_checks.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from history_checks import DEPLOYMENT, SYSTEM, check_run, forecast_check, generate, report, stored

from ingest.events import ParseContext, ParseError
from ingest.parsers import tensorboard
from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store

pytestmark = pytest.mark.slow

HISTORY = ("torch-0", "torch-1", "tbx-3", "keras")
LONG = "torch-2"
OTHER_SYSTEM = "ci-cpu-other"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    out = tmp_path_factory.mktemp("tensorboard") / "gen"
    runs = generate(out, "--runs", "torch:20,torch:30,torch:80,tbx:20,keras:20,keras-epoch:8")
    return out, {r["name"]: r for r in runs}


@pytest.fixture(scope="module")
def store(artifacts, tmp_path_factory) -> Store:
    out, _ = artifacts
    st = Store(f"sqlite:///{tmp_path_factory.mktemp('tb-store') / 'store.db'}")
    # the job forecast below (PyTorch, torch.utils.tensorboard) on its system; the same CNN
    # logged by tensorboardX and the Keras CNN on another, so they do not mix into it
    for names, system in ((HISTORY[:2], SYSTEM), (HISTORY[2:], OTHER_SYSTEM)):
        got = ingest_paths(st, [str(out / "tb" / name) for name in names],
                           IngestOptions(deployment=DEPLOYMENT, system=system), workers=1)
        assert not got.rejected, [str(e) for e in got.rejected]
    yield st
    st.engine.dispose()


def _source(out: Path, name: str) -> str:
    folder = out / "tb" / name
    [event] = [p for p in folder.rglob("events.out.tfevents.*")
               if not tensorboard.side_file(p)]
    return str(event)


def test_decoder_agrees_with_tensorboards_own_protos(artifacts):
    """Each record as TensorBoard's protobuf classes read it (no TensorFlow imported):
    the same wall times, steps and scalar values."""
    import json

    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    out, _ = artifacts
    checked = 0
    for name in ("torch-0", "tbx-3", "keras"):
        data = Path(_source(out, name)).read_bytes()
        lines = tensorboard.decode(data)
        pos = 0
        for line in lines:
            length = int.from_bytes(data[pos:pos + 8], "little")
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
            pos += 16 + length
            mine = json.loads(line)
            scalars = {}
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars[value.tag] = value.simple_value
                elif value.metadata.plugin_data.plugin_name == "scalars":
                    scalars[value.tag] = float(tensor_util.make_ndarray(value.tensor))
            if scalars:
                assert mine["t"] == event.wall_time and mine["s"] == event.step
                assert mine["x"] == pytest.approx(scalars)
                checked += 1
        assert pos == len(data)
    assert checked > 40


def test_stored_steps_and_seconds_are_what_the_script_measured(artifacts, store):
    out, measured = artifacts
    runs = stored(store)
    figures = {}
    for name in HISTORY:
        entry = runs[_source(out, name)]
        figures[name] = check_run(entry, measured[name])
        assert entry["run"].network == "tinycnn" and entry["run"].batch_size == 16
        assert entry["run"].deployment == "cpu-x1"
    assert runs[_source(out, "torch-0")]["run"].stack == "PyTorch"
    assert runs[_source(out, "keras")]["run"].stack == "Keras"
    assert runs[_source(out, "keras")]["meta"]["progress_tag"] == "batch_loss"
    report("tensorboard runs", figures)


def test_side_files_and_facts_from_config_files(artifacts, store):
    out, _ = artifacts
    runs = stored(store)
    torch_meta = runs[_source(out, "torch-0")]["meta"]
    assert torch_meta["facts_from"] == {"network": "model.arch", "batch_size": "data.batch_size",
                                        "epochs": "epochs"}
    tbx_meta = runs[_source(out, "tbx-3")]["meta"]
    assert tbx_meta["config_files"] == ["add_hparams sub-folder"]
    st = Store("sqlite://")
    again = ingest_paths(st, [str(out / "tb" / "tbx-3"), str(out / "tb" / "keras")],
                         IngestOptions(deployment=DEPLOYMENT), workers=1)
    assert len(again.added) == 2 and not again.rejected
    # the add_hparams sub-folder's event file, Keras's hparams.yaml stays beside its train/
    assert any("/tbx-3/1" in s for s in again.skipped), again.skipped


def test_reingest_adds_nothing(artifacts, store):
    out, _ = artifacts
    paths = [str(out / "tb" / name) for name in HISTORY]
    again = ingest_paths(store, paths, IngestOptions(deployment=DEPLOYMENT, system=SYSTEM),
                         workers=1)
    assert not again.added and len(again.duplicates) == len(HISTORY) and not again.rejected


def test_forecast_of_a_longer_run_from_the_history(artifacts, store):
    _, measured = artifacts
    long = measured[LONG]
    figures = forecast_check(store, "tinycnn", long["steps"], long["total"])
    report("tensorboard forecast", {"history": HISTORY[:2], "steps": long["steps"], **figures})


def test_missing_facts_name_the_flag(artifacts, tmp_path):
    """An event file alone (no config file, no flags): rejected naming the flag; with the
    flags it is stored."""
    out, _ = artifacts
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(_source(out, "torch-1"), lone)
    st = Store("sqlite://")
    got = ingest_paths(st, [str(lone)], IngestOptions(deployment=DEPLOYMENT), workers=1)
    assert not got.added and "--network" in got.rejected[0].reason
    got = ingest_paths(st, [str(lone)], IngestOptions(network="tinycnn"), workers=1)
    assert "--deployment" in got.rejected[0].reason
    got = ingest_paths(st, [str(lone)], IngestOptions(network="tinycnn", deployment=DEPLOYMENT),
                       workers=1)
    assert "--batch-size" in got.rejected[0].reason
    got = ingest_paths(st, [str(lone)], IngestOptions(network="tinycnn", deployment=DEPLOYMENT,
                                                  batch_size=16), workers=1)
    assert len(got.added) == 1


def test_keras_per_epoch_only_is_rejected_with_the_fix(artifacts):
    out, _ = artifacts
    st = Store("sqlite://")
    got = ingest_paths(st, [str(out / "tb" / "keras-epoch")],
                       IngestOptions(deployment=DEPLOYMENT), workers=1)
    [err] = got.rejected
    assert "only per-epoch values" in err.reason and "update_freq" in err.reason


def test_cut_and_corrupt_files_are_rejected_at_their_record(artifacts, tmp_path):
    out, _ = artifacts
    data = Path(_source(out, "torch-0")).read_bytes()
    cut = tmp_path / "cut" / "events.out.tfevents.1.host"
    cut.parent.mkdir()
    cut.write_bytes(data[:-7])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    bad = tmp_path / "bad" / "events.out.tfevents.1.host"
    bad.parent.mkdir()
    bad.write_bytes(bytes(flipped))
    got = ingest_paths(Store("sqlite://"), [str(cut), str(bad)],
                       IngestOptions(network="n", deployment=DEPLOYMENT, batch_size=16), workers=1)
    assert not got.added and len(got.rejected) == 2
    for err in got.rejected:
        assert err.line and err.line > 1 and ("cut short" in err.reason or
                                              "checksum" in err.reason), err


def test_parse_is_pure_and_needs_progress():
    """Decoded records without a per-step scalar: no training progress, said so."""
    lines = ['{"t":1795640000.5,"s":0,"fv":"brain.Event:2"}',
             '{"t":1795640001.5,"s":0,"x":{"train/loss":1.0}}']
    with pytest.raises(ParseError, match="no metric logged at two or more increasing steps"):
        tensorboard.parse(lines, ParseContext())
    assert tensorboard.sniff(lines) and not tensorboard.sniff(['{"v": 1}'])
