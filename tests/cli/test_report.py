"""The HTML report and the deployment comparison, on real sample logs."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from paths import DATA
from typer.testing import CliRunner

from jobcast.cli.app import app

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def store_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('report') / 'jobcast.db'}"
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(DATA / "mlperf"), "--store", url]).exit_code == 0
    assert runner.invoke(app, ["fit", "--store", url]).exit_code == 0
    return url


def chromium() -> str:
    """Debian's chromium, installed on first use (the test machines run as root)."""
    found = shutil.which("chromium")
    if found:
        return found
    install = subprocess.run(
        ["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, text=True
    )
    if install.returncode != 0:
        update = subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
        install = subprocess.run(
            ["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, text=True
        )
        if install.returncode != 0:
            pytest.skip(f"cannot install chromium: {update.stderr[-300:]}{install.stderr[-300:]}")
    return shutil.which("chromium") or "/usr/bin/chromium"


def test_report_is_self_contained_and_renders(store_url, tmp_path):
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", "--store", store_url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    figures = page.count('<img class="fig"')
    assert figures >= 6 and page.count("data:image/png;base64,") == figures
    assert 'src="http' not in page and 'href="http' not in page  # nothing fetched
    for heading in ("The data", "Ingest: rejected and repaired", "Coverage", "End-to-end models",
                    "Forecasts for common jobs", "Which model serves each key",
                    "Layerwise calibration", "Warnings (grouped)"):
        assert f"<h2>{heading}</h2>" in page
    assert "resnet50" in page and "<th>network</th>\n    </tr>" not in page  # no stray row
    assert "<th>precision</th>" in page  # the example forecasts say which precision they ask
    browser = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'ud'}"]
    dom = subprocess.run(
        [*browser, "--virtual-time-budget=10000", "--dump-dom", (out / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    # The browser decoded every figure (the page counts them after load).
    assert f'data-figures-loaded="{figures}"' in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*browser, "--window-size=1200,1600", f"--screenshot={shot}",
         (out / "report.html").as_uri()],
        capture_output=True, timeout=120, check=True,
    )
    from PIL import Image

    image = Image.open(shot).convert("L")
    assert image.size == (1200, 1600)
    # A rendered page has text and a plot: many distinct grey levels, not a blank canvas.
    assert len(image.histogram()) == 256 and sum(1 for n in image.histogram() if n) > 50


def test_report_groups_repeated_warnings():
    from jobcast.cli.report import _grouped

    items = [(f"e2e/m{i}", f"one batch size ({100 + i}): other batch sizes are extrapolated")
             for i in range(24)] + [("x", "cross-validated error 12.5 % is high")]
    text = _grouped(items)
    assert text.count("<details>") == 2 and "24 ×" in text and "1 ×" in text


def test_compare_ranks_by_time_and_cost(store_url, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "compare",
            "--store",
            store_url,
            "--network",
            "resnet50",
            "--batch-size",
            "1024",
            "--epochs",
            "40",
            "--device",
            "T4",
            "--device",
            "A100",
            "--include-history",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    ok = [c for c in out["candidates"] if "rank_time" in c and c["precision"] == "fp32"]
    assert {c["route"] for c in out["candidates"]} >= {"end-to-end", "layerwise"}
    times = [c["seconds"] for c in ok]
    assert times == sorted(times) and [c["rank_time"] for c in ok] == list(range(1, len(ok) + 1))
    priced = sorted((c for c in ok if c["usd"] is not None), key=lambda c: c["rank_cost"])
    assert priced and [c["usd"] for c in priced] == sorted(c["usd"] for c in priced)
    for c in priced:
        assert c["usd_low"] <= c["usd"] <= c["usd_high"]


def test_price_table_errors_name_file_and_line(store_url, tmp_path):
    prices = tmp_path / "prices.csv"
    prices.write_text("gpu,usd_per_gpu_hour\nV100,3.0\nNoSuchGPU 9000,1.0\n")
    result = CliRunner().invoke(
        app,
        [
            "compare",
            "--store",
            store_url,
            "--network",
            "resnet50",
            "--batch-size",
            "256",
            "--epochs",
            "1",
            "--prices",
            str(prices),
        ],
    )
    assert result.exit_code == 2
    assert f"{prices}:3" in result.output


def test_examples_ask_for_the_precision_of_their_history(store_url):
    """The V100 history holds fp16 runs and runs that state no precision: each is its own
    example, answered by a model of its own variant (not the fp32-first default)."""
    from ingest.store import Store
    from jobcast.service.features.report_data import forecast_jobs, job_table, variant_request

    assert variant_request("compiler=xla,precision=fp16") == {"precision": "fp16",
                                                              "tags": "compiler=xla"}
    assert variant_request("") == {}
    store = Store(store_url)
    jobs = job_table(store)
    problems: list[str] = []
    examples = forecast_jobs(store, jobs[jobs["phase"] == "train"], problems)
    assert not problems
    v100 = examples[examples["deployment"] == "nvidia-v100-sxm2-16gb-x8"]
    assert sorted(v100["precision"]) == ["fp16", "unstated"]
    a100 = examples[examples["deployment"] == "nvidia-a100-sxm4-40gb-x8"]
    assert list(a100["precision"]) == ["fp16"] and list(a100["route"]) == ["rate"]
    assert examples["candidate"].ne("").all()  # which candidate answered, with its backtest
    assert "backtest %" in examples.columns
    for row in examples.itertuples():
        if row.precision == "fp16":  # an fp16 job is never answered by another precision
            assert "precision:fp16" in row.model, row
        assert (" · precision=fp16" in row.job) == (row.precision == "fp16"), row


def test_compare_rows_say_why_and_which_precision(store_url):
    args = ["compare", "--store", store_url, "--network", "resnet50", "--batch-size", "3264",
            "--epochs", "1", "--device", "A100", "--precision", "fp16", "--include-history"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    notes = {n["id"]: n["text"] for n in out["notes"]}
    rows = {(c["candidate"], c["precision"]): c for c in out["candidates"]}
    a100 = rows[("nvidia-a100-sxm4-40gb-x8", "fp16")]  # its history: fp16 runs at batch 3264
    assert a100["source"] == "history" and a100["route"] == "rate"
    assert a100["answer_precision"] == "fp16" and a100["variant"] == "precision=fp16"
    assert any("precision=fp16" in notes[i] for i in a100["notes"])
    for row in rows.values():
        assert row["notes"] and row["precision"], row
    assert rows[("1 × A100", "fp16")]["variant"] == "precision=fp16"  # layerwise prices it
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "precision fp16" in table.stdout and "notes:" in table.stdout


FOUR = ["--device", "V100", "--device", "A100", "--device", "H100", "--device", "T4"]


@pytest.fixture(scope="module")
def four_gpus(store_url) -> dict:
    """Issue 28's must-show: four GPUs x 1,2,4,8 and a GPU nobody knows, text and JSON."""
    args = ["compare", "--store", store_url, "--network", "resnet50", "--batch-size", "256",
            "--epochs", "40", *FOUR, "--device", "Banana", "--gpus", "1,2,4,8"]
    return {"json": CliRunner().invoke(app, [*args, "--json"]),
            "text": CliRunner().invoke(app, args)}


def test_compare_ranks_exactly_what_was_asked(four_gpus):
    result = four_gpus["json"]
    assert result.exit_code == 1  # a row failed; the others are still there
    out = json.loads(result.stdout)
    rows = out["candidates"]
    assert {(r["device"], r["gpus"]) for r in rows} == {
        (d, n) for d in ("V100", "A100", "H100", "T4", "Banana") for n in (1, 2, 4, 8)}
    assert len(rows) == 20 and {r["source"] for r in rows} == {"asked"}  # no store rows
    assert out["precisions"] == ["fp32"] and {r["precision"] for r in rows} == {"fp32"}
    failed = [r for r in rows if "error" in r]
    assert out["failed"] == 4 and {r["device"] for r in failed} == {"Banana"}
    ranked = [r for r in rows if "rank_time" in r]
    assert ranked and [r["rank_time"] for r in ranked] == list(range(1, len(ranked) + 1))
    for r in rows:  # a row answered from history of unstated precision is not ranked
        if "error" not in r:
            assert ("rank_time" in r) == (r["answer_precision"] == "fp32"), r
    ids = [n["id"] for n in out["notes"]]
    assert all(set(r["notes"]) <= set(ids) for r in rows if "error" not in r)


def test_compare_text_prints_each_note_once_and_the_failures(four_gpus):
    result = four_gpus["text"]
    assert result.exit_code == 1
    out = json.loads(four_gpus["json"].stdout)
    lines = result.stdout.splitlines()
    for n in out["notes"]:
        assert lines.count(f"[{n['id']}] {n['text']}") == 1
    for r in out["candidates"]:
        if "error" in r:
            assert f"{r['candidate']} (fp32): {r['error']}" in lines
    assert "4 of 20 rows could not be forecast" in result.stderr
    assert result.stdout.count("precision fp32 (as the framework runs it)") == 1  # one ranking
    header = next(line for line in lines if "GPUs" in line)
    assert "time (90 % interval)" in header and "fits (GiB)" in header and "notes" in header
    for device in ("V100", "A100", "H100", "T4"):  # the GPU each name resolved to, once
        assert sum(line.startswith("[") and f"] {device} resolved to " in line
                   for line in lines) == 1


def test_compare_history_only_when_asked(store_url, four_gpus):
    plain = json.loads(four_gpus["json"].stdout)["candidates"]
    args = ["compare", "--store", store_url, "--network", "resnet50", "--batch-size", "256",
            "--epochs", "40", "--device", "T4", "--include-history", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    history = [r for r in out["candidates"] if r["source"] == "history"]
    assert history and not any(r["source"] == "history" for r in plain)
    assert out["precisions"][0] == "fp32" and "unstated" in out["precisions"]
    for r in history:  # history that states no precision is ranked on its own
        assert r["precision"] in ("fp32", "unstated")
        if r["precision"] == "unstated":
            assert r["answer_precision"] == "unstated" and r["rank_time"] >= 1
    assert any("not ranked" in n["text"] and "fp16" in n["text"] for n in out["notes"])


def test_compare_refuses_an_unknown_precision(store_url):
    result = CliRunner().invoke(app, ["compare", "--store", store_url, "--network", "resnet50",
                                      "--batch-size", "64", "--epochs", "1", "--device", "T4",
                                      "--precision", "fp8"])
    assert result.exit_code == 2 and "unknown precision 'fp8'" in result.stderr
