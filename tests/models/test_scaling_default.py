"""The data-parallel mechanism is what the user says; ``auto`` is the framework's modern one
(PyTorch DDP, TensorFlow 2 all-reduce), TensorFlow 1.x replicated variables only when the stack
says 1.x or the user asks. Relations only: no timing or prediction is hard-coded."""

from __future__ import annotations

import pytest

from fleet.data_parallel import DATA_PARALLEL_CHOICES, KNOWN_STRATEGIES, parse_data_parallel
from fleet.deployment import Deployment
from jobcast.service.engine.request import JobRequest, JobRequestError
from jobcast.service.engine.routes import LayerwiseRoute
from models.scaling import STRATEGIES, auto_strategy, data_parallel_step, resolve_strategy

LAYERS = [{"ms": 1.5, "params": 3e5}] * 50 + [{"ms": 0.5, "params": 2e6}]


@pytest.mark.parametrize(("spelling", "choice"), [
    (None, "auto"), ("", "auto"), (float("nan"), "auto"), ("Auto", "auto"), ("DDP", "ddp"),
    ("DistributedDataParallel", "ddp"), ("horovod", "ddp"), ("MirroredStrategy", "allreduce"),
    ("all-reduce", "allreduce"), ("replicated", "replicated"), ("DataParallel", "dp"),
])
def test_spellings_parse_to_one_choice(spelling, choice):
    assert parse_data_parallel(spelling) == choice
    assert choice in DATA_PARALLEL_CHOICES


def test_a_bad_mechanism_names_the_choices():
    with pytest.raises(ValueError, match="choose from auto, ddp, allreduce, replicated, dp"):
        parse_data_parallel("zero3")


@pytest.mark.parametrize(("framework", "stack", "expected"), [
    ("pytorch", None, "ddp"), ("torch", "NGC PyTorch 23.09", "ddp"),
    ("tensorflow", None, "allreduce"), ("tf", "TensorFlow 2.5.1", "allreduce"),
    ("tensorflow", "tensorflow-1.15.0", "replicated"), ("keras", "TF 1.14", "replicated"),
    ("tensorflow", "nvcr.io/nvidia/tensorflow:20.06-tf1-py3", "replicated"),
])
def test_auto_is_the_framework_modern_default_and_tf1_only_from_the_stack(framework, stack,
                                                                          expected):
    assert auto_strategy(framework, stack) == expected
    assert resolve_strategy(None, framework, stack) == expected
    assert resolve_strategy("auto", framework, stack) == expected
    assert resolve_strategy("dp", framework, stack) == "dp"  # asked: never overridden
    assert set(STRATEGIES.values()) <= set(KNOWN_STRATEGIES)


def test_mechanisms_order_on_one_step_and_one_gpu_is_unchanged():
    eight, one = Deployment("V100", 8), Deployment("V100", 1)
    got = {s: data_parallel_step("tensorflow", 100.0, eight, "fp16", LAYERS, s)
           for s in KNOWN_STRATEGIES}
    assert all(g.strategy == s for s, g in got.items())
    # overlap hides what one all-reduce after the backward pass shows
    assert 100.0 <= got["ddp"].ms <= got["allreduce"].ms
    assert got["allreduce"].ms == pytest.approx(100.0 + got["allreduce"].allreduce_ms)
    assert got["allreduce"].low_ms <= got["allreduce"].ms <= got["allreduce"].high_ms
    assert got["allreduce"].ms < got["replicated"].ms  # TF 1.x replicas cost more
    for s in KNOWN_STRATEGIES:
        assert data_parallel_step("tensorflow", 100.0, one, "fp16", LAYERS, s).ms == \
            pytest.approx(100.0)
    assert data_parallel_step("tensorflow", 100.0, eight, "fp16", LAYERS).strategy == \
        STRATEGIES["tensorflow"]


def test_the_request_field_parses_and_refuses_a_bad_value_naming_it():
    req = JobRequest.from_mapping({"network": "resnet50", "batch_size": 64,
                                   "data_parallel": " DistributedDataParallel "})
    assert req.data_parallel == "ddp"
    assert JobRequest.from_mapping({"network": "resnet50", "batch_size": 64}).data_parallel \
        is None
    with pytest.raises(JobRequestError, match="jobs.csv:3: unknown data-parallel") as err:
        JobRequest.from_mapping({"network": "resnet50", "batch_size": 64,
                                 "data_parallel": "zero3"}, where="jobs.csv:3")
    assert err.value.field == "data_parallel"
    with pytest.raises(JobRequestError, match="data-parallel"):
        JobRequest(network="resnet50", batch_size=64, data_parallel="zero3").validate()


def test_the_layerwise_answer_states_the_mechanism_and_auto_picks_the_documented_one():
    route = LayerwiseRoute()
    base = dict(network="resnet50", deployment="8x A100-SXM4-80GB", batch_size=2048,
                iterations=10, phase="train", precision="fp16")

    def scaling(**extra) -> tuple[float, dict]:
        f = route.forecast(JobRequest(**{**base, **extra}))
        return f.seconds, f.details["scaling"]

    torch_s, torch = scaling()  # the default framework is pytorch (issue 36)
    assert torch["strategy"] == "ddp" and "auto for pytorch" in torch["chosen"]
    auto_s, auto = scaling(framework="tensorflow")
    assert auto["strategy"] == "allreduce" and "auto for tensorflow" in auto["chosen"]
    assert "MirroredStrategy" in auto["mechanism"]
    tf1_s, tf1 = scaling(stack="tensorflow-1.15", framework="tensorflow")
    assert tf1["strategy"] == "replicated" and "tensorflow-1.15" in tf1["chosen"]
    ddp_s, ddp = scaling(data_parallel="ddp", framework="tensorflow")
    rep_s, rep = scaling(data_parallel="replicated", framework="tensorflow")
    assert ddp["strategy"] == "ddp" and ddp["chosen"].startswith("asked")
    assert ddp_s <= auto_s < rep_s == pytest.approx(tf1_s)
    # one GPU: the mechanism changes nothing
    one = dict(network="resnet50", device="A100-SXM4-80GB", batch_size=256, iterations=10,
               phase="train", precision="fp16")
    steps = {route.forecast(JobRequest(**one, data_parallel=s)).seconds
             for s in ("ddp", "replicated", None)}
    assert len(steps) == 1
