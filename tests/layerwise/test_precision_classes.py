"""The composition's precision classes (issue 36): a ``half`` class (scored as a candidate by
``benchmarks/layerwise_transfer.py``) priced at the ``tensor`` scale by a composition fitted
without one, and counted as on tensor cores by the whole-network residual."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from layerwise.as_run import CLASS_FALLBACK, TENSOR_CLASSES
from layerwise.compose import Composition, frame_features
from layerwise.pricing.residual import FEATURES, for_step
from layerwise.pricing.step import class_scale, step_array, step_from_dict


def test_a_composition_without_a_half_scale_prices_half_at_its_tensor_scale():
    doc = {"scale": {"fp32": 0.7, "tensor": 0.3}, "kernel_ms": 0.02, "step_ms": 1.0,
           "log_low": -0.1, "log_high": 0.1}
    half = step_from_dict(doc, (100.0, 90.0, 110.0), 500, "half")
    tensor = step_from_dict(doc, (100.0, 90.0, 110.0), 500, "tensor")
    assert half == tensor and half[3] == pytest.approx(0.3)
    arr = step_array(doc, np.array([100.0]), np.array([500.0]), np.array(["half"]),
                     np.array([0.0]))
    assert arr[0] == pytest.approx(tensor[0])
    assert Composition.from_dict(doc).scale_for("half") == pytest.approx(0.3)
    # the chain ends at fp32, and a class no chain knows is priced at fp32 as before
    assert class_scale({"fp32": 0.7}, "half") == pytest.approx(0.7)
    assert class_scale({"fp32": 0.7, "tensor": 0.3}, "unknown") == pytest.approx(0.7)
    assert set(CLASS_FALLBACK) <= {*TENSOR_CLASSES, "fp32"}


def test_the_residual_counts_a_half_class_as_on_tensor_cores():
    row = {"kind_ms": {"conv": 8.0, "bn": 2.0}, "kernels": 300, "precision": "fp16",
           "batch_per_gpu": 64}
    frame = pd.DataFrame([{**row, "precision_class": c} for c in ("half", "tensor", "fp32")])
    flag = frame_features(frame)[:, FEATURES.index("tensor")]
    assert list(flag) == [1.0, 1.0, 0.0]
    entries = [{"layer": "conv", "ms": 8.0}, {"layer": "bn", "ms": 2.0}]
    doc = Composition(residual_alpha=1.0).fit(
        frame.assign(sum_ms=10.0, network="n", step_ms=[5.0, 5.0, 6.0]),
        [5.0, 5.0, 6.0]).residual_
    answers = [for_step(doc, entries, kernels=300, request="fp16", pclass=c, batch=64,
                        network=None)[0] for c in ("half", "tensor", "fp32")]
    assert answers[0] == answers[1] != answers[2]
