"""``predict --job NAME`` reads only the newest runs a deployment (issue 35, "at a cluster's
scale"), and its answer is the answer of the whole history.

A real-shaped ``sacct --json`` history (``tests/slurm_shapes.py``: the real Slurm job as the
template) of one job on three deployments, more runs on two of them than the forecaster
reads (``MAX_RUNS``, 200), with failed, timed-out, running and never-started jobs (the
last two not stored: not history yet), a requeued job (two attempts of one job id, stored
twice, one record in the history), two overlapping dumps and two recorded lengths. The
forecaster's limited read (``whole_job_runs(..., newest=N)``: SQL) must give what the full
read gives: the same forecast, interval, reason and counts, for each way the job is asked;
the model, the job's newest run and its counts the same at a small ``N`` too.
"""

from __future__ import annotations

import random

import pytest
from slurm_shapes import document, history, never_started

from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store
from ingest.whole_job import RecentRuns, left_out, whole_job_runs
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.job_history import newest_run
from jobcast.service.engine.request import JobRequest
from models.whole_job import WholeJobFit, candidate_from

NAME = "nightly-resnet"
T0 = 1_714_000_000
# (GPUs, GPU type, runs): two deployments past the forecaster's 200, one well under
DEPLOYMENTS = ((4, "a100", 236), (16, "a100", 214), (8, "v100", 30))


def _jobs() -> list[dict]:
    """The job's runs in time order (module doc), interleaved over the deployments."""
    rng = random.Random(35)
    plan = [(gpus, kind, i) for gpus, kind, n in DEPLOYMENTS for i in range(n)]
    plan.sort(key=lambda p: (p[2], p[0]))
    runs = []
    for k, (gpus, kind, i) in enumerate(plan):
        base = 40000 * 4 / gpus * (1.4 if kind == "v100" else 1.0) * (1 + 0.002 * i)
        state = ("FAILED" if k % 23 == 5 else "TIMEOUT" if k % 41 == 7 else
                 "RUNNING" if k == len(plan) - 3 else "COMPLETED")
        runs.append({"start": T0 + k * 3600, "seconds": round(base * rng.uniform(0.85, 1.2)),
                     "state": state, "gpus": gpus, "gpu_type": kind})
    jobs = history(NAME, runs, first_id=5_000_000)
    for k in (11, 400):  # cancelled while pending: no start (undated)
        never_started(jobs[k])
    jobs[301]["job_id"] = jobs[300]["job_id"]  # requeued: the same job, a later attempt
    jobs[300]["state"]["current"] = "NODE_FAIL"
    return jobs


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    root = tmp_path_factory.mktemp("recent")
    jobs = _jobs()
    cut = len(jobs) // 2
    first, second = root / "week1.json", root / "week2.json"
    first.write_text(document(jobs[:cut + 20], "old"))  # the dumps overlap by 20 jobs
    second.write_text(document(jobs[cut:], "new"))
    st = Store(f"sqlite:///{root / 'jobs.db'}")
    assert ingest_paths(st, [str(first)], IngestOptions(length=("iterations", 900))).ok
    assert ingest_paths(st, [str(second)], IngestOptions(length=("iterations", 1500))).ok
    return st


def _full(store: Store) -> Forecaster:
    """A forecaster that reads every run of the job (as before issue 35's limited read)."""
    fc = Forecaster(store)
    fc._job_runs[NAME] = whole_job_runs(store, NAME, traces=False)
    return fc


def test_the_store_holds_more_than_the_forecaster_reads(store: Store) -> None:
    every = whole_job_runs(store, NAME, traces=False)
    recent = Forecaster(store).job_runs(NAME)
    assert isinstance(recent, RecentRuns) and not recent.complete
    assert len(recent) < len(every) and left_out(recent) == len(every) - len(recent)
    assert {r.state for r in every} == {"completed", "failed", "timeout"}  # one per job
    assert len({r.ident for r in every}) == len(every) < len(store.runs())
    assert recent.everything() == every


@pytest.mark.parametrize("asked", [
    {},  # the newest run's deployment
    # no run at 8 GPUs: moved from 4 or 16, one doubling each (the tie broken by run counts)
    {"deployment": "nvidia-a100-sxm4-40gb-x8"},
    {"deployment": "nvidia-v100-sxm2-16gb-x8"},
    {"iterations": 1200},  # scaled from the median length of all the runs
    {"epochs": 3},  # refused, counting the runs that do not record it
])
def test_the_limited_read_answers_as_the_full_read(store: Store, asked: dict) -> None:
    req = JobRequest(network="", system=NAME, **asked)
    now = T0 + 500 * 3600.0
    recent, full = Forecaster(store).forecast(req, now=now), _full(store).forecast(req, now=now)
    assert recent == full
    if "epochs" not in asked:
        assert recent.ok and recent.details["candidate"] == "whole-job"


@pytest.mark.parametrize("newest", [2, 5, 40])
def test_the_model_and_the_newest_run_are_those_of_all_runs(store: Store,
                                                            newest: int) -> None:
    every = whole_job_runs(store, NAME, traces=False)
    recent = whole_job_runs(store, NAME, traces=False, newest=newest)
    assert isinstance(recent, RecentRuns) and len(recent) < len(every)
    assert set(recent) <= set(every)
    a, b = WholeJobFit(max_runs=newest).fit(recent), WholeJobFit(max_runs=newest).fit(every)
    assert a.groups_ == b.groups_ and (a.skipped_, a.n_runs_) == (b.skipped_, b.n_runs_)
    for dep in {r.deployment for r in every}:
        assert candidate_from(a, NAME, dep) == candidate_from(b, NAME, dep)
    assert newest_run(NAME, None, recent) == newest_run(NAME, None, every)
