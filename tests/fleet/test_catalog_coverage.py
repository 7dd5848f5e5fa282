"""The catalog covers every NVIDIA data-center, workstation and GeForce (desktop and laptop) GPU
from Pascal to Blackwell (issue 23, "Catalog"), with facts that hold together; interconnect
defaults come from catalog columns, so a new GPU or architecture is one catalog row."""

from __future__ import annotations

import pytest

from fleet.catalog import GpuSpec, load_catalog, resolve_gpu
from fleet.interconnect import pcie_gbs, resolve_interconnect

ARCHS = ("Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell")

# The parts the issue names, one spelling each (not necessarily the catalog's own).
NAMED = [
    "H100 PCIe", "H100 SXM5", "H100 NVL", "H200", "H200 NVL", "A100 PCIe 40GB", "A100 PCIe 80GB",
    "A100 SXM4 40GB", "A100 SXM4 80GB", "B200", "B100", "GB200", "GH200 480GB",
    "RTX PRO 6000 Blackwell", "L40", "L40S", "L4", "A10", "A16", "A30", "A40", "A2",
    "RTX A2000", "RTX A4000", "RTX A4500", "RTX A5000", "RTX A5500", "RTX A6000",
    "RTX 2000 Ada", "RTX 4000 Ada", "RTX 4500 Ada", "RTX 5000 Ada", "RTX 6000 Ada",
    "Quadro P2000", "Quadro P6000", "Quadro RTX 4000", "Quadro RTX 8000", "TITAN Xp", "TITAN V",
    "TITAN RTX", "GTX 1050 Ti", "GTX 1060 6GB", "GTX 1080 Ti", "GTX 1650", "GTX 1660 Super",
    "RTX 2060", "RTX 2080 Ti", "RTX 3060", "RTX 3090 Ti", "RTX 4060 Ti", "RTX 4090",
    "RTX 5060", "RTX 5090", "GTX 1080 Mobile", "RTX 2080 Mobile", "RTX 3070 Laptop GPU",
    "RTX 4090 Laptop GPU", "RTX 5090 Laptop GPU", "Tesla P100-PCIE-16GB", "Tesla P40",
    "Tesla V100-SXM2-32GB", "Tesla T4",
]


@pytest.mark.parametrize("name", NAMED)
def test_the_named_parts_are_in_the_catalog(name):
    spec = resolve_gpu(name)
    assert spec.architecture in ARCHS


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_has_its_segments(arch):
    specs = [s for s in load_catalog() if s.architecture == arch]
    kinds = {(s.segment, s.form_factor) for s in specs}
    assert any(seg == "datacenter" for seg, _ in kinds), arch
    if arch != "Hopper":  # Hopper is a data-center architecture only
        assert any(seg == "workstation" for seg, _ in kinds), arch
        assert ("consumer", "desktop") in kinds, arch
    if arch not in ("Hopper", "Volta"):  # no Volta laptops
        assert ("consumer", "mobile") in kinds, arch


def test_superchips_list_the_gpu_as_it_sees_its_memory():
    assert resolve_gpu("NVIDIA GH200 480GB").memory_gb == 96  # 480 GB is the Grace CPU's LPDDR5X
    assert resolve_gpu("NVIDIA GH200 144G HBM3e").memory_gb == 144
    gb200 = resolve_gpu("GB200")
    assert gb200.memory_gb == 186 and gb200.tensor_fp16_tflops == 2500
    assert gb200.peak_tflops("bf16") > resolve_gpu("B200").peak_tflops("bf16")


def test_laptop_parts_are_slower_than_the_desktop_boards_of_their_number():
    for number in ("1060", "2080", "3070", "3080", "4060", "4090", "5070", "5090"):
        desktop = [s for s in load_catalog() if s.form_factor == "desktop"
                   and number in s.name and "Ti" not in s.name and s.segment == "consumer"]
        laptop = [s for s in load_catalog() if s.form_factor == "mobile" and number in s.name
                  and "Ti" not in s.name and "Max-Q" not in s.name]
        assert desktop and laptop, number
        assert max(s.peak_tflops("fp16") for s in laptop) < max(
            s.peak_tflops("fp16") for s in desktop), number


def test_geforce_runs_fp32_accumulate_tensor_math_at_half_the_workstation_rate():
    geforce, pro = resolve_gpu("RTX 4090"), resolve_gpu("RTX 6000 Ada")
    per_sm = [s.tensor_fp16_tflops / (s.sm_count * s.boost_clock_mhz) for s in (geforce, pro)]
    assert per_sm[0] == pytest.approx(per_sm[1] / 2, rel=0.02)
    a10g, a10 = resolve_gpu("A10G"), resolve_gpu("A10")
    assert a10g.tensor_fp16_tflops < a10.tensor_fp16_tflops


def test_every_family_variant_differs_in_a_column_that_matters():
    """Rows are different GPUs: two rows never carry the same hardware facts, except the
    DGX-2H V100 (its own nvidia-smi name and history; the catalog knows no figure that tells it
    from the DGX-2 part)."""
    seen: dict[tuple, str] = {}
    for spec in load_catalog():
        facts = (spec.architecture, spec.memory_gb, spec.bandwidth_gbs, spec.boost_clock_mhz,
                 spec.sm_count, spec.tdp_w, spec.form_factor, spec.nvlink_gbs)
        if facts in seen:
            assert {seen[facts], spec.name} == {"Tesla V100 SXM3 32GB", "Tesla V100 SXM3 32GB H"}
        seen[facts] = spec.name


def _spec(**overrides) -> GpuSpec:
    base = dict(name="X100", aliases=(), architecture="Rubin", compute_capability="11.0",
                segment="datacenter", memory_gb=288, memory_type="HBM4", bandwidth_gbs=13000,
                boost_clock_mhz=2000, sm_count=160, cuda_cores=20480, fp32_tflops=81.9,
                release_year=2026, form_factor="sxm", nvlink_gbs=3600, pcie_gen=6)
    return GpuSpec(**{**base, **overrides})


def test_interconnect_defaults_come_from_columns_not_architecture_names():
    new_arch = _spec()  # an architecture no code names
    eight = resolve_interconnect(new_arch, 8, 1)
    assert eight.link == "nvswitch" and eight.link_gbs == 1800
    assert resolve_interconnect(new_arch, 4, 1).link == "nvlink"
    card = resolve_interconnect(_spec(form_factor="pcie", nvlink_gbs=0), 4, 1)
    assert card.link == "pcie" and card.link_gbs == pcie_gbs(6)
    # DGX-1 (8 V100 SXM2 in a hybrid cube mesh) is NVLink, DGX-2 (16 V100 SXM3) NVSwitch
    assert resolve_interconnect(resolve_gpu("V100 SXM2 16GB"), 8, 1).link == "nvlink"
    assert resolve_interconnect(resolve_gpu("V100 SXM3 32GB"), 16, 1).link == "nvswitch"
    assert resolve_interconnect(resolve_gpu("GB200"), 8, 1).link == "nvswitch"


def test_the_catalog_is_read_once():
    assert load_catalog() is load_catalog()
