"""GPU names as nvidia-smi, frameworks, clouds and papers write them resolve to one entry."""

from __future__ import annotations

import pytest

from fleet.catalog import UnknownGpuError, load_catalog, resolve_gpu
from fleet.names import accelerator_slug, gpu_words, lookup_key, split_memory, unordered_key

HEADER = (
    "name,aliases,architecture,compute_capability,segment,memory_gb,memory_type,"
    "bandwidth_gbs,boost_clock_mhz,sm_count,cuda_cores,fp32_tflops,release_year"
)


@pytest.mark.parametrize(
    ("spelling", "entry"),
    [
        ("Tesla V100-SXM2-16GB", "Tesla V100 SXM2 16GB"),
        ("Tesla V100-SXM3-32GB", "Tesla V100 SXM3 32GB"),
        ("Tesla V100-PCIE-32GB", "Tesla V100 PCIe 32GB"),
        ("A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("A100 SXM4 40GB", "A100 SXM4 40GB"),
        ("GeForce RTX 2080 Super with Max-Q Design", "GeForce RTX 2080 Super Max-Q"),
        ("GeForce RTX 2080 with Max-Q Design", "GeForce RTX 2080 Max-Q"),
        ("GeForce RTX 2070 with Max-Q Design", "GeForce RTX 2070 Max-Q"),
        ("GeForce RTX 2060", "GeForce RTX 2060"),
        ("GeForce RTX 2070 SUPER", "GeForce RTX 2070 Super"),
        ("GeForce RTX 2080 SUPER", "GeForce RTX 2080 Super"),
        ("NVIDIA GeForce RTX 3080 Laptop GPU", "GeForce RTX 3080 Laptop GPU"),
        ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
        ("QuadroP2000", "Quadro P2000"),
        ("Quadro P2000", "Quadro P2000"),
        ("Quadro RTX 8000", "Quadro RTX 8000"),
        ("TITAN RTX", "Titan RTX"),
        ("TITAN V", "Titan V"),
        ("GeForce GTX 1080 Ti", "GeForce GTX 1080 Ti"),
        ("GTX 1080 Ti", "GeForce GTX 1080 Ti"),
        ("H100 SXM5", "H100 SXM5"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA L4", "L4"),
        ("L40S", "L40S"),
        ("B200", "B200"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla T4", "Tesla T4"),
        ("Tesla P100-PCIE-16GB", "Tesla P100 PCIe 16GB"),
        ("Tesla P4", "Tesla P4"),
        ("Tesla K80", "Tesla K80"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        ("RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("GeForce GTX 1660 Ti", "GeForce GTX 1660 Ti"),
        ("GeForce GTX 1650", "GeForce GTX 1650"),
        # a laptop-only part: nvidia-smi prints it without "Laptop GPU" (no desktop board)
        ("NVIDIA GeForce GTX 1650 Ti", "GeForce GTX 1650 Ti Mobile"),
        # more spellings of the same rules
        ("TeslaV100", "Tesla V100 SXM2 16GB"),
        ("GeForce RTX 2080 Super MaxQ", "GeForce RTX 2080 Super Max-Q"),
        ("RTX 3080 Mobile", "GeForce RTX 3080 Laptop GPU"),
        ("A100 40GB SXM4", "A100 SXM4 40GB"),
        ("NVIDIA H100 80GB PCIe", "H100 PCIe"),
        ("A100-SXM-80GB", "A100 SXM4 80GB"),
    ],
)
def test_spellings_resolve(spelling, entry):
    assert resolve_gpu(spelling).name == entry


def test_laptop_and_maxq_parts_are_their_own_entries():
    desktop, maxq = resolve_gpu("RTX 2080 Super"), resolve_gpu("RTX 2080 Super Max-Q")
    assert desktop != maxq and maxq.form_factor == "mobile" and desktop.form_factor == "desktop"
    assert (maxq.boost_clock_mhz, maxq.tdp_w) == (1080, 80)
    assert 1080 <= resolve_gpu("RTX 2080 Max-Q").boost_clock_mhz <= 1110
    assert 1170 <= resolve_gpu("RTX 2070 Max-Q").boost_clock_mhz <= 1200
    laptop, card = resolve_gpu("RTX 3080 Laptop GPU"), resolve_gpu("RTX 3080")
    assert laptop.sm_count < card.sm_count and laptop.tdp_w < card.tdp_w
    assert laptop.peak_tflops("fp16") < card.peak_tflops("fp16")
    sxm3 = resolve_gpu("Tesla V100-SXM3-32GB")
    assert (sxm3.boost_clock_mhz, sxm3.tdp_w, sxm3.memory_gb) == (1597, 450, 32)
    assert resolve_gpu("A100 PCIe 80GB").form_factor == "pcie"
    assert resolve_gpu("A100 SXM4 80GB").form_factor == "sxm"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("QuadroP2000", ["p2000"]),
        ("TeslaV100-SXM2-16GB", ["v100", "sxm2", "16gb"]),
        ("GeForce RTX 2080 Super with Max-Q Design", ["rtx", "2080", "super", "maxq"]),
        ("RTX 2080 Max-Q", ["rtx", "2080", "maxq"]),
        ("rtx 2080 max q design", ["rtx", "2080", "maxq"]),
        ("NVIDIA GeForce RTX 3080 Laptop GPU", ["rtx", "3080", "mobile"]),
        ("GeForce RTX 2060 Mobile", ["rtx", "2060", "mobile"]),
        ("RTX 3080 Laptop GPU Mobile", ["rtx", "3080", "mobile"]),
        ("NVIDIA A100 80GB PCIe", ["a100", "80gb", "pcie"]),
    ],
)
def test_gpu_words(name, words):
    assert gpu_words(name) == words


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Tesla V100-SXM2-16GB", "nvidia-v100-sxm2-16gb"),
        ("GeForce GTX 1080 Ti", "nvidia-gtx-1080-ti"),
        ("GTX1080Ti", "nvidia-gtx1080ti"),
        ("TITAN Xp", "nvidia-titan-xp"),
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("GeForce RTX 2080 with Max-Q Design", "nvidia-rtx-2080-maxq"),
        ("NVIDIA GeForce RTX 3080 Laptop GPU", "nvidia-rtx-3080-mobile"),
        ("QuadroP2000", "nvidia-p2000"),
    ],
)
def test_slugs_of_new_and_old_spellings(name, slug):
    assert accelerator_slug(name) == slug
    assert accelerator_slug(slug) == slug


def test_every_label_and_its_slug_resolve_to_its_entry():
    for spec in load_catalog():
        for label in (spec.name, *spec.aliases):
            assert resolve_gpu(label) == spec, label
            assert resolve_gpu(accelerator_slug(label)) == spec, label
            assert resolve_gpu(label.upper()) == spec, label


def test_word_order_does_not_matter():
    assert unordered_key("NVIDIA A100 80GB PCIe") == unordered_key("A100-PCIE-80GB")
    assert lookup_key("NVIDIA A100 80GB PCIe") != lookup_key("A100-PCIE-80GB")
    assert resolve_gpu("PCIe A100 80GB") == resolve_gpu("A100-PCIE-80GB")


def test_split_memory():
    assert split_memory(["v100", "sxm2", "16gb"]) == (["v100", "sxm2"], 16.0)
    assert split_memory(["h100", "nvl"]) == (["h100", "nvl"], None)


def test_memory_size_fallback_takes_the_one_entry_only():
    assert resolve_gpu("Tesla V100-SXM3").name == "Tesla V100 SXM3 32GB"
    assert resolve_gpu("NVIDIA L4 24GB").name == "L4"
    assert resolve_gpu("Tesla P4 8GB").name == "Tesla P4"
    with pytest.raises(UnknownGpuError):  # the size must agree with the entry
        resolve_gpu("Tesla P4 16GB")


def _catalog(tmp_path, *rows: str):
    path = tmp_path / "catalog.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def test_never_guesses_between_two_entries(tmp_path):
    path = _catalog(
        tmp_path,
        "Foo X1 8GB,,Volta,7.0,datacenter,8,HBM2,900,1500,10,640,1.92,2020",
        "Foo X1 16GB,,Volta,7.0,datacenter,16,HBM2,900,1500,10,640,1.92,2020",
    )
    assert resolve_gpu("Foo X1 16GB", path).name == "Foo X1 16GB"
    assert resolve_gpu("16GB X1 Foo", path).name == "Foo X1 16GB"
    with pytest.raises(UnknownGpuError) as info:
        resolve_gpu("Foo X1", path)
    assert set(info.value.suggestions) == {"Foo X1 8GB", "Foo X1 16GB"}
    assert "more than one" in str(info.value)


def test_catalog_rejects_names_that_collide_in_any_word_order(tmp_path):
    path = _catalog(
        tmp_path,
        "Foo X1 PCIe,,Volta,7.0,datacenter,8,HBM2,900,1500,10,640,1.92,2020",
        "Bar,PCIe X1 Foo,Volta,7.0,datacenter,16,HBM2,900,1500,10,640,1.92,2020",
    )
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_gpu("Foo X1 PCIe", path)


def test_unknown_names_still_suggest():
    with pytest.raises(UnknownGpuError) as info:
        resolve_gpu("RTX 2090 Max-Q")
    assert info.value.suggestions
    assert "not in the GPU catalog" in str(info.value)
