"""``jobcast build-shipped`` builds the shipped data in the library (issue 38): the scaling
fits equal the shipped files byte for byte, the selector prior built from a small real store
loads as the selector's prior, and a missing input is one clear error, exit 2. The specialist
part trains with the recipe the shipped specialist records, and writes a loadable predictor
from a small real sample of the Justus tables."""

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
    from models.relation import load_prior

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


def _justus_sample(shared_data, folder, rows=120):
    """The first ``rows`` rows of three GPUs' conv and dense tables (real Justus et al.)."""
    import gzip

    (folder / "justus2018").mkdir(parents=True)
    kept = 0
    for layer in ("conv", "dense"):
        for gpu in ("K80", "P100", "V100"):
            name = f"{layer}_{gpu}.csv.gz"
            with gzip.open(shared_data / "justus2018" / name, "rt") as src:
                lines = [next(src) for _ in range(rows + 1)]
            with gzip.open(folder / "justus2018" / name, "wt") as dst:
                dst.writelines(lines)
            kept += rows
    return kept


def test_the_specialist_recipe_is_the_one_the_shipped_specialist_records(shared_data):
    from jobcast.service.features.shipped_build import (
        SPECIALIST_MODELS,
        SPECIALIST_SETTINGS,
        default_parts,
    )

    shipped = json.loads((REPO / "layerwise" / "data" / "default_predictor" / "specialist"
                          / "predictor.json").read_text())
    for layer in shipped["layers"].values():
        assert sorted(layer["validation"]) == sorted(SPECIALIST_MODELS.split(","))
        assert layer["params"]["max_iter"] == SPECIALIST_SETTINGS["gbt_iter"]
        assert layer["params"]["random_state"] == SPECIALIST_SETTINGS["seed"]
        val = layer["validation"]["gbt"]["n"]
        assert val == round(SPECIALIST_SETTINGS["val_fraction"] * layer["n_train"])
    assert "specialist" in default_parts(shared_data, store=False)


def test_the_specialist_part_trains_a_loadable_predictor_on_a_real_sample(shared_data,
                                                                           tmp_path):
    from jobcast.service.features.shipped_build import build_specialist
    from layerwise.shipped import load_predictor

    rows = _justus_sample(shared_data, tmp_path / "shared")
    report = build_specialist(tmp_path / "shared", tmp_path / "out", models="gbt,linear",
                              gbt_iter=20)
    folder = tmp_path / "out" / "layerwise" / "data" / "default_predictor" / "specialist"
    assert sorted(report.written) == [str(folder / n)
                                      for n in ("conv.npz", "dense.npz", "predictor.json")]
    assert len(report.inputs) == 6
    saved = json.loads((folder / "predictor.json").read_text())
    assert saved["info"]["n_rows"] == rows
    assert sorted(saved["info"]["gpus"]) == ["K80", "P100", "V100"]
    assert sorted(load_predictor(folder).known_layers) == ["conv", "dense"]


def test_the_specialist_needs_the_justus_tables(tmp_path):
    (tmp_path / "shared" / "justus2018").mkdir(parents=True)
    empty = runner.invoke(app, ["build-shipped", "specialist", "--shared",
                                str(tmp_path / "shared"), "--out", str(tmp_path / "out")])
    assert empty.exit_code == 2 and "no <layer>_<gpu>.csv.gz table" in empty.output
    missing = runner.invoke(app, ["build-shipped", "specialist", "--shared", str(tmp_path),
                                  "--out", str(tmp_path / "out")])
    assert missing.exit_code == 2
    assert f"{tmp_path / 'justus2018'}: not found" in missing.output
    assert "Traceback" not in empty.output + missing.output and not (tmp_path / "out").exists()
