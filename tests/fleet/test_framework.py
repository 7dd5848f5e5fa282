"""One vocabulary for the framework a job runs in; per-framework network compositions."""

from __future__ import annotations

import math

import pytest

from fleet.framework import FRAMEWORKS, Framework, parse_framework, parse_framework_choice
from jobcast.service.engine.request import JobRequest, JobRequestError
from layerwise.compose import Composition, composition_for


@pytest.mark.parametrize(("text", "expected"), [
    ("tensorflow", Framework.TENSORFLOW), ("TF", Framework.TENSORFLOW),
    (" keras ", Framework.TENSORFLOW), ("PyTorch", Framework.PYTORCH),
    ("torch", Framework.PYTORCH), (None, Framework.PYTORCH), ("", Framework.PYTORCH),
    (math.nan, Framework.PYTORCH), ("auto", Framework.PYTORCH),
])
def test_spellings(text, expected):
    assert parse_framework(text) is expected


def test_unknown_framework_lists_the_choices():
    with pytest.raises(ValueError, match="unknown framework 'jax'; choose from auto, tensorflow, "
                                         "pytorch"):
        parse_framework("jax")
    assert FRAMEWORKS == ("tensorflow", "pytorch")


def test_job_requests_default_to_auto_and_refuse_unknown_frameworks():
    req = JobRequest.from_mapping({"network": "resnet50", "batch_size": 32, "device": "V100"})
    assert req.framework == "auto"
    assert parse_framework_choice(req.framework) is None
    assert parse_framework_choice(" Keras ") is Framework.TENSORFLOW
    req = JobRequest.from_mapping({"network": "resnet50", "batch_size": 32, "device": "V100",
                                   "framework": "mxnet"})
    with pytest.raises(JobRequestError, match="unknown framework 'mxnet'"):
        req.validate()


class _Predictor:
    pass


def test_a_framework_gets_its_own_composition_else_the_default_else_identity():
    pred = _Predictor()
    assert composition_for(pred, "pytorch").step(10.0, 9.0, 11.0, 5, "fp32")[0] == 10.0
    default = Composition.from_dict({"scale": {"fp32": 0.5}, "kernel_ms": 0.0, "step_ms": 1.0,
                                     "log_low": -0.1, "log_high": 0.1})
    torch_comp = Composition.from_dict({"scale": {"fp32": 1.0}, "kernel_ms": 0.1,
                                        "step_ms": 0.0, "log_low": -0.1, "log_high": 0.1})
    pred.composition_ = default
    assert composition_for(pred, "pytorch") is default
    pred.framework_compositions_ = {"pytorch": torch_comp}
    assert composition_for(pred, "pytorch") is torch_comp
    assert composition_for(pred, "tensorflow") is default
    assert composition_for(pred, "pytorch").step(10.0, 9.0, 11.0, 5, "fp32")[0] == \
        pytest.approx(10.5)
