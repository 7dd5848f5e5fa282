"""What other code reads of an answer or an error is typed, never parsed out of a string:
the layerwise route's miss (``NoLayerwiseForecast.reason``), a request error's ``problem``,
an answer's ``parts`` and ``why``, and a failure's error object."""

from __future__ import annotations

import pandas as pd
import pytest

from jobcast.service.engine.forecast import ForecastFailure, ModelParts
from jobcast.service.engine.request import (
    INVALID_VALUE,
    UNKNOWN_COLUMN,
    JobRequest,
    JobRequestError,
    requests_from_rows,
)
from jobcast.service.engine.routes import (
    LAYERWISE_MODEL,
    LayerwiseRoute,
    NoLayerwiseForecast,
    RouteMiss,
)
from jobcast.service.engine.scale_calibration import layerwise_observations


def test_a_layerwise_miss_carries_its_reason():
    req = JobRequest(network="resnet50", device="Banana 9000", batch_size=32, iterations=10)
    with pytest.raises(NoLayerwiseForecast) as err:
        LayerwiseRoute().forecast(req, "no history of resnet50")
    assert isinstance(err.value, RouteMiss) and err.value.why == "no history of resnet50"
    assert "Banana" in err.value.reason and "no layerwise forecast" not in err.value.reason
    assert str(err.value).startswith("no history of resnet50; and no layerwise forecast: ")


def test_calibration_data_lists_the_miss_reason_alone():
    runs = pd.DataFrame([{"run_id": 1, "network": "resnet50", "deployment": "1x Banana 9000",
                          "batch_size": 32, "iterations": 10, "seconds": 5.0,
                          "source": "a.log"}])
    obs, skipped = layerwise_observations(runs)
    assert obs.empty and len(skipped) == 1
    assert skipped[0].startswith("a.log: ") and "no layerwise forecast" not in skipped[0]


def test_a_request_error_says_its_problem_in_a_word():
    bad_column, bad_value, good = requests_from_rows([
        {"network": "resnet50", "batch_size": 32, "colour": "red"},
        {"network": "resnet50", "batch_size": -1},
        {"network": "resnet50", "batch_size": 32, "device": "V100", "iterations": 5}])
    assert isinstance(bad_column, JobRequestError) and bad_column.refusal == UNKNOWN_COLUMN
    assert isinstance(bad_value, JobRequestError) and bad_value.refusal == INVALID_VALUE
    assert bad_column.kind == bad_value.kind == "request" and isinstance(good, JobRequest)


def test_a_layerwise_answer_names_its_parts():
    req = JobRequest(network="resnet50", device="V100", batch_size=32, iterations=10,
                     phase="train")
    out = LayerwiseRoute().forecast(req, "no history")
    assert out.parts == ModelParts(layerwise=LAYERWISE_MODEL) and out.why == "no history"
    assert out.parts.as_dict() == {"end_to_end": None, "layerwise": LAYERWISE_MODEL,
                                   "scaled_from": None}


def test_a_failure_keeps_its_text_and_gives_the_error_object():
    req = JobRequest(network="resnet50", batch_size=32)
    err = JobRequestError("batch_size must be positive", field="batch_size")
    failure = ForecastFailure(req, str(err), err.info())
    out = failure.to_dict()
    assert out["error"] == "batch_size must be positive"
    assert out["problem"]["kind"] == "request" and out["problem"]["field"] == "batch_size"
    assert ForecastFailure(req, "none").to_dict()["problem"]["kind"] == "no_forecast"
