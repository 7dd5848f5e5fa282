"""PyTorch models traced on the meta device: a module of our own, references, detection loops.

Runs on the project's CPU torch (no torchvision, no GPU, no weights, no downloads).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from layerwise.kinds.mapping import NetworkSpecError
from layerwise.network import decompose
from layerwise.torch_graph import TorchRef, parse_reference
from layerwise.torch_layers import window

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional


class SmallNet(nn.Module):
    """A small CNN: BN, residual add, concat, depthwise and grouped convs, pooling, dropout,
    and two ops no layer kind covers (a broadcast multiply and a bilinear resize)."""

    def __init__(self, num_classes: int = 10, width: int = 16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.branch_a = nn.Conv2d(width, width, 3, padding=1)
        self.branch_b = nn.Conv2d(width, 8, 1)
        self.dw = nn.Conv2d(width + 8, width + 8, 3, padding=1, groups=width + 8)
        self.grouped = nn.Conv2d(width + 8, 32, 3, stride=2, padding=1, groups=4)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.branch_a(x)
        x = torch.cat([x, self.branch_b(x)], dim=1)
        x = self.dw(x)
        x = x * torch.sigmoid(x).mean(dim=1, keepdim=True)
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        x = self.pool(self.grouped(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(self.drop(x))


class ToyDetector(nn.Module):
    """Detection-style: images and targets, a per-image loss loop with data-dependent ops."""

    def __init__(self):
        super().__init__()
        self.body = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.cls = nn.Conv2d(8, 2, 1)

    def forward(self, images, targets=None):
        logits = self.cls(torch.relu(self.body(torch.stack(images))))
        losses = []
        for scores, target in zip(logits, targets, strict=True):
            flat = scores.flatten(1)
            keep = torch.where(flat[0] > 0)[0]
            if bool(flat.max() > 1e6):  # a value meta tensors do not have
                keep = keep[:1]
            losses.append(flat[:, keep].sigmoid().sum() + target["boxes"].abs().sum())
        return {"loss": torch.stack(losses).mean()}


def make_net(num_classes: int = 10, width: int = 16) -> nn.Module:
    return SmallNet(num_classes, width)


def _download(**kwargs) -> nn.Module:
    torch.hub.download_url_to_file("https://example.invalid/weights.pth", "/tmp/never")
    return SmallNet()


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_own_module_parameters_equal_pytorchs_and_kinds_are_mapped():
    with torch.device("meta"):
        model = SmallNet()
    net = decompose(model, batch_size=4, optimizer="sgd", image_size=32)
    assert net.params == _params(model) == 5_250  # 432 + 32 + 2,320 + 136 + 240 + 1,760 + 330
    kinds = Counter(row["layer"] for row in net.rows)
    assert kinds == {"conv": 4, "dwconv": 1, "bn": 1, "act": 2, "add": 1, "concat": 1,
                     "pool": 2, "dense": 1, "dropout": 1, "unknown": 3}
    assert net.flagged_ops == {"mul": 1, "mean": 1, "interpolate": 1}
    assert any("interpolate x1" in w and "flagged" in w for w in net.warnings)
    assert net.input_shape == (32, 32, 3)
    grouped = next(row for row in net.rows if row["name"] == "grouped")
    # 4 groups: a conv of 24/4 -> 32/4 channels on 4x the batch, PyTorch's 1,760 parameters
    assert (grouped["channels_in"], grouped["channels_out"], grouped["batchsize"]) == (6, 8, 16)
    assert grouped["params"] == 32 * 6 * 9 + 32 and "4 groups" in grouped["note"]
    interp = next(row for row in net.rows if row["keras_class"] == "torch.interpolate")
    assert interp["bytes_out"] == 4 * 24 * 64 * 64 * 4 and interp["flops"] == 8 * 24 * 64 * 64 * 4
    stem = net.rows[0]
    assert stem["name"] == "stem.0" and stem["grad_input"] is False


def test_rows_scale_with_the_batch_and_forward_only_has_no_dropout():
    with torch.device("meta"):
        model = SmallNet()
    one = decompose(model, batch_size=1, optimizer="none", image_size=32)
    eight = decompose(model, batch_size=8, optimizer="none", image_size=32)
    assert len(one.rows) == len(eight.rows) and one.params == eight.params
    assert math.isclose(eight.flops, 8 * one.flops)
    assert Counter(r["layer"] for r in one.rows)["dropout"] == 0


def test_reference_with_literal_kwargs_is_built_on_meta_and_traced():
    text = f"{__name__}:make_net(num_classes=5, width=8)"
    net = decompose(text, batch_size=2, optimizer="sgd", image_size=16)
    assert net.name == "make_net"
    assert net.params == _params(SmallNet(5, 8))
    dense = next(row for row in net.rows if row["layer"] == "dense")
    assert (dense["dim_input"], dense["dim_output"]) == (32, 5)


def test_forecast_of_a_reference_needs_no_gpu():
    from layerwise.forecast import forecast_network

    result = forecast_network(f"{__name__}:make_net", device="NVIDIA A100-SXM4-80GB",
                              batch_size=8, image_size=32, framework="pytorch")
    assert 0 < result["low"] <= result["batch_seconds"] <= result["high"]
    assert result["params"] == _params(SmallNet())
    assert any("interpolate" in w for w in result["warnings"])


def test_detection_loop_ops_run_once_per_image():
    with torch.device("meta"):
        model = ToyDetector()
    net = decompose(model, batch_size=3, optimizer="sgd", image_size=16)
    assert net.params == _params(model)
    convs = [row for row in net.rows if row["layer"] == "conv"]
    assert [row["batchsize"] for row in convs] == [3, 3]
    copies = Counter(row["name"].split("@")[0] for row in net.rows if "@" in row["name"])
    assert copies and set(copies.values()) == {3}  # the loop body, once per image
    assert any(name.startswith("forward/sigmoid") or name.endswith("sigmoid")
               for name in copies)


@pytest.mark.parametrize(("text", "expected"), [
    ("pkg.mod:build", TorchRef("pkg.mod", "build")),
    ("a.b:Net(num_classes=10, pretrained=False)",
     TorchRef("a.b", "Net", (), (("num_classes", 10), ("pretrained", False)))),
    ("a:f(3, 'x', sizes=(1, 2))", TorchRef("a", "f", (3, "x"), (("sizes", (1, 2)),))),
])
def test_references_are_parsed_without_evaluating(text, expected):
    assert parse_reference(text) == expected


@pytest.mark.parametrize("text", ["resnet50", "model.json", "https://host/x:1", "C:"])
def test_names_and_paths_are_not_references(text):
    assert parse_reference(text) is None


@pytest.mark.parametrize("text", ["a:f(__import__('os').system('true'))", "a:f(x=y)",
                                  "a:f(**kw)"])
def test_non_literal_arguments_are_refused(text):
    with pytest.raises(NetworkSpecError, match="literals"):
        parse_reference(text)


@pytest.mark.parametrize(("text", "message"), [
    ("no_such_module_xyz:net", "cannot import no_such_module_xyz"),
    (f"{__name__}:no_such_callable", "has no 'no_such_callable'"),
    (f"{__name__}:_download", "download"),
    (f"{__name__}:make_net(nope=1)", "building the model failed"),
])
def test_bad_references_say_why(text, message):
    with pytest.raises(NetworkSpecError, match=message):
        decompose(text, batch_size=1, image_size=16)


@pytest.mark.parametrize(("side", "k", "s", "p", "out", "expected"), [
    (56, 3, 1, 1, 56, ("same", (56, 56))),  # symmetric: Keras same
    (224, 7, 2, 3, 112, ("valid", (230, 230))),  # odd Keras total: valid on the padded side
    (56, 1, 2, 0, 28, ("same", (56, 56))),
    (224, 11, 4, 2, 55, ("valid", (228, 228))),  # AlexNet: neither same nor valid on 224
])
def test_pytorch_padding_becomes_a_keras_window(side, k, s, p, out, expected):
    assert window((side, side), (out, out), (k, k), (s, s), (p, p)) == expected


def test_torchvision_trace_matches_the_shipped_spec():
    pytest.importorskip("torchvision")
    from layerwise.zoo import torch_zoo

    traced = decompose("torchvision.models:resnet18(weights=None, num_classes=1000)",
                       batch_size=2, optimizer="sgd")
    shipped = decompose("resnet18", batch_size=2, optimizer="sgd", framework="pytorch")
    assert traced.params == shipped.params == torch_zoo.load("resnet18").totals["params"]
    assert [r["layer"] for r in traced.rows] == [r["layer"] for r in shipped.rows]
