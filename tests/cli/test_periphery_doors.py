"""The service doors of the CLI periphery (issue 26): ``benching``, ``layer_models``,
``report_data`` and ``cluster`` answer with typed errors whose kind reaches ``--json``, keep
the commands' defaults, and say what a failed cluster fetch wrote (nothing)."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
from pg_server import free_port
from typer.testing import CliRunner

from fleet.errors import JobcastError
from ingest.store import Store
from jobcast.cli.app import app
from jobcast.service.errors import ServiceError
from jobcast.service.features import cluster
from jobcast.service.features.benching import BenchRequest

runner = CliRunner()


def json_error(*args: str) -> dict:
    """The ``{"error": {...}}`` a failing ``--json`` command prints on stdout (exit 2)."""
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 2, result.output
    return json.loads(result.stdout)["error"]


def test_bench_request_defaults_are_the_commands():
    from jobcast.cli.bench import bench

    flags = {name: p.default.default for name, p in inspect.signature(bench).parameters.items()}
    renamed = {"device": "local_device", "precisions": "precision"}
    for f in dataclasses.fields(BenchRequest):
        if f.default is dataclasses.MISSING:
            continue
        flag = flags[renamed.get(f.name, f.name)]
        if flag is None and f.name in renamed:  # None: not given; the command's default
            continue
        assert flag == f.default, f.name


def test_a_library_error_keeps_its_kind_through_the_door(tmp_path):
    error = json_error("bench", "--out", str(tmp_path / "b.csv"), "--local-device", "tpu")
    assert error["kind"] == "device" and "bad device 'tpu'" in error["message"]
    error = json_error("layerwise", "predict", "--data", str(tmp_path / "none.csv"),
                       "--out", str(tmp_path / "o.csv"))
    assert error["kind"] == "layer_model"
    assert error["message"] == f"{tmp_path / 'none.csv'}: no such file"


def test_an_empty_store_is_a_service_error_the_report_names(tmp_path):
    from jobcast.service.features.report_data import EmptyStoreError, report_data

    assert issubclass(EmptyStoreError, ServiceError)
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(EmptyStoreError, match="holds no runs"):
        report_data(Store(url))
    result = runner.invoke(app, ["report", "--store", url, "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "nothing to report" in result.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("parse, text", [(cluster.parse_duration, "soon"),
                                         (cluster.parse_time, "yesterday-ish"),
                                         (cluster.parse_matcher, "no operator"),
                                         (cluster.job_key_rule, "name:(")])
def test_cluster_flag_parsers_raise_one_typed_error(parse, text):
    with pytest.raises(cluster.ClusterError) as caught:
        parse(text)
    assert isinstance(caught.value, (ValueError, JobcastError)) and str(caught.value)
    assert caught.value.info().kind == "cluster"


def test_cluster_flags_that_are_fine():
    assert cluster.parse_duration("2h") == 7200 and cluster.job_key_rule(None) is None
    assert cluster.job_key_rule("submit:train-(?P<key>\\w+)") == "submit:train-(?P<key>\\w+)"
    assert cluster.parse_matcher("gpu=A100") == ("gpu", "=", "A100")
    assert cluster.KeyRule.parse("x").field == "name"  # the re-export, loaded on first use
    with pytest.raises(cluster.ClusterError, match="--basic-auth must be USER:PASSWORD"):
        cluster.prometheus_client("http://127.0.0.1:9", basic_auth="no-colon")


def test_a_failed_fetch_says_nothing_was_written_and_opens_no_store():
    """Nothing listens on the port: the fetch fails, says so, and no store was opened."""
    client = cluster.prometheus_client(f"http://127.0.0.1:{free_port()}", timeout=2.0,
                                       retries=0)
    opened: list[str] = []
    with pytest.raises(cluster.ClusterFetchError, match=r"\(nothing was written\)$"):
        cluster.prometheus_jobs(client, lambda: opened.append("store"), 0.0, 3600.0)
    assert not opened
