"""Issue 22: the end-to-end route is never worse than the system's own history.

One test per cause the issue measured (each fails on the rule-order forecaster it replaced),
plus the backtest, the selector and the whole-job forecast. Runs go through the real Store
API and `jobcast fit`'s service call; no timing is hard-coded: every expectation is derived
from the runs the test writes.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from fleet.deployment import Deployment, canonical_key
from ingest.events import ParsedRun, Segment
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.service.engine.backtest import backtest
from jobcast.service.engine.fitting import fit_store_all
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from models.dataset import collect_points
from models.history import run_table
from models.relation import Relation
from models.selector import BacktestSelector

DAY = 86400.0
runner = CliRunner()


def _run(system: str, rate: float, *, batch: int = 256, iterations: float = 1000.0,
         start: float = 1.6e9, stack: str = "MXNet 22.05", variant: dict | None = None,
         gpu: str = "NVIDIA A100-SXM4-40GB", count: int = 8, evals: float = 0.0,
         init: float | None = None) -> ParsedRun:
    """A train run of ``rate`` seconds per step (plus 5 s of warm-up), ten progress marks,
    and optionally an evaluation segment of ``evals`` seconds and a start-up of ``init``."""
    total = 5.0 + rate * iterations
    marks = tuple((iterations * i / 10, 5.0 + rate * iterations * i / 10) for i in range(1, 10))
    segs = [Segment("train", iterations, total, batch_size=batch, start_time=start,
                    points=marks)]
    meta: dict = {"system": system} if system else {}
    if evals:
        segs.append(Segment("test", 50, evals, batch_size=batch, start_time=start + total))
    if variant is not None:
        meta["variant"] = variant
    if init is not None:
        meta["init_seconds"] = init
        meta["run_start"], meta["run_stop"] = start, start + total + evals + 1.0
    return ParsedRun(format="jsonl", network="resnet50", deployment=Deployment(gpu, count),
                     stack=stack, batch_size=batch, start_time=start, segments=segs,
                     meta=meta)


def _store(tmp_path, runs: list[ParsedRun], name: str = "jobcast.db") -> Store:
    store = Store(f"sqlite:///{tmp_path / name}")
    for i, run in enumerate(runs):
        assert store.add_file(content_hash=f"{i:064x}", source=f"run{i:03d}.jsonl", fmt="jsonl",
                              size=1, parsed=[run])
    return store


def _ask(store: Store, **fields) -> object:
    fields.setdefault("network", "resnet50")
    fields.setdefault("deployment", "8x NVIDIA A100-SXM4-40GB")
    fields.setdefault("batch_size", 256)
    fields.setdefault("iterations", 1000)
    fields.setdefault("phase", "train")
    return Forecaster(store).forecast(JobRequest.from_mapping(fields))


def test_cause_1_a_system_alone_on_its_key_is_its_own_history(tmp_path):
    """System A's runs sit in a key of its own (one stack, one system: only the pooled model
    exists); system B runs a newer stack on the same GPUs, 40 % faster. Asked for A, the
    answer is A's own history, not B's newer stack."""
    runs = [_run("vendor/A", 0.10, start=1.6e9 + i * DAY, stack="MXNet 21.09") for i in range(3)]
    runs += [_run("vendor/B", 0.06, start=1.7e9 + i * DAY, stack="MXNet 23.09")
             for i in range(3)]
    store = _store(tmp_path, runs)
    fit_store_all(store, backtest=False)
    out = _ask(store, system="vendor/A")
    truth = 5.0 + 0.10 * 1000
    assert out.ok and out.details["relation"]["system"] == "own", out.details["chosen"]
    assert "no history of system" not in out.details["chosen"]
    assert abs(out.seconds - truth) / truth < 0.02


def test_cause_2_an_unstated_precision_takes_the_systems_own_fp16_runs(tmp_path):
    """The named system has fp16 runs at the asked batch size; another system has runs that
    state no precision at another batch size. A request that states no precision gets the
    system's own fp16 history (and says it assumed fp16), not the other system's."""
    runs = [_run("vendor/A", 0.05, variant={"precision": "fp16"}, start=1.6e9 + i * DAY)
            for i in range(3)]
    runs += [_run("vendor/B", 0.20, batch=1024, start=1.61e9 + i * DAY) for i in range(3)]
    store = _store(tmp_path, runs)
    fit_store_all(store, backtest=False)
    out = _ask(store, system="vendor/A")
    truth = 5.0 + 0.05 * 1000
    assert out.ok and out.details["relation"]["system"] == "own"
    assert out.details["relation"]["batch"] == "same"
    assert str(out.route) == "rate" and abs(out.seconds - truth) / truth < 0.02
    assert "precision=fp16" in out.details["chosen"]


def test_cause_3_gpu_spellings_and_families_find_the_same_history(tmp_path):
    """History stored from 'Tesla V100-SXM2-16GB' x 8 answers '8x V100' (the family, saying
    which part answered), '8x Tesla V100-SXM2-16GB' and the nvidia-smi spelling alike."""
    runs = [_run("lab/dgx1", 0.2, gpu="Tesla V100-SXM2-16GB", start=1.6e9 + i * DAY)
            for i in range(3)]
    store = _store(tmp_path, runs)
    fit_store_all(store, backtest=False)
    answers = {d: _ask(store, deployment=d, system="lab/dgx1")
               for d in ("8x V100", "8x Tesla V100-SXM2-16GB", "8x NVIDIA Tesla V100-SXM2-16GB")}
    assert all(a.ok for a in answers.values()), answers
    assert len({round(a.seconds, 9) for a in answers.values()}) == 1
    assert answers["8x V100"].details["deployment_match"].startswith("family")
    assert "V100-SXM2-16GB" in answers["8x V100"].details["deployment_match"]
    assert answers["8x Tesla V100-SXM2-16GB"].details["deployment_match"] == "exact"
    # two different GPUs never share a key: an A100 request finds no V100 history
    other = _ask(store, deployment="8x A100-SXM4-40GB", system="lab/dgx1")
    assert not (other.ok and other.details.get("relation", {}).get("system") == "own")
    assert canonical_key("8x Tesla V100-SXM2-16GB") == canonical_key("8x V100-SXM2-16GB")


def _corpus() -> list[ParsedRun]:
    """Eight systems, four runs each, each system its own speed and a little noise."""
    runs = []
    for s in range(8):
        rate = 0.05 + 0.02 * s
        for i in range(4):
            noise = 1 + 0.004 * math.sin(7 * s + 3 * i)
            runs.append(_run(f"v/s{s}", rate * noise, iterations=900 + 60 * i,
                             start=1.6e9 + s * 10 * DAY + i * DAY, evals=3.0 + s,
                             init=30.0 + s))
    return runs


def test_the_backtest_never_sees_a_target_or_what_came_after_it(tmp_path):
    store = _store(tmp_path, _corpus())
    points, _ = collect_points(store)
    rows = backtest(points, run_table(store), folds=(2,), max_targets=2)
    assert not rows.empty and set(rows["fold"]) == {2}
    history = run_table(store)
    for _, row in rows.drop_duplicates("target_run").iterrows():
        target = history[history["run_id"] == row["target_run"]].iloc[0]
        earlier = history[(history["system"] == target["system"])
                          & (history["start_time"] < target["start_time"])]
        assert len(earlier) >= 2  # the first two runs are history, never targets
    own = rows[(rows["kind"] == "own-rate") & (rows["ask"] == "train/named")]
    assert len(own) == 8 * 2 and (own["error"].abs() < 0.05).all()
    assert {"own-rate", "own-model", "fleet-rate", "pooled-model"} <= set(rows["kind"])


def test_selector_learns_which_kind_to_trust_and_intervals_that_cover():
    """Two kinds: one 1 % off, one 20 % off; the selector ranks them by their backtest and
    its 90 % interval holds about 90 % of new errors of the good kind."""
    rng = pd.Series(range(400))
    good = pd.DataFrame({"kind": ["own-rate"] * 400, "scale": [0.01] * 400})
    errors_good = 0.01 * ((rng * 37 % 101) / 50.0 - 1.0)
    bad = good.assign(kind="pooled-model")
    errors_bad = 0.2 * ((rng * 53 % 97) / 48.0 - 1.0)
    for col in ("target", "system", "batch", "variant", "stack", "runs", "gpu", "devices", "age"):
        good[col] = bad[col] = getattr(Relation("x"), col)
    sel = BacktestSelector().fit(pd.concat([good, bad]), list(errors_good) + list(errors_bad))
    j_good = sel.judge(Relation("own-rate"))
    j_bad = sel.judge(Relation("pooled-model"))
    assert j_good.expected < j_bad.expected
    inside = [(j_good.low_factor <= math.exp(e) <= j_good.high_factor) for e in errors_good]
    assert 0.85 <= sum(inside) / len(inside) <= 1.0
    assert BacktestSelector.from_dict(sel.to_dict()).judge(Relation("own-rate")) == j_good


def test_fit_saves_a_selector_and_predict_json_names_the_candidate_and_its_backtest(tmp_path):
    store = _store(tmp_path, _corpus())
    outcome = fit_store_all(store)
    assert outcome.backtest.rows > 0 and outcome.selector.n_ == outcome.backtest.rows
    assert store.load_artifact("selector") is not None
    result = runner.invoke(app, ["predict", "--store", store.url, "--network", "resnet50",
                                 "--deployment", "8x A100-SXM4-40GB", "--batch-size", "256",
                                 "--iterations", "1100", "--system", "v/s3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["candidate"].startswith("own-")
    assert out["backtest"]["forecasts"] > 0 and out["backtest"]["expected_error_percent"] >= 0
    assert "backtest:" in out["chosen"] and out["relation"]["system"] == "own"
    assert out["low"] <= out["seconds"] <= out["high"]


def test_the_whole_job_is_the_headline_with_its_phases_beside_it(tmp_path):
    """The default phase is the whole run: training, evaluation and gaps as the system's own
    runs spent them, start-up beside; ``--phase train`` is training alone."""
    store = _store(tmp_path, _corpus())
    fit_store_all(store, backtest=False)
    job = _ask(store, system="v/s2", phase="job", iterations=1000)
    train = _ask(store, system="v/s2", phase="train", iterations=1000)
    phases = job.details["phases"]
    assert job.ok and train.ok and job.seconds > train.seconds
    assert phases["train"] + phases["test"] + phases["gaps"] == pytest.approx(job.seconds)
    assert phases["test"] == pytest.approx(5.0, rel=0.05)  # the runs' 5 s of evaluation
    assert phases["init"] == pytest.approx(32.0)  # their start-up, before the run
    assert job.details["wall_with_init"] == pytest.approx(job.seconds + 32.0)


def test_a_recurring_slurm_job_is_forecast_from_its_whole_job_history(tmp_path):
    """Scheduler history (no per-step data) answers a whole job of that job key."""
    from slurm_shapes import document, history

    seconds = (1800, 1750, 1820, 1790, 1810, 1770)
    runs = [{"start": 1_714_000_000 + i * DAY, "seconds": s} for i, s in enumerate(seconds)]
    (tmp_path / "hist").mkdir()
    (tmp_path / "hist" / "sacct.json").write_text(
        document(history("resnet50-nightly", runs), "new"))
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert runner.invoke(app, ["ingest", str(tmp_path / "hist"), "--store", url]).exit_code == 0
    result = runner.invoke(app, ["predict", "--store", url, "--network", "resnet50-nightly",
                                 "--system", "resnet50-nightly", "--deployment",
                                 "8x A100-SXM4-40GB", "--batch-size", "256", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["candidate"] == "whole-job" and out["relation"]["system"] == "own"
    assert min(seconds) * 0.9 <= out["seconds"] <= max(seconds) * 1.1
    assert out["low"] <= out["seconds"] <= out["high"]
