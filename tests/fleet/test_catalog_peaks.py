"""Catalog v2: per-precision peaks, roofline inputs, hardware facts and loader errors."""

from __future__ import annotations

import pytest

from fleet.catalog import (
    FORM_FACTORS,
    HW_KEYS,
    GpuSpec,
    load_catalog,
    resolve_gpu,
    roofline_features,
)
from fleet.precision import Precision

HEADER = (
    "name,aliases,architecture,compute_capability,segment,memory_gb,memory_type,"
    "bandwidth_gbs,boost_clock_mhz,sm_count,cuda_cores,fp32_tflops,release_year"
)
V2 = ",fp16_tflops,tensor_fp16_tflops,tensor_bf16_tflops,tensor_tf32_tflops,l2_mb,tdp_w," \
     "form_factor,nvlink_gbs,pcie_gen"
GOOD = "Foo X1,,Ampere,8.0,datacenter,8,HBM2,900,1500,10,640,1.92,2020"
GOOD_V2 = GOOD + ",,,,,4,300,pcie,0,4"
TENSOR_ARCHS = {"Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell"}
BF16_ARCHS = {"Ampere", "Ada", "Hopper", "Blackwell"}
# GeForce-class parts run FP16 tensor math with FP32 accumulate at half rate.
HALF_RATE = {"L40", "A10G"}
# Turing TU116/TU117 parts without tensor cores: GeForce GTX 16xx and the T400/T600/T1000 boards.
NO_TENSOR = {"T400", "T400 4GB", "T600", "T1000", "T1000 8GB"}


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("RTX 2080 Ti", 53.8),
        ("Titan RTX", 130.5),
        ("Quadro RTX 8000", 130.5),
        ("V100", 125),
        ("A100", 312),
        ("H100 SXM5", 989),
        ("L4", 121),
        ("L40S", 362),
        ("B200", 2250),
        ("T4", 65),
    ],
)
def test_fp16_tensor_peaks_with_fp32_accumulate(name, tflops):
    assert resolve_gpu(name).peak_tflops("fp16") == pytest.approx(tflops, rel=0.01)


def test_peak_rule_per_precision():
    a100, v100, p100 = resolve_gpu("A100"), resolve_gpu("V100"), resolve_gpu("P100")
    assert a100.peak_tflops() == a100.peak_tflops(Precision.FP32) == a100.fp32_tflops
    assert a100.peak_tflops("tf32") == 156 and a100.peak_tflops("bf16") == 312
    assert a100.peak_tflops("mixed_float16") == 312
    # Volta: fp16 tensor cores, no tf32/bf16 -> those run at fp32 speed
    assert v100.peak_tflops("fp16") == 125
    assert v100.peak_tflops("tf32") == v100.peak_tflops("bf16") == v100.fp32_tflops
    # no tensor cores: mixed precision accumulates in fp32, so it runs at fp32 speed,
    # even where the non-tensor fp16 rate is higher (P100: 2x fp32)
    assert p100.fp16_tflops == pytest.approx(2 * p100.fp32_tflops, rel=0.01)
    assert p100.peak_tflops("fp16") == p100.fp32_tflops
    assert not p100.has_tensor_cores() and not p100.has_tensor_cores("bf16")
    assert v100.has_tensor_cores("fp16") and not v100.has_tensor_cores("tf32")
    assert not a100.has_tensor_cores("fp32") and a100.has_tensor_cores("tf32")
    with pytest.raises(ValueError, match="unknown precision"):
        a100.peak_tflops("fp8")


def test_roofline_features():
    feats = roofline_features("A100 SXM4 80GB", "bf16")
    assert feats == {
        "peak_flops": 312e12,
        "bandwidth": 2039e9,
        "sm_count": 108.0,
        "clock_mhz": 1410.0,
        "l2_mb": 40.0,
        "tensor": True,
    }
    k80 = resolve_gpu("K80").roofline_features("fp16")
    assert k80["tensor"] is False and k80["peak_flops"] == pytest.approx(4.37e12)
    assert resolve_gpu("K80").bandwidth_bytes_per_s == 240e9


def test_hardware_features_contract_is_unchanged():
    assert HW_KEYS == ("hw_kind", "hw_memory_gb", "hw_bandwidth_gbs", "hw_clock_mhz",
                       "hw_cores", "hw_peak_tflops")
    for spec in load_catalog():
        assert tuple(spec.hardware_features()) == HW_KEYS
        assert spec.hardware_features()["hw_peak_tflops"] == spec.fp32_tflops


def test_old_constructor_calls_keep_working():
    spec = GpuSpec("X", (), "Pascal", "6.1", "consumer", 8, "GDDR5", 256, 1600, 10, 1280,
                   4.1, 2016)
    assert spec.peak_tflops("bf16") == 4.1 and spec.nvlink_gbs == 0 and spec.l2_mb is None
    assert spec.roofline_features()["l2_mb"] == 0.0


def test_every_row_has_the_v2_facts():
    for spec in load_catalog():
        assert spec.l2_mb and spec.tdp_w and spec.pcie_gen in (2, 3, 4, 5, 6), spec.name
        assert spec.form_factor in FORM_FACTORS, spec.name
        assert spec.nvlink_gbs >= 0, spec.name
        if spec.form_factor == "sxm":
            assert spec.nvlink_gbs > 0, spec.name
        if spec.architecture not in {"Kepler", "Maxwell"}:
            ratio = spec.fp16_tflops / spec.fp32_tflops
            assert min(abs(ratio - r) for r in (1 / 64, 1, 2, 4)) < 0.02, spec.name


def test_tensor_columns_follow_the_architecture():
    for spec in load_catalog():
        tensor = (spec.architecture in TENSOR_ARCHS and "GTX" not in spec.name
                  and spec.name not in NO_TENSOR)
        assert (spec.tensor_fp16_tflops is not None) == tensor, spec.name
        has_bf16 = spec.architecture in BF16_ARCHS
        assert (spec.tensor_bf16_tflops is not None) == has_bf16, spec.name
        assert (spec.tensor_tf32_tflops is not None) == has_bf16, spec.name
        if tensor:
            assert 1.99 <= spec.tensor_fp16_tflops / spec.fp32_tflops <= 32, spec.name
        if has_bf16:
            assert spec.tensor_bf16_tflops == spec.tensor_fp16_tflops, spec.name
            half = spec.tensor_fp16_tflops / 2
            assert spec.tensor_tf32_tflops == pytest.approx(half, rel=0.03), spec.name


@pytest.mark.parametrize("cc", ["7.5", "8.6", "8.9", "12.0"])
def test_graphics_dies_run_geforce_tensor_math_at_half_rate(cc):
    """FP16 tensor FLOP per SM per clock, FP32 accumulate: 1024, or 512 on GeForce parts."""
    for spec in load_catalog():
        if spec.compute_capability != cc or spec.tensor_fp16_tflops is None:
            continue
        geforce = spec.segment == "consumer" and "Titan" not in spec.name
        rate = 512 if geforce or spec.name in HALF_RATE else 1024
        expected = spec.sm_count * rate * spec.boost_clock_mhz / 1e6
        assert spec.tensor_fp16_tflops == pytest.approx(expected, rel=0.02), spec.name


def _write(tmp_path, header: str, *rows: str):
    path = tmp_path / "catalog.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_old_format_catalog_still_loads(tmp_path):
    (spec,) = load_catalog(_write(tmp_path, HEADER, GOOD))
    assert spec.tensor_fp16_tflops is None and spec.form_factor == "" and spec.pcie_gen is None


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (GOOD_V2.replace(",1.92,", ",0,"), "'fp32_tflops' must be positive"),
        (GOOD_V2.replace(",1.92,", ",-3,"), "'fp32_tflops' must be positive"),
        (GOOD_V2.replace(",1.92,", ",fast,"), "'fp32_tflops': 'fast' is not a number"),
        (GOOD_V2.replace(",900,", ",,"), "empty column 'bandwidth_gbs'"),
        (GOOD + ",,0,,,4,300,pcie,0,4", "'tensor_fp16_tflops' must be positive"),
        (GOOD + ",,,,-1,4,300,pcie,0,4", "'tensor_tf32_tflops' must be positive"),
        (GOOD + ",,,,,4,300,pcie,-5,4", "'nvlink_gbs' must not be negative"),
        (GOOD + ",,,,,4,300,socket,0,4", "form_factor 'socket'"),
        (GOOD + ",,,,,4,300,pcie,0,4.5", "'pcie_gen' must be a whole number"),
        (GOOD + ",,,,,4,300,pcie,0,4,extra", "more fields than the header"),
        (GOOD + ",,,,,4,300", "missing value for column"),
    ],
)
def test_bad_rows_fail_with_file_and_line(tmp_path, row, reason):
    path = _write(tmp_path, HEADER + V2, GOOD_V2, row)
    with pytest.raises(ValueError) as info:
        load_catalog(path)
    assert str(info.value).startswith(f"{path}:3: ")
    assert reason in str(info.value)


def test_bad_header(tmp_path):
    with pytest.raises(ValueError, match=r":1: bad header \(missing column\(s\) \['sm_count'\]"):
        load_catalog(_write(tmp_path, HEADER.replace("sm_count", "sms"), GOOD))
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['tdp'\]"):
        load_catalog(_write(tmp_path, HEADER + ",tdp", GOOD + ",300"))
