"""``jobcast ingest --tag key=value --system S``: into every run's variant and system (they win
over what logs and folders say), and on into the fitted models' keys."""

from __future__ import annotations

import json

import pytest
from paths import DATA
from typer.testing import CliRunner

from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store
from jobcast.cli.app import app
from models.e2e import fit_store_report

LAMBDA = DATA / "lambda_sample"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_tags_and_system_win_over_log_and_folder(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobcast.db'}"
    result = invoke("ingest", str(LAMBDA), "--store", url, "--json",
                    "--tag", "Precision=FP16", "--tag", "team=vision", "--system", "  rack 7 ")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["stored"] == 3 and payload["rejected"] == [] and len(payload["skipped"]) == 2
    runs = Store(url).runs()
    assert len(runs) == 3
    for run in runs:
        assert run.meta["variant"]["precision"] == "fp16"  # the folders say fp32 for two
        assert run.meta["variant"]["team"] == "vision"
        assert run.meta["variant"]["data"] == "synthetic"  # untagged keys keep the log's
        assert run.meta["system"] == "rack 7"


@pytest.mark.parametrize(("flags", "message"), [
    (["--tag", "precision"], "key=value"),
    (["--system", "   "], "--system"),
])
def test_bad_flags_are_clear_errors(tmp_path, flags, message):
    result = invoke("ingest", str(LAMBDA), "--store", f"sqlite:///{tmp_path / 'j.db'}", *flags)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_tags_reach_the_model_keys(tmp_path):
    plain = Store(f"sqlite:///{tmp_path / 'plain.db'}")
    assert not ingest_paths(plain, [str(LAMBDA)]).rejected
    keys = {(m.network, m.deployment, m.phase, m.variant) for m in fit_store_report(plain).models}
    # fp16 and fp32 runs of one network on one GPU are two models, never one
    single = {k[3] for k in keys if k[:3] == ("resnet50", "nvidia-rtx-2080-ti-x1", "train")}
    assert len(single) == 2 and all("precision=" in v for v in single)

    tagged = Store(f"sqlite:///{tmp_path / 'tagged.db'}")
    report = ingest_paths(tagged, [str(LAMBDA)], IngestOptions(tags=(("compiler", "xla"),)))
    assert not report.rejected
    fit = fit_store_report(tagged)
    variants = {m.variant for m in fit.models} | {f.variant for f in fit.failures}
    assert variants and all("compiler=xla" in v for v in variants)
