"""The whole-network residual (layerwise.pricing.residual): its fit, saved form and answer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from layerwise.compose import Composition, NetworkResidual
from layerwise.errors import SavedPredictorError
from layerwise.forecast import forecast_network
from layerwise.pricing.residual import (
    FEATURES,
    GROUPS,
    MAX_LOG,
    correction,
    features,
    kind_ms,
    network_key,
)
from layerwise.shipped import default_predictor


def _planted(rng, gpus=4, nets=6, slope=0.2, gpu_effect=0.0):
    """Residuals with a slope on the conv share, a per-network effect and (``gpu_effect``) a
    per-GPU one that differs only inside a GPU pair of equal conv share, per GPU (a balanced
    design: every network meets the same conv shares, so the parts separate exactly)."""
    X, r, names, gpu_of = [], [], [], []
    effect = {f"net{i}": 0.1 * (i - nets / 2) for i in range(nets)}
    for g in range(gpus):
        for n, e in effect.items():
            conv = 0.3 + 0.15 * (g // 2 if gpu_effect else g) + rng.uniform(0.0, 1e-9)
            x = features({"conv": conv, "bn": 1 - conv}, 100, False, True, 32)
            X.append(x)
            r.append(slope * conv + e + (gpu_effect if g % 2 else -gpu_effect))
            names.append(n)
            gpu_of.append(f"gpu{g}")
    return np.array(X), np.array(r), np.array(names), np.array(gpu_of), effect


def test_features_shares_cover_the_priced_time_and_keep_their_order():
    x = features({"conv": 6.0, "bn": 2.0, "act": 1.0, "add": 1.0}, 50, True, True, 64)
    assert len(x) == len(FEATURES)
    shares = dict(zip(FEATURES, x, strict=True))
    assert math.isclose(sum(shares[g] for g in GROUPS), 1.0)
    assert shares["conv"] == pytest.approx(0.6) and shares["norm"] == pytest.approx(0.2)
    assert shares["half_conv"] == pytest.approx(0.6) and shares["half"] == 1.0
    assert shares["log_batch"] == pytest.approx(math.log(64))
    assert kind_ms([{"layer": "conv", "ms": 3.0, "floor_ms": 1.0},
                    {"layer": "conv", "ms": 0.5, "floor_ms": 1.0},
                    {"layer": "bn", "ms": 1.0}]) == {"conv": 3.5, "bn": 1.0}


def test_fit_finds_a_planted_network_effect_and_shrinks_it_by_the_gpus_that_saw_it():
    X, r, names, gpus, effect = _planted(np.random.default_rng(0))
    res = NetworkResidual(alpha=1e-6, shrink=1.0).fit(X, r, names, np.zeros(len(r), bool), gpus)
    doc = res.to_dict()
    # the fixed part takes the mean and the slope; what is left per network is its effect
    # (centred), seen by 4 GPUs and shrunk by 4 / 5
    centred = {n: e - np.mean(list(effect.values())) for n, e in effect.items()}
    for n, e in centred.items():
        got, votes = doc["networks"][network_key(n, False)]
        assert votes == 4
        assert got == pytest.approx(e * 4 / 5, abs=1e-6)
    x = X[0]
    with_net, source = correction(doc, x, str(names[0]), False)
    without, other = correction(doc, x, "never-measured", False)
    assert (source, other) == ("network", "shape")
    assert math.log(with_net) - math.log(without) == pytest.approx(
        doc["networks"][network_key(str(names[0]), False)][0])
    # half and full precision are separate keys
    assert correction(doc, x, str(names[0]), True)[1] == "shape"


def test_fit_finds_a_planted_gpu_effect_beside_the_network_effect():
    X, r, names, gpus, effect = _planted(np.random.default_rng(4), gpu_effect=0.15)
    doc = NetworkResidual(alpha=1e-6, shrink=1.0).fit(X, r, names, np.zeros(len(r), bool),
                                                      gpus).to_dict()
    # the network part is untouched by the GPU effect (it averages out over the GPUs) ...
    centred = np.mean(list(effect.values()))
    for n, e in effect.items():
        assert doc["networks"][network_key(n, False)][0] == pytest.approx(
            (e - centred) * 4 / 5, abs=1e-6)
    # ... and each GPU keeps +-0.15 of what that part leaves, 6 networks' votes, shrunk by 6/7
    for g in range(4):
        got, votes = doc["gpus"][network_key(f"gpu{g}", False)]
        assert votes == 6
        left = (0.15 if g % 2 else -0.15) + np.mean(
            [(e - centred) / 5 for e in effect.values()])
        assert got == pytest.approx(left * 6 / 7, abs=1e-6)
    x, name = X[1], str(names[1])
    on_gpu, source = correction(doc, x, name, False, "gpu1")
    elsewhere, other = correction(doc, x, name, False, "a-gpu-never-measured")
    assert (source, other) == ("network+gpu", "network")
    assert math.log(on_gpu) - math.log(elsewhere) == pytest.approx(
        doc["gpus"][network_key("gpu1", False)][0])
    assert correction(doc, x, "never-measured", False, "gpu1")[1] == "gpu"
    # without GPU names the fit has no GPU part
    assert NetworkResidual().fit(X, r, names, np.zeros(len(r), bool)).to_dict()["gpus"] == {}


def test_one_gpu_counts_once_however_many_rows_it_has():
    X, r, names, gpus, _ = _planted(np.random.default_rng(1), gpus=1)
    res = NetworkResidual(alpha=1e-6).fit(np.vstack([X, X]), np.concatenate([r, r]),
                                          np.concatenate([names, names]),
                                          np.zeros(2 * len(r), bool),
                                          np.concatenate([gpus, gpus]))
    assert {v[1] for v in res.to_dict()["networks"].values()} == {1}


def test_the_factor_is_clipped_to_a_factor_of_two():
    conv_only = features({"conv": 1.0}, 100, False, True, 32)
    for slope, bound in ((50.0, math.exp(MAX_LOG)), (-50.0, math.exp(-MAX_LOG))):
        X, r, names, gpus, _ = _planted(np.random.default_rng(2), slope=slope)
        doc = NetworkResidual(alpha=1e-6).fit(X, r, names, np.zeros(len(r), bool),
                                              gpus).to_dict()
        assert correction(doc, conv_only, None, False)[0] == pytest.approx(bound)
    assert correction(None, conv_only, "x", False) == (1.0, "none")


def test_shipped_compositions_carry_a_residual_that_survives_a_round_trip(tmp_path):
    predictor = default_predictor()
    comp = predictor.framework_compositions_["pytorch"]
    assert comp.residual_ and comp.residual_["features"] == list(FEATURES)
    again = Composition.from_dict(json.loads(json.dumps(comp.to_dict())))
    assert again.residual_ == comp.residual_
    broken = comp.to_dict()
    broken["residual"] = {**broken["residual"], "coef": broken["residual"]["coef"][:-1]}
    (tmp_path / "composition.json").write_text(json.dumps(broken))
    with pytest.raises(SavedPredictorError, match="composition"):
        Composition.load(tmp_path)


def test_a_forecast_says_which_residual_it_applied():
    predictor = default_predictor()
    comp = predictor.framework_compositions_["pytorch"]
    measured = next(k.split("|")[0] for k in comp.residual_["networks"]
                    if k.startswith("resnet50|"))
    out = forecast_network(measured, device="NVIDIA H100 80GB HBM3", batch_size=64,
                           optimizer="momentum", precision="fp32", framework="pytorch")
    res = out["network_residual"]
    assert res["source"] == "network+gpu" and measured in res["reason"] and res["gpus"] >= 1
    assert res["networks"] >= 1 and "H100 SXM5" in res["reason"]
    assert math.exp(-MAX_LOG) <= res["factor"] <= math.exp(MAX_LOG)
    # the layers' times and the step overhead add up to the corrected step
    layers = sum(e["ms"] for e in out["layers"])
    assert (layers + out["step_overhead_ms"]) / 1000.0 == pytest.approx(out["batch_seconds"])


def test_a_cpu_step_gets_no_residual_learned_on_gpus():
    out = forecast_network("resnet18", device="cpu", batch_size=4, optimizer="momentum",
                           precision="fp32", framework="pytorch")
    assert out["network_residual"] == {"factor": 1.0, "source": "none", "gpus": 0,
                                       "networks": 0, "reason": None}
    gpu = forecast_network("resnet18", device="NVIDIA A100-SXM4-40GB", batch_size=4,
                           optimizer="momentum", precision="fp32", framework="pytorch")
    assert gpu["network_residual"]["source"] == "network+gpu"


def test_a_gpu_no_whole_network_benchmark_measured_gets_no_gpu_part():
    """The A100 of torchvision_bench is the SXM4 40GB: its PCIe sibling is a catalog row of
    its own and inherits nothing (module rule: the GPU part keys on the catalog name)."""
    comp = default_predictor().framework_compositions_["pytorch"]
    measured = {k.split("|")[0] for k in comp.residual_["gpus"]}
    assert "A100 SXM4 40GB" in measured and "A100 PCIe 40GB" not in measured
    out = forecast_network("resnet18", device="NVIDIA A100-PCIE-40GB", batch_size=4,
                           optimizer="momentum", precision="fp32", framework="pytorch")
    res = out["network_residual"]
    assert res["source"] == "network" and res["networks"] == 0
    assert res["reason"].endswith("no whole-network benchmark on A100 PCIe 40GB")


def test_a_feature_outside_the_fitted_range_is_clipped_to_it():
    X, r, names, gpus, _ = _planted(np.random.default_rng(3))
    doc = NetworkResidual(alpha=1e-6).fit(X, r, names, np.zeros(len(r), bool), gpus).to_dict()
    far = features({"conv": 1.0}, 100, False, True, 32)      # conv share 1.0: never fitted
    edge = features({"conv": max(doc["high"][0], 0.0), "bn": 1.0 - doc["high"][0]},
                    100, False, True, 32)
    assert far[0] > doc["high"][0]
    assert correction(doc, far, None, False) == pytest.approx(correction(doc, edge, None, False))


def _frozen_row(name="retinanet_resnet50_fpn"):
    from layerwise.network import decompose

    rows = decompose(name, batch_size=8, optimizer="momentum", framework="pytorch").rows
    return next(r for r in rows if r.get("frozen") and r["layer"] == "conv")


def test_a_frozen_row_costs_its_forward_pass_only_in_a_training_step():
    from layerwise.forecast import device_features
    from layerwise.pricing.model import shipped_model
    from layerwise.pricing.network import price_entries

    model, hw = shipped_model().arrays, device_features("NVIDIA H100 80GB HBM3")
    row = _frozen_row()

    def price(r, training):
        return price_entries([r], model, hw, "fp32", training, "momentum", "pytorch")[0]

    frozen, forward = price(row, True), price(row, False)
    trained = price({**row, "frozen": False}, True)
    assert frozen["kernels"] == forward["kernels"] == 1 and trained["kernels"] > 1
    assert frozen["ms"] == pytest.approx(forward["ms"]) and trained["ms"] > frozen["ms"]
    assert frozen["floor_ms"] == pytest.approx(forward["floor_ms"])
