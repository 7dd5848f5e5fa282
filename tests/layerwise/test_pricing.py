"""One way to price a network (layerwise.pricing): one entry point, one step formula, one
array interface; decompositions derived across batch sizes exactly."""

from __future__ import annotations

import dataclasses
import re

from paths import REPO

from layerwise.efficiency import EfficiencyPredictor
from layerwise.forecast import device_features, forecast_network
from layerwise.network import decompose
from layerwise.predictor import LayerPredictor
from layerwise.pricing import SHIPPED_DIR, price_network, shipped_model
from layerwise.pricing import batch as cache
from layerwise.pricing.model import COMPOSED, PER_TYPE
from layerwise.shipped import EfficiencyPlusSpecialist, default_predictor


def test_every_composed_predictor_answers_through_the_one_entry_point():
    kw = dict(batch_size=48, optimizer="sgd", precision="fp16", framework="pytorch")
    for device in ("V100", "cpu"):
        direct = price_network("resnet50", model=shipped_model(), hw=device_features(device),
                               device=device, **kw)
        for predictor in (None, default_predictor(), EfficiencyPredictor.load(SHIPPED_DIR)):
            assert forecast_network("resnet50", device=device, predictor=predictor,
                                    **kw) == direct


def test_each_predictor_class_declares_how_it_is_priced():
    assert EfficiencyPredictor.pricing == COMPOSED
    assert EfficiencyPlusSpecialist.pricing == COMPOSED
    assert LayerPredictor.pricing == PER_TYPE


def test_one_step_formula_and_no_switch_on_attributes():
    layerwise = REPO / "layerwise"
    defining = sorted(str(p.relative_to(layerwise)) for p in layerwise.rglob("*.py")
                      if re.search(r"^def (step_from_dict|step_array|_core)\(",
                                   p.read_text(), re.M))
    assert defining == ["pricing/step.py"]
    assert not (layerwise / "quick.py").exists()
    assert "hasattr(" not in (layerwise / "forecast.py").read_text()


def test_later_batch_sizes_are_derived_exactly_from_two_decompositions():
    cache.NETWORKS.clear()
    for name in ("resnet50", "inceptionv3", "alexnet"):
        for size in (7, 64, 1, 250):
            got = cache.network_rows(name, size, "sgd", None, "tensorflow")
            ref = decompose(name, batch_size=size, optimizer="sgd", framework="tensorflow")
            assert dataclasses.asdict(got) == dataclasses.asdict(ref), (name, size)
            assert [[type(v) for v in r.values()] for r in got.rows] == \
                [[type(v) for v in r.values()] for r in ref.rows]
        assert isinstance(cache.NETWORKS[(name, "sgd", None, "tensorflow")], cache.BatchScaled)


def test_a_value_not_proportional_to_the_batch_keeps_decomposing():
    a = decompose("alexnet", batch_size=2, optimizer="sgd")
    b = decompose("alexnet", batch_size=6, optimizer="sgd")
    assert cache.BatchScaled.check(a, b) is not None
    b.rows[3]["flops"] += 1.0
    assert cache.BatchScaled.check(a, b) is None
    b = decompose("alexnet", batch_size=6, optimizer="sgd")
    b.rows[0]["note"] = "changed"
    assert cache.BatchScaled.check(a, b) is None
