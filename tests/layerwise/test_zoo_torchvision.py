"""Shipped PyTorch (torchvision) specs: complete, PyTorch's parameter counts, read without torch."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from layerwise import zoo
from layerwise.kinds.mapping import NetworkSpecError
from layerwise.network import decompose
from layerwise.zoo import torch_zoo

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT.parent / "shared" / "data" / "torchvision_bench" / "steps.csv.gz"
RETINANET = "torchvision.models.detection:retinanet_resnet50_fpn"
# torchvision's documented parameter counts (weights' ``num_params``) where the builder with
# weights=None and its default (pretrained, frozen-BN) backbone builds the same model
DOCUMENTED = {"resnet18": 11_689_512, "resnet50": 25_557_032, "vgg16": 138_357_544,
              "densenet121": 7_978_856, "mobilenet_v2": 3_504_872,
              "efficientnet_b0": 5_288_548, "convnext_tiny": 28_589_128,
              "vit_b_16": 86_567_656, "retinanet_resnet50_fpn": 34_014_999,
              "ssd300_vgg16": 35_641_826, "fasterrcnn_resnet50_fpn": 41_755_286,
              "maskrcnn_resnet50_fpn": 44_401_393}


def test_every_catalogued_network_is_shipped_and_small():
    assert {e.name for e in torch_zoo.CATALOG.values()} == set(torch_zoo.known_networks())
    assert len(torch_zoo.known_networks()) == 48
    total = sum(p.stat().st_size for p in torch_zoo.TORCH_DIR.iterdir())
    assert total < 512 * 1024


def test_the_torchvision_bench_networks_are_shipped():
    if BENCH.exists():
        import pandas as pd

        bench = set(pd.read_csv(BENCH)["network"])
        assert bench == set(torch_zoo.BENCH_NETWORKS)
    assert set(torch_zoo.BENCH_NETWORKS) <= set(torch_zoo.known_networks())


@pytest.mark.parametrize("name", sorted(e.name for e in torch_zoo.CATALOG.values()))
def test_spec_parameters_equal_pytorchs(name):
    spec = torch_zoo.load(name)
    assert sum(layer.params for layer in spec.layers) == spec.totals["params"]
    if name in DOCUMENTED:
        assert spec.totals["params"] == DOCUMENTED[name]
    net = decompose(name, batch_size=2, optimizer="sgd", framework="pytorch")
    assert net.params == spec.totals["params"]
    assert net.input_shape == (spec.image_size, spec.image_size, 3)
    assert all(math.isfinite(row["flops"]) and row["flops"] >= 0 for row in net.rows)


def test_reference_reads_the_shipped_spec_without_importing_torch():
    code = (
        "import json, sys\n"
        "from layerwise.network import decompose\n"
        f"net = decompose({RETINANET!r}, batch_size=4, optimizer='sgd')\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'params': net.params,\n"
        "  'flagged': net.flagged_ops, 'warnings': net.warnings, 'name': net.name,\n"
        "  'rows': len(net.rows)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=300)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["torch"] is False
    assert found["name"] == "retinanet_resnet50_fpn" and found["params"] == 34_014_999
    assert found["flagged"]["binary_cross_entropy_with_logits"] == 4  # once per image
    assert any("flagged" in w and "l1_loss x4" in w for w in found["warnings"])


def test_detection_spec_scales_per_image_and_per_batch():
    one = decompose(RETINANET, batch_size=1, optimizer="sgd")
    four = decompose(RETINANET, batch_size=4, optimizer="sgd")
    per_image = Counter(r["name"].split("@")[0] for r in four.rows if "@" in r["name"])
    assert per_image and set(per_image.values()) == {4}
    conv = [r for r in four.rows if r["layer"] == "conv"]
    assert {r["batchsize"] for r in conv} == {4}
    assert len(conv) == sum(r["layer"] == "conv" for r in one.rows) == 111  # heads x 5 levels
    assert one.params == four.params
    assert any(r.get("frozen") for r in four.rows)  # the pretrained backbone's frozen stem


@pytest.mark.parametrize(("source", "framework", "params"), [
    ("resnet50", None, 25_636_712),  # the Keras model, as before
    ("resnet50", "tensorflow", 25_636_712),
    ("resnet50", "pytorch", 25_557_032),  # torchvision's
    ("torchvision.models:resnet50", "tensorflow", 25_557_032),
    ("torchvision.models:resnet50(weights=None)", None, 25_557_032),
    ("retinanet_resnet50_fpn", None, 34_014_999),
    ("RetinaNet-ResNet50-FPN", "tensorflow", 34_014_999),
    ("vgg13", None, 133_047_848),  # no Keras model of that name
    ("googlenet", None, None),  # tf_cnn_benchmarks' GoogLeNet for TensorFlow…
    ("googlenet", "pytorch", 13_004_888),  # …torchvision's (with its two aux heads) for PyTorch
])
def test_names_resolve_per_framework(source, framework, params):
    net = decompose(source, batch_size=1, framework=framework)
    if params is None:
        assert net.params == zoo.load("googlenet").totals["params"]
    else:
        assert net.params == params
    if source == "vgg13" or framework == "tensorflow" and "resnet50" not in source:
        assert any("torchvision" in w for w in net.warnings) == (framework == "tensorflow")


def test_other_sizes_and_arguments_need_torchvision():
    pytest.importorskip("torch")
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - absent or broken (CPU torch): the case tested here
        with pytest.raises(NetworkSpecError, match="needs a trace with torch and torchvision"):
            decompose("resnet18", batch_size=1, image_size=160, framework="pytorch")
        with pytest.raises(NetworkSpecError, match="torchvision"):
            decompose("torchvision.models:resnet18(num_classes=10)", batch_size=1)
        return
    net = decompose("resnet18", batch_size=1, image_size=160, framework="pytorch")
    assert net.input_shape == (160, 160, 3)


def test_forecast_of_retinanet_needs_no_gpu():
    from layerwise.forecast import forecast_network

    result = forecast_network(RETINANET, device="NVIDIA A100-SXM4-80GB", batch_size=16,
                              framework="pytorch")
    assert 0 < result["low"] <= result["batch_seconds"] <= result["high"]
    assert result["params"] == 34_014_999
    assert any("roi" not in w and "flagged" in w for w in result["warnings"])
