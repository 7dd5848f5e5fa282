"""The renamed flags of issue 26 keep their old spellings for one release, hidden, with a
warning on stderr (``--json`` stdout stays clean): ``bench --device`` (now
``--local-device``), ``bench --precisions`` (now a repeatable ``--precision``, comma lists
too) and ``register --calibrate/--no-calibrate`` (now ``--scale-calibration``). Both
spellings with different values fail with exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ingest.store import Store
from jobcast.cli.app import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def deprecated(result, old: str) -> bool:
    """The result warned, on stderr only, that ``old`` is deprecated."""
    return f"{old} is deprecated" in result.stderr and "deprecated" not in result.stdout


def test_bench_old_spellings_still_run_and_warn(tmp_path):
    """One real campaign asked for the old way: two rows, one per precision (PyTorch here)."""
    pytest.importorskip("torch")
    out = tmp_path / "old.csv"
    result = invoke("bench", "--out", str(out), "--device", "cpu", "--precisions", "fp32,bf16",
                    "--layers", "dense", "--samples", "2", "--backend", "torch",
                    "--in-process", "--reps", "1", "--runs", "1", "--warmup", "1", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # the warnings left stdout clean
    assert summary["precisions"] == ["fp32", "bf16"] and summary["written"] == 2
    assert deprecated(result, "--device") and deprecated(result, "--precisions")


@pytest.mark.parametrize("flag", ["--device", "--local-device"])
def test_bench_device_value_reaches_the_campaign_under_either_spelling(tmp_path, flag):
    result = invoke("bench", "--out", str(tmp_path / "b.csv"), flag, "tpu")
    assert result.exit_code == 2
    assert "bad device 'tpu'" in result.stderr
    assert deprecated(result, "--device") == (flag == "--device")


@pytest.mark.parametrize("asked", [["--precision", "fp32", "--precision", "fp99"],
                                   ["--precision", "fp32,fp99"],
                                   ["--precisions", "fp32,fp99"]])
def test_bench_precisions_repeat_take_comma_lists_and_the_old_flag(tmp_path, asked):
    result = invoke("bench", "--out", str(tmp_path / "b.csv"), *asked)
    assert result.exit_code == 2
    assert "unknown precision 'fp99'" in result.stderr
    assert deprecated(result, "--precisions") == ("--precisions" in asked)


@pytest.mark.parametrize("both", [["--device", "gpu", "--local-device", "cpu"],
                                  ["--precisions", "bf16", "--precision", "fp16"]])
def test_bench_both_spellings_with_different_values_fail(tmp_path, both):
    result = invoke("bench", "--out", str(tmp_path / "b.csv"), *both)
    assert result.exit_code == 2
    assert "give one of them, not both" in result.stderr
    assert not (tmp_path / "b.csv").exists()


def test_bench_help_shows_only_the_new_spellings():
    text = invoke("bench", "--help").output
    assert "--local-device" in text and "--precision" in text
    assert "--device" not in text.replace("--local-device", "")
    assert "--precisions" not in text


@pytest.fixture
def store_without_models(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(url)
    return url


@pytest.mark.parametrize("flag", ["--calibrate", "--no-calibrate"])
def test_register_old_calibrate_flags_still_work_and_warn(store_without_models, flag):
    """The old flag is read (and warned about) before the store is: the registry answers
    that there is nothing to register."""
    result = invoke("register", "--store", store_without_models, flag)
    assert result.exit_code == 2
    assert "no fitted models" in result.stderr
    assert deprecated(result, "--calibrate/--no-calibrate")


def test_register_new_flag_does_not_warn_and_a_conflict_fails(store_without_models):
    new = invoke("register", "--store", store_without_models, "--no-scale-calibration")
    assert new.exit_code == 2 and "no fitted models" in new.stderr
    assert "deprecated" not in new.stderr
    both = invoke("register", "--store", store_without_models, "--scale-calibration",
                  "--no-calibrate")
    assert both.exit_code == 2 and "give one of them, not both" in both.stderr
    help_text = invoke("register", "--help").output
    assert "--scale-calibration" in help_text and "--calibrate" not in help_text
