"""Half precision as the framework runs it (issue 23, section 8 of docs/lab/layerwise-pytorch.md):
weight casts inside the layer prices, TensorFlow's half storage on GPUs without fast FP16,
and the channel alignment of half convolutions in older releases. Relations, not numbers."""

from __future__ import annotations

import pytest

from layerwise.as_run import as_run_warning, cast_kernels, cast_launches, resolve
from layerwise.forecast import device_features, forecast_network
from layerwise.network import decompose
from layerwise.pricing.rows import layer_query


def _first_conv_and_a_later_one(rows):
    convs = [r for r in rows if r["layer"] == "conv"]
    first = convs[0]
    later = next(r for r in convs[1:] if int(r["channels_in"]) % 8 == 0)
    return first, later


@pytest.mark.parametrize("framework,version", [("pytorch", "1.4"), ("pytorch", "1.7"),
                                               ("tensorflow", "1.15")])
def test_old_releases_run_unaligned_half_convs_without_tensor_cores(framework, version):
    hw = device_features("V100")
    rows = decompose("resnet18", batch_size=8, framework=framework).rows
    first, later = _first_conv_and_a_later_one(rows)
    assert int(first["channels_in"]) % 8  # the image's channels
    for req in ("fp16", "fp16-pure"):
        run = resolve(req, framework, hw, version=version)
        assert run.align8
        assert run.for_row(first) == "fp32" and run.for_row(later) == run.conv
        assert layer_query(first, "none", run, framework, hw)["precision"] == "fp32"
        assert layer_query(later, "none", run, framework, hw)["precision"] == run.conv
        assert "multiple of 8" in run.assumed


@pytest.mark.parametrize("framework,version", [("pytorch", None), ("pytorch", "2.11"),
                                               ("tensorflow", None), ("tensorflow", "2.15")])
def test_current_releases_run_every_half_conv_in_half(framework, version):
    hw = device_features("H100")
    first, _ = _first_conv_and_a_later_one(
        decompose("resnet18", batch_size=8, framework=framework).rows)
    run = resolve("fp16", framework, hw, version=version)
    assert not run.align8 and run.for_row(first) == "fp16"
    assert resolve("fp16", framework, hw, version="1.4" if framework == "pytorch" else "1.15",
                   align8=False).for_row(first) == "fp16"  # forced off for comparisons


def test_the_alignment_rule_touches_half_only():
    rows = decompose("resnet18", batch_size=8, framework="pytorch").rows
    first, _ = _first_conv_and_a_later_one(rows)
    for req in ("fp32", "fp32-strict", "tf32"):
        run = resolve(req, "pytorch", device_features("A100"), version="1.7")
        assert run.for_row(first) == run.conv


def test_an_unaligned_half_conv_gains_less_than_an_aligned_one_under_an_old_release():
    """The image's convolution priced as fp32 (old release) costs more than priced in fp16
    (current release) on tensor cores, and the rest of the network is priced the same."""
    from layerwise.compose import price_layers
    from layerwise.shipped import default_predictor

    hw = device_features("V100")
    rows = decompose("resnet18", batch_size=32, framework="pytorch").rows
    predictor = default_predictor()
    old = price_layers(rows, predictor, hw, resolve("fp16-pure", "pytorch", hw, "1.4"),
                       True, "sgd", "pytorch")
    new = price_layers(rows, predictor, hw, resolve("fp16-pure", "pytorch", hw, "1.4",
                                                    align8=False), True, "sgd", "pytorch")
    first = old.index[old["layer"].eq("conv")][0]
    assert old.loc[first, "ms"] > new.loc[first, "ms"]
    rest = old.index != first
    assert old.loc[rest, "ms"].tolist() == pytest.approx(new.loc[rest, "ms"].tolist())
    assert old.loc[rest, "floor_ms"].tolist() == pytest.approx(new.loc[rest, "floor_ms"].tolist())


def test_amp_cast_launches_follow_the_switch():
    from layerwise.as_run import CASTS_IN_LAYER_PRICES

    hw = device_features("A100")
    rows = decompose("resnet18", batch_size=8, framework="pytorch").rows
    amp = resolve("fp16", "pytorch", hw)
    assert amp.casts and cast_kernels(amp, rows, True) > cast_kernels(amp, rows, False) > 0
    assert cast_launches(amp, rows, True, in_layer_prices=True) == 0  # inside the layers
    assert cast_launches(amp, rows, True, in_layer_prices=False) == cast_kernels(amp, rows, True)
    shipped = 0 if CASTS_IN_LAYER_PRICES else cast_kernels(amp, rows, True)
    assert cast_launches(amp, rows, True) == shipped
    pure = resolve("fp16-pure", "pytorch", hw)
    assert cast_launches(pure, rows, True, in_layer_prices=False) == 0  # model.half(): none


def test_tensorflow_half_on_pascal_keeps_half_storage_pytorch_does_not():
    pascal = device_features("GTX 1080 Ti")
    tf = resolve("fp16", "tensorflow", pascal)
    assert (tf.conv, tf.matmul, tf.memory) == ("fp32", "fp32", "fp16") and not tf.casts
    assert "half the bytes" in tf.assumed and tf.assumed in as_run_warning(tf)
    before = resolve("fp16", "tensorflow", pascal, half_rule="fp32")
    assert before.uniform and before.conv == "fp32"
    pt = resolve("fp16", "pytorch", pascal)
    assert pt.uniform and pt.conv == "fp32"
    pure = resolve("fp16-pure", "tensorflow", pascal)
    assert pure.memory == "fp16" and pure.conv == "fp32"


def test_a_tensorflow_half_step_on_pascal_is_faster_than_its_fp32_step():
    kw = dict(device="NVIDIA GeForce GTX 1080 Ti", batch_size=32, optimizer="momentum",
              framework="tensorflow")
    half = forecast_network("resnet50", precision="fp16", **kw)
    full = forecast_network("resnet50", precision="fp32", **kw)
    assert half["batch_seconds"] < full["batch_seconds"]
    assert half["precision_as_run"]["convolutions"] == "fp32"
    assert half["precision_as_run"]["memory_bound"] == "fp16"
    assert any("half the bytes" in w for w in half["warnings"])
