"""fleet.precision: one vocabulary for fp32 / tf32 / fp16 / bf16 (mixed) training."""

from __future__ import annotations

import math

import pytest

from fleet.precision import PRECISIONS, Precision, bytes_per_element, parse_precision


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, Precision.FP32),
        ("", Precision.FP32),
        ("  ", Precision.FP32),
        (math.nan, Precision.FP32),
        (32, Precision.FP32),
        ("32", Precision.FP32),
        (32.0, Precision.FP32),
        ("fp32", Precision.FP32),
        ("Float32", Precision.FP32),
        ("single", Precision.FP32),
        ("tf32", Precision.TF32),
        ("TF32", Precision.TF32),
        (16, Precision.FP16),
        ("16", Precision.FP16),
        ("fp16", Precision.FP16),
        ("float16", Precision.FP16),
        ("half", Precision.FP16),
        ("mixed_float16", Precision.FP16),
        ("AMP", Precision.FP16),
        ("mixed", Precision.FP16),
        ("mixed-fp16", Precision.FP16),
        (" fp16 ", Precision.FP16),
        ("torch.float16", Precision.FP16),
        ("16-mixed", Precision.FP16),
        ("bf16", Precision.BF16),
        ("bfloat16", Precision.BF16),
        ("mixed_bfloat16", Precision.BF16),
        ("BF16-mixed", Precision.BF16),
        (Precision.BF16, Precision.BF16),
    ],
)
def test_parse_precision_spellings(value, expected):
    assert parse_precision(value) is expected


@pytest.mark.parametrize("value", ["fp8", "int8", "64", 64, 8, 16.5, True, "double", object()])
def test_unknown_precision_lists_accepted_values(value):
    with pytest.raises(ValueError, match="unknown precision") as info:
        parse_precision(value)
    message = str(info.value)
    for accepted in ("fp32", "tf32", "fp16", "bf16", "mixed-float16", "amp"):
        assert accepted in message


def test_precision_is_a_string_enum():
    assert PRECISIONS == ("fp32", "tf32", "fp16", "bf16")
    assert Precision.FP16 == "fp16" and f"{Precision.BF16}" == "bf16"
    assert all(parse_precision(p) == p for p in PRECISIONS)


def test_bytes_per_element():
    assert [bytes_per_element(p) for p in Precision] == [4, 4, 2, 2]
    assert bytes_per_element("mixed_float16") == 2
    assert bytes_per_element(None) == 4
