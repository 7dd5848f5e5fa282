"""Data-parallel mechanism: one vocabulary for how N GPUs share a training step.

Rules: ``auto`` (the default: the framework's modern mechanism, ``ddp`` for PyTorch and
``allreduce`` for TensorFlow, ``replicated`` where the stack says TensorFlow 1.x; chosen by
``models.scaling.auto_strategy``) or one of :data:`KNOWN_STRATEGIES`:

* ``ddp``: gradients all-reduced in buckets while the backward pass goes on (PyTorch
  ``DistributedDataParallel``; Horovod and MXNet's fused NCCL all-reduce work alike);
* ``allreduce``: one all-reduce of every gradient after the backward pass (TensorFlow 2
  ``MirroredStrategy`` as Keras runs it);
* ``replicated``: TensorFlow 1.x replicated variables (tf_cnn_benchmarks);
* ``dp``: ``torch.nn.DataParallel`` (one process drives every GPU).

:func:`parse_data_parallel` is the one place that turns a spelling into a choice (case, spaces
and underscores ignored; ``DistributedDataParallel``, ``horovod``, ``mirrored``,
``MirroredStrategy``, ``DataParallel`` accepted); missing values (``None``, ``""``, NaN) mean
``auto``; anything else raises :class:`DataParallelError` (a ``ValueError``) listing the
choices.
"""

from __future__ import annotations

import math
from typing import ClassVar

from fleet.errors import FleetError


class DataParallelError(FleetError, ValueError):
    """A data-parallel spelling :func:`parse_data_parallel` does not know."""

    kind: ClassVar[str] = "data_parallel"


KNOWN_STRATEGIES: tuple[str, ...] = ("ddp", "allreduce", "replicated", "dp")
DATA_PARALLEL_CHOICES: tuple[str, ...] = ("auto", *KNOWN_STRATEGIES)
MECHANISMS: dict[str, str] = {
    "ddp": "bucketed gradient all-reduce overlapped with the backward pass (PyTorch DDP, "
           "Horovod)",
    "allreduce": "one gradient all-reduce after the backward pass (TensorFlow 2 "
                 "MirroredStrategy)",
    "replicated": "TensorFlow 1.x replicated variables (fitted on tf_cnn_benchmarks)",
    "dp": "torch.nn.DataParallel (one process drives every GPU)",
}
_ALIASES = {"distributeddataparallel": "ddp", "horovod": "ddp", "mirrored": "allreduce",
            "mirroredstrategy": "allreduce", "dataparallel": "dp"}


def parse_data_parallel(value: object) -> str:
    """``auto`` or one of :data:`KNOWN_STRATEGIES` from a spelling (see the module rules)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "auto"
    text = str(value).strip().lower().replace(" ", "").replace("_", "").replace("-", "")
    if not text:
        return "auto"
    text = _ALIASES.get(text, text)
    if text not in DATA_PARALLEL_CHOICES:
        raise DataParallelError(f"unknown data-parallel mechanism {str(value)[:40]!r}; choose from "
                         f"{', '.join(DATA_PARALLEL_CHOICES)}")
    return text
