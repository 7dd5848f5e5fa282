"""Campaigns on a real local Ray: same CSV as local campaigns, resume, retries, the CLI."""

from __future__ import annotations

import csv
import json
import os

import pytest

from layerwise.backends import Backend, register_backend, unregister_backend
from layerwise.bench import CSV_COLUMNS, TimingPlan, campaign_configs, run_campaign
from layerwise.layers import FeatureSpace

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from layerwise.ray_campaign import bench_chunk, run_ray_campaign  # noqa: E402

TINY = FeatureSpace(name="tiny", batchsize=(1, 4), matsize=(1, 8), kernelsize=(1, 3),
                    pool_kernelsize=(1, 2), strides=(1, 2), channels=(1, 8), dense_dim=(1, 32),
                    max_flops=2e5)
FAST = TimingPlan(warmup=1, reps=3, runs=2)
LAYERS = ["conv", "dense", "pool", "act"]
ARGS = dict(seed=4, space=TINY, plan=FAST, backend="torch", device="cpu")


pytestmark = pytest.mark.usefixtures("local_ray")


def read_rows(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def expected_ids(samples: int) -> list[str]:
    return [r["config_id"] for r in campaign_configs(LAYERS, samples, 4, TINY, ("fp32",),
                                                     "torch")]


def test_rows_land_once_in_the_bench_layout_and_a_rerun_measures_nothing(tmp_path):
    out = tmp_path / "ray.csv"
    ticks: list[tuple[int, int, bool]] = []
    result = run_ray_campaign(out, LAYERS, 14, configs_per_task=3, **ARGS,
                              progress=lambda d, t, row: ticks.append((d, t, row is None)))
    assert (result.written, result.ok, result.failed) == (14, 14, 0)
    assert result.tasks == 5 and result.retried_tasks == 0 and result.failed_tasks == 0
    assert sum(result.hosts.values()) == 14 and result.device["hw_kind"] == "cpu"
    assert ticks[0] == (0, 14, True)
    assert [d for d, _, none in ticks[1:]] == list(range(1, 15))
    with open(out, newline="") as handle:
        assert tuple(next(csv.reader(handle))) == CSV_COLUMNS
    rows = read_rows(out)
    assert sorted(r["config_id"] for r in rows) == sorted(expected_ids(14))
    assert sorted(int(r["index"]) for r in rows) == list(range(14))
    for r in rows:
        assert r["status"] == "ok", r["error"]
        assert r["framework"] == "pytorch" and r["sw_torch"] and r["device"] == "cpu"
        assert r["hw_kind"] == "cpu" and r["gpu"].startswith("cpu-") and r["run_id"]
        assert float(r["time_ms_min"]) <= float(r["time_ms_median"]) <= float(r["time_ms_max"])
    assert len({r["run_id"] for r in rows}) == 1

    again = run_ray_campaign(out, LAYERS, 14, **ARGS)
    assert (again.written, again.skipped_existing, again.tasks) == (0, 14, 0)
    assert read_rows(out) == rows


def test_a_partial_local_file_is_resumed_on_ray(tmp_path):
    out = tmp_path / "mixed.csv"
    local = run_campaign(out, LAYERS, 9, max_rows=3, **ARGS)
    assert local.written == 3
    out.write_text(out.read_text() + "cpu-partial,3,7,")  # a kill in the middle of a line
    stopped = run_ray_campaign(out, LAYERS, 9, max_seconds=0.0, **ARGS)
    assert stopped.stopped_early and stopped.written == 0 and stopped.skipped_existing == 3
    result = run_ray_campaign(out, LAYERS, 9, configs_per_task=2, **ARGS)
    assert result.skipped_existing == 3 and result.written == 6
    rows = read_rows(out)
    assert sorted(r["config_id"] for r in rows) == sorted(expected_ids(9))
    assert all(r["status"] == "ok" for r in rows)


def test_duplicate_and_foreign_records_are_never_written(tmp_path):
    out = tmp_path / "dups.csv"

    def doubles(rows, device, plan, backend):
        records = bench_chunk(rows, device, plan, backend)
        return records + records + [{**records[0], "config_id": "not-asked"}]

    result = run_ray_campaign(out, LAYERS, 4, configs_per_task=2, task=doubles, **ARGS)
    assert result.written == 4 and result.dropped_duplicates == 2 * (2 + 1)
    assert sorted(r["config_id"] for r in read_rows(out)) == sorted(expected_ids(4))


def test_a_task_that_raises_stops_the_campaign_with_its_error(tmp_path):
    def broken(rows, device, plan, backend):
        raise ValueError("no such framework on this node")

    with pytest.raises(RuntimeError, match="no such framework on this node"):
        run_ray_campaign(tmp_path / "x.csv", LAYERS, 2, task=broken, **ARGS)
    with pytest.raises(ValueError, match="no GPU"):
        run_ray_campaign(tmp_path / "g.csv", LAYERS, 2, **{**ARGS, "device": "gpu"})
    with pytest.raises(ValueError, match="accelerator type 'H100'"):
        run_ray_campaign(tmp_path / "a.csv", LAYERS, 2, accelerator_type="H100", **ARGS)
    with pytest.raises(ValueError, match="unknown precision 'fp64'"):
        run_ray_campaign(tmp_path / "p.csv", LAYERS, 2, **ARGS, precisions=["fp64"])
    with pytest.raises(ValueError, match="times fp32, not bf16|not installed"):
        run_ray_campaign(tmp_path / "t.csv", LAYERS, 2, **{**ARGS, "backend": "tf"},
                         precisions=["bf16"])
    assert not any((tmp_path / name).exists() for name in ("p.csv", "t.csv"))


def _app():
    import typer

    from jobcast.cli.bench import register

    app = typer.Typer()
    register(app)

    @app.command()
    def noop() -> None:  # a second command keeps typer in multi-command mode
        """Nothing."""

    return app


CLI_FAST = ["--reps", "2", "--runs", "1", "--warmup", "1", "--json"]


def test_cli_ray_contract_twice_measures_nothing_new(tmp_path):
    from typer.testing import CliRunner

    out = tmp_path / "cli.csv"
    args = ["bench", "--backend", "torch", "--ray", "--local-device", "cpu", "--layers",
            "conv,dense", "--samples", "4", "--out", str(out), *CLI_FAST]
    first = CliRunner().invoke(_app(), args)
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    assert summary["written"] == 4 and summary["total_rows"] == 4 and summary["ray"] is True
    assert summary["backend"] == "torch" and summary["precisions"] == ["fp32"]
    assert summary["retried_tasks"] == 0 and summary["space"] == "cpu"
    rows = read_rows(out)
    assert len(rows) == 4 and {r["layer"] for r in rows} == {"conv", "dense"}
    assert {"layer", "status", "time_ms_median"} <= set(rows[0])
    second = json.loads(CliRunner().invoke(_app(), args).stdout)
    assert second["written"] == 0 and second["skipped_existing"] == 4
    assert read_rows(out) == rows


def test_cli_torch_backend_in_process_and_bad_values(tmp_path, monkeypatch):
    import sys

    from typer.testing import CliRunner

    out = tmp_path / "local.csv"
    args = ["bench", "--backend", "pytorch", "--in-process", "--layers", "dense,act",
            "--samples", "3", "--precisions", "fp32,bf16", "--out", str(out), *CLI_FAST]
    result = CliRunner().invoke(_app(), args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["written"] == 3 and summary["backend"] == "torch"
    assert summary["precisions"] == ["fp32", "bf16"] and "retried_tasks" not in summary
    rows = read_rows(out)
    assert [r["precision"] for r in rows] == ["fp32", "bf16", "fp32"]
    assert {r["framework"] for r in rows} == {"pytorch"}
    for bad, message in ((["--backend", "mxnet"], "unknown backend 'mxnet'"),
                         (["--precisions", "fp99"], "unknown precision 'fp99'"),
                         (["--accelerator-type", "H100"], "--accelerator-type needs --ray")):
        failed = CliRunner().invoke(_app(), ["bench", "--out", str(tmp_path / "b.csv"), *bad])
        assert failed.exit_code == 2 and message in failed.output
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    missing = CliRunner().invoke(_app(), ["bench", "--out", str(tmp_path / "r.csv"), "--ray",
                                          "--backend", "torch"])
    assert missing.exit_code == 2 and "pip install ray" in missing.output


# Worker deaths last: the workers they leave behind start cold.


def test_a_worker_killed_mid_run_is_retried_and_every_row_lands_once(tmp_path):
    out = tmp_path / "killed.csv"
    marker = tmp_path / "died-once"

    def dies_once(rows, device, plan, backend):
        if any(r["index"] == 5 for r in rows) and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(1)  # a real worker death, as the OOM killer or a pre-emption causes
        return bench_chunk(rows, device, plan, backend)

    result = run_ray_campaign(out, LAYERS, 12, configs_per_task=3, max_retries=2,
                              task=dies_once, **ARGS)
    assert marker.exists()
    assert result.retried_tasks == 1 and result.failed_tasks == 0
    assert (result.written, result.ok) == (12, 12)
    rows = read_rows(out)
    assert sorted(r["config_id"] for r in rows) == sorted(expected_ids(12))


def test_a_configuration_that_always_kills_its_worker_becomes_a_failed_row(tmp_path):
    out = tmp_path / "poison.csv"

    def poison(rows, device, plan, backend):
        if any(r["index"] == 2 for r in rows):
            os._exit(1)
        return bench_chunk(rows, device, plan, backend)

    result = run_ray_campaign(out, LAYERS, 6, configs_per_task=3, max_retries=0,
                              task=poison, **ARGS)
    assert result.failed_tasks == 2  # its chunk, then its own task
    assert (result.written, result.ok, result.failed) == (6, 5, 1)
    rows = {int(r["index"]): r for r in read_rows(out)}
    assert sorted(rows) == list(range(6))
    assert rows[2]["status"] == "failed" and "worker died 1 time(s)" in rows[2]["error"]
    assert rows[2]["framework"] == "pytorch" and rows[2]["time_ms_median"] == ""


def _toy_time(row: dict, device: str, plan: TimingPlan) -> dict:
    """A dense row as one numpy matmul (the toy backend below: no timing is asserted)."""
    import time

    import numpy as np

    from layerwise.backends.base import summarise

    x = np.ones((int(row["batchsize"]), int(row["dim_input"])), dtype=np.float32)
    w = np.ones((int(row["dim_input"]), int(row["dim_output"])), dtype=np.float32)
    times = []
    for _ in range(plan.reps):
        start = time.perf_counter()
        x @ w
        times.append((time.perf_counter() - start) * 1e3)
    return summarise(times, 1)


def _toy_detect(device: str) -> dict:
    from layerwise.local_device import cpu_features

    return {"device": "cpu", **cpu_features()}


# workers import the repository's folders, not pytest's test folders: name the module so
TOY = Backend(name="toy-ray", framework="pytorch", time_config=_toy_time, detect=_toy_detect,
              precisions=("fp32",), module="numpy",
              defined_in="tests.layerwise.test_ray_campaign")


def test_a_worker_finds_a_backend_registered_outside_layerwise(tmp_path):
    """Ray workers know only the built-in backends; they import the toy's module
    (``Backend.home``, this test module) to get it."""
    out = tmp_path / "toy.csv"
    register_backend(TOY)
    try:
        result = run_ray_campaign(out, ["dense"], 4, seed=4, space=TINY, plan=FAST,
                                  backend="toy-ray", device="cpu", configs_per_task=2)
    finally:
        unregister_backend("toy-ray")
    assert (result.written, result.ok, result.failed) == (4, 4, 0)
    rows = read_rows(out)
    assert {r["framework"] for r in rows} == {"pytorch"} and {r["layer"] for r in rows} == {
        "dense"}
