"""Weights & Biases run folders written by the real ``wandb`` library (offline mode, no
network): a tiny CNN trained a few steps per run by tests/ingest/history_artifacts.py, the
``.wandb`` transaction log read without the ``wandb`` package, checked against the script's own
figures (history_checks.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from history_checks import DEPLOYMENT, SYSTEM, check_run, forecast_check, generate, report, stored

from ingest.events import ParseContext, ParseError
from ingest.parsers import wandb as wandb_parser
from ingest.parsers import wire
from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("wandb") / "gen"
    return out, generate(out, "--runs", "wandb:20,wandb:30,wandb:80")


def _folder(out: Path, run_id: str) -> Path:
    [folder] = (out / "wandb").glob(f"*run-*-{run_id}")
    return folder


@pytest.fixture(scope="module")
def store(artifacts, tmp_path_factory) -> Store:
    out, runs = artifacts
    st = Store(f"sqlite:///{tmp_path_factory.mktemp('wandb-store') / 'store.db'}")
    got = ingest_paths(st, [str(_folder(out, r["name"])) for r in runs[:2]],
                       IngestOptions(deployment=DEPLOYMENT, system=SYSTEM), workers=1)
    assert not got.rejected, [str(e) for e in got.rejected]
    yield st
    st.engine.dispose()


def test_decoder_agrees_with_wandbs_own_protos(artifacts):
    """Every record as wandb's own protobuf classes read it: the same history rows, run
    record and exit record."""
    from wandb.proto import wandb_internal_pb2

    out, runs = artifacts
    path = next(_folder(out, runs[0]["name"]).glob("run-*.wandb"))
    records, cut = wire.leveldb_records(path.read_bytes())
    lines = [json.loads(line) for line in wandb_parser.decode(path.read_bytes())]
    assert not cut and len(records) == len(lines)
    history = 0
    for record, mine in zip(records, lines, strict=True):
        rec = wandb_internal_pb2.Record.FromString(record)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                   for i in rec.history.item}
            assert mine["w"] == "h" and mine["v"] == pytest.approx(row)
            history += 1
        elif kind == "run":
            assert mine["id"] == rec.run.run_id
            assert mine["start"] == pytest.approx(rec.run.start_time.ToMicroseconds() / 1e6)
        elif kind == "exit":
            assert mine["code"] == rec.exit.exit_code
    assert history == runs[0]["steps"]


def test_stored_steps_and_seconds_are_what_the_script_measured(artifacts, store):
    out, runs = artifacts
    by_source = stored(store)
    figures = {}
    for m in runs[:2]:
        [entry] = [e for s, e in by_source.items() if m["name"] in s]
        figures[m["name"]] = check_run(entry, m)
        run = entry["run"]
        assert (run.network, run.batch_size, run.deployment) == ("tinycnn", 16, "cpu-x1")
        assert entry["meta"]["progress_key"] == "train/loss"
        assert entry["meta"]["exit_code"] == 0
    report("wandb runs", figures)


def test_side_files_are_skipped_and_reingest_adds_nothing(artifacts, store):
    out, runs = artifacts
    again = ingest_paths(store, [str(out / "wandb")], IngestOptions(deployment=DEPLOYMENT,
                                                                 system=SYSTEM), workers=1)
    assert len(again.duplicates) == 2 and len(again.added) == 1 and not again.rejected
    assert again.skipped and all(wandb_parser.side_file(Path(p)) for p in again.skipped)
    third = ingest_paths(store, [str(out / "wandb")], IngestOptions(deployment=DEPLOYMENT,
                                                                system=SYSTEM), workers=1)
    assert not third.added and len(third.duplicates) == 3


def test_forecast_of_a_longer_run_from_the_history(artifacts, tmp_path):
    out, runs = artifacts
    st = Store(f"sqlite:///{tmp_path / 'forecast.db'}")
    ingest_paths(st, [str(_folder(out, r["name"])) for r in runs[:2]],
                 IngestOptions(deployment=DEPLOYMENT, system=SYSTEM), workers=1)
    long = runs[2]
    figures = forecast_check(st, "tinycnn", long["steps"], long["total"])
    report("wandb forecast", {"steps": long["steps"], **figures})
    st.engine.dispose()


def test_cpu_run_without_deployment_names_the_flag(artifacts):
    out, runs = artifacts
    got = ingest_paths(Store("sqlite://"), [str(_folder(out, runs[0]["name"]))], IngestOptions(),
                       workers=1)
    [err] = got.rejected
    assert "--deployment" in err.reason and err.source.endswith(".wandb")


def test_unfinished_and_corrupt_logs_are_rejected(artifacts, tmp_path):
    """A log cut before its exit record (a run still running, or killed) and one with a
    flipped byte: rejected, with the record."""
    out, runs = artifacts
    path = next(_folder(out, runs[0]["name"]).glob("run-*.wandb"))
    data = path.read_bytes()
    records, _ = wire.leveldb_records(data)
    running = tmp_path / "a" / "run-x.wandb"
    running.parent.mkdir()
    running.write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x01
    corrupt = tmp_path / "b" / "run-y.wandb"
    corrupt.parent.mkdir()
    corrupt.write_bytes(bytes(flipped))
    got = ingest_paths(Store("sqlite://"), [str(running), str(corrupt)],
                       IngestOptions(deployment=DEPLOYMENT), workers=1)
    reasons = {Path(e.source).name: e for e in got.rejected}
    assert "still running" in reasons["run-x.wandb"].reason
    assert "checksum" in reasons["run-y.wandb"].reason
    assert 1 < reasons["run-y.wandb"].line <= len(records)


def test_gpu_from_the_environment_record_or_metadata():
    """The GPU model and count: the environment record first, else wandb-metadata.json."""
    env = {"gpu": "NVIDIA H100 80GB HBM3", "gpus": 8}
    dep, where = wandb_parser._gpus(env, {})
    assert (dep.accelerator, dep.count, where) == ("NVIDIA H100 80GB HBM3", 8, "environment record")
    dep, where = wandb_parser._gpus({}, {"metadata": {"gpu": "NVIDIA A100-SXM4-40GB",
                                                      "gpu_count": 4}})
    assert (dep.count, where) == (4, "wandb-metadata.json")
    assert wandb_parser._gpus({}, {"metadata": {"gpu": "A100", "gpu_count": 0}}) == (None, None)


def test_metadata_file_of_a_synced_run_folder(artifacts, tmp_path):
    """A synced run folder keeps files/wandb-metadata.json: its GPU is the run's."""
    out, runs = artifacts
    folder = tmp_path / _folder(out, runs[0]["name"]).name
    shutil.copytree(_folder(out, runs[0]["name"]), folder)
    (folder / "files").mkdir(exist_ok=True)
    (folder / "files" / "wandb-metadata.json").write_text(json.dumps(
        {"gpu": "NVIDIA A100-SXM4-40GB", "gpu_count": 2, "cpu_count": 32}))
    st = Store("sqlite://")
    got = ingest_paths(st, [str(folder)], IngestOptions(), workers=1)
    assert not got.rejected, got.rejected
    [run] = st.runs()
    assert run.deployment == "nvidia-a100-sxm4-40gb-x2"
    assert run.meta["gpu_from"] == "wandb-metadata.json"


def test_parse_needs_a_run_record():
    with pytest.raises(ParseError, match="no run record"):
        wandb_parser.parse(['{"w":"header"}', '{"w":"h","v":{"_step":0}}'], ParseContext())


def _history_rows(path: Path) -> list[dict]:
    """The run's history rows as wandb's own protobuf classes read them from its log, keyed
    as ``wandb.Api().run(...).history()`` keys its columns (``_step``, ``_runtime``,
    ``_timestamp``, the metrics). The API needs a W&B server, which these tests do not reach:
    the export is laid out from the real run's rows."""
    from wandb.proto import wandb_internal_pb2

    records, _ = wire.leveldb_records(path.read_bytes())
    rows = []
    for record in records:
        rec = wandb_internal_pb2.Record.FromString(record)
        if rec.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                         for i in rec.history.item})
    return rows


def test_exported_history_csv_and_json_lines(artifacts, tmp_path):
    import pandas as pd

    out, runs = artifacts
    m = runs[1]
    rows = _history_rows(next(_folder(out, m["name"]).glob("run-*.wandb")))
    frame = pd.DataFrame(rows)
    csv_path = tmp_path / "csv" / "history.csv"
    jsonl_path = tmp_path / "jsonl" / "history.jsonl"
    csv_path.parent.mkdir()
    jsonl_path.parent.mkdir()
    frame.to_csv(csv_path)  # with pandas' index column, as a notebook user writes it
    frame.to_json(jsonl_path, orient="records", lines=True)
    (csv_path.parent / "config.yaml").write_text(
        "model:\n  value: tinycnn\nbatch_size:\n  value: 16\n")  # W&B's config.yaml layout
    st = Store("sqlite://")
    got = ingest_paths(st, [str(csv_path), str(jsonl_path)],
                       IngestOptions(deployment=DEPLOYMENT, network="tinycnn", batch_size=16),
                       workers=1)
    assert not got.rejected, [str(e) for e in got.rejected]
    by_source = stored(st)
    figures = {}
    # the export's run start is _timestamp - _runtime of its first row: W&B counts _runtime
    # from a moment of its own, a little after the run record's start time
    slack = rows[0]["_timestamp"] - rows[0]["_runtime"] - m["origin"]
    assert 0 <= abs(slack) < 1
    for path in (csv_path, jsonl_path):
        entry = by_source[str(path)]
        assert entry["run"].format == "wandb_history"
        figures[path.suffix] = check_run(entry, m, origin_slack=abs(slack))
    assert by_source[str(csv_path)]["meta"]["facts_from"]["network"] == "model"
    report("wandb exported history", {**figures, "origin_offset_s": round(slack, 4)})
