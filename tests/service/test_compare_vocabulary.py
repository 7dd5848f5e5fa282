"""``compare`` speaks ``predict``'s language (issue 37): a device that names its count
("8x A100", or ``--deployment``) is that deployment, every answered row has its scaling
figure, notes are words (no selector cells), and a flag a row's route cannot use is said."""

from __future__ import annotations

import json

import pytest
from paths import DATA
from typer.testing import CliRunner

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.service.engine.fitting import fit_store_all
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.features.compare import compare
from jobcast.service.features.prices import load_prices


def ask(forecaster=None, **kw) -> dict:
    return compare(forecaster or Forecaster(models=[]), load_prices(None), "resnet50",
                   batch_size=256, epochs=1, **kw)


@pytest.fixture(scope="module")
def counted() -> dict:
    return ask(devices=["8x A100", "4x H100", "A100"])


def notes_of(result, row) -> list[str]:
    text = {n["id"]: n["text"] for n in result["notes"]}
    return [text[i] for i in row.get("notes", [])]


def test_a_device_that_names_its_count_is_that_deployment(counted):
    rows = {r["candidate"]: r for r in counted["candidates"]}
    assert set(rows) == {"8 × A100", "4 × H100", "1 × A100"}
    assert all("error" not in r for r in rows.values()), rows
    assert rows["8 × A100"]["gpus"] == 8 and rows["4 × H100"]["gpus"] == 4
    assert rows["8 × A100"]["gpu"] == rows["1 × A100"]["gpu"]  # one GPU, two counts


def test_every_answered_row_has_its_scaling_figure(counted):
    rows = {r["candidate"]: r for r in counted["candidates"]}
    assert rows["1 × A100"]["scaling_efficiency"] == 1.0
    eight = rows["8 × A100"]
    assert eight["scaling_efficiency"] == pytest.approx(
        rows["1 × A100"]["seconds"] / (8 * eight["seconds"]))
    assert rows["4 × H100"]["scaling_efficiency"] > 0  # its 1-GPU time forecast for it


def test_notes_are_words_not_selector_cells(counted):
    texts = [n["text"] for n in counted["notes"]]
    assert any(t.startswith("backtest:") for t in texts)
    assert not any("kind=" in t or "|" in t for t in texts), texts


def test_gpus_that_a_counted_device_ignores_are_said():
    result = ask(devices=["8x A100", "T4"], counts=[1, 2])
    assert {r["candidate"] for r in result["candidates"]} == {"8 × A100", "1 × T4", "2 × T4"}
    assert any("--gpus 1,2 applies to bare GPUs only" in n["text"] and "8x A100" in n["text"]
               for n in result["notes"])


def test_the_cli_takes_deployment_as_predict_does(tmp_path):
    out = CliRunner().invoke(app, ["compare", "--network", "resnet50", "--batch-size", "256",
                                   "--epochs", "1", "--deployment", "8x A100", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)["candidates"]
    assert row["gpus"] == 8 and row["scaling_efficiency"] > 0


def test_history_rows_say_which_flags_they_cannot_use(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'h.db'}")
    ingest_paths(store, [str(DATA / "mlperf")])
    fit_store_all(store, backtest=False)
    result = ask(Forecaster(store), devices=[], include_history=True, framework="pytorch",
                 optimizer="adam")
    history = [r for r in result["candidates"] if r["source"] == "history"]
    assert history and all("error" not in r for r in history)
    for row in history:
        said = " ".join(notes_of(result, row))
        assert "--framework pytorch" in said and "--optimizer adam" in said, said
