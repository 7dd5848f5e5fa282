"""Data that looks like Rich markup (``[red]x``, ``a[/b]``) prints exactly as written.

File names, network names, tags, model ids and error messages reach the console through
``note()`` or :class:`rich.text.Text`; before, ``[red]`` vanished into a style and ``[/b]``
raised ``MarkupError`` (a traceback).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from paths import DATA, REPO
from rich.console import Console
from typer.testing import CliRunner

from jobcast.cli.app import app
from jobcast.cli.views import compare_table, forecasts_table

MARKUP_DIR = "[red]logs a["  # with the next folder "b]": the path reads "[red]logs a[/b]"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The installed CLI in a fresh process, 400 columns wide (no table cell folds)."""
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "jobcast", *args], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=300)


@pytest.fixture(scope="module")
def markup_store(tmp_path_factory) -> tuple[str, str]:
    """A store ingested from a folder whose path holds markup; (store url, that folder)."""
    root = tmp_path_factory.mktemp("markup")
    logs = root / MARKUP_DIR / "b]"
    shutil.copytree(DATA / "mlperf", logs)
    url = f"sqlite:///{root / 'jobcast.db'}"
    result = invoke("ingest", str(logs), "--store", url)
    assert result.exit_code == 0, result.output
    result = invoke("fit", "--store", url, "--no-track", "--json")
    assert result.exit_code == 0, result.output
    return url, str(logs)


def test_runs_table_prints_sources_as_written(markup_store):
    url, logs = markup_store
    assert "[red]logs a[/b]" in logs
    table = run_cli("runs", "--store", url)
    assert table.returncode == 0, table.stderr
    assert "Traceback" not in table.stderr
    assert f"{logs}/v1.0/Google/results/tpu-v4-128-TF/resnet/result_0.txt" in table.stdout
    as_json = run_cli("runs", "--store", url, "--json")
    sources = {r["source"] for r in json.loads(as_json.stdout)}
    assert f"{logs}/v1.0/Google/results/tpu-v4-128-TF/resnet/result_0.txt" in sources


def test_fit_table_shows_the_variant_in_brackets(markup_store):
    url, _ = markup_store
    fit = run_cli("fit", "--store", url, "--no-track")
    assert fit.returncode == 0, fit.stderr
    assert "MXNet NVIDIA Release 20.06 [precision=fp16] (thin)" in fit.stdout


@pytest.mark.parametrize("tag", ["compiler=[/b]", "compiler=[red]x"])
def test_predict_prints_route_model_and_tag_as_written(markup_store, tag):
    url, _ = markup_store
    result = invoke("predict", "--store", url, "--network", "resnet50", "--deployment",
                    "google-tpu-v4-x4-n16", "--batch-size", "8192", "--iterations", "100",
                    "--tag", tag)
    assert result.exit_code == 0, result.output
    route = next(line for line in result.stdout.splitlines() if line.startswith("route: "))
    assert route.startswith(("route: rate ", "route: end-to-end "))  # a history route's name
    assert "resnet50/google-tpu-v4-x4-n16/" in route
    assert f"the asked {tag}" in result.stdout
    assert "\nwarning: outside the fitted batch-size or iteration range" in result.stdout


def test_unknown_network_with_markup_is_a_clean_error(markup_store):
    url, _ = markup_store
    result = invoke("predict", "--store", url, "--network", "a[/b]", "--deployment",
                    "[red]x", "--batch-size", "8", "--iterations", "10")
    assert result.exit_code == 2
    assert result.stdout == ""


def _render(renderable) -> str:
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(renderable)
    return out.getvalue()


def test_tables_print_names_and_errors_as_written():
    compared = {
        "network": "[red]net", "batch_size": 8, "epochs": 1, "dataset": "given",
        "dataset_size": 100, "prices": "/p/[bold]prices.csv", "precisions": ["fp16"],
        "notes": [{"id": 1, "text": "asked a[/b]"}],
        "candidates": [
            {"candidate": "[red]x1", "route": "end-to-end", "extrapolated": False,
             "precision": "fp16", "notes": [1], "rank_time": 1, "seconds": 10.0,
             "low": 9.0, "high": 11.0, "usd": None},
            {"candidate": "2x a[/b]", "gpus": 2, "precision": "fp16",
             "error": "no GPU named 'a[/b]'"},
        ],
    }
    text = _render(compare_table(compared))
    for expected in ("[red]net", "/p/[bold]prices.csv", "[red]x1", "asked a[/b]", "fp16",
                     "2x a[/b]", "no GPU named 'a[/b]'"):
        assert expected in text
    forecasts = [{"job": {"network": "[red]n", "deployment": "a[/b]", "batch_size": 8,
                          "iterations": 10}, "error": "network '[red]n' unknown"}]
    text = _render(forecasts_table(forecasts))
    assert "[red]n" in text and "a[/b]" in text and "network '[red]n' unknown" in text


def test_layerwise_predict_names_an_output_path_with_markup(tmp_path):
    rows = pd.read_csv(DATA / "justus2018" / "conv_slice.csv.gz").head(20)
    data = tmp_path / "[red]in.csv"
    rows.to_csv(data, index=False)
    out = tmp_path / "[red]o a[" / "b].csv"
    result = invoke("layerwise", "predict", "--data", str(data), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.is_file()
    assert result.stdout.startswith("wrote 20 rows with predicted_ms, low_ms, high_ms to ")
    assert result.stdout.rstrip("\n").endswith(str(out))
    missing = tmp_path / "a[" / "b]" / "[red]none.csv"
    result = invoke("layerwise", "predict", "--data", str(missing), "--out", str(out))
    assert result.exit_code == 2
    assert f"error: {missing}: no such file" in result.output


def test_bench_summary_names_an_output_path_with_markup(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "[red]b a[" / "b].csv"
    out.parent.mkdir()
    result = invoke("bench", "--out", str(out), "--layers", "dense", "--samples", "1",
                    "--backend", "torch", "--in-process", "--reps", "1", "--warmup", "1",
                    "--runs", "1")
    assert result.exit_code == 0, result.output
    assert f"0 already in {out}; " in result.stdout
    assert result.stdout.startswith("1 new row(s) (")


def test_ingest_summary_and_rejections_print_file_names_as_written(tmp_path):
    """Added, rejected and warned-about files are named exactly, markup and all."""
    folder = tmp_path / "[red]x a["
    folder.mkdir()
    good = folder / "b] good.txt"  # the path holds "[red]x a[/b] good.txt"
    shutil.copy(next((DATA / "tf_cnn").glob("*.txt")), good)
    bad = folder / "b] bad.log"
    bad.write_text("hello\nnot a log\n")
    assert "[red]x a[/b]" in str(good) and "[red]x a[/b]" in str(bad)
    url = f"sqlite:///{tmp_path / 'jobcast.db'}"
    result = invoke("ingest", str(folder), "--store", url, "--deployment", "8x V100",
                    "--override")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == ("added 1 files (1 runs), 0 already in the store, 1 rejected, "
                        "0 side files skipped")
    assert f"warning {good} run 1: stored under --deployment nvidia-v100-x8" in result.stdout
    assert f"rejected {bad}:1: unrecognised format" in result.stdout
    as_json = invoke("ingest", str(folder), "--store", url, "--json")
    report = json.loads(as_json.stdout)
    assert report["duplicates"] == [{"source": str(good), "first_source": str(good)}]
    assert [r["source"] for r in report["rejected"]] == [str(bad)]


def test_report_names_a_folder_with_markup(markup_store, tmp_path):
    url, _ = markup_store
    out = tmp_path / "[red]r a[" / "b]"
    result = invoke("report", "--store", url, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "report.html").is_file()
    assert result.stdout == f"wrote {out / 'report.html'}\n"


def test_stack_status_and_logs_print_the_folder_as_written(tmp_path):
    """An empty stack folder (nothing started: no PostgreSQL needed) whose path and saved
    host look like markup: every path and URL is printed as written."""
    folder = tmp_path / "[red]s a[" / "b]"
    folder.mkdir(parents=True)
    (folder / "stack.json").write_text(json.dumps({"host": "[red]h[/b]"}))
    status = run_cli("stack", "status", "--dir", str(folder))
    assert status.returncode == 0, status.stderr
    for piece in ("postgres", "mlflow", "forecast"):
        assert str(folder / "logs" / f"{piece}.log") in status.stdout
    assert "http://[red]h[/b]:5000" in status.stdout
    assert status.stdout.splitlines()[-2:] == [
        f"environment for ingest, fit, register: source {folder / 'env'}",
        f"environment for predict, report, serve (read-only): source {folder / 'reader.env'}"]
    as_json = json.loads(run_cli("stack", "status", "--dir", str(folder), "--json").stdout)
    assert as_json["env"] == str(folder / "env")
    logs = run_cli("stack", "logs", "--dir", str(folder), "--service", "mlflow")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == [f"== mlflow: {folder / 'logs' / 'mlflow.log'}",
                                        "(no log yet)"]
