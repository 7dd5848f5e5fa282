"""``jobcast build-shipped`` builds the shipped data in the library (issue 38): the scaling
fits equal the shipped files byte for byte, the selector prior built from a small real store
loads as the selector's prior, and a missing input is one clear error, exit 2."""

from __future__ import annotations

import json

from paths import DATA, REPO
from typer.testing import CliRunner

from jobcast.cli.app import app

runner = CliRunner()


def test_scaling_rebuilds_the_shipped_files_exactly(shared_data, tmp_path):
    result = runner.invoke(app, ["build-shipped", "scaling", "--shared", str(shared_data),
                                 "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["parts"][0]
    assert report["part"] == "scaling" and report["seconds"] >= 0
    for name in ("scaling.json", "scaling_pytorch.json"):
        built = tmp_path / "models" / "data" / name
        assert str(built) in report["written"]
        assert built.read_bytes() == (REPO / "models" / "data" / name).read_bytes()


def test_selector_prior_from_a_small_store_loads_as_the_prior(tmp_path):
    from ingest.pipeline import ingest_paths
    from ingest.store import Store
    from models.selector import load_prior

    url = f"sqlite:///{tmp_path / 'small.db'}"
    ingest_paths(Store(url), [str(DATA / "mlperf")])
    result = runner.invoke(app, ["build-shipped", "selector-prior", "--store", url,
                                 "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["parts"][0]
    prior = load_prior(tmp_path / "out" / "models" / "data" / "selector_prior.json")
    assert prior is not None and prior.n_ == sum(r["forecasts"] for r in report["table"])
    assert sorted(prior.kinds_) == sorted(r["kind"] for r in report["table"])


def test_a_missing_input_is_a_clear_error_and_nothing_is_written(tmp_path):
    empty = tmp_path / "no-shared"
    empty.mkdir()
    result = runner.invoke(app, ["build-shipped", "scaling", "--shared", str(empty),
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert f"{empty / 'lambda'}: not found" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_the_selector_prior_needs_a_store_and_parts_are_checked(tmp_path):
    no_store = runner.invoke(app, ["build-shipped", "selector-prior", "--out", str(tmp_path)])
    assert no_store.exit_code == 2 and "needs --store" in no_store.output
    unknown = runner.invoke(app, ["build-shipped", "everything", "--out", str(tmp_path)])
    assert unknown.exit_code == 2 and "unknown part 'everything'" in unknown.output
