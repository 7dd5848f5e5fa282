"""``ingest-prometheus --source kubernetes`` and ``check --k8s-job`` against a real Prometheus.

The server is backfilled with CronJob runs in the exact names and labels of
kube-state-metrics and dcgm-exporter (tests/k8s_series.py, label sets read from the
recorded public samples in tests/data/kubernetes): Jobs on two GPU models, both DCGM host
label spellings and both pod label spellings, a node without profiling counters, a failed
Job, one deleted before it ended, one still running, one whose pod names no node.
"""

from __future__ import annotations

import json
import time

import pytest
from k8s_series import JobRun, Node, openmetrics
from prom_server import PromServer, backfill, free_port, prometheus_bin  # noqa: F401
from typer.testing import CliRunner

from ingest.store import Store
from ingest.whole_job import WholeJobRun, whole_job_runs
from jobcast.cli.app import app
from models.whole_job import whole_job_candidate

runner = CliRunner()
A100 = Node("gpu-a100-0", "NVIDIA A100-SXM4-80GB")
V100 = Node("gpu-v100-0", "Tesla V100-SXM2-16GB", prof=False, host_label="hostname")
A100_KEY, V100_KEY = "nvidia-a100-sxm4-80gb-x8", "nvidia-v100-sxm2-16gb-x8"


def scenario(now: float) -> tuple[list[JobRun], float]:
    """The runs, and the time between the history and the two jobs to check."""
    t0 = now - 10 * 3600
    runs = []
    for i, (a, v) in enumerate(((620, 1310), (600, 1370), (640, 1300), (610, 1350))):
        # A100: pod labels, Hostname; V100: old pod labels, hostname, no profiling fields
        runs.append(JobRun("resnet50-nightly", t0 + i * 3600, a, A100))
        runs.append(JobRun("resnet50-nightly", t0 + i * 3600 + 1800, v, V100, pod_labels="old"))
    runs.append(JobRun("resnet50-nightly", t0 + 4 * 3600, 660, A100, pod_labels=None))
    runs.append(JobRun("resnet50-nightly", t0 + 4 * 3600 + 1800, 200, A100, state="failed"))
    runs.append(JobRun("resnet50-nightly", t0 + 5 * 3600, None, A100,
                       deleted_at=t0 + 5 * 3600 + 300))
    runs.append(JobRun("eval-adhoc", t0 + 5 * 3600 + 900, 300, Node("gpu-x", "NVIDIA L4"),
                       gpus=1, pod_labels=None, node_known=False, owner=False))
    split = t0 + 6 * 3600
    runs.append(JobRun("resnet50-nightly", split + 600, 640, A100, name="rn50-normal"))
    runs.append(JobRun("resnet50-nightly", split + 1800, 1500, A100, busy=0.25,
                       name="rn50-starved"))
    runs.append(JobRun("other", now - 900, None, V100, name="other-running"))
    return runs, split


@pytest.fixture(scope="module")
def cluster(prometheus_bin, tmp_path_factory):  # noqa: F811
    prom, promtool = prometheus_bin
    work = tmp_path_factory.mktemp("k8s")
    now = time.time()
    runs, split = scenario(now)
    backfill(promtool, openmetrics(runs, now), work / "data")
    with PromServer(prom, work) as srv:
        yield srv, runs, now, split


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def ingest(srv, store: str, since: float, until: float, *extra: str):
    return cli("ingest-prometheus", "--source", "kubernetes", "--url", srv.url,
               "--since", f"{since:.0f}", "--until", f"{until:.0f}", "--store", store,
               "--json", *extra)


def test_cronjob_runs_stored_with_gpu_model_count_and_duration(cluster, tmp_path):
    srv, runs, now, split = cluster
    url = f"sqlite:///{tmp_path / 'k.db'}"
    result = ingest(srv, url, now - 11 * 3600, split)
    assert result.exit_code == 1, result.output  # one partial join is rejected
    report = json.loads(result.stdout)
    added = {a["job"].split("/")[1]: a for a in report["added"]}
    wanted = {r.name: r for r in runs if r.end is not None and r.end < split
              and r.cronjob == "resnet50-nightly"}
    assert set(added) == set(wanted)
    for name, run in wanted.items():
        item = added[name]
        assert item["key"] == "resnet50-nightly" and item["gpus"] == 8
        assert item["deployment"] == (A100_KEY if run.node is A100 else V100_KEY)
        assert item["gpu_model"] == run.node.model
        if run.state == "complete":
            assert item["state"] == "completed" and item["seconds"] == pytest.approx(
                run.seconds)
        else:
            assert item["state"] == "failed"
    skipped = {s["job"].split("/")[1]: s["reason"] for s in report["skipped"]}
    deleted = next(r.name for r in runs if r.deleted_at)
    assert skipped[deleted].startswith("lost: deleted before it completed")
    (rejected,) = report["rejected"]
    assert "has no node in kube_pod_info and no DCGM series names it" in rejected["reason"]
    store = Store(url)
    history = [r for r in whole_job_runs(store) if r.finished]
    traced = {r.deployment: r.trace for r in history if r.trace}
    assert traced[A100_KEY]["fields"]["busy"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert traced[V100_KEY]["fields"]["busy"] == "DCGM_FI_DEV_GPU_UTIL"  # no profiling
    assert 0.7 < traced[A100_KEY]["summary"]["busy_mean"] < 1.0
    assert max(len(v) for v in traced[A100_KEY]["series"].values()) <= 240
    # the whole-job model forecasts each GPU model from its own runs, as if fitted on the
    # generated runs themselves
    for key, node in ((A100_KEY, A100), (V100_KEY, V100)):
        own = [WholeJobRun(0, "", "resnet50-nightly", key, "completed", r.seconds, r.start,
                           r.end, 8, None, r.name, r.name) for r in runs
               if r.node is node and r.state == "complete" and r.end is not None
               and r.end < split]
        cand = whole_job_candidate(store, "resnet50-nightly", key)
        assert cand == whole_job_candidate(own, "resnet50-nightly", key)
        assert cand.n_runs == len(own) and cand.low < cand.seconds < cand.high
    again = json.loads(ingest(srv, url, now - 11 * 3600, split).stdout)
    assert again["added"] == [] and len(again["duplicates"]) == len(added)


def test_check_a_kubernetes_job_slow_and_normal(cluster, tmp_path):
    srv, _, now, split = cluster
    url = f"sqlite:///{tmp_path / 'c.db'}"
    ingest(srv, url, now - 11 * 3600, split)
    common = ["--url", srv.url, "--store", url, "--json"]
    slow = cli("check", "--k8s-job", "rn50-starved", "--namespace", "ml", *common)
    normal = cli("check", "--k8s-job", "rn50-normal", *common)
    running = cli("check", "--k8s-job", "other-running", *common)
    assert slow.exit_code == 1 and normal.exit_code == 0, (slow.output, normal.output)
    verdict = json.loads(slow.stdout)
    assert verdict["status"] == "slow" and verdict["ratio"] > 1.5
    assert [c["cause"] for c in verdict["causes"]] == ["input pipeline or host bound"]
    assert "SLOW" in verdict["message"] and "GPU busy" in verdict["message"]
    assert json.loads(normal.stdout)["status"] == "normal"
    assert running.exit_code == 3 and json.loads(running.stdout)["state"] == "running"


def test_limits_and_a_server_that_is_down(cluster, tmp_path):
    srv, _, now, split = cluster
    store = tmp_path / "none.db"
    capped = ingest(srv, f"sqlite:///{store}", now - 11 * 3600, split, "--max-series", "10")
    assert capped.exit_code == 2
    assert "over the limit of 10 (--max-series)" in capped.output
    assert "nothing was written" in capped.output and not store.exists()
    down = ingest(type("S", (), {"url": f"http://127.0.0.1:{free_port()}"})(),
                  f"sqlite:///{store}", now - 3600, now, "--retries", "0")
    assert down.exit_code == 2 and "connection refused" in down.output and not store.exists()
    Store(f"sqlite:///{tmp_path / 'm.db'}")  # an empty store: check reads, never creates one
    missing = cli("check", "--k8s-job", "no-such-job", "--url", srv.url, "--store",
                  f"sqlite:///{tmp_path / 'm.db'}")
    assert missing.exit_code == 2 and "no-such-job" in missing.output


def test_check_a_slurm_job_with_its_nodes_dcgm_series(cluster, tmp_path):
    """A Slurm job on a node that dcgm-exporter watches: its trace comes by host name."""
    srv, runs, _, _ = cluster
    starved = next(r for r in runs if r.name == "rn50-starved")
    history = [r for r in runs if r.node is A100 and r.state == "complete"
               and r.end is not None and r.name.startswith("resnet50-nightly")]
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))  # noqa: E731
    rows = ["JobID|JobName|State|Start|End|AllocTRES|NNodes|NodeList"]
    for i, r in enumerate([*history, starved]):
        rows.append(f"{900 + i}|resnet50-nightly|COMPLETED|{iso(r.start)}|{iso(r.end)}|"
                    f"cpu=64,gres/gpu:a100=8,gres/gpu=8,node=1|1|{r.node.name}")
    (tmp_path / "hist").mkdir()
    (tmp_path / "hist" / "sacct.txt").write_text("\n".join(rows[:-1]) + "\n")
    (tmp_path / "today.txt").write_text("\n".join([rows[0], rows[-1]]) + "\n")
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert cli("ingest", str(tmp_path / "hist"), "--store", url).exit_code == 0
    result = cli("check", "--sacct", str(tmp_path / "today.txt"), "--job-id",
                 str(900 + len(history)), "--url", srv.url, "--store", url, "--json")
    verdict = json.loads(result.stdout)
    assert result.exit_code == 1 and verdict["status"] == "slow", verdict["message"]
    assert verdict["observed"]["trace_summary"]["busy_mean"] < 0.5
    assert verdict["causes"][0]["cause"] == "input pipeline or host bound"


def test_a_cronjob_asked_by_name_scales_with_its_recorded_length(cluster, tmp_path):
    """Issue 35, must-show 3: the next run of a CronJob by its name; ``--iterations`` (its
    Jobs ingested with the length they trained) and ``--gpus`` change the answer."""
    srv, _, now, split = cluster
    url = f"sqlite:///{tmp_path / 'len.db'}"
    ingest(srv, url, now - 11 * 3600, split, "--iterations", "1000")

    def predict(*flags: str) -> dict:
        res = cli("predict", "--job", "resnet50-nightly", "--deployment", A100_KEY,
                  "--store", url, "--json", *flags)
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    usual, longer, fewer = predict(), predict("--iterations", "2000"), None
    assert 1.9 < longer["seconds"] / usual["seconds"] < 2.1
    res = cli("predict", "--job", "resnet50-nightly", "--store", url, "--json", "--gpus", "4")
    assert res.exit_code == 0, res.output
    fewer = json.loads(res.stdout)
    assert fewer["seconds"] > usual["seconds"] and fewer["extrapolated"]
