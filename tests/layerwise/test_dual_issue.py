"""FP32 GEMMs on dual-issue GPUs (GA10x, AD10x, GB20x) are priced against half their FP32 peak."""

from __future__ import annotations

import json

import numpy as np
import pytest

from layerwise.efficiency_arrays import (
    EfficiencyArrays,
    as_records,
    fp32_issue_factor,
    gemm_physics,
)
from layerwise.pricing import SHIPPED_DIR
from layerwise.roofline import physics_columns


def _dense(gpu: str, precision: str = "fp32", batch: int = 4096) -> dict:
    return {"layer": "dense", "batchsize": batch, "dim_input": 4096, "dim_output": 4096,
            "activation": "none", "optimizer": "none", "precision": precision,
            "framework": "pytorch", "gpu": gpu}


def _add(gpu: str) -> dict:
    return {"layer": "add", "batchsize": 64, "matsize": 56, "channels_in": 256,
            "optimizer": "none", "precision": "fp32", "framework": "pytorch", "gpu": gpu}


@pytest.mark.parametrize("gpu", ["NVIDIA L4", "NVIDIA GeForce RTX 3090", "NVIDIA RTX A6000",
                                 "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090"])
def test_dual_issue_gpus_count_half_their_fp32_peak(gpu):
    assert fp32_issue_factor(gpu) == 2.0


@pytest.mark.parametrize("gpu", ["Tesla T4", "Tesla V100-PCIE-32GB", "NVIDIA A100 80GB PCIe",
                                 "NVIDIA H100 80GB HBM3", "Tesla K80", "GeForce GTX 1080 Ti",
                                 "no such gpu", "cpu-amd-epyc-2c"])
def test_other_devices_keep_their_fp32_peak(gpu):
    assert fp32_issue_factor(gpu) == 1.0


def test_only_fp32_gemm_rows_on_dual_issue_gpus_change():
    records, columns = as_records([_dense("NVIDIA L4"), _dense("NVIDIA L4", "tf32"),
                                   _add("NVIDIA L4"), _dense("Tesla T4")])
    phys = physics_columns(records, None, columns)
    eff = gemm_physics(phys, records, columns)
    assert eff["compute_ms"][0] == pytest.approx(2.0 * phys["compute_ms"][0])
    assert eff["peak_flops"][0] == pytest.approx(phys["peak_flops"][0] / 2.0)
    assert eff["bound_ms"][0] > 1.9 * phys["bound_ms"][0]  # compute-bound: the bound doubles
    for key in ("compute_ms", "bound_ms", "peak_flops", "memory_ms"):
        np.testing.assert_array_equal(eff[key][1:], phys[key][1:])


def test_the_shipped_trees_saw_no_dual_issue_gpu():
    """The rule changes no training row, so the shipped trees hold with it on or off."""
    doc = json.loads((SHIPPED_DIR / "efficiency.json").read_text())
    assert doc["info"]["gpus"]
    assert all(fp32_issue_factor(g) == 1.0 for g in doc["info"]["gpus"])


def test_shipped_model_prices_a_dual_issue_gemm_slower_and_leaves_others():
    on = EfficiencyArrays.load(SHIPPED_DIR)
    off = EfficiencyArrays.load(SHIPPED_DIR)
    off.dual_issue = False
    records, columns = as_records([_dense("NVIDIA L4"), _dense("NVIDIA A100 80GB PCIe"),
                                   _add("NVIDIA L4")])
    a, b = on.predict_records(records, columns), off.predict_records(records, columns)
    assert a["predicted_ms"][0] > b["predicted_ms"][0]
    assert a["bound_ms"][0] > b["bound_ms"][0]
    np.testing.assert_allclose(a["predicted_ms"][1:], b["predicted_ms"][1:])
