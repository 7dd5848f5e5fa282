"""Precision as the framework runs it: what a request's fp32, tf32 and AMP price."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleet.precision import Precision, parse_precision
from layerwise.as_run import cast_kernels, request_precision, resolve, run_class
from layerwise.compose import price_layers
from layerwise.forecast import device_features, forecast_network
from layerwise.network import decompose


def test_pytorch_fp32_runs_convolutions_in_tf32_on_ampere_and_matmuls_in_fp32():
    run = resolve("fp32", "pytorch", device_features("A100"))
    assert (run.conv, run.matmul, run.memory) == ("tf32", "fp32", "fp32")
    assert "TF32" in run.assumed and "fp32-strict" in run.assumed
    old = resolve("fp32", "pytorch", device_features("A100"), version="1.7.0a0")
    assert (old.conv, old.matmul) == ("tf32", "tf32")  # PyTorch 1.7-1.11: matmuls too


def test_fp32_is_plain_fp32_without_tf32_hardware_or_when_strict():
    for gpu in ("V100", "GTX 1080 Ti", "Titan RTX"):
        run = resolve("fp32", "pytorch", device_features(gpu))
        assert run.uniform and run.conv == "fp32"
    strict = resolve("fp32-strict", "pytorch", device_features("H100"))
    assert strict.uniform and strict.conv == "fp32"
    no_tf32 = resolve("tf32", "pytorch", device_features("V100"))
    assert no_tf32.conv == "fp32" and "no TF32" in no_tf32.assumed


def test_tensorflow_fp32_follows_its_version():
    a100 = device_features("A100")
    assert (resolve("fp32", "tensorflow", a100).conv,
            resolve("fp32", "tensorflow", a100).matmul) == ("tf32", "tf32")
    assert resolve("fp32", "tensorflow", a100, version="1.15").uniform


def test_mixed_precision_keeps_layernorm_and_softmax_in_fp32_and_adds_casts():
    run = resolve("amp", "pytorch", device_features("A100"))
    assert run.request == "fp16" and run.casts
    assert run.for_kind("conv") == run.for_kind("dense") == run.for_kind("bn") == "fp16"
    assert run.for_kind("ln") == run.for_kind("softmax") == "fp32"
    rows = [{"layer": "conv", "params": 10}, {"layer": "dense", "params": 5},
            {"layer": "bn", "params": 2}, {"layer": "conv", "params": 0}]
    assert cast_kernels(run, rows, training=True) == 4
    assert cast_kernels(run, rows, training=False) == 2
    assert cast_kernels(resolve("fp16-pure", "pytorch", device_features("A100")), rows, True) == 0


def test_request_spellings_and_the_shared_vocabulary():
    assert request_precision("FP32_strict") == "fp32-strict"
    assert request_precision("mixed_float16") == "fp16"
    assert request_precision(None) == "fp32"
    assert parse_precision("fp32-strict") is Precision.FP32  # the service accepts it
    with pytest.raises(ValueError, match="unknown precision"):
        request_precision("fp8-ish")


class _Recorder:
    """A stand-in predictor that records the precision each layer kind was asked at."""

    known_layers = {"conv", "dense", "act", "bn"}

    def __init__(self):
        self.seen: dict[str, set[str]] = {}

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        for kind, p in zip(rows["layer"], rows["precision"], strict=True):
            self.seen.setdefault(kind, set()).add(str(p))
        ms = np.ones(len(rows))
        return pd.DataFrame({"predicted_ms": ms, "low_ms": ms, "high_ms": ms}, index=rows.index)


def _tiny():
    return decompose({"name": "tiny", "input_shape": [8, 8, 3], "layers": [
        {"type": "conv", "filters": 4}, {"type": "bn"}, {"type": "act", "activation": "relu"},
        {"type": "flatten"}, {"type": "dense", "units": 2}]}, batch_size=2, optimizer="sgd")


@pytest.mark.parametrize(("gpu", "conv"), [("A100", "tf32"), ("V100", "fp32")])
def test_each_kind_is_priced_at_its_precision_as_run(gpu, conv):
    hw = device_features(gpu)
    rec = _Recorder()
    price_layers(_tiny().rows, rec, hw, resolve("fp32", "pytorch", hw), True, "sgd", "pytorch")
    assert rec.seen["conv"] == {conv}
    assert rec.seen["dense"] == {"fp32"} and rec.seen["bn"] == {"fp32"}
    assert run_class(resolve("fp32", "pytorch", hw), hw, _tiny().rows) in ("tensor", "fp32")


def test_a_pytorch_fp32_forecast_on_an_a100_says_tf32_and_on_a_v100_does_not():
    kw = dict(batch_size=32, optimizer="momentum", framework="pytorch")
    a100 = forecast_network("resnet50", device="A100", precision="fp32", **kw)
    strict = forecast_network("resnet50", device="A100", precision="fp32-strict", **kw)
    assert a100["precision_as_run"]["convolutions"] == "tf32"
    assert a100["precision_as_run"]["matmuls"] == "fp32"
    assert any("TF32" in w for w in a100["warnings"])
    assert strict["precision_as_run"]["convolutions"] == "fp32"
    assert not any("priced as run" in w for w in strict["warnings"])
    assert a100["batch_seconds"] < strict["batch_seconds"]  # tensor cores, whatever the fit
    v100 = forecast_network("resnet50", device="V100", precision="fp32", **kw)
    v100_strict = forecast_network("resnet50", device="V100", precision="fp32-strict", **kw)
    assert v100["precision_as_run"]["convolutions"] == "fp32"
    assert not any("priced as run" in w for w in v100["warnings"])
    assert v100["batch_seconds"] == pytest.approx(v100_strict["batch_seconds"])


@pytest.mark.parametrize("request_", ["fp16", "bf16", "amp", "fp16-pure"])
def test_half_on_a_gpu_without_fast_fp16_is_priced_as_strict_fp32_and_said(request_):
    from layerwise.as_run import as_run_warning, slow_fp16

    pascal = device_features("GTX 1080 Ti")
    assert slow_fp16(pascal) and slow_fp16("Titan Xp") and slow_fp16("Quadro P2000")
    for fast in ("Tesla P100 PCIe 16GB", "V100", "T4", "H100", "cpu"):  # P100: FP16 at 2x FP32
        assert not slow_fp16(device_features(fast))
    run = resolve(request_, "pytorch", pascal)
    assert run.uniform and run.conv == "fp32" and not run.casts
    assert run.request == request_precision(request_)
    assert "slower than FP32" in run.assumed and run.assumed in as_run_warning(run)
    before = resolve(request_, "pytorch", pascal, half_rule=False)
    assert before.conv in ("fp16", "bf16")
    t4 = resolve(request_, "pytorch", device_features("T4"))
    assert t4.conv == before.conv and as_run_warning(t4) is None


def test_a_half_forecast_on_pascal_equals_fp32_and_says_why():
    kw = dict(device="NVIDIA GeForce GTX 1080 Ti", batch_size=16, optimizer="momentum",
              framework="pytorch")
    half = forecast_network("resnet18", precision="fp16", **kw)
    full = forecast_network("resnet18", precision="fp32", **kw)
    # priced the same; only the whole-network residual (learned on measured half steps,
    # layerwise.pricing.residual) may tell them apart
    assert half["batch_seconds"] / half["network_residual"]["factor"] == pytest.approx(
        full["batch_seconds"] / full["network_residual"]["factor"])
    assert half["precision"] == "fp16" and half["precision_class"] == "fp32"
    assert "priced as fp32" in half["precision_as_run"]["assumed"]
    assert any("priced as fp32" in w for w in half["warnings"])


def test_year_offset_is_the_catalog_release_year_less_2019():
    from fleet.catalog import resolve_gpu
    from layerwise.as_run import YEAR0, year_offset

    for gpu in ("H100", "A100", "T4", "GTX 1080 Ti"):
        hw = device_features(gpu)
        assert year_offset(hw) == resolve_gpu(hw["hw_model"]).release_year - YEAR0
    assert year_offset(device_features("cpu")) == 0.0 and year_offset("no such gpu") == 0.0
