"""PyTorch is the default framework (issue 36): TensorFlow only when asked, or when the stack,
the job's history or the network's source says so; the answer says which and why."""

from __future__ import annotations

import json

import pytest

from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.framework_choice import resolve_framework
from jobcast.service.engine.request import JobRequest, requests_from_rows


def _ask(**kw) -> JobRequest:
    return JobRequest(**{"device": "V100", "batch_size": 32, "iterations": 10, **kw})


@pytest.fixture(scope="module")
def forecaster() -> Forecaster:
    return Forecaster()


def _framework_note(answer) -> str:
    notes = [n for n in answer.details["assumptions"] if n.startswith("framework ")]
    assert len(notes) == 1, answer.details["assumptions"]
    return notes[0]


def test_resnet50_is_priced_as_pytorch_by_default_and_the_answer_says_why(forecaster):
    auto = forecaster.forecast(_ask(network="resnet50"))
    torch = forecaster.forecast(_ask(network="resnet50", framework="pytorch"))
    assert auto.seconds == torch.seconds
    note = _framework_note(auto)
    assert note.startswith("framework pytorch: the default")
    assert "--framework tensorflow" in note


def test_tensorflow_when_asked(forecaster):
    asked = forecaster.forecast(_ask(network="resnet50", framework="tf"))
    assert _framework_note(asked) == "framework tensorflow (as asked)"
    assert asked.seconds != forecaster.forecast(_ask(network="resnet50")).seconds


def test_a_pytorch_only_network_is_never_priced_as_tensorflow_unless_asked():
    req, note = resolve_framework(_ask(network="resnet18"))
    assert req.framework == "pytorch" and note.startswith("framework pytorch")


@pytest.mark.parametrize(("kw", "stacks", "framework", "why"), [
    (dict(network="inception_resnet_v2"), (), "tensorflow", "Keras network"),
    (dict(network="resnet50", stack="tensorflow-2.4 cuda11"), (), "tensorflow", "stack you named"),
    (dict(network="resnet50"), ("", "TF 1.15 (tf_cnn_benchmarks)"), "tensorflow", "history"),
    (dict(network="resnet50"), ("pytorch 2.1",), "pytorch", "history"),
    (dict(network="torchvision.models:resnet50"), (), "pytorch", "module:callable"),
    (dict(network='{"framework": "keras", "input_shape": [32, 32, 3], "layers": []}'), (),
     "tensorflow", "JSON spec says framework keras"),
])
def test_the_source_the_stack_and_the_history_decide_where_not_asked(kw, stacks, framework,
                                                                     why):
    req, note = resolve_framework(_ask(**kw), stacks)
    assert req.framework == framework
    assert note.startswith(f"framework {framework}: ") and why in note


def test_a_stated_framework_beats_the_history():
    req, note = resolve_framework(_ask(network="resnet50", framework="pytorch"),
                                  ("tensorflow 2.4",))
    assert req.framework == "pytorch" and note == "framework pytorch (as asked)"


def test_an_unknown_framework_is_refused_naming_auto_too(forecaster):
    out = json.loads(json.dumps(forecaster.forecast(_ask(network="resnet50",
                                                         framework="jax")).to_dict(),
                                default=str))
    assert "unknown framework 'jax'; choose from auto, tensorflow, pytorch" in str(out)


def test_a_served_row_never_names_code_to_run():
    out = requests_from_rows([{"network": "os:system('true')", "deployment": "x",
                               "batch_size": 1, "iterations": 1, "phase": "train"}])
    assert out[0].field == "network" and "module:callable" in str(out[0])
