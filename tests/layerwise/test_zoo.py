"""The network zoo: shipped specs load without TensorFlow and decompose exactly like Keras."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from layerwise import zoo
from layerwise.kinds.mapping import NetworkSpecError, UnknownNetworkError
from layerwise.network import decompose

ROOT = Path(__file__).resolve().parents[2]

KERAS_NETWORKS = {
    "resnet50", "resnet101", "resnet152", "resnet50v2", "resnet101v2", "resnet152v2", "vgg16",
    "vgg19", "inceptionv3", "inceptionresnetv2", "xception", "mobilenet", "mobilenetv2",
    "densenet121", "densenet169", "densenet201", "efficientnetb0", "nasnetmobile",
}
TF_CNN_NETWORKS = {"alexnet", "googlenet", "inception4", "vgg11", "overfeat"}


def test_every_catalogued_network_is_shipped():
    assert set(zoo.CATALOG) == KERAS_NETWORKS | TF_CNN_NETWORKS
    # caffenet128 ships from its Caffe prototxt (layerwise/zoo/caffe.py), not a Keras build
    assert set(zoo.known_networks()) == set(zoo.CATALOG) | {"caffenet128"}
    sizes = {name: zoo.CATALOG[name].image_size for name in zoo.CATALOG}
    assert sizes["inceptionv3"] == sizes["inception4"] == sizes["xception"] == 299
    assert (sizes["alexnet"], sizes["overfeat"], sizes["resnet50"]) == (227, 231, 224)
    total = sum(p.stat().st_size for p in zoo.DATA_DIR.iterdir())
    assert total < 3 * 1024 * 1024


@pytest.mark.parametrize(("name", "canonical"), [
    ("inception3", "inceptionv3"), ("InceptionV3", "inceptionv3"),
    ("inception_v3", "inceptionv3"), ("resnet50", "resnet50"), ("ResNet-50", "resnet50"),
    ("resnet50_v1", "resnet50"), ("Inception-v4", "inception4"), ("inception4", "inception4"),
    ("VGG11", "vgg11"), ("nasnet", "nasnetmobile"), ("mobilenet_v2", "mobilenetv2"),
])
def test_names_and_aliases_resolve(name, canonical):
    assert zoo.resolve_name(name) == canonical
    assert zoo.load(name).name == canonical
    assert zoo.aliases()["inception3"] == "inceptionv3"


def test_unknown_names_give_suggestions():
    with pytest.raises(ValueError, match=r"unknown zoo network 'resnet5O'; did you mean resnet50"
                       ) as caught:
        zoo.resolve_name("resnet5O")
    assert isinstance(caught.value, UnknownNetworkError)
    assert caught.value.info().as_dict()["kind"] == "unknown_network"
    with pytest.raises(NetworkSpecError, match="did you mean inception3"):
        zoo.resolve_name("inceptoin3")
    with pytest.raises(NetworkSpecError, match="known: alexnet, caffenet128, densenet121"):
        zoo.resolve_name("lenet")
    assert zoo.lookup("lenet") is None and zoo.lookup("") is None


def test_every_spec_loads_and_decomposes_without_tensorflow():
    code = """
import json, sys
from layerwise import zoo
from layerwise.network import decompose
out = {}
for name in zoo.known_networks():
    spec = zoo.load(name)
    fwd = decompose(name)
    step = decompose(zoo.CATALOG[name].builder if name in zoo.CATALOG else name,
                     batch_size=8, optimizer="adam", image_size=spec.image_size)
    out[name] = {"layers": len(spec.layers), "totals": spec.totals, "flops": fwd.flops,
                 "macs": fwd.macs, "rows": len(fwd.rows), "name": fwd.name,
                 "input": list(fwd.input_shape), "step_rows": len(step.rows),
                 "step_flops": step.flops, "params": sum(l.params for l in spec.layers)}
out["_modules"] = sorted(m for m in ("tensorflow", "keras") if m in sys.modules)
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out.pop("_modules") == []
    assert set(out) == set(zoo.known_networks())
    for name, got in out.items():
        totals = got["totals"]
        assert got["layers"] == sum(totals["layers"].values()), name
        assert got["params"] == totals["params"] > 0, name
        # totals were costed when the spec was built; the layer kinds may have been refined since
        assert got["flops"] == pytest.approx(totals["flops"], rel=0.05), name
        assert got["macs"] == pytest.approx(totals["macs"], rel=0.05), name
        assert got["rows"] == got["step_rows"] > 0, name
        assert got["step_flops"] >= 8 * got["flops"], name  # dropout costs while training
        side = zoo.CATALOG[name].image_size if name in zoo.CATALOG else zoo.load(name).image_size
        assert got["input"] == [side, side, 3], name


def _flat_layers(model):
    import keras

    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _flat_layers(layer)
        else:
            yield layer


@pytest.mark.slow
@pytest.mark.parametrize(("name", "ctor"), [
    ("resnet50", "ResNet50"), ("vgg16", "VGG16"), ("mobilenet", "MobileNet"),
    ("inception_v3", "InceptionV3"),
])
def test_zoo_rows_equal_keras_rows(name, ctor):
    import keras

    spec = zoo.load(name)
    side = spec.image_size
    keras.backend.clear_session()  # automatic layer names as in the build ("…_pooling2d", no "_1")
    model = getattr(keras.applications, ctor)(weights=None, input_shape=(side, side, 3))
    for optimizer, batch in (("none", 1), ("sgd", 16)):
        ours = decompose(name, batch_size=batch, optimizer=optimizer)
        theirs = decompose(model, batch_size=batch, optimizer=optimizer)
        assert ours.rows == theirs.rows
        assert (ours.name, ours.input_shape, ours.warnings) == \
            (theirs.name, theirs.input_shape, theirs.warnings)
    assert spec.totals["params"] == model.count_params()
    assert spec.totals["trainable_params"] == sum(int(np.prod(w.shape))
                                                  for w in model.trainable_weights)
    layers = list(_flat_layers(model))
    assert [layer.cls for layer in spec.layers] == [type(layer).__name__ for layer in layers]
    named = [layer.name for layer in layers[1:]]  # the input's automatic name varies
    assert spec.layers[0].name == "input_layer" and [x.name for x in spec.layers[1:]] == named
    assert spec.totals["layers"] == dict(Counter(type(layer).__name__ for layer in layers))


def _conv(cin: int, cout: int, kh: int, kw: int | None = None) -> int:
    """Trainable weights of a tf_cnn_benchmarks conv: kernel + bias (or batch-norm beta)."""
    return kh * (kh if kw is None else kw) * cin * cout + cout


def _dense(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


# Trainable parameters from tf_cnn_benchmarks' model definitions (1001 ImageNet classes), by
# hand, given the side of the last feature map (the definitions' reshape: 6, 6, 7 at full size).
def _alexnet(side: int = 6) -> int:
    return (_conv(3, 64, 11) + _conv(64, 192, 5) + _conv(192, 384, 3) + _conv(384, 384, 3)
            + _conv(384, 256, 3) + _dense(256 * side * side, 4096) + _dense(4096, 4096)
            + _dense(4096, 1001))


def _overfeat(side: int = 6) -> int:
    return (_conv(3, 96, 11) + _conv(96, 256, 5) + _conv(256, 512, 3) + _conv(512, 1024, 3)
            + _conv(1024, 1024, 3) + _dense(1024 * side * side, 3072) + _dense(3072, 4096)
            + _dense(4096, 1001))


def _vgg11(side: int = 7) -> int:
    return (_conv(3, 64, 3) + _conv(64, 128, 3) + _conv(128, 256, 3) + _conv(256, 256, 3)
            + _conv(256, 512, 3) + 3 * _conv(512, 512, 3) + _dense(512 * side * side, 4096)
            + _dense(4096, 4096) + _dense(4096, 1001))


def _googlenet() -> int:
    total, cin = _conv(3, 64, 7) + _conv(64, 64, 1) + _conv(64, 192, 3), 192
    for k, r3, k3, r5, k5, q in [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64),
                                 (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64),
                                 (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
                                 (256, 160, 320, 32, 128, 128), (256, 160, 320, 32, 128, 128),
                                 (384, 192, 384, 48, 128, 128)]:
        total += (_conv(cin, k, 1) + _conv(cin, r3, 1) + _conv(r3, k3, 3) + _conv(cin, r5, 1)
                  + _conv(r5, k5, 5) + _conv(cin, q, 1))
        cin = k + k3 + k5 + q
    return total + _dense(cin, 1001)


# Inception v4 (stem, 4xA, reduction A, 7xB, reduction B, 3xC, fc 1536->1001), summed by hand
# from inception_model.py the same way; published: 42.7 M.
INCEPTION4 = 42_649_769

# name -> (trainable parameters, last feature map before the flatten / spatial mean, image side)
TF_CNN = {"alexnet": (_alexnet(), (6, 6, 256), 227), "overfeat": (_overfeat(), (6, 6, 1024), 231),
          "vgg11": (_vgg11(), (7, 7, 512), 224), "googlenet": (_googlenet(), (1, 1, 1024), 224),
          "inception4": (INCEPTION4, (8, 8, 1536), 299)}


def test_tf_cnn_specs_have_the_published_sizes():
    assert _googlenet() == 6_999_577 and _alexnet() == 61_842_345  # 7.0 M, 61.8 M
    assert _vgg11() - _dense(4096, 1001) + _dense(4096, 1000) == 132_863_336  # VGG-11, 1000 cl.
    assert pytest.approx(42.7e6, rel=0.002) == INCEPTION4
    for name, (params, last_map, side) in TF_CNN.items():
        spec = zoo.load(name)
        assert spec.totals["trainable_params"] == params, name
        maps = [layer.out_shape for layer in spec.layers if len(layer.out_shape) == 3]
        assert maps[-1] == last_map, name
        assert spec.image_size == side and spec.input_shape == (side, side, 3), name
        assert spec.layers[-1].cls == "Dense" and spec.layers[-1].out_shape == (1001,), name


@pytest.mark.slow
def test_tf_cnn_builders_match_the_definitions():
    from layerwise.zoo import tf_cnn

    # small images keep the dense layers small: last maps 1x1 (alexnet, overfeat), 2x2 (vgg11)
    expected = {"alexnet": (67, _alexnet(1)), "overfeat": (71, _overfeat(1)),
                "vgg11": (64, _vgg11(2)), "googlenet": (224, _googlenet()),
                "inception4": (299, INCEPTION4)}
    for name, (side, params) in expected.items():
        model = tf_cnn.build(name, side)
        assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == params, name
        assert model.output_shape == (None, 1001)
        if side == tf_cnn.IMAGE_SIZES[name]:
            assert zoo.load(name).totals["params"] == model.count_params(), name


@pytest.mark.slow
def test_other_sizes_fall_back_to_keras_and_the_build_command_reproduces_a_spec(tmp_path):
    net = decompose("googlenet", batch_size=2, image_size=256)  # not the shipped size
    assert net.input_shape == (256, 256, 3) and net.name == "googlenet"
    assert net.flops > decompose("googlenet", batch_size=2).flops
    assert decompose("inception3", image_size=224).input_shape == (224, 224, 3)

    from layerwise.zoo import build

    assert build.main(["--out", str(tmp_path), "alexnet", "inception3"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alexnet.json", "inceptionv3.json.gz"]
    for path in tmp_path.iterdir():
        fresh, shipped = zoo.read_spec(path), zoo.load(path.name.split(".")[0])
        assert fresh.layers == shipped.layers and fresh.totals == shipped.totals
    assert build.main(["--out", str(tmp_path), "lenet"]) == 1
