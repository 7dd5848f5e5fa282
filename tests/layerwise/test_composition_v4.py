"""Composition forms with catalog features (layerwise.corpora.composition_v4): the fit
recovers its constants, the leave-one-out protocol, the half-precision rule, the features."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from layerwise.corpora.composition_v4 import (
    FeatureComposition,
    gpu_features,
    leave_one_out,
    roofline_split,
    slow_fp16,
)


def _frame(n: int = 80, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "sum_ms": rng.uniform(5, 400, n), "floor_ms": rng.uniform(0.5, 3, n),
        "kernels": rng.integers(50, 1500, n).astype(float),
        "precision_class": np.where(np.arange(n) % 3, "tensor", "fp32"),
        "year": np.array([-2.0, -1.0, 0.0, 1.0, 3.0])[np.arange(n) % 5],
        "roof_gemm_c": rng.uniform(1, 100, n), "roof_gemm_b": rng.uniform(0.5, 10, n),
        "roof_mem": rng.uniform(1, 40, n),
        "chip": np.array(["a", "b", "c", "d", "e"])[np.arange(n) % 5],
        "network": [f"net{i % 10}" for i in range(n)]})


TRUTH = {"s_fp32": math.log(0.6), "s_tensor": math.log(0.4), "kernel": math.log(0.06),
         "base": math.log(2.0), "year": -0.15, "e_fp32": math.log(3.0),
         "e_tensor": math.log(5.0), "e_gb": math.log(1.5), "e_mem": math.log(2.0)}


@pytest.mark.parametrize("form", [{}, {"roofline_blend": True},
                                  {"year_kernel": False, "overlap_p": 0.0}])
def test_the_fit_recovers_the_constants_of_each_form(form):
    X = _frame()
    truth = FeatureComposition(**form)
    names = truth._names(["fp32", "tensor"])
    X["step_ms"] = truth._ms({n: TRUTH[n] for n in names}, X)
    comp = FeatureComposition(**form).fit(X, X["step_ms"])
    assert np.allclose(comp.predict(X), X["step_ms"], rtol=1e-3)
    for name in ("s_fp32", "s_tensor", "kernel", "year", "e_fp32", "e_gb"):
        if name in names:
            assert comp.theta_[name] == pytest.approx(TRUTH[name], abs=0.05)
    assert ("s_fp32" in names) != bool(form.get("roofline_blend"))  # blended: s_fp32 = 1
    assert comp.log_low_ <= 0.0 <= comp.log_high_


def test_year_is_bounded_and_an_unseen_class_takes_the_fp32_scale():
    X = _frame()
    X["step_ms"] = 0.5 * X["sum_ms"] + 0.05 * X["kernels"] * np.exp(3.0 * X["year"])
    comp = FeatureComposition().fit(X, X["step_ms"])
    assert -1.0 <= comp.theta_["year"] <= 1.0
    one = X.iloc[:1].assign(precision_class="fp32")
    other = X.iloc[:1].assign(precision_class="unseen")
    assert comp.predict(other)[0] == pytest.approx(comp.predict(one)[0])


def test_leave_one_out_predicts_every_row_with_an_interval():
    X = _frame()
    X["step_ms"] = FeatureComposition()._ms(
        {n: TRUTH[n] for n in FeatureComposition()._names(["fp32", "tensor"])}, X)
    X["step_ms"] *= np.exp(np.random.default_rng(1).normal(0, 0.05, len(X)))
    for by in ("chip", "network"):
        out = leave_one_out(X, by=by, form={})
        assert np.isfinite(out["pred_ms"]).all()
        assert (out["pred_low_ms"] <= out["pred_ms"]).all()
        assert (out["pred_ms"] <= out["pred_high_ms"]).all()
        assert out["ape"].mean() < 25.0  # noise of 5 %: a loose sanity bound, not a target


def test_slow_fp16_is_the_product_definition():
    import layerwise.as_run as as_run

    assert slow_fp16 is as_run.slow_fp16
    assert slow_fp16("Titan Xp") and not slow_fp16("H100 SXM5")


def test_catalog_features_of_a_small_target():
    targets = pd.DataFrame({"gpu": ["H100 SXM5", "Titan Xp"], "network": ["resnet18"] * 2,
                            "batch_per_gpu": [2, 2], "precision": ["fp16", "fp32"],
                            "framework": ["pytorch"] * 2, "fw_version": ["2.11", "1.4"],
                            "optimizer": ["momentum", "none"]})
    out = gpu_features(targets)
    assert out["year"].tolist() == [3.0, -2.0]
    for col in ("roof_gemm_c", "roof_gemm_b", "roof_mem"):
        assert (out[col] > 0).all() and np.isfinite(out[col]).all()
    # the same work at a half of the bytes and on a faster GPU: a smaller roofline
    assert out.loc[0, "roof_mem"] < out.loc[1, "roof_mem"]
    assert out.loc[0, "roof_gemm_c"] < out.loc[1, "roof_gemm_c"]


def test_roofline_split_skips_views():
    from layerwise.as_run import resolve
    from layerwise.forecast import device_features

    hw = device_features("H100 SXM5")
    run = resolve("fp32", "pytorch", hw, "2.11")
    assert roofline_split([{"layer": "view", "flops": 1e9, "bytes_in": 1e6}], hw, run) == {
        "roof_gemm_c": 0.0, "roof_gemm_b": 0.0, "roof_mem": 0.0}
