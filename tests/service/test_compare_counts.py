"""``compare`` ranks GPU counts: split global batch, scaling efficiency, time and cost ranks."""

from __future__ import annotations

import pytest

from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.features.compare import compare
from jobcast.service.features.prices import load_prices


@pytest.fixture(scope="module")
def result() -> dict:
    forecaster = Forecaster(models=[])
    return compare(forecaster, load_prices(None), "resnet50", batch_size=512, epochs=1,
                   devices=["V100"], counts=[1, 2, 8])


def test_every_count_is_a_candidate_with_its_efficiency(result):
    rows = {r["gpus"]: r for r in result["candidates"]}
    assert set(rows) == {1, 2, 8}
    assert {r["device"] for r in rows.values()} == {"V100"}
    assert {r["deployment"] for r in rows.values()} == {"nvidia-v100-x1", "nvidia-v100-x2",
                                                        "nvidia-v100-x8"}
    one, eight = rows[1], rows[8]
    assert eight["seconds"] < one["seconds"]  # 8 GPUs share the batch
    assert 0 < eight["scaling_efficiency"] < 1  # but not 8x faster: communication, sync
    assert eight["scaling_efficiency"] == pytest.approx(one["seconds"] / (8 * eight["seconds"]))
    assert one["scaling_efficiency"] == 1  # one GPU is its own reference
    assert [r["rank_time"] for r in result["candidates"]] == [1, 2, 3]


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="GPU counts"):
        compare(Forecaster(models=[]), load_prices(None), "resnet50", 64, 1, devices=["V100"],
                counts=[0])
