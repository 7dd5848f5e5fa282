"""``--deployment`` supplies what a log lacks and never silently replaces a GPU the log names:
a disagreeing file is rejected with its line and both deployments, unless ``--override``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import DATA
from typer.testing import CliRunner

from ingest.events import ParseError
from ingest.parsers import ParseOverrides, registered
from ingest.pipeline import IngestOptions, ingest_paths, parse_file, same_gpu
from ingest.store import Store
from jobcast.cli.app import app

GTX = DATA / "caffe" / "ethanhe42_resnet-20_logs_resnet-20__2018-10-19_01-43-18.log"
GTX_LINE = 5  # "GPU 0: GeForce GTX 1080 Ti"
NO_GPU = DATA / "caffe" / "ducha_caffenet128_lsuv_bs128_lr002.log"
MLPERF_A100 = DATA / "mlperf" / "v0.7" / "NVIDIA"
runner = CliRunner()


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'jobcast.db'}")


def _runs(store: Store, log: Path):
    return [r for r in store.runs() if r.source == str(log)]


def test_the_named_line_is_what_the_test_expects():
    assert "GPU 0: GeForce GTX 1080 Ti" in GTX.read_text().splitlines()[GTX_LINE - 1]
    assert "GPU 0:" not in NO_GPU.read_text()


def test_a_disagreeing_flag_rejects_that_file_only(store):
    report = ingest_paths(store, [str(GTX), str(NO_GPU)], IngestOptions(deployment="1x V100"))
    [err] = report.rejected
    assert err.source == str(GTX) and err.line == GTX_LINE
    assert "GeForce GTX 1080 Ti" in err.reason and "nvidia-gtx-1080-ti-x1" in err.reason
    assert "1x V100" in err.reason and "nvidia-v100-x1" in err.reason
    assert "another GPU model" in err.reason and "--override" in err.reason
    assert _runs(store, GTX) == []
    assert [r.deployment for r in _runs(store, NO_GPU)] == ["nvidia-v100-x1"]  # filled in


def test_override_stores_under_the_flag_with_a_warning(store):
    report = ingest_paths(store, [str(GTX)], IngestOptions(deployment="1x V100", override=True))
    assert not report.rejected and report.added == [(str(GTX), 1)]
    [run] = _runs(store, GTX)
    assert run.deployment == "nvidia-v100-x1"
    [warning] = run.meta["warnings"]
    assert "--override" in warning and "GeForce GTX 1080 Ti" in warning
    assert f"line {GTX_LINE}" in warning
    assert run.meta["log_deployment"]["key"] == "nvidia-gtx-1080-ti-x1"
    assert report.warnings == [(str(GTX), 1, warning)]


def test_a_log_naming_no_gpu_takes_the_flag(store):
    report = ingest_paths(store, [str(NO_GPU)], IngestOptions(deployment="1x V100"))
    assert not report.rejected  # the log ends before its run did: said, never silent
    assert [w[2] for w in report.warnings if "truncated" not in w[2]] == []
    [run] = _runs(store, NO_GPU)
    assert run.deployment == "nvidia-v100-x1"
    assert not [w for w in run.meta.get("warnings", []) if "truncated" not in w]


@pytest.mark.parametrize("flag", ["1x GTX1080Ti", "GeForce GTX 1080 Ti", "nvidia-gtx-1080-ti-x1",
                                  "1x NVIDIA GeForce GTX 1080Ti"])
def test_the_same_gpu_spelled_otherwise_is_no_conflict(store, flag):
    report = ingest_paths(store, [str(GTX)], IngestOptions(deployment=flag))
    assert not report.rejected and not report.warnings
    [run] = _runs(store, GTX)
    assert run.deployment == "nvidia-gtx-1080-ti-x1"  # the log's own deployment is kept
    assert "warnings" not in run.meta


def test_another_count_is_a_conflict(store):
    [err] = ingest_paths(store, [str(GTX)], IngestOptions(deployment="2x GTX 1080 Ti")).rejected
    assert "2 instead of 1 accelerators per node" in err.reason
    assert "another GPU model" not in err.reason


def test_mlperf_system_description_counts_as_naming_the_gpu(store):
    [err] = ingest_paths(store, [str(MLPERF_A100)], IngestOptions(deployment="8x V100")).rejected
    assert "A100-SXM4-40GB" in err.reason and "8x V100" in err.reason
    assert "dgxa100_ngc20.06_mxnet.json" in err.reason  # where the log's GPU comes from
    agree = ingest_paths(store, [str(MLPERF_A100)], IngestOptions(deployment="8x A100 SXM4 40GB"))
    assert not agree.rejected and len(agree.added) == 1


def test_the_parallel_parse_path_applies_the_same_check():
    """ingest.ray_ingest parses with parse_file and the parsers' own ParseOverrides."""
    with pytest.raises(ParseError) as caught:
        parse_file(str(GTX), GTX, ParseOverrides(deployment="1x V100"), registered())
    assert caught.value.line == GTX_LINE and caught.value.source == str(GTX)
    forced = parse_file(str(GTX), GTX, IngestOptions(deployment="1x V100", override=True),
                        registered())
    assert forced.runs[0].meta["deployment_key"] == "nvidia-v100-x1"


def test_same_gpu_uses_the_fleet_definition():
    assert same_gpu("GeForce GTX 1080 Ti", "GTX1080Ti")
    assert same_gpu("Tesla V100-SXM2-16GB", "nvidia-v100-sxm2-16gb")
    assert same_gpu("TPU v4", "tpu-v4")  # not in the catalog: compared by lookup key
    assert not same_gpu("GeForce GTX 1080 Ti", "V100")
    assert not same_gpu("RTX 3090", "RTX 3090 Ti")
    assert not same_gpu("GeForce GTX 1080 Ti", "unknown-gpu")


def test_cli_rejects_then_overrides(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    args = ["ingest", str(GTX), "--store", url, "--deployment", "1x V100", "--json"]
    rejected = runner.invoke(app, args, catch_exceptions=False)
    assert rejected.exit_code == 1
    [entry] = json.loads(rejected.stdout)["rejected"]
    assert entry["line"] == GTX_LINE and "GeForce GTX 1080 Ti" in entry["reason"]
    forced = runner.invoke(app, [*args, "--override"], catch_exceptions=False)
    assert forced.exit_code == 0, forced.output
    out = json.loads(forced.stdout)
    assert out["added"] == [{"source": str(GTX), "runs": 1}]
    [warning] = out["warnings"]
    assert warning["source"] == str(GTX) and "GeForce GTX 1080 Ti" in warning["warning"]


def test_cli_flag_errors_are_clear(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    lone = runner.invoke(app, ["ingest", str(GTX), "--store", url, "--override"])
    assert lone.exit_code == 2 and "--override needs --deployment" in lone.output
    bad = runner.invoke(app, ["ingest", str(GTX), "--store", url, "--deployment", "8x"])
    assert bad.exit_code == 2 and "names no accelerator" in bad.output


def test_ray_task_body_rejects_and_overrides_the_same_way():
    from ingest.ray_ingest import parse_batch

    [rejected] = parse_batch([(str(GTX), str(GTX))], IngestOptions(deployment="1x V100"))
    assert rejected[0] == "rejected" and rejected[3] == GTX_LINE
    assert "GeForce GTX 1080 Ti" in rejected[4]
    forced = IngestOptions(deployment="1x V100", override=True)
    [parsed] = parse_batch([(str(GTX), str(GTX))], forced)
    assert parsed[0] == "parsed" and parsed[2].runs[0].meta["warnings"]


def test_cli_ray_ingest_reports_the_override_warning(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_DISABLE_USAGE_STATS", "1")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    url = f"sqlite:///{tmp_path / 'ray.db'}"
    args = ["ingest", str(GTX), str(NO_GPU), "--store", url, "--deployment", "1x V100",
            "--override", "--ray", "--json"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert len(out["added"]) == 2
    overrides = [w for w in out["warnings"] if "--override" in w["warning"]]
    assert [w["source"] for w in overrides] == [str(GTX)]
