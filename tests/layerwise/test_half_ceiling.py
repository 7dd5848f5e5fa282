"""Half layers no slower than the framework's fp32 on GPUs with TF32 tensor cores (issue 23,
section 9 of docs/lab/layerwise-pytorch.md). Relations, not numbers."""

from __future__ import annotations

import pytest

from layerwise.as_run import HALF_CEILING, resolve
from layerwise.forecast import device_features
from layerwise.network import decompose


def _rows(network="resnet18", batch=16):
    return decompose(network, batch_size=batch, optimizer="sgd", framework="pytorch").rows


@pytest.mark.parametrize("framework,version,ceiling", [
    ("pytorch", None, ("tf32", "fp32")), ("pytorch", "1.10", ("tf32", "tf32")),
    ("pytorch", "1.4", ("fp32", "fp32")), ("tensorflow", None, ("tf32", "tf32")),
    ("tensorflow", "2.2", ("fp32", "fp32"))])
def test_the_ceiling_is_the_frameworks_fp32_as_run(framework, version, ceiling):
    for gpu in ("A100", "H100"):
        hw = device_features(gpu)
        fp32 = resolve("fp32", framework, hw, version=version)
        for req in ("fp16", "bf16", "fp16-pure"):
            run = resolve(req, framework, hw, version=version)
            assert run.ceiling == (ceiling if HALF_CEILING else None)
            assert run.ceiling is None or run.ceiling == (fp32.conv, fp32.matmul)
            assert resolve(req, framework, hw, version=version, ceiling=False).ceiling is None


@pytest.mark.parametrize("gpu", ["V100", "RTX 2080 Ti", "Titan Xp"])
def test_no_ceiling_without_tf32(gpu):
    for req in ("fp16", "fp16-pure", "fp32"):
        assert resolve(req, "pytorch", device_features(gpu), ceiling=True).ceiling is None


def test_only_half_weight_layers_have_a_ceiling():
    hw = device_features("A100")
    rows = _rows("vgg11_bn")
    run = resolve("fp16", "pytorch", hw, ceiling=True)
    for row in rows:
        top = run.ceiling_for(row)
        if row["layer"] in ("conv", "dwconv"):
            assert top == "tf32"
        elif row["layer"] == "dense":
            assert top == "fp32"
        else:
            assert top is None
    for req in ("fp32", "tf32", "fp32-strict"):
        assert all(resolve(req, "pytorch", hw).ceiling_for(r) is None for r in rows)
    old = resolve("fp16", "pytorch", hw, version="1.4", ceiling=True)  # image conv as fp32
    first = next(r for r in rows if r["layer"] == "conv")
    assert old.for_row(first) == "fp32" and old.ceiling_for(first) is None


def test_a_half_layer_costs_at_most_its_fp32_price_and_nothing_else_moves():
    from layerwise.compose import price_layers
    from layerwise.shipped import default_predictor

    predictor = default_predictor()
    rows = _rows("vgg11_bn", 32)
    for gpu in ("A100", "H100"):
        hw = device_features(gpu)
        args = (True, "momentum", "pytorch")
        on = price_layers(rows, predictor, hw, resolve("fp16", "pytorch", hw, ceiling=True), *args)
        off = price_layers(rows, predictor, hw, resolve("fp16", "pytorch", hw, ceiling=False),
                           *args)
        fp32 = price_layers(rows, predictor, hw, resolve("fp32", "pytorch", hw), *args)
        weight = on["layer"].isin(["conv", "dwconv", "dense"])
        for col in ("ms", "low_ms", "high_ms"):
            assert (on.loc[weight, col] <= fp32.loc[weight, col] + 1e-12).all()
            assert (on[col] <= off[col] + 1e-12).all()
            assert on.loc[weight, col].tolist() == pytest.approx(
                [min(a, b) for a, b in zip(off.loc[weight, col], fp32.loc[weight, col],
                                           strict=True)])
            assert on.loc[~weight, col].tolist() == pytest.approx(off.loc[~weight, col].tolist())
        assert on["floor_ms"].tolist() == pytest.approx(off["floor_ms"].tolist())
        assert on["kernels"].tolist() == off["kernels"].tolist()


def test_the_fast_path_prices_the_ceiling_too():
    from layerwise.forecast import forecast_network

    rows = {p: forecast_network("vgg11_bn", device="A100", batch_size=32, optimizer="momentum",
                             precision=p, framework="pytorch") for p in ("fp16", "fp32")}
    assert "at most at PyTorch's fp32" in rows["fp16"]["precision_as_run"]["assumed"]
    assert "at most" not in rows["fp32"]["precision_as_run"]["assumed"]
