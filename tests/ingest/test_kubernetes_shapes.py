"""Kubernetes Jobs through a real Prometheus in the label shapes real clusters write.

One server (module fixture) is backfilled by tests/k8s_series.py with the exporters' own
metric and label names: a CronJob with several completed Jobs, a slow one, a failed one
(its pods' exit recorded) and a failed one whose pods' exit is not, one named like a
CronJob's run without a ``kube_job_owner`` naming it, and its next run still running; DCGM
series with pod labels ``pod``, ``pod_name`` and ``exported_pod`` (a scrape with
``honorLabels: false``), a node-valued ``hostname`` beside a ``Hostname`` that holds the
exporter pod's name, MIG slices (both strategies), 1-GPU pods beside 7-GPU pods on 8-GPU
nodes with and without pod labels, and a node no exporter watches.
"""

from __future__ import annotations

import json
import time

import pytest
from k8s_series import JobRun, Node, openmetrics
from prom_server import PromServer, backfill, prometheus_bin  # noqa: F401
from typer.testing import CliRunner

from ingest.store import Store
from jobcast.cli.app import app

runner = CliRunner()
A100 = Node("gpu-a100-0", "NVIDIA A100-SXM4-80GB")  # GPU Operator: node-valued Hostname
BOTH = Node("gpu-h100-0", "NVIDIA H100 80GB HBM3", host_label="both")
EXPORTED = Node("gpu-l40s-0", "NVIDIA L40S", host_label="both")
MIG = Node("gpu-a100-mig", "NVIDIA A100-SXM4-40GB", host_label="hostname")
SHARED = Node("gpu-a100-1", "NVIDIA A100-SXM4-80GB", host_label="hostname")
DARK = Node("gpu-dark-0", "NVIDIA A100-SXM4-80GB")
CRON = "nightly"


def scenario(now: float) -> list[JobRun]:
    t0 = now - 9 * 3600
    runs = [JobRun(CRON, t0 + i * 1800, s, A100) for i, s in enumerate((600, 620, 590, 610))]
    runs += [
        JobRun(CRON, t0 + 4 * 1800, 1500, A100, busy=0.25, name="nightly-slow"),
        JobRun(CRON, t0 + 5 * 1800, 200, A100, state="failed", name="nightly-failed"),
        JobRun(CRON, t0 + 6 * 1800, 300, A100, state="failed", pod_done=False,
               name="nightly-failed-nopod"),
        JobRun(CRON, t0 + 7 * 1800, 605, A100, owner=False),  # named <cronjob>-<minute>
        JobRun(CRON, now - 400, None, A100, name="nightly-next"),
        # label shapes
        JobRun("by-hostname", t0 + 600, 700, BOTH, pod_labels=None, name="by-hostname"),
        JobRun("by-exported", t0 + 600, 700, EXPORTED, pod_labels="exported",
               name="by-exported"),
        JobRun("dark", t0 + 600, 700, DARK, pod_labels=None, dcgm=False, name="dark"),
        # MIG: the mixed strategy (nvidia_com_mig_2g_20gb) and the single one
        JobRun("mig-mixed", t0 + 1200, 900, MIG, gpus=1, mig="2g.20gb", pod_labels="old",
               name="mig-mixed"),
        JobRun("mig-single", t0 + 1200, 900, MIG, gpus=1, mig="2g.20gb", mig_resource=False,
               first_gpu=1, name="mig-single"),
    ]
    # a 1-GPU pod beside a 7-GPU pod on an 8-GPU node: without, then with pod labels
    for when, labels, tag in ((t0 + 3 * 3600, None, "bare"), (t0 + 4 * 3600, "new", "pod")):
        runs.append(JobRun("one", when, 800, SHARED, gpus=1, pod_labels=labels,
                           name=f"one-gpu-{tag}"))
        runs.append(JobRun("seven", when, 800, SHARED, gpus=7, first_gpu=1, busy=0.5,
                           pod_labels=labels, name=f"seven-gpu-{tag}"))
    return runs


@pytest.fixture(scope="module")
def cluster(prometheus_bin, tmp_path_factory):  # noqa: F811
    prom, promtool = prometheus_bin
    work = tmp_path_factory.mktemp("k8s-shapes")
    now = time.time()
    runs = scenario(now)
    backfill(promtool, openmetrics(runs, now), work / "data")
    with PromServer(prom, work) as srv:
        store = f"sqlite:///{work / 'k.db'}"
        result = cli("ingest-prometheus", "--source", "kubernetes", "--url", srv.url,
                     "--since", f"{now - 10 * 3600:.0f}", "--until", f"{now:.0f}",
                     "--store", store, "--json")
        report = json.loads(result.stdout)
        yield srv, {r.name: r for r in runs}, report, store


def cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def added(report: dict) -> dict[str, dict]:
    return {a["job"].split("/")[1]: a for a in report["added"]}


def stored(store: str) -> dict[str, dict]:
    """Each stored Kubernetes Job's meta by Job name."""
    return {r.meta["whole_job"]["name"]: r.meta for r in Store(store).runs()
            if r.format == "kubernetes"}


def test_failed_jobs_keep_state_and_real_wall_time(cluster):
    _, runs, report, store = cluster
    jobs, metas = added(report), stored(store)
    exact = jobs["nightly-failed"]
    assert exact["state"] == "failed"
    assert exact["seconds"] == pytest.approx(runs["nightly-failed"].seconds, abs=1)
    # no pod exit recorded: the failed condition's first sample bounds it (30 s scrapes)
    late = jobs["nightly-failed-nopod"]
    true = runs["nightly-failed-nopod"].seconds
    assert late["state"] == "failed" and true <= late["seconds"] <= true + 90
    for name in ("nightly-failed", "nightly-failed-nopod"):
        record = metas[name]["whole_job"]
        assert record["end"] > record["start"] and record["seconds"] > 0
        assert not any("no completion time" in w for w in metas[name].get("warnings", []))
    skipped = {s["job"].split("/")[1]: s["reason"] for s in report["skipped"]}
    assert skipped["nightly-next"].startswith("still running")


def test_check_a_failed_job_is_not_fast_and_a_running_one_is_running(cluster):
    srv, _, _, store = cluster
    common = ["--url", srv.url, "--store", store, "--json"]
    failed = cli("check", "--k8s-job", "nightly-failed", *common)
    verdict = json.loads(failed.stdout)
    assert verdict["state"] == "failed" and verdict["observed"]["seconds"] > 0
    assert verdict["status"] != "fast" and "faster than expected" not in verdict["message"]
    assert "failed" in verdict["message"]
    running = cli("check", "--k8s-job", "nightly-next", *common)
    verdict = json.loads(running.stdout)
    assert verdict["state"] == "running" and verdict["key"] == CRON
    assert verdict["expected"] is not None  # its CronJob's history was found
    assert not any("failed" in n.lower() for n in verdict["notes"]), verdict["notes"]


def test_cronjob_runs_share_the_cronjob_name_as_key(cluster):
    _, runs, report, store = cluster
    jobs = added(report)
    cron = [r.name for r in runs.values() if r.cronjob == CRON and r.end is not None]
    assert set(cron) <= set(jobs)
    assert {jobs[name]["key"] for name in cron} == {CRON}
    ownerless = next(r.name for r in runs.values() if not r.owner)
    assert jobs[ownerless]["key"] == CRON and jobs[ownerless]["state"] == "completed"
    # the next run, asked for by the CronJob's name, comes from its completed runs only
    answer = cli("predict", "--job", CRON, "--store", store, "--json")
    assert answer.exit_code == 0, answer.output
    whole = json.loads(answer.stdout)["whole_job"]
    completed = [n for n in cron if runs[n].state == "complete"]
    assert whole["key"] == CRON and whole["n_runs"] == len(completed)


def test_mig_slices_are_gpu_shares(cluster):
    _, _, report, store = cluster
    jobs, metas = added(report), stored(store)
    for name in ("mig-mixed", "mig-single"):
        item = jobs[name]
        assert item["gpus"] == 1 and item["deployment"] != "cpu"
        assert item["deployment"].startswith("nvidia-a100-sxm4-40gb-mig-2g20gb")
        assert metas[name]["whole_job"]["mig_profile"] == "2g.20gb"
        assert item["trace"]


def test_exporter_label_shapes(cluster):
    _, runs, report, store = cluster
    jobs, metas = added(report), stored(store)
    for name in ("by-hostname", "by-exported"):
        item, run = jobs[name], runs[name]
        assert item["gpu_model"] == run.node.model and item["gpus"] == 8
        assert item["seconds"] == pytest.approx(run.seconds)
        assert metas[name]["trace"]["summary"]["gpus"] == 8
    (dark,) = [r["reason"] for r in report["rejected"] if r["source"].endswith("#ml/dark")]
    assert "no DCGM series names its pods (looked for pod, pod_name, exported_pod)" in dark
    assert "gpu-dark-0 (looked for Hostname, hostname" in dark


def test_one_gpu_pod_on_an_eight_gpu_node(cluster):
    _, _, report, store = cluster
    jobs, metas = added(report), stored(store)
    for tag in ("bare", "pod"):
        assert jobs[f"one-gpu-{tag}"]["gpus"] == 1 and jobs[f"seven-gpu-{tag}"]["gpus"] == 7
    # with pod labels each pod's trace holds its own GPUs only
    assert metas["one-gpu-pod"]["trace"]["summary"]["gpus"] == 1
    assert metas["seven-gpu-pod"]["trace"]["summary"]["gpus"] == 7
    # without them the node's 8 GPUs cannot be told apart: no trace, and it says why
    for name in ("one-gpu-bare", "seven-gpu-bare"):
        assert "trace" not in metas[name]
        (note,) = [w for w in metas[name]["warnings"] if "ambiguous" in w]
        assert "shows 8 GPUs" in note and "looked for pod, pod_name, exported_pod" in note
