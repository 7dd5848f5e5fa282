"""Will the job fit? The service's memory verdict of a request
(jobcast.service.engine.feasibility)."""

from __future__ import annotations

import math

import pytest

from jobcast.service.engine.feasibility import memory_verdict, request_verdict
from jobcast.service.engine.request import JobRequest
from layerwise.memory import MemoryEstimateError, estimate_memory


def test_t4_at_4096_is_refused_with_the_largest_batch_that_fits() -> None:
    req = JobRequest.from_mapping({"network": "resnet50", "device": "T4", "batch_size": 4096})
    verdict = request_verdict(req)
    assert verdict is not None and verdict.fits is False
    assert verdict.gpu == "Tesla T4" and verdict.batch_size == 4096
    assert 0 < verdict.max_batch < 4096
    edge = memory_verdict("resnet50", "T4", batch_size=verdict.max_batch)
    assert edge is not None and edge.fits
    assert not memory_verdict("resnet50", "T4", batch_size=verdict.max_batch + 1).fits


def test_a_deployment_splits_the_global_batch_over_its_gpus() -> None:
    verdict = memory_verdict("resnet50", None, deployment="nvidia-a100-sxm4-40gb-x8",
                             batch_size=3264)
    assert verdict is not None and verdict.batch_size == math.ceil(3264 / 8)
    assert verdict.gpu == "A100 SXM4 40GB"
    same = estimate_memory("resnet50", batch_size=408, gpu="A100 SXM4 40GB")
    assert verdict.total_bytes == same.total_bytes
    counted = memory_verdict("resnet50", "8x V100", batch_size=1024)
    assert counted is not None and counted.batch_size == 128
    assert memory_verdict("resnet50", "V100", batch_size=1024, gpus=4).batch_size == 256


def test_the_request_precision_optimizer_and_framework_are_used() -> None:
    req = JobRequest.from_mapping({"network": "resnet50", "device": "V100", "batch_size": 256,
                                   "precision": "fp16", "optimizer": "adam",
                                   "framework": "pytorch"})
    verdict = request_verdict(req)
    assert verdict is not None
    assert (verdict.precision, verdict.optimizer, verdict.framework) == ("fp16", "adam",
                                                                         "pytorch")


def test_none_where_it_cannot_say() -> None:
    assert memory_verdict("no-such-net", "T4", batch_size=8) is None
    assert memory_verdict("resnet50", "tpu-v3-8", batch_size=8) is None
    assert memory_verdict("resnet50", "Banana", batch_size=8) is None
    assert memory_verdict("resnet50", None, batch_size=8) is None
    assert memory_verdict("resnet50", "T4", batch_size=None) is None


def test_bad_values_raise_a_clear_error() -> None:
    with pytest.raises(MemoryEstimateError, match="precision"):
        memory_verdict("resnet50", "T4", batch_size=8, precision="fp8")
    with pytest.raises(MemoryEstimateError, match="optimizer"):
        memory_verdict("resnet50", "T4", batch_size=8, optimizer="lion")
