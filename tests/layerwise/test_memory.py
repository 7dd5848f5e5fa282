"""The memory estimate (layerwise.memory) against a real PyTorch training step on this CPU."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from fleet.catalog import UnknownGpuError, resolve_gpu  # noqa: E402
from layerwise import torch_graph  # noqa: E402
from layerwise.kinds.mapping import UnknownNetworkError  # noqa: E402
from layerwise.memory import (  # noqa: E402
    CONTEXT_BYTES,
    GIB,
    WORKSPACE_BYTES,
    MemoryEstimateError,
    NetworkLayers,
    estimate_layers,
    estimate_memory,
    gpu_memory_bytes,
)
from layerwise.memory_measure import measure_step  # noqa: E402

SIDE = 32
# saved-for-backward bytes: the estimate leaves out BatchNorm's per-channel statistics and the
# loss's B x classes tensors, which the measurement counts (both tiny here)
SAVED_TOLERANCE = 0.02
# under autocast the estimate also counts the half copy of BatchNorm weights (CPU autocast keeps
# BatchNorm in FP32), and a half copy of the input where CPU autocast may save another layout
AMP_TOLERANCE = 0.10


class Tiny(nn.Module):
    """Every kind the rules name: conv, BN, in-place ReLU and ReLU6, max pool, a residual add,
    global pooling, dropout, dense."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(16), nn.ReLU6(inplace=True),
                                   nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                                  nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return self.head(self.relu(x + self.block(x)))


@pytest.fixture(scope="module")
def tiny() -> NetworkLayers:
    with torch.device("meta"):
        model = Tiny()
    layers, info = torch_graph.module_layers(model, SIDE)
    return NetworkLayers("tiny", "pytorch", tuple(layers), (SIDE, SIDE, 3), info["params"],
                         info["trainable_params"])


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_estimate_matches_a_real_step_on_this_cpu(tiny: NetworkLayers, optimizer: str) -> None:
    torch.manual_seed(0)
    measured = measure_step(Tiny(), 8, SIDE, optimizer=optimizer)
    est = estimate_layers(tiny, batch_size=8, optimizer=optimizer)
    assert est.activations_bytes == pytest.approx(measured.saved_bytes, rel=SAVED_TOLERANCE)
    assert est.weights_bytes == measured.weights_bytes
    assert est.gradients_bytes == measured.gradients_bytes
    assert est.optimizer_bytes == measured.optimizer_bytes


def test_mixed_precision_matches_autocast_and_keeps_less(tiny: NetworkLayers) -> None:
    torch.manual_seed(0)
    measured = measure_step(Tiny(), 8, SIDE, amp_dtype=torch.bfloat16)
    half = estimate_layers(tiny, batch_size=8, precision="bf16")
    full = estimate_layers(tiny, batch_size=8, precision="fp32")
    assert half.activations_bytes == pytest.approx(measured.saved_bytes, rel=AMP_TOLERANCE)
    assert half.activations_bytes < full.activations_bytes
    assert half.weights_bytes > full.weights_bytes  # FP32 masters + the half working copy
    amp = estimate_memory("resnet50", batch_size=64, precision="amp", framework="pytorch")
    fp32 = estimate_memory("resnet50", batch_size=64, precision="fp32", framework="pytorch")
    assert amp.activations_bytes < fp32.activations_bytes and amp.total_bytes < fp32.total_bytes


def test_the_peak_of_a_real_step_is_within_the_estimate(tiny: NetworkLayers) -> None:
    torch.manual_seed(0)
    measured = measure_step(Tiny(), 4, SIDE, optimizer="momentum", peak=True)
    est = estimate_layers(tiny, batch_size=4, optimizer="momentum")
    on_cpu = est.total_bytes - CONTEXT_BYTES - WORKSPACE_BYTES
    assert measured.peak_bytes is not None
    assert measured.saved_bytes + measured.weights_bytes < measured.peak_bytes <= on_cpu


def test_memory_grows_with_the_batch_and_max_batch_is_the_edge() -> None:
    totals = [estimate_memory("resnet50", batch_size=b, gpu="T4").total_bytes
              for b in (1, 2, 16, 64, 256)]
    assert totals == sorted(totals) and len(set(totals)) == len(totals)
    for gpu, precision, optimizer in (("T4", "fp32", "sgd"), ("A100 80GB", "fp16", "adam"),
                                      ("V100", "fp32", "momentum")):
        best = estimate_memory("vgg16", batch_size=1, gpu=gpu, precision=precision,
                               optimizer=optimizer).max_batch
        assert best is not None and best >= 1
        at = estimate_memory("vgg16", batch_size=best, gpu=gpu, precision=precision,
                             optimizer=optimizer)
        over = estimate_memory("vgg16", batch_size=best + 1, gpu=gpu, precision=precision,
                               optimizer=optimizer)
        assert at.fits and not over.fits and at.max_batch == over.max_batch == best


def test_t4_at_4096_does_not_fit_and_says_what_would() -> None:
    est = estimate_memory("resnet50", batch_size=4096, gpu="T4")
    assert est.fits is False and est.gpu == "Tesla T4"
    assert est.gpu_memory_bytes == 16 * GIB and est.total_bytes > est.gpu_memory_bytes
    assert 0 < est.max_batch < 4096
    assert "does not fit" in est.summary() and str(est.max_batch) in est.summary()
    parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
             "input_bytes", "transient_bytes", "context_bytes", "workspace_bytes")
    assert sum(est.as_dict()[p] for p in parts) == est.total_bytes


def test_published_resnet50_batch_sizes_fit() -> None:
    """NVIDIA DeepLearningExamples trains ResNet-50 (PyTorch, momentum SGD) with these per-GPU
    batches (PyTorch/Classification/ConvNets/configs.yml): the estimate must let them fit."""
    for gpu, precision, batch in (("Tesla V100 SXM2 16GB", "fp32", 112),
                                  ("Tesla V100 SXM2 16GB", "amp", 256), ("T4", "fp32", 128),
                                  ("T4", "amp", 256), ("A100 SXM4 80GB", "tf32", 256)):
        est = estimate_memory("resnet50", batch_size=batch, precision=precision,
                              optimizer="momentum", framework="pytorch", gpu=gpu)
        assert est.fits, (gpu, precision, batch, est.summary())


def test_optimizer_state_is_zero_one_or_two_copies() -> None:
    sizes = {opt: estimate_memory("mobilenetv2", batch_size=8, optimizer=opt).optimizer_bytes
             for opt in ("sgd", "momentum", "adam")}
    params = estimate_memory("mobilenetv2", batch_size=8).trainable_params
    assert sizes == {"sgd": 0, "momentum": 4 * params, "adam": 8 * params}


def test_clear_errors() -> None:
    no_figure = dataclasses.replace(resolve_gpu("T4"), memory_gb=float("nan"))
    with pytest.raises(MemoryEstimateError, match="no memory figure"):
        estimate_memory("resnet50", batch_size=8, gpu=no_figure)
    with pytest.raises(UnknownGpuError, match="Banana"):
        estimate_memory("resnet50", batch_size=8, gpu="Banana")
    with pytest.raises(UnknownGpuError):
        gpu_memory_bytes("TPU v3")
    with pytest.raises(MemoryEstimateError, match="unknown network 'resnet5000'") as caught:
        estimate_memory("resnet5000", batch_size=8)
    assert isinstance(caught.value, UnknownNetworkError)
    assert caught.value.info().kind == "unknown_network"
    with pytest.raises(MemoryEstimateError, match="optimizer"):
        estimate_memory("resnet50", batch_size=8, optimizer="lion")
    with pytest.raises(MemoryEstimateError, match="batch size"):
        estimate_memory("resnet50", batch_size=0)
    with pytest.raises(MemoryEstimateError, match="precision"):
        estimate_memory("resnet50", batch_size=8, precision="fp8")


def test_other_image_size_scales_activations_and_says_so() -> None:
    base = estimate_memory("resnet50", batch_size=8)
    big = estimate_memory("resnet50", batch_size=8, image_size=448)
    assert big.activations_bytes == pytest.approx(4 * base.activations_bytes, rel=1e-6)
    assert big.weights_bytes == base.weights_bytes and any("448" in n for n in big.notes)
