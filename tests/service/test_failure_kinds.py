"""A request no route answers carries the kind of what stopped it, not only "no_forecast":
an unknown GPU is ``unknown_gpu`` and an unknown network ``unknown_network`` (the message
still gives every route's reason); a miss that says no more stays ``no_forecast``."""

from __future__ import annotations

from fleet.catalog import UnknownGpuError
from jobcast.service.engine.forecast import NO_FORECAST, ForecastFailure
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from layerwise.kinds.mapping import UnknownNetworkError

JOB = {"batch_size": 64, "iterations": 100, "phase": "train"}


def _failure(**fields) -> ForecastFailure:
    out = Forecaster(None).forecast(JobRequest(**{**JOB, **fields}))
    assert isinstance(out, ForecastFailure), out
    return out


def test_an_unknown_gpu_says_so_in_its_kind():
    out = _failure(network="resnet50", device="Quantum 9000")
    assert out.problem.kind == UnknownGpuError.kind
    assert "Quantum 9000" in out.problem.message and "no layerwise forecast" in out.error
    assert out.to_dict()["problem"]["kind"] == UnknownGpuError.kind


def test_an_unknown_network_says_so_in_its_kind():
    out = _failure(network="nosuchnet", device="T4")
    assert out.problem.kind == UnknownNetworkError.kind and "nosuchnet" in out.error


def test_a_miss_that_says_no_more_stays_no_forecast():
    out = _failure(network="resnet50", device=None)
    assert out.problem.kind == NO_FORECAST
