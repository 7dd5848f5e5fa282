"""The shipped predictor: per-type trees on their home rows, the efficiency model elsewhere."""

from __future__ import annotations

import pandas as pd
import pytest
from paths import DATA

from layerwise.efficiency import EfficiencyPredictor
from layerwise.forecast import forecast_network
from layerwise.pricing import SHIPPED_DIR
from layerwise.shipped import EfficiencyPlusSpecialist, default_predictor, load_predictor
from layerwise.sources import kind_rows


@pytest.fixture(scope="module")
def shipped() -> EfficiencyPlusSpecialist:
    predictor = default_predictor()
    assert isinstance(predictor, EfficiencyPlusSpecialist)
    return predictor


def test_old_name_hybrid_predictor_still_imports_with_a_warning():
    import layerwise.shipped as shipped_module

    with pytest.warns(DeprecationWarning, match="EfficiencyPlusSpecialist"):
        from layerwise.shipped import HybridPredictor
    assert HybridPredictor is EfficiencyPlusSpecialist
    with pytest.raises(AttributeError):
        shipped_module.NoSuchName  # noqa: B018


def test_each_row_goes_to_the_model_built_for_it(shipped):
    rows, _ = kind_rows(pd.read_csv(DATA / "justus2018" / "conv_slice.csv.gz"))
    rows = rows.head(20)
    assert set(shipped.predict(rows)["model"]) == {"per-type-gbt"}  # TF fp32 on a Justus GPU
    for change in ({"gpu": "A100"}, {"precision": "fp16"}, {"framework": "pytorch"}):
        out = shipped.predict(rows.assign(**change))
        assert set(out["model"]) == {"efficiency"}, change
    neusight, _ = kind_rows(pd.read_csv(DATA / "neusight" / "ln_slice.csv.gz"))
    assert set(shipped.predict(neusight)["model"]) == {"efficiency"}


def test_networks_are_priced_by_the_efficiency_model_alone(shipped, tmp_path):
    alone = EfficiencyPredictor.load(SHIPPED_DIR)  # the same folder, specialist ignored
    kw = dict(device="V100", batch_size=64, optimizer="sgd")
    assert forecast_network("resnet50", predictor=shipped, **kw)["batch_seconds"] == \
        forecast_network("resnet50", predictor=alone, **kw)["batch_seconds"]


def test_a_folder_without_a_predictor_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="efficiency.json or predictor.json"):
        load_predictor(tmp_path)
