"""``jobcast layerwise train|predict|info`` on small real CSVs, through a throwaway Typer app."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import typer
from paths import DATA as SAMPLES
from paths import REPO
from typer.testing import CliRunner

from jobcast.cli.layerwise import register

DATA = SAMPLES / "justus2018"
runner = CliRunner()


def make_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Test app."""

    register(app)
    return app


APP = make_app()


def invoke(*args: str):
    return runner.invoke(APP, list(args), catch_exceptions=False)


def text(result) -> str:
    """Output with Rich's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def small_csvs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("csv")
    out = {}
    for layer in ("conv", "dense"):
        frame = pd.read_csv(DATA / f"{layer}_slice.csv.gz")
        frame = frame[frame["gpu"].isin(["V100", "P100", "K80"])].groupby("gpu").head(120)
        out[layer] = folder / f"{layer}.csv"
        frame.to_csv(out[layer], index=False)  # published layout: no `layer` column
    return out


@pytest.fixture(scope="module")
def trained(small_csvs, tmp_path_factory) -> Path:
    model = tmp_path_factory.mktemp("model") / "pred"
    result = invoke("layerwise", "train", "--data", str(small_csvs["conv"]),
                    "--data", str(small_csvs["dense"]), "--out", str(model),
                    "--models", "gbt,linear", "--gbt-iter", "40", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {r["layer"] for r in payload["validation"]} == {"conv", "dense"}
    assert (model / "predictor.json").is_file()
    return model


def test_train_then_predict_adds_columns(trained, small_csvs, tmp_path):
    out = tmp_path / "pred.csv"
    result = invoke("layerwise", "predict", "--model", str(trained),
                    "--data", str(small_csvs["conv"]), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    written = pd.read_csv(out)
    original = pd.read_csv(small_csvs["conv"])
    assert len(written) == len(original)
    assert {"predicted_ms", "low_ms", "high_ms"} <= set(written.columns)
    assert set(original.columns) <= set(written.columns)
    assert (written["low_ms"] <= written["predicted_ms"]).all()
    assert (written["predicted_ms"] <= written["high_ms"]).all()
    assert json.loads(result.stdout)["rows"] == len(original)


def test_predict_with_the_shipped_model(small_csvs, tmp_path):
    out = tmp_path / "pred.csv"
    result = invoke("layerwise", "predict", "--data", str(small_csvs["dense"]), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(out)["predicted_ms"] > 0).all()


@pytest.mark.parametrize("name", ["neusight/elementwise_slice.csv.gz",
                                  "neusight/linear_slice.csv.gz",
                                  "justus2018/conv_slice.csv.gz"])
def test_shipped_model_reads_reference_formats_as_they_are(name, tmp_path):
    source = SAMPLES / name
    out = tmp_path / "pred.csv"
    result = invoke("layerwise", "predict", "--data", str(source), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    original = pd.read_csv(source)
    written = pd.read_csv(out)
    assert list(written.columns[: len(original.columns)]) == list(original.columns)
    assert summary["rows"] == len(original) == summary["predicted"]
    assert (written["low_ms"] <= written["predicted_ms"]).all()
    assert (written["predicted_ms"] <= written["high_ms"]).all()
    assert (written["predicted_ms"] > 0).all()


def test_unseen_catalog_gpu(trained, small_csvs, tmp_path):
    frame = pd.read_csv(small_csvs["dense"]).assign(gpu="NVIDIA A100-SXM4-40GB")
    frame.to_csv(tmp_path / "a100.csv", index=False)
    result = invoke("layerwise", "predict", "--model", str(trained),
                    "--data", str(tmp_path / "a100.csv"), "--out", str(tmp_path / "out.csv"))
    assert result.exit_code == 0, result.output
    assert pd.read_csv(tmp_path / "out.csv")["predicted_ms"].notna().all()


def test_clear_errors(trained, small_csvs, tmp_path):
    result = invoke("layerwise", "predict", "--model", str(trained),
                    "--data", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o.csv"))
    assert result.exit_code == 2 and "no such file" in text(result)
    bad = pd.read_csv(small_csvs["dense"]).assign(gpu="GTX 9999")
    bad.to_csv(tmp_path / "bad.csv", index=False)
    result = invoke("layerwise", "predict", "--model", str(trained),
                    "--data", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "o.csv"))
    assert result.exit_code == 2 and "GTX 9999" in text(result)
    result = invoke("layerwise", "train", "--data", str(small_csvs["dense"]),
                    "--out", str(tmp_path / "m"), "--models", "gbt,xgb")
    assert result.exit_code == 2 and "xgb" in text(result)
    result = invoke("layerwise", "predict", "--model", str(tmp_path),
                    "--data", str(small_csvs["dense"]), "--out", str(tmp_path / "o.csv"))
    assert result.exit_code == 2 and "predictor.json" in text(result)


def test_info_json(trained):
    result = invoke("layerwise", "info", "--model", str(trained), "--json")
    assert result.exit_code == 0, result.output
    layers = json.loads(result.stdout)["layers"]
    assert set(layers) == {"conv", "dense"}
    assert all(entry["model"] in ("gbt", "linear") for entry in layers.values())


def test_predict_does_not_import_tensorflow(small_csvs, tmp_path):
    code = (
        "import sys, typer\n"
        "from typer.testing import CliRunner\n"
        "from jobcast.cli.layerwise import register\n"
        "app = typer.Typer()\n"
        "app.callback()(lambda: None)\n"
        "register(app)\n"
        f"args = ['layerwise', 'predict', '--data', {str(small_csvs['conv'])!r},"
        f" '--out', {str(tmp_path / 'o.csv')!r}]\n"
        "r = CliRunner().invoke(app, args)\n"
        "assert r.exit_code == 0, r.output\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_train_records_its_thread_limit(small_csvs, tmp_path):
    """--threads 1 caps every OpenMP/BLAS pool for the fit, even with no $OMP_NUM_THREADS (a
    fresh process on this machine would otherwise start one OpenMP thread per core)."""
    import os

    code = (
        "import typer\n"
        "from typer.testing import CliRunner\n"
        "from jobcast.cli.layerwise import register\n"
        "app = typer.Typer()\n"
        "app.callback()(lambda: None)\n"
        "register(app)\n"
        f"args = ['layerwise', 'train', '--data', {str(small_csvs['conv'])!r},"
        f" '--out', {str(tmp_path / 'pred')!r}, '--models', 'gbt,linear', '--gbt-iter', '20',"
        " '--threads', '1', '--json']\n"
        "r = CliRunner().invoke(app, args)\n"
        "assert r.exit_code == 0, r.output\n"
        "print(r.stdout)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    payload = json.loads(out.stdout)
    assert payload["threads"] == 1
    assert "openmp" in payload["thread_pools"]  # the boosted trees' pool was loaded and capped
    assert set(payload["thread_pools"].values()) == {1}, payload["thread_pools"]


def test_train_threads_default_and_bounds(small_csvs, tmp_path, monkeypatch):
    from jobcast.cli.layerwise import available_cpus, default_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads() == available_cpus() >= 1
    result = invoke("layerwise", "train", "--data", str(small_csvs["conv"]),
                    "--out", str(tmp_path / "p"), "--threads", "0")
    assert result.exit_code == 2 and "--threads" in text(result)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = invoke("layerwise", "train", "--data", str(small_csvs["dense"]),
                    "--out", str(tmp_path / "p"), "--models", "linear", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["threads"] == 1
