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
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    ok = [c for c in out["candidates"] if "error" not in c]
    assert {c["route"] for c in ok} >= {"end-to-end"}
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
    from jobcast.cli.report import forecast_jobs, job_table, variant_request

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
    assert list(a100["precision"]) == ["fp16"] and list(a100["route"]) == ["end-to-end"]
    assert examples["candidate"].ne("").all()  # which candidate answered, with its backtest
    assert "backtest %" in examples.columns
    for row in examples.itertuples():
        if row.precision == "fp16":  # an fp16 job is never answered by another precision
            assert "precision:fp16" in row.model, row
        assert (" · precision=fp16" in row.job) == (row.precision == "fp16"), row


def test_compare_rows_say_why_and_which_precision(store_url):
    args = ["compare", "--store", store_url, "--network", "resnet50", "--batch-size", "3264",
            "--epochs", "1", "--device", "A100"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    rows = {c["candidate"]: c for c in json.loads(result.stdout)["candidates"]}
    a100 = rows["nvidia-a100-sxm4-40gb-x8"]  # its history: fp16 runs at batch 3264
    assert a100["route"] == "end-to-end"
    assert a100["precision"] == "fp16" and a100["variant"] == "precision=fp16"
    assert a100["chosen"] and "precision=fp16" in a100["chosen"]
    for row in rows.values():
        assert row["chosen"] and row["precision"], row
    assert rows["A100 x1"]["precision"] == "fp32"  # the layerwise route prices --precision
    assert rows["A100 x1"]["variant"] == "precision=fp32"
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0, table.output
    header = next(line for line in table.stdout.splitlines() if "candidate" in line)
    assert "precision" in header and "chosen" in header
