"""Training precision: one vocabulary for what the arithmetic runs in.

Rules:

- ``fp32``: plain single precision on the CUDA cores.
- ``tf32``: FP32 storage, matrix products on TF32 tensor cores (Ampere and newer).
- ``fp16`` / ``bf16``: *mixed* precision training (``mixed_float16``, AMP): activations in
  half precision, matrix products on tensor cores with FP32 accumulation where the GPU has
  them, master weights in FP32.
- :func:`parse_precision` is the one place that turns a spelling (``"amp"``, ``16``,
  ``"mixed_bfloat16"``, ``"torch.float16"``) into a :class:`Precision`; missing values
  (``None``, ``""``, NaN) mean ``fp32``. Anything else raises :class:`PrecisionError` (a
  ``ValueError``).
"""

from __future__ import annotations

import math
from enum import StrEnum
from numbers import Integral, Real
from typing import ClassVar

from fleet.errors import FleetError


class PrecisionError(FleetError, ValueError):
    """A precision spelling :func:`parse_precision` does not know (the message lists the
    accepted ones)."""

    kind: ClassVar[str] = "precision"


class Precision(StrEnum):
    """Arithmetic precision of a training job (``fp16``/``bf16`` = mixed precision)."""

    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"


PRECISIONS: tuple[str, ...] = tuple(p.value for p in Precision)

# Spellings after lower-casing, stripping and turning "_" and spaces into "-".
_SPELLINGS: dict[str, Precision] = {
    **dict.fromkeys(
        ("fp32", "32", "float32", "single", "float", "32-true", "full",
         # TF32 off (layerwise.as_run prices the difference; everywhere else it is fp32)
         "fp32-strict", "strict-fp32", "fp32-no-tf32"), Precision.FP32
    ),
    **dict.fromkeys(("tf32", "tensorfloat32", "tensor-float32"), Precision.TF32),
    **dict.fromkeys(
        (
            "fp16", "16", "float16", "half", "mixed-float16", "amp", "mixed", "mixed-fp16",
            "fp16-mixed", "16-mixed", "mixed-half",
        ),
        Precision.FP16,
    ),
    **dict.fromkeys(
        ("bf16", "bfloat16", "mixed-bfloat16", "mixed-bf16", "bf16-mixed"), Precision.BF16
    ),
}
_PREFIXES = ("torch.", "tf.", "np.", "numpy.", "jnp.")

_BYTES: dict[Precision, int] = {
    Precision.FP32: 4,
    Precision.TF32: 4,
    Precision.FP16: 2,
    Precision.BF16: 2,
}


def _accepted() -> str:
    return ", ".join(sorted(_SPELLINGS)) + " (case-insensitive; None or '' = fp32)"


def parse_precision(value: object) -> Precision:
    """The :class:`Precision` a spelling names; ``None``/``""``/NaN -> ``fp32``.

    Integers 32 and 16 (and the strings "32", "16") mean fp32 and fp16 (mixed).
    Unknown spellings raise :class:`PrecisionError` listing the accepted ones.
    """
    if isinstance(value, Precision):
        return value
    if value is None:
        return Precision.FP32
    if isinstance(value, str) and value in _SPELLINGS:  # the common, exact spellings
        return _SPELLINGS[value]
    if isinstance(value, bool):
        raise PrecisionError(f"unknown precision {value!r}; accepted: {_accepted()}")
    if isinstance(value, Integral):
        text = str(int(value))
    elif isinstance(value, Real):
        number = float(value)
        if math.isnan(number):
            return Precision.FP32
        if not number.is_integer():
            raise PrecisionError(f"unknown precision {value!r}; accepted: {_accepted()}")
        text = str(int(number))
    else:
        text = str(value)
    text = text.strip().lower().replace("_", "-").replace(" ", "-")
    if not text:
        return Precision.FP32
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    try:
        return _SPELLINGS[text]
    except KeyError:
        raise PrecisionError(f"unknown precision {value!r}; accepted: {_accepted()}") from None


def bytes_per_element(precision: object) -> int:
    """Bytes of one stored activation: 4 for fp32/tf32, 2 for fp16/bf16 (half storage)."""
    return _BYTES[parse_precision(precision)]
