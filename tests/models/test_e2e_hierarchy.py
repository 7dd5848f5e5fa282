"""End-to-end models keyed on variant and system (issue 12): a system's own history first, the
pooled model as prior, honest intervals on thin data, stacks chosen by evidence, unusable runs
skipped and named. Runs go through the real Store API."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from fleet.errors import bug_info
from ingest.events import ParsedRun, Segment
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from models.e2e import NoModelError, fit_store_report, forecast, model_id, select
from models.errors import ModelError
from models.variant import variant_key

A100 = "nvidia-a100-sxm4-40gb-x8"
DAY = 86400.0
runner = CliRunner()


def _run(system: str = "", variant: dict | None = None, rate: float = 0.1,
         iterations: float = 1000.0, points: int = 10, start: float = 1.6e9,
         stack: str = "MXNet 22.05", batch: int = 256, const: float = 20.0,
         resolution: float | None = None, network: str = "resnet50") -> ParsedRun:
    """One train run: ``const + rate x steps`` seconds, ``points`` progress marks."""
    marks = tuple((iterations * i / points, const + rate * iterations * i / points)
                  for i in range(1, points))
    meta: dict = {"deployment_key": A100}
    if system:
        meta["system"] = system
    if variant is not None:
        meta["variant"] = variant
    if resolution is not None:
        meta["clock_resolution_s"] = resolution
    segment = Segment("train", iterations, const + rate * iterations, batch_size=batch,
                      start_time=start, points=marks)
    return ParsedRun(format="jsonl", network=network, stack=stack, batch_size=batch,
                     start_time=start, segments=[segment], meta=meta)


def _store(tmp_path, runs: list[ParsedRun]) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'jobcast.db'}")
    for i, run in enumerate(runs):
        name = f"run{i:03d}.jsonl"
        assert store.add_file(content_hash=f"{i:064x}", source=name, fmt="jsonl", size=1,
                              parsed=[run])
    return store


def test_precision_and_tags_reach_the_model_key(tmp_path):
    runs = [_run(variant={"precision": p}, rate=r, start=1.6e9 + i * DAY)
            for p, r in (("fp16", 0.05), ("FP32", 0.1)) for i in range(2)]
    runs += [_run(variant={"precision": "amp", "team": "Vision Lab"}, rate=0.07,
                  start=1.6e9 + i * DAY) for i in range(2)]
    report = fit_store_report(_store(tmp_path, runs))
    assert report.failures == [] and report.skipped == []
    by_variant = {m.variant: m for m in report.models}
    assert set(by_variant) == {"precision=fp16", "precision=fp32",
                               "precision=fp16,team=vision-lab"}
    assert len({m.model_id for m in report.models}) == 3
    assert by_variant["precision=fp16"].model_id == (
        model_id("resnet50", A100, "train", "MXNet 22.05") + "/precision:fp16")
    # a request for fp16 gets an fp16 model, never the fp32 one; bf16 has none
    fp16 = select(report.models, "resnet50", A100, "train", variant={"precision": "fp16"})
    assert fp16.model.variant == "precision=fp16"  # no tag asked: the untagged one first
    assert "precision=fp16" in fp16.reason
    tagged = select(report.models, "resnet50", A100, "train",
                    variant="precision=fp16,team=vision lab")
    assert tagged.model.variant == "precision=fp16,team=vision-lab"
    fp32 = forecast(select(report.models, "resnet50", A100, "train",
                           variant={"precision": "fp32"}).model, 1000, 256)
    half = forecast(fp16.model, 1000, 256)
    assert fp32["seconds"] > 1.5 * half["seconds"]
    with pytest.raises(NoModelError, match="precision=bf16"):
        select(report.models, "resnet50", A100, "train", variant={"precision": "bf16"})


def test_request_precision_picks_the_variant_through_the_forecaster(tmp_path):
    runs = [_run(variant={"precision": "fp16"}, rate=0.05, start=1.6e9 + i * DAY)
            for i in range(3)]
    store = _store(tmp_path, runs)
    fit_store_report(store)
    fc = Forecaster(store)
    ok = fc.forecast(JobRequest(network="resnet50", deployment=A100, batch_size=256,
                                iterations=500, precision="fp16"))
    assert ok.ok and str(ok.route) == "end-to-end" and ok.details["variant"] == "precision=fp16"
    assert ok.to_dict()["chosen"] and ok.to_dict()["evidence"]["runs"] == 3
    other = fc.forecast(JobRequest(network="resnet50", deployment=A100, batch_size=256,
                                   iterations=500, precision="fp32"))
    # no fp32 history: the end-to-end route says so and the router falls back
    assert not (other.ok and str(other.route) == "end-to-end")
    text = other.details.get("why_layerwise", "") if other.ok else other.error
    assert "precision=fp32" in text
    # a request that states no precision takes the history's own, and says so
    unstated = fc.forecast(JobRequest(network="resnet50", deployment=A100, batch_size=256,
                                      iterations=500))
    assert unstated.ok and unstated.model.endswith("precision:fp16")
    # (not necessarily the same candidate: stating the precision changes the relation the
    # selector judges, ``variant`` asked or assumed)
    assert "precision=fp16" in unstated.details["chosen"]


def _hierarchy_runs() -> list[ParsedRun]:
    """Three systems of one key with three runs each at different speeds, and a fourth system
    with a single run of a single progress point."""
    runs = []
    for s, rate in (("vendorA/sys1", 0.10), ("vendorB/sys2", 0.13), ("vendorC/sys3", 0.08)):
        runs += [_run(system=s, rate=rate * (1 + 0.002 * i), iterations=1000 + 200 * i,
                      start=1.6e9 + i * DAY) for i in range(3)]
    runs.append(_run(system="vendorD/sys4", rate=0.12, iterations=900, points=1))
    return runs


def test_system_history_beats_the_pooled_model(tmp_path):
    store = _store(tmp_path, _hierarchy_runs())
    report = fit_store_report(store)
    assert report.failures == []
    pooled = [m for m in report.models if m.system == ""]
    assert len(pooled) == 1 and len(pooled[0].systems) == 4
    own = {m.system: m for m in report.models if m.system}
    assert own["vendorB/sys2"].basis == "own" and own["vendorD/sys4"].basis == "pooled-scaled"
    assert own["vendorB/sys2"].model_id.endswith("/system:vendorb-sys2")
    # a new run of system 2: 1500 steps at its own pace
    actual = 20.0 + 0.13 * 1500
    fc = Forecaster(store)
    named = fc.forecast(JobRequest(network="resnet50", deployment=A100, batch_size=256,
                                   iterations=1500, system="vendorB/sys2"))
    plain = fc.forecast(JobRequest(network="resnet50", deployment=A100, batch_size=256,
                                   iterations=1500))
    # the named system is answered from its own history (its own model or its own rate), the
    # anonymous request from every system's (the pooled model or the fleet's rate)
    assert named.details["candidate"].startswith("own-")  # the system's own history
    assert named.details["relation"]["system"] == "own"
    assert plain.details["candidate"] in ("pooled-model", "fleet-rate")
    assert any(c["model"] == own["vendorB/sys2"].model_id for c in named.details["candidates"])
    assert abs(named.seconds - actual) < 0.25 * abs(plain.seconds - actual)
    assert named.low <= actual <= named.high
    assert "own history of system vendorB/sys2" in named.details["chosen"]
    assert "pooled over 4 systems" in plain.details["chosen"]
    unknown = fc.forecast(JobRequest(network="resnet50", deployment=A100, batch_size=256,
                                     iterations=1500, system="nobody/else"))
    assert unknown.details["candidate"] in ("pooled-model", "fleet-rate")
    assert unknown.details["relation"]["system"] == "other"
    assert "no history of system nobody/else" in unknown.details["chosen"]


def test_one_point_model_interval_is_finite_and_bounded_by_the_prior(tmp_path):
    report = fit_store_report(_store(tmp_path, _hierarchy_runs()))
    thin = next(m for m in report.models if m.system == "vendorD/sys4")
    assert thin.thin and thin.evidence() == {"runs": 1, "points": 1, "cv_error": None}
    half = thin.estimator.half_width_
    prior = thin.prior["prior_half_width"]
    assert math.isfinite(half) and 0 < half <= prior < 2.0
    out = forecast(thin, 900, 256)
    assert out["thin"] and out["interval_source"] in ("prior", "default")
    assert out["high"] / out["low"] <= (1 + prior) ** 2
    # its level follows its one observation (0.12 s/step), shrunk toward the pooled model
    pooled = next(m for m in report.models if m.system == "")
    observed = 20.0 + 0.12 * 900
    pooled_s = forecast(pooled, 900, 256)["seconds"]
    assert abs(out["seconds"] - observed) < abs(pooled_s - observed)
    assert 0 < thin.prior["weight"] <= 1


def test_clock_resolution_widens_thin_intervals_but_keeps_them_bounded(tmp_path):
    """Ten-second runs with whole-second stamps: the interval says so, and is not 700x."""
    coarse = [_run(rate=0.01, iterations=1000, const=0.5, resolution=1.0, network="coarse",
                   start=1.6e9 + i * DAY) for i in range(2)]
    fine = [_run(rate=0.01, iterations=1000, const=0.5, resolution=0.001, network="fine",
                 start=1.6e9 + i * DAY) for i in range(2)]
    report = fit_store_report(_store(tmp_path, coarse + fine))
    models = {m.network: m for m in report.models}
    assert models["coarse"].estimator.resolution_s_ == 1.0
    wide, narrow = models["coarse"].estimator.half_width_, models["fine"].estimator.half_width_
    assert narrow < wide < 1.0


def _stack_runs() -> list[ParsedRun]:
    old = [_run(stack="MXNet 21.09", rate=0.10, iterations=5000, start=1.60e9 + i * DAY)
           for i in range(5)]
    new = [_run(stack="MXNet 23.08", rate=0.30, iterations=99, points=3, start=1.7e9)]
    return old + new


def test_stack_choice_prefers_evidence_over_one_short_newest_run(tmp_path):
    report = fit_store_report(_store(tmp_path, _stack_runs()))
    choice = select(report.models, "resnet50", A100, "train")
    assert choice.model.stack == "MXNet 21.09" and choice.model.estimator.n_runs_ == 5
    assert "'MXNet 23.08' is newer but thin" in choice.reason
    # with a second run the newest stack is no longer thin, and recency wins
    more = _stack_runs() + [_run(stack="MXNet 23.08", rate=0.30, iterations=99, points=3,
                                 start=1.7e9 + DAY)]
    (tmp_path / "more").mkdir()
    report = fit_store_report(_store(tmp_path / "more", more))
    assert select(report.models, "resnet50", A100, "train").model.stack == "MXNet 23.08"


def test_fit_skips_unusable_runs_and_names_them(tmp_path):
    good = [_run(rate=0.1, start=1.6e9 + i * DAY) for i in range(3)]
    nan_point = _run(rate=0.1, start=1.6e9 + 5 * DAY)
    seg = nan_point.segments[0]
    nan_point.segments = [Segment("train", seg.iterations, seg.seconds,
                                  batch_size=seg.batch_size, start_time=seg.start_time,
                                  points=((100.0, float("nan")), (200.0, 40.0)))]
    broken = _run(rate=0.1, start=1.6e9 + 6 * DAY, variant={"precision": ["fp16"]})
    infinite = _run(rate=0.1, start=1.6e9 + 7 * DAY)  # as an older version may have stored it
    object.__setattr__(infinite.segments[0], "seconds", float("inf"))  # Segment refuses it now
    store = _store(tmp_path, good + [nan_point, broken, infinite])
    report = fit_store_report(store)
    skipped = {r.source: r.reason for r in report.skipped}
    assert set(skipped) == {"run003.jsonl", "run004.jsonl", "run005.jsonl"}
    assert "not finite" in skipped["run003.jsonl"]
    assert "broken meta" in skipped["run004.jsonl"]
    assert "inf" in skipped["run005.jsonl"]
    assert report.failures == [] and report.models[0].estimator.n_runs_ == 3
    result = runner.invoke(app, ["fit", "--store", store.url, "--no-track", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert {e["source"] for e in entries if "skipped" in e} == set(skipped)
    assert all(e["error"].startswith("run skipped") and e["model"] == report.models[0].model_id
               for e in entries if "skipped" in e)


def test_predict_cli_names_the_system_and_says_why(tmp_path):
    store = _store(tmp_path, _hierarchy_runs())
    fit_store_report(store)
    result = runner.invoke(app, ["predict", "--store", store.url, "--network", "resnet50",
                                 "--deployment", A100, "--batch-size", "256",
                                 "--iterations", "1200", "--system", "vendorC/sys3", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["system"] == "vendorC/sys3" and "own history" in out["chosen"]
    assert out["evidence"]["runs"] == 3 and out["thin"] is False
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("network,deployment,batch_size,iterations,phase,system,precision\n"
                    f"resnet50,{A100},256,1200,train,vendorD/sys4,fp32\n")
    batch = runner.invoke(app, ["predict", "--store", store.url, "--jobs", str(jobs), "--json"],
                          catch_exceptions=False)
    assert batch.exit_code == 0, batch.output
    row = json.loads(batch.stdout)[0]
    assert row["system"] == "vendorD/sys4" and row["thin"] is True
    assert row["relation"]["system"] == "own" and row["relation"]["runs"] == "1"
    assert any("pooled model" in c["reason"] for c in row["candidates"]
               if c["kind"] == "own-model")  # its level on the pooled model, shrunk


def test_variant_key_is_canonical():
    assert variant_key({"Precision": "AMP", "compiler": "XLA"}) == "compiler=xla,precision=fp16"
    assert variant_key({}) == variant_key(None) == ""
    assert variant_key("data=synthetic; precision=fp32") == "data=synthetic,precision=fp32"


def test_an_unstated_precision_is_named_with_the_others_history_has(tmp_path):
    """A request that states no precision where the key has fp16 and fp32 models gets fp32
    (the default) and a reason that names fp16 and how to ask for it; asking leaves no note."""
    runs = [_run(variant={"precision": p}, rate=r, start=1.6e9 + i * DAY)
            for p, r in (("fp16", 0.05), ("fp32", 0.1)) for i in range(2)]
    report = fit_store_report(_store(tmp_path, runs))
    open_ = select(report.models, "resnet50", A100, "train")
    assert open_.model.variant == "precision=fp32"
    assert "assumed precision=fp32" in open_.reason
    assert "also has precision=fp16" in open_.reason and "--precision" in open_.reason
    asked = select(report.models, "resnet50", A100, "train", variant={"precision": "fp16"})
    assert "assumed" not in asked.reason


def _two_networks(tmp_path) -> Store:
    """Two systems' runs of resnet50 and of othernet, a day apart (a backtest has asks)."""
    runs = [_run(system=s, network=n, rate=r, start=1.6e9 + i * DAY)
            for n, r in (("resnet50", 0.1), ("othernet", 0.2))
            for s in ("sys-a", "sys-b") for i in range(3)]
    return _store(tmp_path, runs)


def _failing(monkeypatch, exc: Exception) -> None:
    """``othernet``'s keys fail with ``exc``; the others fit as ever."""
    import models.e2e as e2e

    real = e2e._fit_key

    def fit_key(df, form):
        if df["network"].iloc[0] == "othernet":
            raise exc
        return real(df, form)

    monkeypatch.setattr(e2e, "_fit_key", fit_key)


@pytest.mark.parametrize(("exc", "kind"), [
    (ZeroDivisionError("injected"), "bug"),
    (KeyError("seconds"), "bug"),
    (ModelError("no usable points"), "fit"),
    (ValueError("1 progress point; a model needs at least 2"), "fit"),
])
def test_a_key_that_fails_is_a_fit_failure_and_a_bug_is_named_as_one(tmp_path, monkeypatch,
                                                                     exc, kind):
    _failing(monkeypatch, exc)
    report = fit_store_report(_two_networks(tmp_path))
    failed = [f for f in report.failures if f.network == "othernet"]
    assert failed and {f.kind for f in failed} == {kind}
    assert {f.info().kind for f in failed} == {kind}
    reason = bug_info(exc).message if kind == "bug" else str(exc)
    assert {f.reason.split("; and no pooled")[0] for f in failed} == {reason}
    assert all(f.to_dict()["problem"]["kind"] == kind for f in failed)
    assert {m.network for m in report.models} == {"resnet50"}  # the others still fitted


def test_fit_text_names_a_bug_as_a_bug_and_lists_the_backtests_bugs(tmp_path, monkeypatch):
    store = _two_networks(tmp_path)
    _failing(monkeypatch, ZeroDivisionError("injected"))
    result = runner.invoke(app, ["fit", "--store", store.url, "--no-track", "--no-backtest"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stdout.splitlines() if "othernet" in ln]
    assert lines and all(ln.startswith("not fitted, a bug ") for ln in lines)
    assert all("a bug in jobcast" in ln and "ZeroDivisionError: injected" in ln
               for ln in lines)
    assert "backtest bug" not in result.stdout and "Traceback" not in result.output

    def broken(*_args, **_kwargs):
        raise ArithmeticError("injected in an ask")

    monkeypatch.setattr(Forecaster, "candidates", broken)
    with pytest.warns(RuntimeWarning, match="a bug in jobcast"):
        result = runner.invoke(app, ["fit", "--store", store.url, "--no-track"],
                               catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [bug] = [ln for ln in result.stdout.splitlines() if ln.startswith("backtest bug ")]
    assert "a bug in jobcast" in bug and "ArithmeticError: injected in an ask" in bug
    assert "Traceback" not in result.output


def test_an_ordinary_fit_failure_is_not_called_a_bug(tmp_path, monkeypatch):
    _failing(monkeypatch, ModelError("no usable points"))
    result = runner.invoke(app, ["fit", "--store", _two_networks(tmp_path).url, "--no-track",
                                 "--no-backtest"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stdout.splitlines() if "othernet" in ln]
    assert lines and all(ln.startswith("not fitted ") and "no usable points" in ln
                         for ln in lines)
    assert "bug" not in result.stdout
