"""User errors in the layerwise room raise a :class:`layerwise.errors.LayerwiseError` with its
own ``kind`` (issue 26), keep their ``ValueError`` base and their message."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd
import pytest

from layerwise.compose import Composition
from layerwise.efficiency import EfficiencyPredictor
from layerwise.errors import (
    DeviceError,
    ForecastInputError,
    LayerwiseError,
    SavedPredictorError,
    TrainingDataError,
    UnknownLayerKindError,
)
from layerwise.forecast import device_features, forecast_network
from layerwise.kinds.registry import get_kind
from layerwise.local_device import parse_device
from layerwise.predictor import LayerPredictor


@contextmanager
def _raises(cls: type[LayerwiseError], kind: str, match: str) -> Iterator[None]:
    """pytest.raises for ``cls`` that also checks the JSON kind and the ValueError base."""
    with pytest.raises(cls, match=match) as caught:
        yield
    assert isinstance(caught.value, ValueError) and caught.value.info().kind == kind


def test_unknown_layer_type():
    with _raises(UnknownLayerKindError, "unknown_layer_kind", "unknown layer type 'lstm'; known"):
        get_kind("lstm")


def test_bad_devices():
    with _raises(DeviceError, "device", "expected cpu, gpu or gpu:N"):
        parse_device("tpu:0")
    with _raises(DeviceError, "device", "Banana"):
        device_features("Banana GPU 9000")
    with _raises(DeviceError, "device", "only this machine's CPU"):
        device_features("cpu-some-other-machine-64c")


@pytest.mark.parametrize(("kw", "match"), [
    ({"call_overhead": "twice"}, "call_overhead must be"),
    ({"input_grad": "guess"}, "input_grad must be"),
    ({"epochs": 2}, "epochs needs dataset_size"),
    ({"dataset_size": 0}, "dataset_size must be >= 1"),
])
def test_forecast_arguments_out_of_range(kw, match):
    with _raises(ForecastInputError, "forecast_input", match):
        forecast_network("resnet50", device="V100", batch_size=8, **kw)


def test_training_rows_that_cannot_train_a_predictor():
    with _raises(TrainingDataError, "training_data", "need a 'time_ms_median' column"):
        LayerPredictor().fit(pd.DataFrame({"layer": ["conv"]}))
    with _raises(TrainingDataError, "training_data", "no usable training rows"):
        EfficiencyPredictor().fit(pd.DataFrame({"layer": ["lstm"]}), [1.0])


def test_a_bad_composition_file(tmp_path):
    (tmp_path / "composition.json").write_text("{not json")
    with _raises(SavedPredictorError, "saved_predictor", "bad composition file"):
        Composition.load(tmp_path)
