"""An op no layer kind covers never dominates a step (issue 36): bounded, flagged, interval wider.

A small module of our own (the project's CPU torch, meta device, no torchvision): a conv
stem, a batched matrix product no kind covers (CondConv-like per-sample mixing) and a dense
head; the same module without the product is the reference.
"""

from __future__ import annotations

import math

import pytest

from layerwise.pricing.rows import UNCOVERED_SHARE, bound_uncovered

torch = pytest.importorskip("torch")
nn = torch.nn


class Mixer(nn.Module):
    """Conv stem, then (``mix``) a per-sample product with ``width`` rows no kind covers."""

    def __init__(self, mix: bool = True, width: int = 512):
        super().__init__()
        self.mix, self.width = mix, width
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        if self.mix:
            b, c, h, w = x.shape
            k = torch.ones(b, self.width, c, device=x.device)
            y = torch.bmm(k, x.flatten(2))
            x = x * y.mean(dim=1, keepdim=True).view(b, 1, h, w)
        return self.head(x.mean(dim=(2, 3)))


def mixer() -> nn.Module:
    return Mixer(True)


def wide_mixer() -> nn.Module:
    return Mixer(True, width=8192)


def plain() -> nn.Module:
    return Mixer(False)


def _forecast(name: str) -> dict:
    from layerwise.forecast import forecast_network

    return forecast_network(f"{__name__}:{name}", device="NVIDIA A100-SXM4-80GB", batch_size=8,
                            image_size=64, framework="pytorch", optimizer="sgd")


def test_uncovered_ops_are_capped_flagged_and_widen_the_interval():
    result, wide = _forecast("mixer"), _forecast("wide_mixer")
    for res in (result, wide):
        rough = [e for e in res["layers"] if e["method"] == "roofline"]
        covered = math.fsum(e["ms"] for e in res["layers"] if e["method"] != "roofline")
        assert rough and all(e["layer"] == "unknown" for e in rough)
        share = math.fsum(e["ms"] for e in rough) / (covered + math.fsum(e["ms"] for e in rough))
        assert share <= UNCOVERED_SHARE + 1e-9
        assert all(e["high_ms"] >= e["ms"] for e in rough)
        assert any("no kind covers" in w and "capped" in w for w in res["warnings"])
        assert res["low"] <= res["batch_seconds"] <= res["high"]
    # 16x the uncovered work: the point is bounded, the interval's top grows instead
    assert wide["batch_seconds"] <= result["batch_seconds"] * (1.0 + UNCOVERED_SHARE)
    assert wide["high"] > result["high"]


def test_a_step_without_uncovered_ops_is_not_touched():
    result = _forecast("plain")
    assert not any(e["method"] == "roofline" for e in result["layers"])
    assert not any("no kind covers" in w for w in result["warnings"])


def test_the_cap_keeps_small_uncovered_prices_and_a_step_with_nothing_covered():
    def entry(method: str, ms: float) -> dict:
        return {"method": method, "ms": ms, "low_ms": 0.3 * ms, "high_ms": 3.0 * ms,
                "note": "", "capped": False, "floor_ms": 0.0}

    small = bound_uncovered([entry("predictor", 9.0), entry("roofline", 1.0)])
    assert small[1]["ms"] == 1.0 and not small[1]["capped"]
    alone = bound_uncovered([entry("roofline", 5.0)])
    assert alone[0]["ms"] == 5.0
    big = bound_uncovered([entry("predictor", 3.0), entry("roofline", 30.0),
                           entry("roofline", 10.0)])
    assert math.isclose(big[1]["ms"] + big[2]["ms"], UNCOVERED_SHARE / (1 - UNCOVERED_SHARE) * 3)
    assert big[1]["ms"] / big[2]["ms"] == pytest.approx(3.0)
    assert big[1]["high_ms"] == 90.0 and big[1]["capped"]
