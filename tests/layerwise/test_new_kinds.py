"""The kinds ln, softmax, concat, pad and dropout: hand-computed costs, Keras decomposition,
real forward passes of the benchmarked layers, sampling, JSON specs and one bench row each."""

from __future__ import annotations

import numpy as np
import pytest

from layerwise.bench import CSV_COLUMNS, TimingPlan, bench_row
from layerwise.kinds import KINDS, kind_for_keras
from layerwise.kinds.concat import split_channels
from layerwise.kinds.space import FeatureSpace
from layerwise.network import decompose, spec_to_keras

NEW = ("ln", "softmax", "concat", "pad", "dropout")
TINY = FeatureSpace(name="tiny", batchsize=(1, 4), matsize=(1, 8), channels=(1, 16),
                    max_flops=2e5)
FAST = TimingPlan(warmup=1, reps=2, runs=1)


def row(layer: str, **values) -> dict:
    return {"layer": layer, "optimizer": "sgd", "precision": 32, **values}


# --------------------------------------------------------------------------- costs by hand


def test_ln_softmax_dropout_costs_by_hand():
    ln = row("ln", batchsize=2, matsize=4, channels_in=3)  # 2 x 4 x 4 x 3 = 96 elements
    kind = KINDS["ln"]
    assert kind.input_shape(ln) == kind.output_shape(ln) == (2, 4, 4, 3)
    assert kind.flops(ln) == 8 * 96 and kind.weights(ln) == 6
    assert kind.bytes_in(ln) == kind.bytes_out(ln) == 96 * 4
    sm = row("softmax", batchsize=2, matsize=1, channels_in=10)  # a flat vector
    assert KINDS["softmax"].output_shape(sm) == (2, 1, 1, 10)
    assert KINDS["softmax"].flops(sm) == 5 * 20 and KINDS["softmax"].weights(sm) == 0
    do = row("dropout", batchsize=2, matsize=3, channels_in=4)
    assert KINDS["dropout"].flops(do) == 2 * 72 and KINDS["dropout"].bytes_out(do) == 72 * 4
    assert KINDS["ln"].check({**ln, "channels_in": 0})


def test_concat_costs_by_hand():
    kind = KINDS["concat"]
    cat = row("concat", batchsize=2, matsize=4, channels_in=7, n_inputs=3)
    assert split_channels(7, 3) == [3, 2, 2]
    assert kind.input_shape(cat) == (2, 4, 4, 3) and kind.output_shape(cat) == (2, 4, 4, 7)
    assert kind.flops(cat) == 0 and kind.weights(cat) == 0
    assert kind.bytes_in(cat) == kind.bytes_out(cat) == 2 * 16 * 7 * 4  # all inputs = output
    assert any("n_inputs 1" in p for p in kind.check({**cat, "n_inputs": 1}))
    assert any("channels_in 2 < n_inputs 3" in p for p in kind.check({**cat, "channels_in": 2}))
    assert kind.check(kind.minimal_row("sgd")) == []


def test_pad_costs_by_hand():
    kind = KINDS["pad"]
    pad = row("pad", batchsize=2, matsize=5, channels_in=3, padding_px=2)
    assert kind.input_shape(pad) == (2, 5, 5, 3) and kind.output_shape(pad) == (2, 9, 9, 3)
    assert kind.flops(pad) == 0 and kind.weights(pad) == 0
    assert kind.bytes_in(pad) == 2 * 25 * 3 * 4 and kind.bytes_out(pad) == 2 * 81 * 3 * 4
    assert kind.check({**pad, "padding_px": 0}) == ["padding_px 0 < 1"]


def test_registration_order_columns_and_minimal_rows():
    assert list(KINDS)[-5:] == list(NEW)
    assert CSV_COLUMNS.index("padding_px") > CSV_COLUMNS.index("pool_type")
    assert CSV_COLUMNS.index("n_inputs") > CSV_COLUMNS.index("pool_type")
    assert kind_for_keras("Softmax") is KINDS["softmax"]
    assert kind_for_keras("Activation") is KINDS["act"]
    assert kind_for_keras("SpatialDropout2D") is KINDS["dropout"]
    for name in NEW:
        minimal = KINDS[name].minimal_row("none")
        assert KINDS[name].check(minimal) == [], name
        assert set(KINDS[name].columns) <= set(minimal)


@pytest.mark.parametrize("space", [TINY, "cpu", "paper"])
def test_sample_draws_valid_rows(space):
    rng = np.random.default_rng(3)
    for name in NEW:
        kind = KINDS[name]
        rows = [kind.sample(rng, space) for _ in range(25)]
        for r in rows:
            assert r["layer"] == name and kind.check(r) == [], r
            assert set(kind.columns) <= set(r)
            assert min(kind.output_shape(r)) >= 1
    pads = [KINDS["pad"].sample(rng, space)["padding_px"] for _ in range(40)]
    assert set(pads) <= {1, 2, 3} and len(set(pads)) > 1
    inputs = [KINDS["concat"].sample(rng, space)["n_inputs"] for _ in range(40)]
    assert set(inputs) <= {2, 3, 4} and len(set(inputs)) > 1


# --------------------------------------------------------------------------- JSON specs

SPEC = {"name": "spec-new", "input_shape": [6, 6, 4], "layers": [
    {"type": "pad", "pad": 1}, {"type": "conv", "filters": 5, "kernel": 3, "padding": "valid"},
    {"type": "ln"}, {"type": "dropout", "rate": 0.2}, {"type": "flatten"},
    {"type": "dense", "units": 3}, {"type": "softmax"},
]}


def test_json_spec_types_decompose():
    train = decompose(SPEC, batch_size=2, optimizer="adam")
    assert [r["layer"] for r in train.rows] == ["pad", "conv", "ln", "dropout", "view", "dense",
                                               "softmax"]
    pad, conv, ln = train.rows[:3]
    assert pad["output_shape"] == "8x8x4" and pad["padding_px"] == 1
    assert conv["matsize"] == 8 and ln["params"] == 10 and ln["flops"] == 8 * 2 * 36 * 5
    assert train.count("unknown") == 0 and train.warnings == []
    infer = decompose(SPEC, batch_size=2, optimizer="none")
    assert [r["layer"] for r in infer.rows][3] == "view"


def test_json_spec_builds_the_same_keras_model():
    pytest.importorskip("tensorflow")
    model = spec_to_keras(SPEC)
    assert [type(layer).__name__ for layer in model.layers[1:]] == [
        "ZeroPadding2D", "Conv2D", "LayerNormalization", "Dropout", "Flatten", "Dense",
        "Softmax"]
    from_spec = decompose(SPEC, batch_size=2, optimizer="sgd")
    from_keras = decompose(model, batch_size=2, optimizer="sgd")
    assert [r["layer"] for r in from_keras.rows] == [r["layer"] for r in from_spec.rows]
    assert from_spec.params == from_keras.params == model.count_params()
    assert from_spec.flops == from_keras.flops


# --------------------------------------------------------------------------- Keras models


def _model():
    import keras

    inp = keras.Input((16, 16, 8))
    x = keras.layers.ZeroPadding2D(1, name="pad")(inp)
    x = keras.layers.Conv2D(8, 3, name="conv")(x)
    a = keras.layers.Conv2D(4, 1, name="branch_a")(x)
    b = keras.layers.Conv2D(6, 3, padding="same", name="branch_b")(x)
    x = keras.layers.Concatenate(name="cat")([a, b])
    x = keras.layers.LayerNormalization(name="ln")(x)
    x = keras.layers.Dropout(0.3, name="drop")(x)
    x = keras.layers.Flatten(name="flat")(x)
    x = keras.layers.Dense(5, name="dense")(x)
    out = keras.layers.Softmax(name="softmax")(x)
    return keras.Model(inp, out)


@pytest.mark.slow
def test_keras_model_decomposes_into_the_new_kinds():
    pytest.importorskip("tensorflow")
    from layerwise.kinds.mapping import shape_text

    model = _model()
    net = decompose(model, batch_size=4, optimizer="sgd")
    kinds = {r["name"]: r["layer"] for r in net.rows}
    assert kinds == {"pad": "pad", "conv": "conv", "branch_a": "conv", "branch_b": "conv",
                     "cat": "concat", "ln": "ln", "drop": "dropout", "flat": "view",
                     "dense": "dense", "softmax": "softmax"}
    assert net.count("unknown") == 0 and net.warnings == []
    by_name = {r["name"]: r for r in net.rows}
    for layer in model.layers[1:]:
        r, keras_shape = by_name[layer.name], tuple(layer.output.shape[1:])
        assert r["output_shape"] == shape_text(keras_shape), layer.name
        if r["layer"] != "view":
            claimed = KINDS[r["layer"]].output_shape(r)  # plane kinds: a vector is 1x1xC
            assert claimed[0] == 4, layer.name
            assert claimed[1:] in (keras_shape, (1, 1, *keras_shape)), layer.name
            if len(keras_shape) == 3:  # a vector's row notes the 1x1xC approximation
                assert r["note"] == "", (layer.name, r["note"])
    assert (by_name["pad"]["matsize"], by_name["pad"]["padding_px"]) == (16, 1)
    assert (by_name["cat"]["channels_in"], by_name["cat"]["n_inputs"]) == (10, 2)
    assert by_name["cat"]["input_shape"] == "16x16x4;16x16x6"
    assert by_name["softmax"]["matsize"] == 1 and by_name["softmax"]["channels_in"] == 5
    assert net.params == model.count_params()
    assert by_name["ln"]["flops"] == 8 * 4 * 16 * 16 * 10
    assert by_name["drop"]["flops"] == 2 * 4 * 16 * 16 * 10
    inference = decompose(model, batch_size=4, optimizer="none")
    assert {r["name"]: r["layer"] for r in inference.rows}["drop"] == "view"


@pytest.mark.slow
def test_layers_outside_the_kinds_stay_unknown_or_views():
    pytest.importorskip("tensorflow")
    import keras

    inp = keras.Input((8, 8, 4))
    x = keras.layers.ZeroPadding2D(((0, 1), (0, 1)), name="asym")(inp)  # MobileNet style
    y = keras.layers.LayerNormalization(axis=1, name="ln_h")(inp)
    z = keras.layers.Softmax(axis=1, name="sm_h")(inp)
    w = keras.layers.Concatenate(axis=1, name="cat_h")([y, z])  # 16 x 8: not square
    v = keras.layers.Activation("softmax", name="act_sm")(inp)
    u = keras.layers.Dropout(0.0, name="no_drop")(v)
    s = keras.layers.Concatenate(name="cat_odd")([inp, v, inp])  # 4 + 4 + 4 = 12 channels
    t = keras.layers.Concatenate(name="cat_uneven")([inp, keras.layers.Conv2D(
        9, 1, name="c9")(inp)])
    model = keras.Model(inp, [x, w, u, s, t])
    rows = {r["name"]: r for r in decompose(model, batch_size=2, optimizer="sgd").rows}
    for name in ("asym", "ln_h", "sm_h", "cat_h"):
        assert rows[name]["layer"] == "unknown", name
    assert rows["act_sm"]["layer"] == "act" and rows["no_drop"]["layer"] == "view"
    assert rows["cat_odd"]["layer"] == "concat" and rows["cat_odd"]["n_inputs"] == 3
    assert (rows["cat_uneven"]["channels_in"], rows["cat_uneven"]["n_inputs"]) == (13, 2)


# --------------------------------------------------------------------------- TensorFlow


@pytest.mark.slow
def test_build_runs_a_forward_pass_with_the_claimed_shapes():
    tf = pytest.importorskip("tensorflow")
    import keras

    rng = np.random.default_rng(7)
    for name in NEW:
        kind = KINDS[name]
        for r in [kind.sample(rng, TINY) for _ in range(3)] + [kind.minimal_row("sgd")]:
            layer = kind.build(keras, r)
            with tf.device("/CPU:0"):
                x = tf.random.normal(kind.input_shape(r))
                y = layer(x, training=False)
            assert tuple(y.shape) == kind.output_shape(r), (name, r)
    # the benchmarked dropout always drops; the benchmarked concat keeps its input first
    drop = KINDS["dropout"].build(keras, row("dropout", batchsize=4, matsize=8, channels_in=8))
    y = drop(tf.ones((4, 8, 8, 8)), training=False).numpy()
    assert 0.2 < float((y == 0).mean()) < 0.8
    cat_row = row("concat", batchsize=1, matsize=2, channels_in=5, n_inputs=2)
    x = tf.ones(KINDS["concat"].input_shape(cat_row))
    y = KINDS["concat"].build(keras, cat_row)(x).numpy()
    assert y.shape == (1, 2, 2, 5) and (y[..., :3] == 1).all()


@pytest.mark.slow
def test_bench_times_one_row_of_each_new_kind():
    pytest.importorskip("tensorflow")
    rows = [row("ln", batchsize=2, matsize=4, channels_in=8),
            row("softmax", batchsize=2, matsize=1, channels_in=10, optimizer="none"),
            row("concat", batchsize=2, matsize=4, channels_in=7, n_inputs=3),
            row("pad", batchsize=2, matsize=5, channels_in=3, padding_px=1, optimizer="none"),
            row("dropout", batchsize=2, matsize=4, channels_in=6, optimizer="adam")]
    for r in rows:
        record = bench_row(r, "cpu", FAST)
        assert record["status"] == "ok", (r["layer"], record["error"])
        assert record["time_ms_median"] > 0 and record["runs"] == 1
        assert record["flops"] == KINDS[r["layer"]].flops(r)
