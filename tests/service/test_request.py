"""jobcast.service: one job-request schema for CSV rows, table rows and CLI flags; typed
forecasts with one list of route names."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from jobcast.service.engine.forecast import Forecast, ForecastFailure
from jobcast.service.engine.request import (
    CORE_COLUMNS,
    FIELDS,
    JobRequest,
    JobRequestError,
    read_jobs_csv,
)
from jobcast.service.engine.route_registry import LAYERWISE, route_names


def test_csv_row_table_row_and_flags_give_the_same_request(tmp_path):
    csv = tmp_path / "jobs.csv"
    csv.write_text("network,deployment,batch_size,iterations,phase,image_size\n"
                   " resnet50 ,8x V100,256,1000,,\n")
    from_csv = read_jobs_csv(csv)[0]
    frame = pd.DataFrame({"network": ["resnet50"], "deployment": ["8x V100"],
                          "batch_size": [256], "iterations": [1000.0], "phase": [None],
                          "image_size": [np.nan]})
    from_table = JobRequest.from_mapping(frame.to_dict(orient="records")[0])
    from_flags = JobRequest.from_mapping(dict(network="resnet50", deployment="8x V100",
                                              batch_size=256, iterations=1000))
    assert from_csv == from_table == from_flags
    assert from_csv.phase == "job" and from_csv.precision == "fp32"  # the whole job
    assert from_csv.image_size is None  # the network's own input side


def test_errors_name_file_line_and_field(tmp_path):
    csv = tmp_path / "jobs.csv"
    csv.write_text("network,batch_size,iterations\nvgg16,32,10\nvgg16,32,1.5\n")
    with pytest.raises(JobRequestError, match=r"jobs\.csv:3: iterations must be a whole number"):
        read_jobs_csv(csv)
    with pytest.raises(JobRequestError, match="epochs must be finite"):
        JobRequest.from_mapping({"network": "x", "batch_size": 1, "epochs": math.inf})
    csv.write_text("network,deployment\nvgg16,x\n")
    with pytest.raises(JobRequestError, match="missing column.*batch_size"):
        read_jobs_csv(csv)
    csv.write_text("network,batch_size,colour\nvgg16,1,red\n")
    with pytest.raises(JobRequestError, match="unknown column.*colour"):
        read_jobs_csv(csv)


def test_validate_names_what_no_route_can_answer():
    with pytest.raises(JobRequestError, match="network is missing"):
        JobRequest.from_mapping({"network": None, "batch_size": 4}).validate()
    with pytest.raises(JobRequestError, match="phase must be job, train or test"):
        JobRequest(network="x", batch_size=4, phase="eval").validate()
    JobRequest.from_mapping({"network": "x", "batch_size": 4, "phase": "TEST"}).validate()


def test_the_served_signature_comes_from_the_same_schema():
    from jobcast.mlops.pyfunc_model import OPTIONAL_COLUMNS, REQUIRED_COLUMNS

    assert tuple(REQUIRED_COLUMNS) == CORE_COLUMNS
    assert set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS) == {f.name for f in FIELDS}
    assert REQUIRED_COLUMNS["batch_size"] == "long" and REQUIRED_COLUMNS["iterations"] == "double"


def test_forecast_json_shape_and_scaling():
    job = JobRequest(network="vgg16", device="V100", batch_size=32, iterations=10)
    fc = Forecast(job, 10.0, 8.0, 12.5, LAYERWISE, "layerwise/default",
                  details={"device": "Tesla V100", "warnings": []})
    out = fc.to_dict()
    assert out["route"] == "layerwise" and out["unit"] == "s" and out["job"]["network"] == "vgg16"
    assert list(out)[0] == "job" and out["device"] == "Tesla V100"
    double = fc.scaled(2.0, model="layerwise/default+calibration/x")
    assert (double.seconds, double.low, double.high) == (20.0, 16.0, 25.0)
    assert double.to_dict()["model"] == "layerwise/default+calibration/x"
    failure = ForecastFailure(job, "no model")
    assert not failure.ok and failure.to_dict() == {
        "job": job.describe(), "error": "no model",
        "problem": {"kind": "no_forecast", "message": "no model", "file": None, "line": None,
                    "field": None, "row": None}}
    assert route_names() == ("rate", "whole-job", "end-to-end", "hybrid", "layerwise")
