"""Which files of a folder are logs is the parsers' decision (ingest.pipeline.recognised):

* a ``.csv``/``.json``/``.yaml`` file reaches a parser exactly when a registered parser's
  sniff recognises it, else it is a side file (skipped, listed): shown with a toy ``.csv``
  log format registered from this test alone, and with a jobcast JSON-lines log named
  ``.json`` (skipped before this rule);
* MLPerf system descriptions and Lambda ``metadata`` stay side files, as before;
* binary checkpoints and weights the frameworks leave beside their logs are skipped, not
  rejected; a file named on the command line is parsed or rejected, never skipped.
"""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest
from paths import DATA

import ingest.parsers as parsers
from ingest.events import ParsedRun, Segment
from ingest.pipeline import IngestOptions, discover, ingest_paths
from ingest.store import Store

TOY = "tests_toy_csv_format"


def _toy_module() -> types.ModuleType:
    """A log format whose files are CSV tables ``toy_step,toy_seconds`` (one run, one train
    segment up to the last row)."""
    module = types.ModuleType(TOY)
    module.FORMAT = "toy_csv"

    def sniff(head):
        return bool(head) and head[0].strip() == "toy_step,toy_seconds"

    def parse(lines, ctx):
        rows = [tuple(float(v) for v in ln.split(",")) for ln in lines[1:] if ln.strip()]
        steps, seconds = rows[-1]
        return [ParsedRun(format="toy_csv", network="toynet", batch_size=8, first_line=1,
                          segments=[Segment("train", steps, seconds, line=len(rows) + 1,
                                            points=tuple(rows))])]

    module.sniff, module.parse = sniff, parse
    return module


@pytest.fixture
def toy_format(monkeypatch):
    monkeypatch.setitem(sys.modules, TOY, _toy_module())
    monkeypatch.setattr(parsers, "_REGISTRY", [*parsers.names(), TOY])
    yield


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "history"
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "run.csv").write_text("toy_step,toy_seconds\n10,2.5\n20,4.0\n")
    (root / "toy" / "metrics.csv").write_text("epoch,step,train_loss\n0,9,2.3\n")
    (root / "toy" / "config.yaml").write_text("batch_size: 8\nmodel: toynet\n")
    (root / "toy" / "model.ckpt").write_bytes(b"\x80\x04PK\x00\x00binary")
    (root / "toy" / "weights.safetensors").write_bytes(b"\x00" * 64)
    shutil.copytree(DATA / "mlperf" / "v0.6", root / "mlperf" / "v0.6")
    shutil.copytree(DATA / "lambda_sample", root / "lambda")
    shutil.copy(DATA / "keras" / "fit_verbose1.jsonl", root / "keras_run.json")
    return root


def _rel(root: Path, names) -> set[str]:
    return {Path(n).relative_to(root).as_posix() for n in names}


def test_a_csv_format_reaches_its_parser_only_when_registered(tree, toy_format):
    found, skipped, missing = discover([str(tree)])
    found = _rel(tree, (f for f, _ in found))
    assert "toy/run.csv" in found and not missing
    assert {"toy/metrics.csv", "toy/config.yaml", "toy/model.ckpt",
            "toy/weights.safetensors"} <= _rel(tree, skipped)
    store = Store(f"sqlite:///{tree.parent / 'toy.db'}")
    report = ingest_paths(store, [str(tree / "toy")], IngestOptions(deployment="1x cpu"))
    assert report.ok and [Path(s).name for s, _ in report.added] == ["run.csv"]
    [run] = store.runs()
    assert (run.network, run.batch_size) == ("toynet", 8)


def test_without_its_parser_a_csv_is_a_side_file(tree):
    found, skipped, _ = discover([str(tree)])
    assert "toy/run.csv" in _rel(tree, skipped)
    assert "toy/run.csv" not in _rel(tree, (f for f, _ in found))


def test_mlperf_systems_and_lambda_metadata_stay_side_files(tree):
    found, skipped, _ = discover([str(tree)])
    found, skipped = _rel(tree, (f for f, _ in found)), _rel(tree, skipped)
    systems = {s for s in skipped if "/systems/" in s}
    assert systems and not any("/systems/" in f for f in found)
    assert any(s.endswith("/metadata") for s in skipped)
    assert not any(f.endswith("/metadata") for f in found)
    assert any(f.endswith("result_2.txt") for f in found)


def test_a_json_that_a_parser_recognises_is_a_log(tree):
    found, _, _ = discover([str(tree)])
    assert "keras_run.json" in _rel(tree, (f for f, _ in found))
    store = Store(f"sqlite:///{tree.parent / 'json.db'}")
    report = ingest_paths(store, [str(tree / "keras_run.json")])
    assert report.ok and report.stored == 1


def test_a_named_file_is_parsed_or_rejected_never_skipped(tree):
    store = Store(f"sqlite:///{tree.parent / 'named.db'}")
    report = ingest_paths(store, [str(tree / "toy" / "metrics.csv")])
    assert not report.skipped and len(report.rejected) == 1
    assert "unrecognised format" in report.rejected[0].reason
