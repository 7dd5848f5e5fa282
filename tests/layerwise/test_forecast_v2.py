"""Whole-network forecasts with the shipped roofline-efficiency predictor (no TensorFlow)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from paths import REPO

from layerwise.forecast import forecast_network


def test_step_time_grows_with_batch_far_beyond_the_measured_range():
    secs = [forecast_network("resnet50", device="A100", batch_size=b)["batch_seconds"]
            for b in (16, 64, 256, 512)]
    assert np.all(np.diff(secs) > 0)
    assert secs[-1] / secs[-2] > 1.5  # the GPU is full: about linear, never flat


def test_precision_and_tensor_cores_change_the_forecast():
    fp32 = forecast_network("resnet50", device="V100", batch_size=128, precision="fp32")
    fp16 = forecast_network("resnet50", device="V100", batch_size=128, precision="fp16")
    assert fp16["precision_class"] == "tensor" and fp32["precision_class"] == "fp32"
    assert fp16["batch_seconds"] < fp32["batch_seconds"]
    pascal = forecast_network("resnet50", device="GTX 1080 Ti", batch_size=64, precision="fp16")
    assert pascal["precision_class"] == "fp32"  # no tensor cores: fp32 math


def test_forecast_carries_units_interval_and_a_priced_breakdown():
    out = forecast_network("inception3", device="GeForce RTX 2080 Super with Max-Q Design",
                           batch_size=32, optimizer="momentum", dataset_size=1000, epochs=2)
    assert out["unit"] == "s" and 0 < out["low"] <= out["batch_seconds"] <= out["high"]
    assert out["input_shape"] == [299, 299, 3]
    layers = out["layers"]
    assert all(layer["method"] in ("predictor", "none") for layer in layers)
    total = sum(layer["ms"] for layer in layers) + out["step_overhead_ms"]
    assert total / 1000 == pytest.approx(out["batch_seconds"], rel=1e-9)
    assert out["job_seconds"] == pytest.approx(2 * 32 * out["batch_seconds"], rel=1e-9)


def test_known_networks_forecast_without_tensorflow():
    code = ("import sys\n"
            "from layerwise.forecast import forecast_network\n"
            "out = forecast_network('vgg16', device='H100 SXM5', batch_size=48, precision='bf16')\n"
            "assert out['batch_seconds'] > 0\n"
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_bad_requests_are_clear_errors():
    with pytest.raises(ValueError, match="unknown GPU"):
        forecast_network("resnet50", device="Voodoo 5", batch_size=8)
    with pytest.raises(ValueError, match="precision"):
        forecast_network("resnet50", device="V100", batch_size=8, precision="fp8")
