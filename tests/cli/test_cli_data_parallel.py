"""``--data-parallel`` on predict and compare: parsed, stated in the answer, a bad value is one
clear line with exit 2. Relations only."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ingest.store import Store
from jobcast.cli.app import app

runner = CliRunner()


def test_predict_states_the_mechanism_asked_and_auto(tmp_path):
    store = f"sqlite:///{tmp_path / 'empty.db'}"
    Store(store)
    common = ["predict", "--network", "resnet50", "--iterations", "10", "--batch-size", "512",
              "--deployment", "8x A100-SXM4-80GB", "--precision", "fp16", "--store", store,
              "--framework", "tensorflow"]
    auto = runner.invoke(app, common)
    assert auto.exit_code == 0, auto.output
    assert "data parallel: allreduce" in auto.output and "auto for tensorflow" in auto.output
    ddp = runner.invoke(app, [*common, "--data-parallel", "ddp", "--json"])
    rep = runner.invoke(app, [*common, "--data-parallel", "replicated", "--json"])
    assert ddp.exit_code == rep.exit_code == 0, ddp.output + rep.output
    ddp_out, rep_out = json.loads(ddp.output), json.loads(rep.output)
    assert ddp_out["scaling"]["strategy"] == "ddp" and ddp_out["job"]["data_parallel"] == "ddp"
    assert ddp_out["seconds"] < rep_out["seconds"]
    bad = runner.invoke(app, [*common, "--data-parallel", "zero3"])
    assert bad.exit_code == 2
    lines = [x for x in bad.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "unknown data-parallel mechanism 'zero3'" in lines[0]
    assert "Traceback" not in bad.output


def test_compare_refuses_a_bad_mechanism_with_exit_2():
    bad = runner.invoke(app, ["compare", "--network", "resnet50", "--batch-size", "256",
                              "--epochs", "1", "--device", "A100", "--gpus", "8",
                              "--data-parallel", "zero3"])
    assert bad.exit_code == 2
    assert "choose from auto, ddp, allreduce, replicated, dp" in bad.output


def test_compare_passes_the_mechanism_to_every_row():
    def seconds(mechanism: str) -> float:
        got = runner.invoke(app, ["compare", "--network", "resnet50", "--batch-size", "2048",
                                  "--epochs", "1", "--device", "A100-SXM4-80GB", "--gpus", "8",
                                  "--data-parallel", mechanism, "--json"])
        assert got.exit_code == 0, got.output
        return json.loads(got.output)["candidates"][0]["seconds"]

    assert seconds("ddp") < seconds("replicated")
