"""Prometheus end to end, with a real server (Debian ``prometheus``, installed if missing).

(a) History backfilled with ``promtool tsdb create-blocks-from openmetrics`` from traces of
    real tiny Keras runs, ingested and fitted, agrees with the same runs' JSON-lines logs.
(b) A live Keras job instrumented with the exporter and scraped by the server: its ETA is
    checked against its actual finish.
(c) Faults: server killed mid-query, restarted while retrying, hanging, cutting answers;
    auth and TLS options. Nothing is half-written.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import typer
from prom_server import (  # noqa: F401  (prometheus_bin is a fixture)
    FaultProxy,
    PrometheusUnavailable,
    PromServer,
    backfill,
    free_port,
    make_web_config,
    prometheus_bin,
    run_keras_jobs,
    start_keras_jobs,
)
from test_prom_reconstruct import record, scrape_times, script
from typer.testing import CliRunner

from ingest.pipeline import ingest_paths
from ingest.prometheus import (
    MetricNames,
    PrometheusClient,
    PrometheusError,
    ingest_prometheus,
)
from ingest.store import Store
from jobcast.cli.prometheus import register
from jobcast.instrument.prometheus import TraceRecorder
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from jobcast.service.features.eta import estimate_eta, fetch_job
from models.e2e import fit_store

pytestmark = pytest.mark.slow

HISTORY_BATCHES = [16, 32, 64]
KERAS = {"train": 2048, "valid": 512, "image": 32}
ODD_IDS = ['a"} or vector(1) #', 'x", job_id=~".*', "back\\slash", "new\nline", "ünï ✓"]

app = typer.Typer()
register(app)


@app.callback()
def _root() -> None:
    """Test app holding the Prometheus commands."""


runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, dict]:
    """Three real Keras jobs with both loggers: JSON-lines logs and an OpenMetrics trace."""
    out = tmp_path_factory.mktemp("history")
    summary = run_keras_jobs(out, HISTORY_BATCHES, epochs=3, interval=0.1, jitter=0.5,
                             **KERAS)
    return out, summary


def odd_trace() -> str:
    """Jobs with hostile ids, a day back (scripted through the real exporter)."""
    recorder = TraceRecorder()
    start = time.time() - 86400
    for i, job_id in enumerate(ODD_IDS):
        events, _ = script(epochs=2, start=start + 60 * i)
        record(events, scrape_times(events[0][0], events[-1][0] + 1, 0.1), job_id=job_id,
               recorder=recorder)
    return recorder.openmetrics()


@pytest.fixture(scope="module")
def server(prometheus_bin, history, tmp_path_factory):  # noqa: F811
    """Backfilled history + hostile ids; scrapes a live port every 0.5 s."""
    prom, promtool = prometheus_bin
    work = tmp_path_factory.mktemp("prom")
    backfill(promtool, (history[0] / "trace.om").read_text(), work / "data")
    backfill(promtool, odd_trace(), work / "data")
    live_port = free_port()
    srv = PromServer(prom, work, targets=[f"127.0.0.1:{live_port}"], scrape_interval="500ms")
    srv.start()
    yield srv, live_port
    srv.stop()


@pytest.fixture(scope="module")
def stores(server, history, tmp_path_factory) -> tuple[str, str]:
    """(store fitted from Prometheus, store fitted from the JSON-lines logs) of the history."""
    srv, _ = server
    folder = tmp_path_factory.mktemp("stores")
    prom_url, log_url = f"sqlite:///{folder / 'prom.db'}", f"sqlite:///{folder / 'logs.db'}"
    result = cli("ingest-prometheus", "--url", srv.url, "--since", "1h", "--store", prom_url,
                 "--selector", "network=tinycnn", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert sorted(a["job_id"] for a in report["added"]) == sorted(
        j["job_id"] for j in history[1]["jobs"])
    logs = ingest_paths(Store(log_url), [j["jsonl"] for j in history[1]["jobs"]])
    assert logs.ok and len(logs.added) == len(HISTORY_BATCHES)
    assert fit_store(Store(prom_url)) and fit_store(Store(log_url))
    return prom_url, log_url


def _phase_totals(store: Store) -> dict[tuple[str, str], tuple[float, float]]:
    runs = {r.id: (r.meta.get("job_id") or r.meta.get("run_id")) for r in store.runs()}
    totals: dict[tuple[str, str], list[float]] = {}
    for seg in store.segments():
        t = totals.setdefault((runs[seg["run_id"]], seg["phase"]), [0.0, 0.0])
        t[0] += seg["iterations"]
        t[1] += seg["seconds"]
    return {k: (v[0], v[1]) for k, v in totals.items()}


# -- (a) backfilled history ------------------------------------------------------------------


def test_backfilled_history_agrees_with_logs(stores, server):
    prom_url, log_url = stores
    prom, logs = _phase_totals(Store(prom_url)), _phase_totals(Store(log_url))
    assert prom.keys() == logs.keys() and len(prom) == 2 * len(HISTORY_BATCHES)
    for key, (iters, secs) in prom.items():
        assert iters == logs[key][0]
        # two callbacks read the clock one after the other: allow scheduling noise
        assert secs == pytest.approx(logs[key][1], abs=0.05)
    # Same runs, other progress points (scrapes vs every 5th step): the forecasts agree
    # within 10 % for training, and within the models' own cross-validated error for the
    # tiny, warm-up-dominated validation passes.
    fc_prom, fc_logs = Forecaster(Store(prom_url)), Forecaster(Store(log_url))
    for phase, steps in (("train", 400), ("test", 80)):
        for batch in HISTORY_BATCHES:
            req = JobRequest(network="tinycnn", deployment="1x cpu", batch_size=batch,
                             iterations=steps, phase=phase)
            a, b = fc_prom.forecast(req).to_dict(), fc_logs.forecast(req).to_dict()
            assert a["route"] == b["route"] and a["route"] in ("rate", "end-to-end"), (a, b)
            own_error = max(a.get("cv_mape") or 0, b.get("cv_mape") or 0) / 100
            tolerance = 0.10 if phase == "train" else max(0.10, own_error)
            assert a["seconds"] == pytest.approx(b["seconds"], rel=tolerance), (phase, batch)


def test_ingest_is_idempotent(stores, server):
    prom_url, _ = stores
    before = Store(prom_url).counts()
    result = cli("ingest-prometheus", "--url", server[0].url, "--since", "2d", "--store",
                 prom_url, "--selector", "network=tinycnn", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0 and report["added"] == []
    assert len(report["duplicates"]) == len(HISTORY_BATCHES)
    assert Store(prom_url).counts() == before


def test_hostile_job_ids_select_exactly_their_job(server, tmp_path):
    srv, _ = server
    client = PrometheusClient(srv.url, timeout=10)
    for job_id in ODD_IDS:
        trace = fetch_job(client, job_id)
        assert trace.job_id == job_id and trace.status == "finished"
        url = f"sqlite:///{tmp_path / 'odd.db'}"
        result = cli("ingest-prometheus", "--url", srv.url, "--since", "2d", "--store", url,
                     "--selector", f"job_id={job_id}", "--json")
        report = json.loads(result.stdout)
        assert [a["job_id"] for a in report["added"] + report["duplicates"]] == [job_id]
    with pytest.raises(PrometheusError, match="no job with job_id"):
        fetch_job(client, ".*")


# -- (b) a live job --------------------------------------------------------------------------


def test_live_job_eta_against_actual_finish(server, stores, tmp_path):
    srv, port = server
    prom_url, _ = stores
    client = PrometheusClient(srv.url, timeout=10)
    forecaster = Forecaster(Store(prom_url))
    # Long enough to be scraped several times mid-run on an idle machine (8 epochs took ~4 s).
    child = start_keras_jobs(tmp_path, [32], epochs=24, serve_port=port, job_prefix="live",
                             **KERAS)
    estimates = []
    deadline = time.monotonic() + 240
    try:
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                trace = fetch_job(client, "live-1-bs32")
            except PrometheusError:
                continue  # not scraped yet
            now = time.time()
            eta = estimate_eta(trace, forecaster, now=now)
            if eta["status"] == "running":
                estimates.append((eta["phases"]["train"]["fraction"], eta))
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)
    assert child.returncode == 0, child.stderr.read()[-2000:]
    job = json.loads((tmp_path / "summary.json").read_text())["jobs"][0]
    end, duration = job["job_end"], job["job_end"] - job["start"]
    running = [(f, e) for f, e in estimates if 0 < f < 1]
    assert len(running) >= 3, estimates
    for _fraction, eta in running:
        assert eta["finish_low"] <= eta["finish_time"] <= eta["finish_high"]
        assert eta["route"] in ("rate", "end-to-end")
    late = [abs(e["finish_time"] - end) / duration for f, e in running if f >= 0.5]
    assert late and max(late) < 0.35, late
    done = json.loads(cli("eta", "--url", srv.url, "--job-id", "live-1-bs32", "--store",
                          prom_url, "--json").stdout)
    assert done["status"] == "finished"
    assert done["finished_at"] == pytest.approx(end, abs=1e-3)
    result = cli("ingest-prometheus", "--url", srv.url, "--since", "1h", "--store", prom_url,
                 "--selector", "job_id=live-1-bs32", "--json")
    (added,) = json.loads(result.stdout)["added"]
    assert added["status"] == "finished"


# -- (c) faults ------------------------------------------------------------------------------


@pytest.fixture()
def fresh_server(prometheus_bin, history, tmp_path):  # noqa: F811
    prom, promtool = prometheus_bin
    backfill(promtool, (history[0] / "trace.om").read_text(), tmp_path / "data")
    srv = PromServer(prom, tmp_path).start()
    yield srv
    srv.stop()


def _window(history) -> tuple[float, float]:
    jobs = history[1]["jobs"]
    return jobs[0]["start"] - 5, jobs[-1]["end"] + 5


def test_server_killed_mid_query_writes_nothing(fresh_server, history, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'k.db'}")

    def kill_after_two(response) -> None:
        if client.requests_made == 2:
            fresh_server.kill()

    client = PrometheusClient(fresh_server.url, timeout=5, retries=2, backoff=0.05,
                              on_response=kill_after_two)
    start, end = _window(history)
    with pytest.raises(PrometheusError, match=r"connection refused.*tried 3 times"):
        ingest_prometheus(store, client, start, end, chunk=2.0)
    assert client.requests_made == 2
    assert store.counts() == {"files": 0, "runs": 0, "segments": 0}
    result = cli("eta", "--url", fresh_server.url, "--job-id", "job-1-bs16", "--retries", "0")
    assert result.exit_code == 2 and "connection refused" in result.output


def test_retries_ride_out_a_restart(fresh_server, history, tmp_path):
    start, end = _window(history)
    reference = Store(f"sqlite:///{tmp_path / 'ref.db'}")
    ingest_prometheus(reference, PrometheusClient(fresh_server.url), start, end, chunk=2.0)
    store = Store(f"sqlite:///{tmp_path / 'r.db'}")

    def crash_and_restart(response) -> None:
        if client.requests_made == 2:
            fresh_server.kill()
            threading.Timer(0.2, fresh_server.start).start()

    client = PrometheusClient(fresh_server.url, timeout=5, retries=6, backoff=0.3,
                              on_response=crash_and_restart)
    report = ingest_prometheus(store, client, start, end, chunk=2.0)
    assert len(report.added) == len(HISTORY_BATCHES)
    hashes = {r.content_hash for r in store.runs()}
    assert hashes == {r.content_hash for r in reference.runs()}


def test_hanging_server_times_out_clearly(fresh_server, tmp_path):
    with FaultProxy(fresh_server.port, "hang") as proxy:
        began = time.monotonic()
        result = cli("ingest-prometheus", "--url", proxy.url, "--since", "1h", "--timeout",
                     "0.5", "--retries", "1", "--store", f"sqlite:///{tmp_path / 'h.db'}")
        took = time.monotonic() - began
    assert result.exit_code == 2
    assert "no answer within 0.5 s" in result.output and "tried 2 times" in result.output
    assert "nothing was written" in result.output
    assert took < 10 and proxy.connections >= 2
    assert Store(f"sqlite:///{tmp_path / 'h.db'}").counts()["files"] == 0


def test_cut_answer_is_an_error_not_data(fresh_server, history, tmp_path):
    start, end = _window(history)
    with FaultProxy(fresh_server.port, "cut", cut_after=400) as proxy:
        client = PrometheusClient(proxy.url, timeout=5, retries=1, backoff=0.05)
        store = Store(f"sqlite:///{tmp_path / 'c.db'}")
        with pytest.raises(PrometheusError, match=r"cut off|unreadable answer"):
            ingest_prometheus(store, client, start, end)
    assert store.counts()["files"] == 0


def test_auth_and_tls_options(prometheus_bin, tmp_path):  # noqa: F811
    try:
        web, ca = make_web_config(tmp_path / "tls", "alice", "s3cret")
    except PrometheusUnavailable as exc:
        pytest.skip(str(exc))
    events, _ = script(epochs=2, start=time.time() - 3600)
    recorder, _ = record(events, scrape_times(events[0][0], events[-1][0] + 1, 0.1),
                         job_id="tls-job")
    backfill(prometheus_bin[1], recorder.openmetrics(), tmp_path / "data")
    Store(f"sqlite:///{tmp_path / 't.db'}")  # an empty store: eta reads, never creates one
    with PromServer(prometheus_bin[0], tmp_path, web_config=str(web), scheme="https") as srv:
        def eta(*extra: str):
            return cli("eta", "--url", srv.url, "--job-id", "tls-job", "--retries", "0",
                       "--store", f"sqlite:///{tmp_path / 't.db'}", "--json", *extra)

        no_ca = eta("--basic-auth", "alice:s3cret")
        assert no_ca.exit_code == 2 and "--ca-file" in no_ca.output
        no_auth = eta("--ca-file", str(ca))
        assert no_auth.exit_code == 2 and "HTTP 401" in no_auth.output
        wrong = eta("--ca-file", str(ca), "--basic-auth", "alice:nope")
        assert wrong.exit_code == 2 and "not authorised" in wrong.output
        for ok in (eta("--ca-file", str(ca), "--basic-auth", "alice:s3cret"),
                   eta("--insecure", "--basic-auth", "alice:s3cret")):
            assert ok.exit_code == 0, ok.output
            assert json.loads(ok.stdout)["status"] == "finished"
        plain = cli("eta", "--url", srv.url.replace("https", "http"), "--job-id", "tls-job",
                    "--retries", "0")
        assert plain.exit_code == 2 and "error" in plain.output


def test_configured_metric_names_round_trip(prometheus_bin, tmp_path):  # noqa: F811
    names = MetricNames(prefix="team_train", job_label="run")
    events, _ = script(epochs=2, start=time.time() - 3600)
    recorder, _ = record(events, scrape_times(events[0][0], events[-1][0] + 1, 0.1),
                         job_id="named", names=names)
    backfill(prometheus_bin[1], recorder.openmetrics(), tmp_path / "data")
    with PromServer(prometheus_bin[0], tmp_path) as srv:
        url = f"sqlite:///{tmp_path / 'n.db'}"
        default = json.loads(cli("ingest-prometheus", "--url", srv.url, "--since", "2h",
                                 "--store", url, "--json").stdout)
        assert default["added"] == [] and default["read"]["series"] == 0
        named = json.loads(cli("ingest-prometheus", "--url", srv.url, "--since", "2h",
                               "--store", url, "--prefix", "team_train", "--job-label", "run",
                               "--json").stdout)
        assert [a["job_id"] for a in named["added"]] == ["named"]
