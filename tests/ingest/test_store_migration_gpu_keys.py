"""Migration 0004: a store written by the code before one GPU identity (keys in the log's
spelling) is rewritten to canonical keys by ``jobcast store upgrade``, keeping every file, run
and segment, and a request in another spelling of the GPU then finds that history; SQLite and
a real PostgreSQL alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from paths import DATA, code_at
from typer.testing import CliRunner

from fleet.deployment import canonical_key, family_matches
from ingest import migrations
from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import SchemaVersionError, Store, make_engine

OLD_KEYS = "9b78def"  # the last commit whose deployment keys kept the log's GPU spelling
SAMPLE = DATA / "keras" / "fit_verbose2.jsonl"  # a real Keras run written by jobcast's callback
runner = CliRunner()

# file -> (deployment in the log, or None with the --deployment flag below; old key; new key)
LOGS = {
    "mlperf_spelling.jsonl": ("8x NVIDIA A100-SXM-80GB", "nvidia-a100-sxm-80gb-x8",
                              "nvidia-a100-sxm4-80gb-x8"),
    "smi_spelling.jsonl": ("8x NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb-x8",
                           "nvidia-a100-sxm4-80gb-x8"),
    "v100.jsonl": ("8x Tesla V100-SXM2-16GB", "nvidia-v100-sxm2-16gb-x8",
                   "nvidia-v100-sxm2-16gb-x8"),
    "h100.jsonl": ("2x8 NVIDIA H100-SXM5-80GB", "nvidia-h100-sxm5-80gb-x8-n2",
                   "nvidia-h100-sxm5-x8-n2"),
    "gaudi.jsonl": ("8x Intel Gaudi2", "habana-gaudi2-x8", "habana-gaudi2-x8"),
    "flagged.jsonl": (None, "nvidia-a100-sxm-40gb-x4", "nvidia-a100-sxm4-40gb-x4"),
}
FLAG = "4x A100-SXM-40GB"
# models the old code had fitted: those on a rewritten key, or on a key that now also holds
# runs stored in another spelling, are dropped (jobcast fit refits them); the others stay
MODELS = {"nvidia-a100-sxm-80gb-x8": False, "nvidia-a100-sxm4-80gb-x8": False,
          "nvidia-v100-sxm2-16gb-x8": True, "habana-gaudi2-x8": True}

# run by the old code (the commit before migration 0004): its names, not today's
OLD_WRITER = """
import json, sys
from ingest.pipeline import Overrides, ingest_paths
from ingest.store import Store
url, flag, logs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = Store(url)
plain = ingest_paths(store, [p for p, flagged in logs if not flagged])
flagged = ingest_paths(store, [p for p, flagged in logs if flagged], Overrides(deployment=flag))
assert not plain.rejected and not flagged.rejected, (plain.rejected, flagged.rejected)
store.save_models([{"model_id": f"e2e/tinycnn/{key}/train/x", "network": "tinycnn",
                    "deployment": key, "phase": "train", "stack": "x", "params": {}}
                   for key in json.loads(sys.argv[4])])
print(json.dumps(sorted(r.deployment for r in store.runs())))
"""


def _logs(folder: Path) -> list[tuple[str, bool]]:
    """One copy of the sample run per entry of :data:`LOGS`, with that deployment."""
    folder.mkdir()
    out = []
    for name, (deployment, _, _) in LOGS.items():
        (folder / name).write_text(_sample(deployment, name))
        out.append((str(folder / name), deployment is None))
    return out


def _sample(deployment: str | None, tag: str) -> str:
    """The sample log with ``deployment`` on each of its runs (none: left out), tagged."""
    lines = []
    for line in SAMPLE.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "run_start":
            record["meta"] = {**record.get("meta", {}), "copy": tag}  # distinct content
            record.pop("deployment")
            if deployment is not None:
                record["deployment"] = deployment
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def _count(url: str) -> dict[str, int]:
    engine = make_engine(url)
    with engine.connect() as conn:
        found = {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                 for t in ("files", "runs", "segments", "models")}
    engine.dispose()
    return found


def _metas(url: str) -> dict[str, list[dict]]:
    """``runs.meta`` by file name, as stored."""
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT f.source, r.meta FROM runs r JOIN files f "
                                    "ON f.id = r.file_id")).all()
    engine.dispose()
    out: dict[str, list[dict]] = {}
    for source, meta in sorted(rows):
        out.setdefault(Path(source).name, []).append(json.loads(meta))
    return out


def _cli(*args: str):
    from jobcast.cli.app import app

    return runner.invoke(app, list(args), catch_exceptions=False)


def test_old_keys_are_rewritten_and_found_in_another_spelling(empty_url, tmp_path):
    tree = code_at(OLD_KEYS, tmp_path)
    logs = _logs(tmp_path / "logs")
    made = subprocess.run(
        [sys.executable, "-c", OLD_WRITER, empty_url, FLAG, json.dumps(logs),
         json.dumps(list(MODELS))],
        cwd=tree, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tree)})
    assert made.returncode == 0, made.stderr[-2000:]
    assert set(json.loads(made.stdout)) == {old for _, old, _ in LOGS.values()}
    before, metas = _count(empty_url), _metas(empty_url)
    per_file = before["runs"] // len(LOGS)
    assert before["runs"] == per_file * len(LOGS) >= len(LOGS)
    assert before["models"] == len(MODELS)
    assert {m["deployment_key"] for m in metas["flagged.jsonl"]} == {"nvidia-a100-sxm-40gb-x4"}

    with pytest.raises(SchemaVersionError, match="jobcast store upgrade"):
        Store(empty_url)
    upgraded = _cli("store", "upgrade", "--store", empty_url, "--json")
    assert upgraded.exit_code == 0, upgraded.output
    assert json.loads(upgraded.stdout)["to"] == migrations.HEAD

    after = _count(empty_url)
    assert {k: after[k] for k in ("files", "runs", "segments")} == \
        {k: before[k] for k in ("files", "runs", "segments")}  # every row kept
    store = Store(empty_url)
    runs = store.runs()
    by_file: dict[str, set[str]] = {}
    for r in runs:
        by_file.setdefault(Path(r.source).name, set()).add(r.deployment)
    assert by_file == {name: {new} for name, (_, _, new) in LOGS.items()}
    for meta in metas["flagged.jsonl"]:
        meta["deployment_key"] = "nvidia-a100-sxm4-40gb-x4"
    assert _metas(empty_url) == metas  # the key inside meta rewritten, the rest as it was
    kept = {m["deployment"] for m in store.load_models()}
    assert kept == {key for key, stays in MODELS.items() if stays}

    # a request in another spelling finds the history the old code stored
    for asked, files in [("8x NVIDIA A100-SXM4-80GB", {"mlperf_spelling.jsonl",
                                                        "smi_spelling.jsonl"}),
                         ("8x A100-SXM-80GB CTS", {"mlperf_spelling.jsonl",
                                                    "smi_spelling.jsonl"}),
                         ("2x8 NVIDIA H100 80GB HBM3", {"h100.jsonl"}),
                         ("4x NVIDIA A100-SXM4-40GB", {"flagged.jsonl"})]:
        found = store.runs(deployment=canonical_key(asked))
        assert {Path(r.source).name for r in found} == files, asked
    stored = sorted({r.deployment for r in runs})
    assert family_matches("8x A100", stored) == [
        ("nvidia-a100-sxm4-80gb-x8", "family: asked 'A100', history has 'A100-SXM4-80GB'")]
    assert family_matches("8x V100", stored)[0].key == "nvidia-v100-sxm2-16gb-x8"

    # new ingests agree with the migrated keys; a second upgrade changes nothing
    again = _cli("store", "upgrade", "--store", empty_url, "--json")
    assert json.loads(again.stdout)["changed"] is False
    fresh = tmp_path / "fresh.jsonl"
    fresh.write_text(_sample("8x NVIDIA A100-SXM-80GB (400W)", "fresh"))
    report = ingest_paths(store, [str(fresh)], IngestOptions())
    assert not report.rejected
    assert len(store.runs(deployment="nvidia-a100-sxm4-80gb-x8")) == 3 * per_file
    store.engine.dispose()


def test_an_empty_store_and_a_current_one_upgrade_as_before(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert migrations.upgrade(make_engine(url)) == (None, migrations.HEAD)
    Store(url).engine.dispose()  # opens at HEAD
    assert migrations.upgrade(make_engine(url)) == (migrations.HEAD, migrations.HEAD)
