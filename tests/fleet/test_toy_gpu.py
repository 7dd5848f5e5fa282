"""A GPU of a new architecture is one catalog row (issue 26): a toy "Toy X100" (architecture
"Toyarch", compute capability 13.0, PCIe gen 7, dual-issue FP32) registered at run time with
:func:`fleet.catalog.register_gpu`, plus its price in a price table (``JOBCAST_PRICES``), goes
through every flow a shipped GPU does: its spellings give one key, its interconnect comes from
its row, a layerwise forecast with no store, ``compare`` prices it, ``jobcast gpus`` lists it, a
served row answers for it. No test here asserts a timing or a forecast's value.

Also here: the catalog column ``fp32_dual_issue`` gives every shipped GPU the FP32 issue factor
the old compute-capability tuple gave, and the PCIe formula gives the old table's bandwidths.
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from fleet.catalog import (
    CatalogError,
    UnknownGpuError,
    load_catalog,
    register_gpu,
    resolve_gpu,
    unregister_gpu,
)
from fleet.deployment import Deployment, canonical_key
from fleet.interconnect import pcie_gbs

TOY = "Toy X100"
# what the code held before the catalog column and the formula replaced them (issue 26)
OLD_DUAL_ISSUE_FP32 = ("8.6", "8.7", "8.9", "12.0", "12.1")
OLD_PCIE_GBS = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}
TOY_ROW = {
    "name": TOY, "aliases": "X100;Toy X100 PCIe", "architecture": "Toyarch",
    "compute_capability": "13.0", "segment": "datacenter", "memory_gb": 96,
    "memory_type": "HBM4", "bandwidth_gbs": 4000, "boost_clock_mhz": 2000, "sm_count": 160,
    "cuda_cores": 20480, "fp32_tflops": 80, "release_year": 2027, "tensor_fp16_tflops": 2000,
    "tensor_bf16_tflops": 2000, "tensor_tf32_tflops": 1000, "l2_mb": 128, "tdp_w": 700,
    "form_factor": "pcie", "nvlink_gbs": 0, "pcie_gen": 7, "fp32_dual_issue": 1,
}
JOB = {"network": "resnet50", "batch_size": 64, "iterations": 100}


@pytest.fixture(scope="module")
def toy_gpu():
    """The toy GPU, registered for this module's tests and removed after them."""
    spec = register_gpu(TOY_ROW)
    yield spec
    unregister_gpu(TOY)


@pytest.fixture
def toy_prices(tmp_path, monkeypatch):
    """A price table holding the toy and one shipped GPU, named by ``JOBCAST_PRICES``."""
    path = tmp_path / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour,source\nToy X100,9.5,test\nT4,0.35,test\n")
    monkeypatch.setenv("JOBCAST_PRICES", str(path))
    return path


def test_the_dual_issue_column_gives_every_shipped_gpu_its_old_factor():
    from layerwise.efficiency_arrays import fp32_issue_factor

    shipped = [s for s in load_catalog() if s.name != TOY]
    assert len(shipped) >= 190
    for spec in shipped:
        old = 2.0 if spec.compute_capability in OLD_DUAL_ISSUE_FP32 else 1.0
        assert spec.fp32_dual_issue == (old == 2.0), spec.name
        assert fp32_issue_factor(spec.name) == old, spec.name
    assert sum(s.fp32_dual_issue for s in shipped) == 80


def test_the_pcie_formula_keeps_gens_3_to_6_and_needs_no_table():
    assert {gen: pcie_gbs(gen) for gen in OLD_PCIE_GBS} == OLD_PCIE_GBS
    assert pcie_gbs(7) == 192.0 and pcie_gbs(None) == 12.0
    assert pcie_gbs(2) == 6.0  # Tesla K20X: was 12 (the table's fallback), now half of gen 3


def test_every_spelling_of_the_toy_gives_one_key(toy_gpu):
    keys = {canonical_key(text) for text in (
        "8x Toy X100", "8x NVIDIA Toy X100", "8x X100", "8x toy x100 pcie", "8 x TOY-X100")}
    assert keys == {"nvidia-toy-x100-x8"}
    assert resolve_gpu("NVIDIA X100") is toy_gpu


def test_the_toy_interconnect_comes_from_its_row(toy_gpu):
    link = Deployment.parse("4x Toy X100").interconnect()
    assert (link.link, link.link_gbs) == ("pcie", 192.0)  # PCIe gen 7 with peer-to-peer
    two_nodes = Deployment.parse("2x4 Toy X100").interconnect()
    assert two_nodes.network == "ib200"


def test_a_layerwise_forecast_on_the_toy_needs_no_store(toy_gpu):
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest
    from layerwise.efficiency_arrays import fp32_issue_factor

    assert fp32_issue_factor(TOY) == 2.0
    outcome = Forecaster(None).forecast(JobRequest(device=TOY, **JOB))
    assert outcome.ok, outcome.error
    assert str(outcome.route).startswith("layerwise")
    assert outcome.details["gpu"] == TOY and outcome.unit == "s"
    assert math.isfinite(outcome.seconds) and 0 < outcome.low <= outcome.seconds <= outcome.high


def test_compare_lists_the_toy_with_its_cost(toy_gpu, toy_prices):
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.features.compare import compare
    from jobcast.service.features.prices import load_prices

    table = load_prices()
    assert table.source == str(toy_prices) and table.price("X100") == 9.5
    result = compare(Forecaster(None), table, "resnet50", batch_size=64, epochs=0.01,
                     dataset_size=64_000)
    rows = {r["device"]: r for r in result["candidates"]}
    assert set(rows) == {TOY, "Tesla T4"}
    toy = rows[TOY]
    assert "error" not in toy, toy.get("error")
    assert toy["price_usd_per_gpu_hour"] == 9.5 and toy["gpu"] == TOY
    assert toy["usd"] == pytest.approx(toy["seconds"] / 3600 * 9.5)
    assert toy["rank_cost"] in (1, 2) and toy["rank_time"] in (1, 2)


def test_jobcast_gpus_lists_the_toy(toy_gpu):
    from jobcast.cli.app import app

    runner = CliRunner()
    one = runner.invoke(app, ["gpus", "Toy X100", "--json"])
    assert one.exit_code == 0, one.output
    [entry] = json.loads(one.output)
    assert (entry["name"], entry["architecture"], entry["compute_capability"]) == (
        TOY, "Toyarch", "13.0")
    listed = runner.invoke(app, ["gpus", "--json"])
    assert TOY in [e["name"] for e in json.loads(listed.output)]


def test_a_served_row_answers_for_the_toy(toy_gpu):
    import pandas as pd

    from jobcast.mlops.pyfunc_model import JobcastForecaster
    from layerwise.shipped import default_predictor
    from models.scale_calibration import ScaleCalibrator

    served = JobcastForecaster()
    served.setup([], ScaleCalibrator.empty(), default_predictor())
    frame = served.predict(None, pd.DataFrame([{**JOB, "device": TOY},
                                               {**JOB, "deployment": "8x Toy X100"}]))
    assert frame["error"].isna().all(), frame["error"].tolist()
    assert (frame["seconds"] > 0).all() and frame["route"].str.startswith("layerwise").all()
    assert "pcie 192 GB/s" in str(frame["interconnect"].iloc[1])


def test_register_refuses_a_bad_row_and_changes_nothing(toy_gpu):
    before = load_catalog()
    with pytest.raises(CatalogError, match="already in the GPU catalog"):
        register_gpu(TOY_ROW)
    with pytest.raises(CatalogError, match="is ambiguous"):  # its alias is the toy's
        register_gpu({**TOY_ROW, "name": "Toy X200", "aliases": "X100"})
    with pytest.raises(CatalogError, match="must be positive"):
        register_gpu({**TOY_ROW, "name": "Toy X300", "aliases": "", "memory_gb": -1})
    with pytest.raises(CatalogError, match="unknown column"):
        register_gpu({**TOY_ROW, "name": "Toy X400", "aliases": "", "colour": "green"})
    with pytest.raises(CatalogError, match="fp32_dual_issue"):
        register_gpu({**TOY_ROW, "name": "Toy X500", "aliases": "", "fp32_dual_issue": 2})
    assert load_catalog() == before
    with pytest.raises(CatalogError, match="not one register_gpu added"):
        unregister_gpu("V100")


def test_unregister_forgets_the_toy_everywhere():
    from fleet.identity import gpu_identity
    from layerwise.efficiency_arrays import chip_of, fp32_issue_factor

    register_gpu({**TOY_ROW, "name": "Toy Z9", "aliases": "Z9 Toy"})
    assert (fp32_issue_factor("Toy Z9"), chip_of("Toy Z9")) == (2.0, "z9")
    assert gpu_identity("Toy Z9").known
    unregister_gpu("Z9 Toy")
    with pytest.raises(UnknownGpuError):
        resolve_gpu("Toy Z9")
    assert fp32_issue_factor("Toy Z9") == 1.0 and not gpu_identity("Toy Z9").known
    assert canonical_key("2x Toy Z9") == "toy-z9-x2"
