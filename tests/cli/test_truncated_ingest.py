"""A truncated log is never stored silently (ingest.validate rules): a real MLPerf log cut
short is stored with a warning on the ingest line and in ``--json``, or rejected with a
reason that names the truncation first."""

from __future__ import annotations

import json
import shutil

from paths import DATA
from typer.testing import CliRunner

from jobcast.cli.app import app

runner = CliRunner()
TREE = DATA / "mlperf" / "v0.7" / "NVIDIA"  # a submission: results/ and systems/
LOG = "results/dgxa100_ngc20.06_mxnet/resnet/result_0.txt"


def cut_short(folder, *, with_tree: bool):
    """The real log cut to its first half (a job killed mid-training), alone in ``folder``
    or inside a copy of its submission tree (whose system description names the GPUs)."""
    if with_tree:
        shutil.copytree(TREE, folder / "NVIDIA")
        path = folder / "NVIDIA" / LOG
    else:
        path = folder / "result_0.txt"
    lines = (TREE / LOG).read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]))
    return path


def ingest(*args: str):
    return runner.invoke(app, ["ingest", *args])


def test_a_truncated_log_with_deployment_is_stored_with_a_warning(tmp_path):
    log = cut_short(tmp_path, with_tree=False)
    url = f"sqlite:///{tmp_path / 's.db'}"
    shown = ingest(str(log), "--store", url, "--deployment", "8x A100")
    assert shown.exit_code == 0, shown.output
    assert "added 1 files" in shown.stdout
    warning = [line for line in shown.stdout.splitlines() if line.startswith("warning")]
    assert len(warning) == 1 and "truncated" in warning[0] and str(log) in warning[0]
    again = ingest(str(log), "--store", f"sqlite:///{tmp_path / 'j.db'}",
                   "--deployment", "8x A100", "--json")
    payload = json.loads(again.stdout)
    assert payload["stored"] == 1
    assert [w["run"] for w in payload["warnings"]] == [1]
    assert "truncated" in payload["warnings"][0]["warning"]
    runs = json.loads(runner.invoke(app, ["runs", "--store", url, "--json"]).stdout)
    assert runs[0]["meta"]["truncated"] is True


def test_a_truncated_log_whose_system_names_the_gpus_is_stored_with_a_warning(tmp_path):
    log = cut_short(tmp_path, with_tree=True)
    result = ingest(str(log), "--store", f"sqlite:///{tmp_path / 's.db'}", "--json")
    payload = json.loads(result.stdout)
    assert result.exit_code == 0 and payload["stored"] == 1
    assert any("truncated" in w["warning"] for w in payload["warnings"])


def test_the_whole_log_carries_no_truncation_warning(tmp_path):
    result = ingest(str(TREE / LOG), "--store", f"sqlite:///{tmp_path / 's.db'}", "--json")
    payload = json.loads(result.stdout)
    assert payload["stored"] == 1
    assert not any("truncated" in w["warning"] for w in payload["warnings"])


def test_a_truncated_log_rejected_without_deployment_names_the_truncation(tmp_path):
    log = cut_short(tmp_path, with_tree=False)
    result = ingest(str(log), "--store", f"sqlite:///{tmp_path / 's.db'}", "--json")
    assert result.exit_code == 1
    (rejected,) = json.loads(result.stdout)["rejected"]
    assert rejected["reason"].startswith("run 1: the log is truncated")
    assert "--deployment" in rejected["reason"]  # and what else is missing
