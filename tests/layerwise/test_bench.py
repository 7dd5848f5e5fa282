"""Layer microbenchmarks on this CPU: valid rows, failures as rows, resume, CLI."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from layerwise.bench import (
    CSV_COLUMNS,
    CampaignFileError,
    TimingPlan,
    bench_row,
    campaign_configs,
    config_id,
    parse_layers,
    run_campaign,
)
from layerwise.layers import KINDS, FeatureSpace
from layerwise.local_device import cpu_features, cpu_slug, parse_cpuinfo, parse_device

# Tiny sizes: every configuration runs in well under a millisecond.
TINY = FeatureSpace(name="tiny", batchsize=(1, 4), matsize=(1, 8), kernelsize=(1, 3),
                    pool_kernelsize=(1, 2), strides=(1, 2), channels=(1, 8), dense_dim=(1, 32),
                    max_flops=2e5)
FAST = TimingPlan(warmup=1, reps=3, runs=2)
PUBLISHED = {
    "conv": ["gpu", "batchsize", "matsize", "kernelsize", "channels_in", "channels_out",
             "strides", "padding", "use_bias", "activation", "optimizer", "precision"],
    "dense": ["gpu", "batchsize", "dim_input", "dim_output", "activation", "optimizer",
              "precision"],
}
TIMES = ["time_ms_median", "time_ms_min", "time_ms_max", "time_ms_std"]
HW = ["device", "hw_kind", "hw_memory_gb", "hw_bandwidth_gbs", "hw_clock_mhz", "hw_cores",
      "hw_peak_tflops", "sw_tensorflow", "sw_python", "reps", "run_id", "layer", "status",
      "error"]


def read_rows(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_layout_has_the_published_and_contract_columns():
    for columns in PUBLISHED.values():
        assert set(columns) <= set(CSV_COLUMNS)
    assert set(TIMES + HW + ["config_id", "pool_type"]) <= set(CSV_COLUMNS)
    assert CSV_COLUMNS[0] == "gpu"


def test_configs_are_deterministic_per_index():
    a = list(campaign_configs(["conv", "dense", "pool"], 12, seed=5, space=TINY))
    b = list(campaign_configs(["conv", "dense", "pool"], 6, seed=5, space=TINY))
    assert a[:6] == b
    assert [r["layer"] for r in a[:3]] == ["conv", "dense", "pool"]
    assert len({r["config_id"] for r in a}) == 12
    other = list(campaign_configs(["conv", "dense", "pool"], 6, seed=6, space=TINY))
    assert {r["config_id"] for r in other}.isdisjoint({r["config_id"] for r in a})
    assert a[4]["config_id"] == config_id(5, 4, ["conv", "dense", "pool"], "tiny")


@pytest.mark.slow
def test_bench_rows_are_valid_for_every_layer_type():
    rng = np.random.default_rng(0)
    for i, name in enumerate(KINDS):
        row = KINDS[name].sample(rng, TINY)
        row["optimizer"] = "none" if i % 2 else "adam"
        out = bench_row(row, "cpu", FAST)
        assert out["status"] == "ok", out["error"]
        assert out["error"] == ""
        assert 0 < out["time_ms_min"] <= out["time_ms_median"] <= out["time_ms_max"]
        assert out["time_ms_std"] >= 0
        assert out["runs"] == 2 and out["reps"] == 3


@pytest.mark.slow
def test_every_optimizer_runs_a_training_step():
    row = KINDS["dense"].sample(np.random.default_rng(1), TINY)
    for opt in ("sgd", "adadelta", "adagrad", "momentum", "adam", "rmsprop"):
        out = bench_row({**row, "optimizer": opt}, "cpu", FAST)
        assert out["status"] == "ok", (opt, out["error"])
        assert out["backward"] == "upstream" and out["grad_input"] is True
    paper = TimingPlan(warmup=1, reps=2, runs=1, grad_input=False, backward="mse")
    out = bench_row({**row, "optimizer": "adam"}, "cpu", paper)
    assert out["status"] == "ok" and out["backward"] == "mse" and out["grad_input"] is False
    with pytest.raises(ValueError, match="backward"):
        TimingPlan(backward="l1")


def test_invalid_configuration_is_a_failed_row():
    bad = dict(layer="conv", batchsize=2, matsize=3, kernelsize=5, channels_in=2,
               channels_out=2, strides=1, padding="valid", use_bias=True, activation="relu",
               optimizer="sgd", precision=32)
    out = bench_row(bad, "cpu", FAST)
    assert out["status"] == "failed"
    assert "kernel 5 larger than input side 3" in out["error"]
    assert np.isnan(out["time_ms_median"])
    unknown_opt = bench_row({**bad, "kernelsize": 1, "optimizer": "lion"}, "cpu", FAST)
    assert unknown_opt["status"] == "failed" and "lion" in unknown_opt["error"]


@pytest.mark.slow
def test_campaign_writes_rows_and_resumes_after_interruptions(tmp_path):
    out = tmp_path / "bench.csv"
    layers = ["conv", "dense", "pool", "act"]
    first = run_campaign(out, layers, 10, seed=3, space=TINY, plan=FAST, max_rows=4)
    assert first.written == 4 and first.stopped_early
    assert len(read_rows(out)) == 4

    # a kill in the middle of writing a row leaves a partial last line
    text = out.read_text()
    out.write_text(text + text.splitlines()[-1][:25])
    second = run_campaign(out, layers, 10, seed=3, space=TINY, plan=FAST, max_rows=3)
    assert second.skipped_existing == 4 and second.written == 3
    third = run_campaign(out, layers, 10, seed=3, space=TINY, plan=FAST)
    assert third.written == 3 and not third.stopped_early

    rows = read_rows(out)
    assert len(rows) == 10
    assert len({r["config_id"] for r in rows}) == 10
    assert sorted(int(r["index"]) for r in rows) == list(range(10))
    assert list(rows[0]) == list(CSV_COLUMNS)
    for r in rows:
        assert r["status"] == "ok", r["error"]
        assert r["device"] == "cpu" and r["hw_kind"] == "cpu"
        assert r["gpu"].startswith("cpu-")
        assert float(r["hw_cores"]) >= 1 and float(r["hw_peak_tflops"]) > 0
        assert r["sw_tensorflow"] and r["sw_python"]
        assert float(r["time_ms_min"]) <= float(r["time_ms_median"]) <= float(r["time_ms_max"])
    assert len({r["run_id"] for r in rows}) == 3

    again = run_campaign(out, layers, 10, seed=3, space=TINY, plan=FAST)
    assert again.written == 0 and again.skipped_existing == 10
    assert len(read_rows(out)) == 10


def test_foreign_file_is_refused(tmp_path):
    out = tmp_path / "other.csv"
    out.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(CampaignFileError, match=r"other.csv:1: header") as caught:
        run_campaign(out, ["dense"], 2, space=TINY, plan=FAST)
    assert out.read_text() == "a,b,c\n1,2,3\n"
    info = caught.value.info()
    assert (info.kind, info.file, info.line) == ("campaign_file", str(out), 1)


def test_layer_and_device_parsing():
    assert parse_layers("conv, dense") == ["conv", "dense"]
    assert parse_layers("all") == list(KINDS)
    with pytest.raises(ValueError, match="lstm"):
        parse_layers("conv,lstm")
    assert parse_device("gpu:1") == ("gpu", 1)
    with pytest.raises(ValueError, match="bad device"):
        parse_device("tpu")


def test_cpu_description():
    text = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
            "cpu MHz\t\t: 2394.1\nphysical id\t: 0\ncore id\t\t: 0\nflags\t\t: fpu avx avx2 fma "
            "avx512f\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
            "cpu MHz\t\t: 2394.1\nphysical id\t: 0\ncore id\t\t: 0\n")
    info = parse_cpuinfo(text)
    assert info["logical_cores"] == 2 and info["physical_cores"] == 1
    assert "avx512f" in info["flags"]
    assert cpu_slug(info["model"], 1) == "cpu-intel-xeon-gold-6148-1c"
    local = cpu_features()
    assert local["hw_kind"] == "cpu" and local["gpu"].startswith("cpu-")
    for key in ("hw_memory_gb", "hw_bandwidth_gbs", "hw_clock_mhz", "hw_cores", "hw_peak_tflops"):
        assert local[key] > 0, key
    assert cpu_features() == local  # stable between calls


@pytest.mark.slow
def test_cli_bench_json_summary(tmp_path):
    import typer
    from typer.testing import CliRunner

    from jobcast.cli.bench import register

    app = typer.Typer()
    register(app)

    @app.command()
    def noop() -> None:  # a second command keeps typer in multi-command mode
        """Nothing."""

    out = tmp_path / "cli.csv"
    args = ["bench", "--out", str(out), "--layers", "dense,act", "--samples", "3",
            "--reps", "2", "--runs", "1", "--warmup", "1", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["total_rows"] == 3 and summary["written"] == 3
    assert summary["space"] == "cpu"
    assert len(read_rows(out)) == 3
    bad = CliRunner().invoke(app, ["bench", "--out", str(out), "--layers", "lstm"])
    assert bad.exit_code != 0
    assert "unknown layer type" in bad.output


def _marker(out):
    from layerwise.bench import _marker_path

    return _marker_path(out)


@pytest.mark.slow
def test_configuration_that_kills_the_process_is_retried_once_then_failed(tmp_path):
    out = tmp_path / "crash.csv"
    layers = ["dense", "act"]
    configs = list(campaign_configs(layers, 5, seed=2, space=TINY))
    run_campaign(out, layers, 5, seed=2, space=TINY, plan=FAST, max_rows=2)
    # the process died once while timing config 2: it is timed again
    _marker(out).write_text(f"{configs[2]['config_id']} 1\n")
    run_campaign(out, layers, 5, seed=2, space=TINY, plan=FAST, max_rows=1)
    assert read_rows(out)[2]["status"] == "ok"
    assert not _marker(out).exists()
    # it died twice on config 3: recorded as failed, the campaign goes on
    _marker(out).write_text(f"{configs[3]['config_id']} 2\n")
    result = run_campaign(out, layers, 5, seed=2, space=TINY, plan=FAST)
    rows = read_rows(out)
    assert len(rows) == 5 and result.failed == 1
    assert rows[3]["status"] == "failed" and "process died 2 times" in rows[3]["error"]
    assert rows[4]["status"] == "ok"


@pytest.mark.slow
def test_isolated_campaign_in_a_child_process(tmp_path):
    out = tmp_path / "iso.csv"
    seen = []
    result = run_campaign(out, ["dense", "pool"], 4, seed=1, space=TINY, plan=FAST,
                          isolate=True, progress=lambda d, t, row: seen.append((d, t, row)))
    assert result.written == 4 and result.ok == 4 and not result.stopped_early
    assert [d for d, _, row in seen if row is not None] == [1, 2, 3, 4]
    assert result.device["hw_kind"] == "cpu"
    assert len(read_rows(out)) == 4
    with pytest.raises(CampaignFileError):
        (tmp_path / "bad.csv").write_text("x\n")
        run_campaign(tmp_path / "bad.csv", ["dense"], 2, space=TINY, plan=FAST, isolate=True)
