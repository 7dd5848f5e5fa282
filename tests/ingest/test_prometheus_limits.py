"""``ingest-prometheus`` limits, progress and failures, against a real Prometheus.

A range too long for its ``--chunk`` is refused before any request; a range holding more
samples than ``--max-points`` is refused after one counting query (and a fetch that grows
past it stops); the progress bar is drawn on a terminal only, never with ``--json``; TLS and
scheme mistakes are explained with the server's URL (never a cut, URL-encoded query); and a
failed ingest into a new SQLite store leaves no file behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prom_server import (  # noqa: F401  (prometheus_bin is a fixture)
    PrometheusUnavailable,
    PromServer,
    backfill,
    free_port,
    make_web_config,
    prometheus_bin,
)
from test_prom_reconstruct import record, scrape_times, script
from typer.testing import CliRunner

from ingest.prometheus import (
    MetricNames,
    PrometheusClient,
    PrometheusError,
    fetch_jobs,
    job_selector,
)
from jobcast.cli.app import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, ["ingest-prometheus", *args], catch_exceptions=False)


def one_error_line(result) -> str:
    """The command's only output line, which must be ``error: ...``."""
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


@pytest.fixture(scope="module")
def small(prometheus_bin, tmp_path_factory):  # noqa: F811
    """A server holding one finished two-epoch job an hour back: (server, since, until)."""
    prom, promtool = prometheus_bin
    work = tmp_path_factory.mktemp("limits")
    events, _ = script(epochs=2, start=time.time() - 3600)
    recorder, _ = record(events, scrape_times(events[0][0], events[-1][0] + 1, 0.1),
                         job_id="small")
    backfill(promtool, recorder.openmetrics(), work / "data")
    with PromServer(prom, work) as srv:
        yield srv, events[0][0] - 60, events[-1][0] + 60


def _window(small) -> list[str]:
    _, since, until = small
    return ["--since", f"{since:.3f}", "--until", f"{until:.3f}"]


def test_chunk_limit_is_checked_before_any_request(tmp_path):
    store = tmp_path / "new.db"
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: a request would be refused
    result = cli("--url", closed, "--since", "0", "--chunk", "1h", "--store",
                 f"sqlite:///{store}")
    assert result.exit_code == 2
    line = one_error_line(result)
    requests = int(re.search(r"is ([\d,]+) requests", line).group(1).replace(",", ""))
    expected = (time.time() - 0) / 3600
    assert abs(requests - expected) <= 2, line
    for flag in ("--chunk", "--since", "--max-chunks", "limit of 10,000"):
        assert flag in line
    assert "refused" not in line and not store.exists()
    # the suggested --chunk is enough, and --max-chunks moves the limit
    suggested = re.search(r"use --chunk (\S+) or longer", line).group(1)
    again = cli("--url", closed, "--since", "0", "--chunk", suggested, "--retries", "0",
                "--store", f"sqlite:///{store}")
    assert "connection refused" in one_error_line(again) and not store.exists()
    assert "--max-chunks" in one_error_line(
        cli("--url", closed, "--since", "2h", "--chunk", "1h", "--max-chunks", "1",
            "--store", f"sqlite:///{store}"))


def test_points_limit_is_counted_first_and_enforced_while_fetching(small, tmp_path):
    srv, since, until = small
    store = tmp_path / "p.db"
    ok = cli("--url", srv.url, *_window(small), "--chunk", "30s", "--store",
             f"sqlite:///{tmp_path / 'ok.db'}", "--json")
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    samples = report["read"]["samples"]
    assert [a["job_id"] for a in report["added"]] == ["small"] and samples > 100
    assert report["read"]["requests"] == report["read"]["chunks"] + 1  # one counting query

    refused = cli("--url", srv.url, *_window(small), "--max-points", str(samples - 1),
                  "--store", f"sqlite:///{store}")
    assert refused.exit_code == 2
    line = one_error_line(refused)
    assert f"holds {samples:,} samples" in line and f"limit of {samples - 1:,}" in line
    for flag in ("--max-points", "--selector", "--since"):
        assert flag in line
    assert not store.exists()
    assert cli("--url", srv.url, *_window(small), "--max-points", str(samples), "--store",
               f"sqlite:///{store}").exit_code == 0

    client = PrometheusClient(srv.url, timeout=10)
    with pytest.raises(PrometheusError, match="--max-points"):
        fetch_jobs(client, since, until, max_points=10)
    assert client.requests_made == 1  # the count, no samples
    # the running check: samples arriving past the limit stop the fetch early
    client = PrometheusClient(srv.url, timeout=10)
    with pytest.raises(PrometheusError, match=r"more than 10 samples .* after \d+ of"):
        client.raw_samples(job_selector(MetricNames()), since, until, chunk=5.0, max_points=10)
    assert client.requests_made < (until - since) / 5.0


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobcast", "ingest-prometheus", *args], cwd=REPO,
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **env})


def test_progress_bar_on_a_terminal_only_and_never_with_json(small, tmp_path):
    srv, since, until = small
    chunks = int((until - since) // 60) + 1
    args = ["--url", srv.url, *_window(small), "--chunk", "60s"]
    terminal = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
    shown = _run(*args, "--store", f"sqlite:///{tmp_path / 'a.db'}", **terminal)
    assert shown.returncode == 0, shown.stderr
    assert "prometheus" in shown.stderr and f"{chunks}/{chunks}" in shown.stderr
    quiet = _run(*args, "--store", f"sqlite:///{tmp_path / 'b.db'}", "--json", **terminal)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["read"]["chunks"] == chunks
    piped = runner.invoke(app, ["ingest-prometheus", *args, "--store",
                                f"sqlite:///{tmp_path / 'c.db'}"])
    assert piped.exit_code == 0 and piped.stderr == ""


def test_scheme_and_tls_mistakes_are_explained(small, tmp_path):
    srv, _, _ = small
    store = tmp_path / "t.db"
    plain = srv.url.split("://", 1)[1]
    tls_to_plain = cli("--url", f"https://{plain}", "--since", "2h", "--retries", "0",
                       "--store", f"sqlite:///{store}")
    assert tls_to_plain.exit_code == 2
    line = one_error_line(tls_to_plain)
    assert "does not speak TLS" in line and f"use http://{plain}" in line
    assert "%7B" not in line and "query" not in line and "--insecure" not in line
    closed = f"http://127.0.0.1:{free_port()}"
    for flag in (["--insecure"], ["--ca-file", __file__]):
        result = cli("--url", closed, "--since", "2h", "--store", f"sqlite:///{store}", *flag)
        line = one_error_line(result)
        assert f"{flag[0]} only applies to https:// URLs" in line and closed in line
        assert "refused" not in line  # refused before any request
    assert not store.exists()


def test_plain_http_to_a_tls_server_is_explained(prometheus_bin, tmp_path):  # noqa: F811
    try:
        web, _ = make_web_config(tmp_path / "tls", "alice", "s3cret")
    except PrometheusUnavailable as exc:
        pytest.skip(str(exc))
    with PromServer(prometheus_bin[0], tmp_path, web_config=str(web), scheme="https") as srv:
        plain = srv.url.replace("https://", "http://")
        result = cli("--url", plain, "--since", "2h", "--retries", "0", "--store",
                     f"sqlite:///{tmp_path / 'x.db'}")
    line = one_error_line(result)
    assert "speaks HTTPS" in line and f"use {srv.url}" in line
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "1e300", "99999999999999999999y"])
def test_times_out_of_range_are_refused(value, tmp_path):
    result = cli("--url", "http://127.0.0.1:9", "--since", value, "--store",
                 f"sqlite:///{tmp_path / 'x.db'}")
    assert result.exit_code == 2
    assert f"bad time {value!r}" in one_error_line(result)
    assert not (tmp_path / "x.db").exists()
