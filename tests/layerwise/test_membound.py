"""Memory-bound kinds from PROFET's op times (layerwise.membound; issue 36, tried, not shipped).

Real data only: PROFET's profiler tables in ../shared/data/profet and the zoo's ResNet-50.
Relations, never fitted values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fleet.catalog import resolve_gpu
from layerwise import membound
from layerwise.as_run import resolve
from layerwise.corpora.network_fit import kind_work, reprice_memory_bound
from layerwise.network import decompose


@pytest.fixture(scope="module")
def ops(shared_data) -> pd.DataFrame:
    return membound.op_table(shared_data / "profet")


@pytest.fixture(scope="module")
def resnet_frame(ops) -> pd.DataFrame:
    """ResNet-50 at 64 px, every batch, every kind and GPU, joined with the zoo's work."""
    part = ops[(ops["network"] == "resnet50") & (ops["image_size"] == 64)].copy()
    cache: dict = {}
    work = [membound.network_work("resnet50", 64, int(b), cache).get(str(k), (math.nan,) * 2)
            for b, k in zip(part["batch"], part["kind"], strict=True)]
    part["moved"], part["kernels"] = [w[0] for w in work], [w[1] for w in work]
    feats = pd.DataFrame([membound.spec_features(resolve_gpu(g)) for g in part["gpu"]],
                         index=part.index)
    return pd.concat([part, feats], axis=1).dropna(subset=["moved"]).reset_index(drop=True)


def test_op_table_has_every_gpu_and_kind_per_step(ops):
    assert set(ops["gpu"]) == {"Tesla V100-SXM2-16GB", "Tesla T4", "Tesla M60", "Tesla K80"}
    assert set(ops["kind"]) == set(membound.KINDS)
    assert (ops["op_ms"] > 0).all() and np.isfinite(ops["op_ms"]).all()
    # the same batch-norm work is faster on the V100 (900 GB/s) than on the K80 (240 GB/s)
    bn = ops[(ops["kind"] == "bn") & (ops["network"] == "resnet50")]
    wide = bn.pivot_table(index=["image_size", "batch"], columns="gpu", values="op_ms")
    assert (wide["Tesla V100-SXM2-16GB"] < wide["Tesla K80"]).all()


def test_row_work_training_and_half():
    row = {"layer": "bn", "bytes_in": 1e6, "bytes_out": 1e6}
    fwd, k_fwd = membound.row_work(row, "fp32", False)
    train, k_train = membound.row_work(row, "fp32", True)
    half, _ = membound.row_work(row, "fp16", True)
    assert train > fwd and k_train > k_fwd
    assert half == pytest.approx(train / 2)


def test_fused_activations_leave_act_out_of_the_fit():
    work = membound.network_work("vgg11", 64, 16, {})
    assert "act" not in work and "pool" in work


def test_fit_prices_more_bytes_slower_and_more_bandwidth_faster(resnet_frame):
    model = membound.fit(resnet_frame, *membound.CANDIDATES[membound.CHOSEN])
    v100 = membound.spec_features(resolve_gpu("V100 SXM2 16GB"))
    k80 = membound.spec_features(resolve_gpu("Tesla K80"))
    for kind in membound.KINDS:
        assert model.ms(kind, 2e9, 10, v100) > model.ms(kind, 1e9, 10, v100)
        assert model.ms(kind, 1e9, 10, k80) > model.ms(kind, 1e9, 10, v100)


def test_held_out_errors_cover_every_row(resnet_frame):
    err = membound.held_out_errors(resnet_frame, membound.CANDIDATES["bandwidth"])
    assert np.isfinite(err).all() and len(err) == len(resnet_frame)


def test_reprice_replaces_only_the_memory_bound_kinds(resnet_frame):
    net = decompose("resnet50", batch_size=32, framework="tensorflow", image_size=64,
                    optimizer="sgd")
    from layerwise.forecast import device_features

    hw = device_features("Tesla T4")
    work = kind_work(net.rows, resolve("fp32", "tensorflow", hw, "2.5"))
    kinds = {"conv": 10.0, "bn": 1.0, "act": 1.0, "pool": 0.1, "add": 0.5}
    sums = pd.DataFrame([{"gpu": "Tesla T4", "sum_ms": 12.6, "low_ms": 10.0, "high_ms": 15.0,
                          "memory_ms": 2.6, "kind_ms": kinds, "kind_work": work}])
    model = membound.fit(resnet_frame)
    out = reprice_memory_bound(sums, model).iloc[0]
    assert out["kind_ms"]["conv"] == kinds["conv"]
    assert out["sum_ms"] == pytest.approx(sum(out["kind_ms"].values()))
    assert out["low_ms"] < out["sum_ms"] < out["high_ms"]
