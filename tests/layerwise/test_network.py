"""Network decomposition: layer counts, FLOPs and parameters of known models, spec errors."""

from __future__ import annotations

import json

import pytest

from layerwise.network import NetworkSpecError, UnknownNetworkError, decompose, spec_to_keras

# Hand-computed: conv 3->4 (3x3, same) on 8x8, 2x2 max pool, flatten, dense 64->10.
TINY = {
    "name": "tiny", "input_shape": [8, 8, 3],
    "layers": [
        {"type": "conv", "filters": 4, "kernel": 3, "activation": "relu"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "flatten"},
        {"type": "dense", "units": 10},
    ],
}
TINY_MACS = 8 * 8 * 4 * (3 * 3 * 3) + 64 * 10  # per image
TINY_PARAMS = (3 * 3 * 3 * 4 + 4) + (64 * 10 + 10)


def test_tiny_spec_by_hand():
    net = decompose(TINY, batch_size=2, optimizer="sgd")
    assert [r["layer"] for r in net.rows] == ["conv", "pool", "view", "dense"]
    assert net.macs == 2 * TINY_MACS
    conv, pool, _, dense = net.rows
    assert conv["flops"] == 2 * 2 * 8 * 8 * 4 * 27 + 2 * (2 * 8 * 8 * 4)  # + bias + relu
    assert (pool["matsize"], pool["kernelsize"], pool["strides"]) == (8, 2, 2)
    assert (dense["dim_input"], dense["dim_output"]) == (64, 10)
    assert net.params == TINY_PARAMS
    assert all(r["batchsize"] == 2 and r["optimizer"] == "sgd" for r in net.rows)
    assert conv["grad_input"] is False and dense["grad_input"] is True
    assert net.warnings == []
    assert decompose(TINY, image_size=16).rows[3]["dim_input"] == 8 * 8 * 4


@pytest.mark.slow
def test_spec_and_its_keras_model_decompose_alike():
    spec = {**TINY, "layers": [*TINY["layers"][:2],
                               {"type": "dwconv", "kernel": 3, "strides": 2},
                               {"type": "bn"}, {"type": "act", "activation": "tanh"},
                               {"type": "add"}, {"type": "global_pool"},
                               {"type": "dropout", "rate": 0.2},
                               {"type": "dense", "units": 5, "activation": "softmax"}]}
    model = spec_to_keras(spec)
    from_spec = decompose(spec, batch_size=3, optimizer="adam")
    from_keras = decompose(model, batch_size=3, optimizer="adam")
    assert [r["layer"] for r in from_spec.rows] == [r["layer"] for r in from_keras.rows]
    assert from_spec.macs == from_keras.macs
    assert from_spec.params == from_keras.params == model.count_params()
    # dropout costs something only while training
    assert from_keras.count("unknown") == 0 and from_keras.count("dropout") == 1
    assert decompose(model, optimizer="none").count("dropout") == 0


@pytest.mark.slow
def test_vgg16_counts_and_flops():
    net = decompose("vgg16", batch_size=1, image_size=224)
    assert net.count("conv") == 13 and net.count("dense") == 3
    assert net.count("pool") == 5 and net.count("unknown") == 0
    assert net.macs == pytest.approx(15.47e9, rel=0.005)  # the usual "15.5 GFLOPs" (MACs)
    assert net.flops == pytest.approx(2 * net.macs, rel=0.01)  # FLOPs = 2 x multiply-adds
    assert net.params == 138_357_544
    assert decompose("VGG-16", batch_size=4, image_size=224).macs == pytest.approx(4 * net.macs)


@pytest.mark.slow
def test_mobilenetv2_depthwise_and_unknown_layers_are_kept():
    import keras

    model = keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3))
    net = decompose(model, batch_size=2, optimizer="momentum")
    assert net.count("dwconv") == 17 and net.count("conv") == 35
    assert net.count("bn") == 52 and net.count("add") == 10 and net.count("act") == 35
    unknown = [r for r in net.rows if r["layer"] == "unknown"]
    assert len(unknown) == 4 and {r["keras_class"] for r in unknown} == {"ZeroPadding2D"}
    assert all(r["flops"] > 0 and r["bytes_out"] > 0 for r in unknown)
    assert any("ZeroPadding2D" in w for w in net.warnings)
    assert net.params == model.count_params()
    relu6 = [r for r in net.rows if r["keras_class"] == "ReLU"]
    assert relu6[0]["activation"] == "relu" and "relu6" in relu6[0]["note"]
    # 224x224 MobileNetV2 is ~300 M multiply-adds; 96x96 scales with the area
    assert 0.9 * 300e6 * (96 / 224) ** 2 < net.macs / 2 < 1.1 * 300e6 * (96 / 224) ** 2


@pytest.mark.slow
def test_separable_grouped_and_concatenate_layers():
    import keras

    inp = keras.Input((16, 16, 8))
    a = keras.layers.SeparableConv2D(12, 3, padding="same", name="sep")(inp)
    b = keras.layers.Conv2D(4, (1, 5), padding="same", name="wide")(inp)
    c = keras.layers.Conv2D(8, 3, groups=2, padding="same", name="grouped")(inp)
    x = keras.layers.Concatenate(name="cat")([a, b, c])
    model = keras.Model(inp, x)
    net = decompose(model, batch_size=1)
    by_name = {r["name"]: r for r in net.rows}
    assert by_name["sep/depthwise"]["layer"] == "dwconv"
    assert by_name["sep/pointwise"]["layer"] == "conv"
    assert by_name["sep/pointwise"]["channels_in"] == 8
    grouped = by_name["grouped"]
    assert grouped["layer"] == "unknown" and "groups=2" in grouped["note"]
    assert grouped["macs"] > 0
    # a 1x5 kernel (stride 1, same) is priced as the 1x1 conv of the same implicit GEMM
    wide = by_name["wide"]
    assert wide["layer"] == "conv" and wide["kernelsize"] == 1 and wide["channels_in"] == 5 * 8
    assert "1x5 kernel" in wide["note"]
    assert wide["macs"] == 16 * 16 * 4 * 5 * 8
    cat = by_name["cat"]
    assert cat["layer"] == "concat" and cat["channels_in"] == 24 and cat["n_inputs"] == 3
    assert cat["bytes_in"] > 0
    assert net.params == model.count_params()


def test_bad_specs_say_where(tmp_path):
    path = tmp_path / "net.json"
    path.write_text('{"input_shape": [8, 8, 3],\n "layers": [\n  {"type": "conv",}]}')
    with pytest.raises(NetworkSpecError, match=r"net.json:3:\d+: invalid JSON"):
        decompose(str(path))
    path.write_text(json.dumps({"input_shape": [8, 8, 3], "layers": [{"type": "lstm"}]}))
    with pytest.raises(NetworkSpecError, match=r"layers\[0\]: type 'lstm' unknown"):
        decompose(str(path))
    with pytest.raises(NetworkSpecError, match=r"layers\[0\]: conv needs 'filters'"):
        decompose({"input_shape": [8, 8, 3], "layers": [{"type": "conv"}]})
    with pytest.raises(NetworkSpecError, match="dense needs a flat input"):
        decompose({"input_shape": [8, 8, 3], "layers": [{"type": "dense", "units": 3}]})
    with pytest.raises(NetworkSpecError, match="gives no output"):
        decompose({"input_shape": [2, 2, 3],
                   "layers": [{"type": "conv", "filters": 1, "kernel": 3, "padding": "valid"}]})
    with pytest.raises(NetworkSpecError, match="unknown optimizer"):
        decompose(TINY, optimizer="lion")
    with pytest.raises(NetworkSpecError, match="no such model file"):
        decompose(str(tmp_path / "missing.keras"))


@pytest.mark.slow
def test_unknown_application_suggests_names():
    with pytest.raises(NetworkSpecError, match="did you mean.*ResNet50") as caught:
        decompose("resnet5O")
    assert isinstance(caught.value, UnknownNetworkError)
    assert caught.value.info().kind == "unknown_network"


@pytest.mark.slow
def test_saved_keras_file(tmp_path):
    model = spec_to_keras(TINY)
    path = tmp_path / "tiny.keras"
    model.save(path)
    net = decompose(str(path), batch_size=2)
    assert net.macs == 2 * TINY_MACS and net.params == TINY_PARAMS
