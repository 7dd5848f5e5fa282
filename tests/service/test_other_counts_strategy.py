"""Which data-parallel mechanism moves end-to-end history between GPU counts
(``jobcast.service.engine.other_counts.history_strategy``): the one the request names, else
``auto`` for the history's own stack (TensorFlow 1.x: replicated variables; TensorFlow 2:
one all-reduce; anything else: DDP-like overlapped all-reduce)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jobcast.service.engine.other_counts import history_strategy
from jobcast.service.engine.request import JobRequest


def _req(**extra) -> JobRequest:
    return JobRequest.from_mapping({"network": "resnet50", "deployment": "4x A100",
                                    "batch_size": 256, "iterations": 10, **extra})


@pytest.mark.parametrize(("stack", "strategy"), [
    ("tensorflow-1.15", "replicated"),
    ("TF 1.14 (tf_cnn_benchmarks)", "replicated"),
    ("tensorflow-2.15", "allreduce"),
    ("Keras 3 (JAX off)", "allreduce"),
    ("mxnet-1.9 horovod", "ddp"),
    ("pytorch-2.3", "ddp"),
    (None, "ddp"),
])
def test_auto_follows_the_history_stack(stack, strategy):
    got, why = history_strategy(_req(), SimpleNamespace(stack=stack))
    assert got == strategy
    assert "auto" in why


def test_a_named_mechanism_wins_over_the_history_stack():
    got, why = history_strategy(_req(data_parallel="replicated"),
                                SimpleNamespace(stack="pytorch-2.3"))
    assert got == "replicated" and "asked" in why
