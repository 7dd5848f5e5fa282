"""The layer registry: feature spaces, shapes, FLOPs and parameter counts (no TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest

from layerwise.layers import (
    KINDS,
    SPACES,
    FeatureSpace,
    InvalidLayerConfig,
    all_columns,
    get_layer,
    layer_of,
    out_side,
)


def conv_row(**kw) -> dict:
    row = dict(layer="conv", batchsize=2, matsize=8, kernelsize=3, channels_in=4,
               channels_out=5, strides=1, padding="same", use_bias=False, activation="none",
               optimizer="none", precision=32)
    row.update(kw)
    return row


@pytest.mark.parametrize("space", sorted(SPACES))
@pytest.mark.parametrize("name", sorted(KINDS))
def test_samples_are_complete_valid_and_bounded(name, space):
    spec, sp = KINDS[name], SPACES[space]
    rng = np.random.default_rng(7)
    for _ in range(60):
        row = spec.sample(rng, space)
        assert row["layer"] == name
        assert set(spec.columns) <= set(row)
        assert row["optimizer"] in ("none", "sgd", "adadelta", "adagrad", "momentum", "adam",
                                    "rmsprop")
        assert spec.check(row) == []
        assert sp.batchsize[0] <= row["batchsize"] <= sp.batchsize[1]
        assert spec.flops(row) <= sp.max_flops
        assert min(spec.output_shape(row)) >= 1
        assert spec.weights(row) >= 0


def test_sampling_is_deterministic_and_mixes_forward_and_training():
    spec = KINDS["conv"]
    a = [spec.sample(np.random.default_rng([3, i])) for i in range(200)]
    b = [spec.sample(np.random.default_rng([3, i])) for i in range(200)]
    assert a == b
    forward = sum(r["optimizer"] == "none" for r in a)
    assert 60 < forward < 140  # about half forward-only
    assert len({r["optimizer"] for r in a}) == 7


@pytest.mark.parametrize(
    ("n", "k", "s", "padding", "expected"),
    [(7, 3, 2, "valid", 3), (7, 3, 2, "same", 4), (8, 8, 1, "valid", 1), (5, 7, 1, "valid", 0),
     (5, 7, 3, "same", 2), (224, 7, 2, "same", 112)],
)
def test_output_side_follows_keras(n, k, s, padding, expected):
    assert out_side(n, k, s, padding) == expected


def test_conv_costs_by_hand():
    spec = get_layer("conv")
    row = conv_row()
    assert spec.output_shape(row) == (2, 8, 8, 5)
    macs = 2 * 8 * 8 * 5 * (3 * 3 * 4)
    assert spec.macs(row) == macs
    assert spec.flops(row) == 2 * macs  # no bias, no activation
    out = 2 * 8 * 8 * 5
    assert spec.flops(conv_row(use_bias=True, activation="relu")) == 2 * macs + 2 * out
    assert spec.weights(row) == 3 * 3 * 4 * 5
    assert spec.weights(conv_row(use_bias=True)) == 3 * 3 * 4 * 5 + 5
    assert spec.bytes_in(row) == 2 * 8 * 8 * 4 * 4
    assert spec.bytes_out(row) == out * 4
    strided = conv_row(strides=2, padding="valid")
    assert spec.output_shape(strided) == (2, 3, 3, 5)


def test_other_layer_costs_by_hand():
    dense = dict(layer="dense", batchsize=4, dim_input=10, dim_output=3, activation="none",
                 optimizer="none", precision=32)
    assert get_layer("dense").flops(dense) == 2 * 4 * 10 * 3 + 4 * 3  # bias counted once
    assert get_layer("dense").weights(dense) == 33
    dw = dict(layer="dwconv", batchsize=1, matsize=6, kernelsize=3, channels_in=8, strides=1,
              padding="same", use_bias=True, activation="none")
    assert get_layer("dwconv").output_shape(dw) == (1, 6, 6, 8)
    assert get_layer("dwconv").macs(dw) == 6 * 6 * 8 * 9
    assert get_layer("dwconv").weights(dw) == 9 * 8 + 8
    pool = dict(layer="pool", batchsize=1, matsize=6, kernelsize=2, channels_in=3, strides=2,
                padding="valid", pool_type="max")
    assert get_layer("pool").output_shape(pool) == (1, 3, 3, 3)
    add = dict(layer="add", batchsize=2, matsize=4, channels_in=3)
    assert get_layer("add").bytes_in(add) == 2 * get_layer("add").bytes_out(add)
    assert get_layer("bn").weights(dict(batchsize=1, matsize=2, channels_in=7)) == 28


def test_invalid_configuration_is_explained_not_raised_by_costs():
    spec = get_layer("conv")
    bad = conv_row(matsize=3, kernelsize=5, padding="valid")
    reasons = spec.check(bad)
    assert reasons and "kernel 5 larger than input side 3" in reasons[0]
    assert spec.flops(bad) == 0.0
    with pytest.raises(InvalidLayerConfig, match="valid padding"):
        spec.validate(bad)
    assert spec.check(conv_row(activation="softplus"))
    assert spec.check(conv_row(kernelsize=5, matsize=3, padding="same")) == []


def test_tight_space_is_an_error_and_unknown_names_are_listed():
    impossible = FeatureSpace(name="impossible", max_flops=0.0)
    with pytest.raises(RuntimeError, match="too tight"):
        KINDS["conv"].sample(np.random.default_rng(0), impossible)
    with pytest.raises(ValueError, match="known: conv"):
        get_layer("lstm")


def test_layer_of_published_rows_and_columns():
    assert layer_of({"kernelsize": 3, "matsize": 9}) == "conv"
    assert layer_of({"dim_input": 3}) == "dense"
    assert layer_of({"layer": "pool", "kernelsize": 2}) == "pool"
    assert layer_of({"layer": float("nan"), "kernelsize": 2}) == "conv"
    columns = all_columns()
    for spec in KINDS.values():
        assert set(spec.columns) <= set(columns)
    assert len(columns) == len(set(columns))
