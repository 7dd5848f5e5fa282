"""Data-parallel scaling: the fit recovers its constants; a multi-GPU job adds communication."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleet.deployment import Deployment
from models.replicated import DataParallelScaling
from models.scaling import allreduce_ms


def test_fit_recovers_overlap_and_sync():
    rng = np.random.default_rng(1)
    X = pd.DataFrame({"step1_ms": rng.uniform(50, 500, 60), "allreduce_ms": rng.uniform(1, 200, 60),
                      "gpus": rng.choice([2, 4, 8], 60)})
    X["precision"] = np.where(np.arange(60) % 2, "fp16", "fp32")
    X["tensors"] = rng.integers(10, 300, 60)
    d = np.log2(X["gpus"])
    half = X["precision"].eq("fp16")
    y = (X["step1_ms"] * (1 + np.where(half, 0.2, 0.05) * d)
         + np.where(half, 0.3, 0.05) * X["tensors"] * d + 0.4 * X["allreduce_ms"])
    model = DataParallelScaling().fit(X, y)
    assert model.sync_["full"] == pytest.approx(0.05, abs=1e-4)
    assert model.sync_["half"] == pytest.approx(0.2, abs=1e-4)
    assert model.tensor_ms_["half"] == pytest.approx(0.3, abs=1e-3)
    assert model.overlap_ == pytest.approx(0.6, abs=1e-4)
    assert np.allclose(model.predict(X), y)
    ms, low, high = model.step(100.0, 50.0, 8)
    assert low <= ms <= high
    assert model.step(100.0, 0.0, 1)[0] == pytest.approx(100.0)


def test_allreduce_of_a_network_follows_precision_and_links():
    params = 25.6e6
    nvlink = allreduce_ms(params, "fp32", Deployment.parse("8x V100"))
    pcie = allreduce_ms(params, "fp32", Deployment.parse("8x GeForce RTX 2080 Ti"))
    half = allreduce_ms(params, "fp16", Deployment.parse("8x GeForce RTX 2080 Ti"))
    assert nvlink < pcie
    assert half == pytest.approx(pcie / 2, rel=0.05)


def test_shipped_constants_load(tmp_path):
    model = DataParallelScaling.load()
    assert 0.0 <= model.overlap_ <= 1.0 and min(model.sync_.values()) >= 0.0
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json"):
        DataParallelScaling.load(tmp_path / "bad.json")
