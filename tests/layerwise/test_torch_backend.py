"""The PyTorch timing backend on this CPU: every kind builds, shapes and padding match Keras,
precisions are timed, campaigns over precisions resume, and bad requests get clear errors."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from layerwise.backends import BACKENDS, TimingPlan, get_backend
from layerwise.bench import (
    CSV_COLUMNS,
    bench_row,
    campaign_configs,
    config_id,
    parse_precisions,
    run_campaign,
)
from layerwise.kinds.torch_ops import same_padding
from layerwise.layers import KINDS, FeatureSpace

torch = pytest.importorskip("torch")

TINY = FeatureSpace(name="tiny", batchsize=(2, 4), matsize=(1, 9), kernelsize=(1, 3),
                    pool_kernelsize=(1, 3), strides=(1, 3), channels=(1, 8), dense_dim=(1, 32),
                    max_flops=2e5)
FAST = TimingPlan(warmup=1, reps=3, runs=2)


def _torch_shape(kind, row) -> tuple:
    shape = tuple(kind.output_shape(row))
    if kind.torch_layout == "nchw" and len(shape) == 4:
        return (shape[0], shape[3], shape[1], shape[2])
    return shape


def test_every_kind_builds_a_module_with_the_kind_output_shape():
    for row in campaign_configs(list(KINDS), 240, seed=5, space=TINY):
        kind = KINDS[row["layer"]]
        module = kind.build_torch(torch, row).eval()
        inputs = [torch.randn(kind.torch_input_shape(row)) for _ in range(kind.n_inputs)]
        with torch.no_grad():
            out = module(*inputs)
        assert tuple(out.shape) == _torch_shape(kind, row), row


@pytest.mark.parametrize(("side", "kernel", "stride"), [(7, 3, 2), (8, 3, 2), (5, 4, 1),
                                                          (9, 2, 3), (6, 1, 2)])
def test_same_padding_matches_keras_output_side(side, kernel, stride):
    lo, hi = same_padding(side, kernel, stride)
    assert hi - lo in (0, 1)  # the odd pixel goes after, as TensorFlow pads
    assert (side + lo + hi - kernel) // stride + 1 == -(-side // stride)


def test_conv_with_asymmetric_same_padding_computes_what_keras_computes():
    keras = pytest.importorskip("keras")
    row = {"layer": "conv", "batchsize": 2, "matsize": 8, "kernelsize": 3, "channels_in": 3,
           "channels_out": 4, "strides": 2, "padding": "same", "use_bias": True,
           "activation": "relu", "optimizer": "none", "precision": 32}
    kind = KINDS["conv"]
    layer = kind.build(keras, row)
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype("float32")
    expected = np.asarray(layer(x))
    kernel, bias = (np.asarray(w) for w in layer.get_weights())
    module = kind.build_torch(torch, row).eval()
    conv = next(m for m in module if isinstance(m, torch.nn.Conv2d))
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(kernel.transpose(3, 2, 0, 1)))
        conv.bias.copy_(torch.from_numpy(bias))
        got = module(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_torch_rows_are_timed_at_each_precision_forward_and_training(precision):
    rows = list(campaign_configs(list(KINDS), 2 * len(KINDS), seed=1, space=TINY))
    for row in rows:
        row = {**row, "precision": precision}
        if row["layer"] == "bn" and row["optimizer"] != "none":
            row["matsize"] = max(2, int(row["matsize"]))  # torch refuses 1 value per channel
        out = bench_row(row, "cpu", FAST, backend="torch")
        assert out["status"] == "ok", (row, out["error"])
        assert out["framework"] == "pytorch" and out["time_ms_median"] > 0
        assert out["time_ms_min"] <= out["time_ms_median"] <= out["time_ms_max"]


def test_a_configuration_torch_cannot_run_becomes_a_failed_row_with_the_reason():
    row = {"layer": "bn", "batchsize": 1, "matsize": 1, "channels_in": 3,
           "optimizer": "sgd", "precision": "fp32"}
    out = bench_row(row, "cpu", FAST, backend="torch")
    assert out["status"] == "failed" and "value per channel" in out["error"]
    assert np.isnan(out["time_ms_median"])


def test_precision_campaigns_time_each_shape_at_each_precision_with_stable_ids():
    precisions = parse_precisions("fp32, bf16,fp16,bf16")
    assert precisions == ("fp32", "bf16", "fp16")
    rows = list(campaign_configs(["conv", "dense"], 12, seed=3, space=TINY,
                                 precisions=precisions, backend="torch"))
    assert [r["precision"] for r in rows[:3]] == list(precisions)
    shape_cols = ("layer", "batchsize", "matsize", "kernelsize", "channels_in")
    assert all(tuple(rows[i].get(c) for c in shape_cols) == tuple(rows[0].get(c)
                                                                 for c in shape_cols)
               for i in range(3))
    assert rows[3]["layer"] == "dense"
    assert len({r["config_id"] for r in rows}) == len(rows)
    # default precision and backend: the ids of earlier campaigns stay what they were
    plain = next(campaign_configs(["conv"], 1, seed=3, space=TINY))
    assert plain["config_id"] == config_id(3, 0, ["conv"], "tiny")
    assert rows[0]["config_id"] != config_id(3, 0, ["conv", "dense"], "tiny")


def test_torch_campaign_writes_the_bench_layout_and_measures_nothing_twice(tmp_path):
    out = tmp_path / "torch.csv"
    kwargs = dict(seed=2, space=TINY, plan=FAST, backend="torch", precisions=("fp32", "bf16"))
    first = run_campaign(out, ["conv", "pool", "add"], 12, max_rows=7, **kwargs)
    assert first.written == 7 and first.stopped_early
    second = run_campaign(out, ["conv", "pool", "add"], 12, **kwargs)
    assert second.skipped_existing == 7 and second.written == 5
    third = run_campaign(out, ["conv", "pool", "add"], 12, **kwargs)
    assert third.written == 0 and third.skipped_existing == 12
    with open(out, newline="") as handle:
        records = list(csv.DictReader(handle))
    assert tuple(records[0]) == CSV_COLUMNS
    assert len({r["config_id"] for r in records}) == 12
    assert {r["framework"] for r in records} == {"pytorch"}
    assert {r["precision"] for r in records} == {"fp32", "bf16"}
    assert all(r["sw_torch"] == torch.__version__ and r["sw_python"] for r in records)


def test_backends_registry_and_clear_errors():
    assert {"tensorflow", "torch"} <= set(BACKENDS)
    assert get_backend("PyTorch").name == "torch" and get_backend("tf").name == "tensorflow"
    with pytest.raises(ValueError, match="unknown backend 'jax'"):
        get_backend("jax")
    with pytest.raises(ValueError, match="times fp32, not fp16"):
        run_campaign("unused.csv", ["conv"], 1, backend="tensorflow", precisions=("fp16",))
    with pytest.raises(ValueError, match="no precision"):
        parse_precisions(" , ")
    with pytest.raises(ValueError):
        parse_precisions("fp8x")
