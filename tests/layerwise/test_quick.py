"""The array path of network forecasts answers what the DataFrame path answers."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest

import layerwise.quick as quick
from layerwise import zoo
from layerwise.compose import BACKWARD_RATIO, DEFAULT_BACKWARD_RATIO, ROUGH_INTERVAL
from layerwise.efficiency import EfficiencyPredictor
from layerwise.forecast import compose_step, device_features, forecast_network
from layerwise.network import decompose
from layerwise.shipped import default_predictor

# (device as nvidia-smi names it, precision, framework, optimizer): seen and unseen GPUs
CASES = [("Tesla V100-SXM2-16GB", "fp32", "tensorflow", "sgd"),
         ("NVIDIA H100 80GB HBM3", "bf16", "pytorch", "adam"),
         ("NVIDIA L4", "tf32", "pytorch", "none"),
         ("Quadro P2000", "fp16", "tensorflow", "momentum")]


def _same(a, b, path=""):
    """Equal structure, keys in the same order, equal values (floats to rounding)."""
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)


def _general(name, device, batch, optimizer, precision, framework, predictor):
    hw = device_features(device)
    net = decompose(name, batch_size=batch, optimizer=optimizer, framework=framework)
    out = compose_step(net, predictor, hw, precision, optimizer, framework, 0.0)
    out.update(device=device)
    return out


@pytest.mark.parametrize("name", zoo.known_networks())
def test_every_shipped_network_prices_the_same_both_ways(name):
    predictor = default_predictor()
    rng = np.random.default_rng(len(name))
    first = zoo.known_networks().index(name) % 2
    for device, precision, framework, optimizer in CASES[first::2]:
        batch = int(rng.integers(1, 300))
        fast = quick.forecast_fast(name, device=device, batch_size=batch, optimizer=optimizer,
                                   precision=precision, framework=framework)
        _same(_general(name, device, batch, optimizer, precision, framework, predictor), fast)


def test_forecast_network_takes_the_array_path_with_any_efficiency_model(monkeypatch):
    kw = dict(device="V100", batch_size=48, optimizer="sgd", dataset_size=1000, epochs=2)
    for predictor in (None, EfficiencyPredictor.load(quick.SHIPPED_DIR)):
        fast = forecast_network("resnet50", predictor=predictor, **kw)
        monkeypatch.setattr(quick, "forecast_fast", lambda *a, **k: None)
        slow = forecast_network("resnet50", predictor=predictor, **kw)
        monkeypatch.undo()
        _same(slow, fast)
    assert quick.forecast_fast("resnet50", device="cpu", batch_size=8, optimizer="sgd") is None


def test_later_batch_sizes_are_derived_exactly_from_two_decompositions():
    quick._NETWORKS.clear()
    for name in ("resnet50", "inceptionv3", "densenet121", "alexnet"):
        for batch in (7, 64, 1, 250, 33):
            got = quick.network_rows(name, batch, "sgd", None, "tensorflow")
            ref = decompose(name, batch_size=batch, optimizer="sgd", framework="tensorflow")
            assert dataclasses.asdict(got) == dataclasses.asdict(ref), (name, batch)
            assert [[type(v) for v in r.values()] for r in got.rows] == \
                [[type(v) for v in r.values()] for r in ref.rows]
        assert isinstance(quick._NETWORKS[(name, "sgd", None, "tensorflow")], quick.BatchScaled)


def test_a_value_not_proportional_to_the_batch_keeps_decomposing():
    a = decompose("alexnet", batch_size=2, optimizer="sgd")
    b = decompose("alexnet", batch_size=6, optimizer="sgd")
    assert quick.BatchScaled.check(a, b) is not None
    b.rows[3]["flops"] += 1.0
    assert quick.BatchScaled.check(a, b) is None
    b = decompose("alexnet", batch_size=6, optimizer="sgd")
    b.rows[0]["note"] = "changed"
    assert quick.BatchScaled.check(a, b) is None


def test_the_mirrored_constants_equal_compose():
    assert quick.BACKWARD_RATIO == BACKWARD_RATIO
    assert quick.DEFAULT_BACKWARD_RATIO == DEFAULT_BACKWARD_RATIO
    assert quick.ROUGH_INTERVAL == ROUGH_INTERVAL


def test_a_shipped_network_forecast_imports_no_pandas_sklearn_or_scipy():
    code = ("import sys\n"
            "from layerwise.quick import forecast_fast\n"
            "out = forecast_fast('resnet50', device='V100', batch_size=64, optimizer='sgd')\n"
            "assert out['batch_seconds'] > 0\n"
            "print(sorted(m for m in ('sklearn', 'scipy', 'pandas') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
