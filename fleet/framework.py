"""Training framework: one vocabulary for what runs the layers.

Rules: ``tensorflow`` (Keras / ``tf.function`` graphs, the default) or ``pytorch`` (eager
``torch.nn``). :func:`parse_framework` is the one place that turns a spelling (``tf``,
``keras``, ``torch``, ``PyTorch``) into a :class:`Framework`; missing values (``None``, ``""``,
NaN) mean ``tensorflow``; anything else raises :class:`ValueError` listing the choices.
"""

from __future__ import annotations

import math
from enum import StrEnum


class Framework(StrEnum):
    """The framework a job's (or a timing row's) layers run in."""

    TENSORFLOW = "tensorflow"
    PYTORCH = "pytorch"


FRAMEWORKS: tuple[str, ...] = tuple(f.value for f in Framework)
DEFAULT_FRAMEWORK = Framework.TENSORFLOW
_SPELLINGS = {
    "tensorflow": Framework.TENSORFLOW, "tf": Framework.TENSORFLOW,
    "keras": Framework.TENSORFLOW, "tf.keras": Framework.TENSORFLOW,
    "pytorch": Framework.PYTORCH, "torch": Framework.PYTORCH, "pt": Framework.PYTORCH,
}


def parse_framework(value: object) -> Framework:
    """A :class:`Framework` from a spelling (see the module rules)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DEFAULT_FRAMEWORK
    text = str(value).strip().lower()
    if not text:
        return DEFAULT_FRAMEWORK
    try:
        return _SPELLINGS[text]
    except KeyError:
        raise ValueError(f"unknown framework {value!r}; choose from "
                         f"{', '.join(FRAMEWORKS)}") from None
