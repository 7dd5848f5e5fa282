"""Training framework: one vocabulary for what runs the layers.

Rules: ``pytorch`` (eager ``torch.nn``, the default: what most CNN training runs today) or
``tensorflow`` (Keras / ``tf.function`` graphs). :func:`parse_framework` is the one place that
turns a spelling (``tf``, ``keras``, ``torch``, ``PyTorch``) into a :class:`Framework`; missing
values (``None``, ``""``, NaN) and ``auto`` mean :data:`DEFAULT_FRAMEWORK` (``pytorch``);
anything else raises :class:`FrameworkError` (a ``ValueError``) listing the choices.
A request may also leave it to jobcast: :func:`parse_framework_choice` reads ``auto`` (and a
missing value) as None, which ``jobcast.service.engine.framework_choice`` resolves from the
request's stack, the job's history and the network's source, else :data:`DEFAULT_FRAMEWORK`.
:func:`stack_framework` is the one place that reads a framework out of a history's software
stack (its first word found in :data:`STACK_FRAMEWORKS`; Caffe calls one cuDNN/cuBLAS kernel
per layer without a graph runtime, so it runs like eager ``pytorch``).
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import ClassVar

from fleet.errors import FleetError


class FrameworkError(FleetError, ValueError):
    """A framework spelling :func:`parse_framework` does not know (the message lists the
    choices)."""

    kind: ClassVar[str] = "framework"


class Framework(StrEnum):
    """The framework a job's (or a timing row's) layers run in."""

    TENSORFLOW = "tensorflow"
    PYTORCH = "pytorch"


FRAMEWORKS: tuple[str, ...] = tuple(f.value for f in Framework)
DEFAULT_FRAMEWORK = Framework.PYTORCH
AUTO = "auto"  # a request's framework left to jobcast (parse_framework_choice: None)
_SPELLINGS = {
    "tensorflow": Framework.TENSORFLOW, "tf": Framework.TENSORFLOW,
    "keras": Framework.TENSORFLOW, "tf.keras": Framework.TENSORFLOW,
    "pytorch": Framework.PYTORCH, "torch": Framework.PYTORCH, "pt": Framework.PYTORCH,
}


def parse_framework(value: object) -> Framework:
    """A :class:`Framework` from a spelling (see the module rules); ``auto`` or a missing
    value is :data:`DEFAULT_FRAMEWORK`."""
    return parse_framework_choice(value) or DEFAULT_FRAMEWORK


def parse_framework_choice(value: object) -> Framework | None:
    """A request's framework: None for ``auto`` or a missing value (left to jobcast), else
    the :class:`Framework` a spelling names; an unknown one is a :class:`FrameworkError`
    that lists the choices."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip().lower()
    if not text or text == AUTO:
        return None
    try:
        return _SPELLINGS[text]
    except KeyError:
        raise FrameworkError(f"unknown framework {value!r}; choose from {AUTO}, "
                             f"{', '.join(FRAMEWORKS)}") from None


# Words of a software stack -> the framework whose layers run the same way.
STACK_FRAMEWORKS = {"caffe": "pytorch", "pytorch": "pytorch", "torch": "pytorch",
                    "tensorflow": "tensorflow", "tf": "tensorflow", "keras": "tensorflow"}


def stack_framework(stack: str | None, default: str) -> str:
    """The framework of a history's ``stack`` (its first word, case-folded, found in
    :data:`STACK_FRAMEWORKS`), else ``default``."""
    for word in re.split(r"[^a-z0-9]+", str(stack or "").casefold()):
        if word in STACK_FRAMEWORKS:
            return STACK_FRAMEWORKS[word]
    return default
