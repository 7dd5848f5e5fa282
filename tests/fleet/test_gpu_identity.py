"""One GPU identity: every spelling of one GPU gives one deployment key, two GPUs never share
one, and a name less specific than the history (a family) matches it and says which GPU
answered (issue 22, "One GPU identity")."""

from __future__ import annotations

from itertools import combinations

import pytest

from fleet.catalog import family_names, gpu_members, load_catalog, resolve_gpu
from fleet.deployment import Deployment, FamilyMatch, canonical_key, family_matches
from fleet.identity import canonical_slug, gpu_identity, gpu_slug
from fleet.names import accelerator_slug

# Every NVIDIA ``accelerator_model_name`` (also v0.6 ``nodes[].accelerator``) of the MLPerf
# Training system descriptions of rounds v0.6-v4.0 (mlcommons/training_results_v0.6 ... v4.0,
# ResNet and the other CNN benchmarks), as written there, with the part each one is.
MLPERF_NAMES = {
    "A100-SXM4-40GB": "A100 SXM4 40GB",
    "A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100 - PCIe - 80 GB": "A100 PCIe 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA A100-PCIE-40GB (250W)": "A100 PCIe 40GB",
    "NVIDIA A100-PCIE-80GB": "A100 PCIe 80GB",
    "NVIDIA A100-PCIE-80GB (300W)": "A100 PCIe 80GB",
    "NVIDIA A100-PCIe-40GB": "A100 PCIe 40GB",
    "NVIDIA A100-PCIe-40GB(250W)": "A100 PCIe 40GB",
    "NVIDIA A100-PCIe-80GB": "A100 PCIe 80GB",
    "NVIDIA A100-SXM-40GB": "A100 SXM4 40GB",
    "NVIDIA A100-SXM-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-SXM-80GB (500W)": "A100 SXM4 80GB",
    "NVIDIA A100-SXM-80GB CTS": "A100 SXM4 80GB",
    "NVIDIA A100-SXM4-40GB": "A100 SXM4 40GB",
    "NVIDIA A100-SXM4-40GB(400W)": "A100 SXM4 40GB",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100-SXM4-80GB (400W)": "A100 SXM4 80GB",
    "NVIDIA A10G": "A10G",
    "NVIDIA A30": "A30",
    "NVIDIA A30-PCIE-24GB": "A30",
    "NVIDIA A40": "A40",
    "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
    "NVIDIA H100-PCIe": "H100 PCIe",
    "NVIDIA H100-PCIe-80GB": "H100 PCIe",
    "NVIDIA H100-SXM-80GB": "H100 SXM5",
    "NVIDIA H100-SXM5-80GB": "H100 SXM5",
    "NVIDIA H100-SXM5-96GB": "H100 SXM5 96GB",
    "NVIDIA H200-SXM5-141GB": "H200 SXM",
    "NVIDIA L4": "L4",
    "NVIDIA L40": "L40",
    "NVIDIA L40S": "L40S",
    "NVIDIA RTX A5000": "RTX A5000",
    "NVIDIA V100-SXM2-16GB (300W)": "Tesla V100 SXM2 16GB",
    "NVIDIA V100-SXM2-32GB": "Tesla V100 SXM2 32GB",
    "NVIDIA V100-SXM3-32GB (450W)": "Tesla V100 SXM3 32GB",
    "Nvidia Tesla V100-SXM2-32GB": "Tesla V100 SXM2 32GB",
    "Nvidia Tesla V100S-PCIe-32GB": "Tesla V100S PCIe 32GB",
    "Tesla V100-SXM2-16GB": "Tesla V100 SXM2 16GB",
    "Tesla V100-SXM3-32GB": "Tesla V100 SXM3 32GB",
    "Tesla V100-SXM3-32GB-H": "Tesla V100 SXM3 32GB H",
}
# The same MLPerf files also say just "NVIDIA A100", "NVIDIA V100" and "Nvidia Tesla V100".
MLPERF_FAMILIES = {"NVIDIA A100": "A100", "NVIDIA V100": "V100", "Nvidia Tesla V100": "V100"}

# nvidia-smi's names (``nvidia-smi --query-gpu=name``) and the part each one is.
NVIDIA_SMI = {
    "NVIDIA GH200 480GB": "GH200 96GB",
    "NVIDIA GH200 144G HBM3e": "GH200 144GB HBM3e",
    "NVIDIA RTX A4500": "RTX A4500",
    "NVIDIA RTX A5500": "RTX A5500",
    "NVIDIA H100 80GB HBM3": "H100 SXM5",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA B200": "B200",
    "NVIDIA A100-SXM4-80GB": "A100 SXM4 80GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "Tesla V100-SXM2-16GB": "Tesla V100 SXM2 16GB",
    "Tesla V100-PCIE-32GB": "Tesla V100 PCIe 32GB",
    "NVIDIA GeForce RTX 4090 Laptop GPU": "GeForce RTX 4090 Laptop GPU",
    "NVIDIA GeForce RTX 3090": "GeForce RTX 3090",
    "NVIDIA RTX 6000 Ada Generation": "RTX 6000 Ada",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX PRO 6000 Blackwell",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "RTX PRO 6000 Blackwell Max-Q",
    "Quadro RTX 8000": "Quadro RTX 8000",
    "TITAN RTX": "Titan RTX",
    "Tesla T4": "Tesla T4",
}


def _row_slug(name: str) -> str:
    return gpu_slug(resolve_gpu(name))


@pytest.mark.parametrize("spelling", [
    "8x Tesla V100-SXM2-16GB", "8x NVIDIA Tesla V100-SXM2-16GB", "8 x NVIDIA V100-SXM2-16GB (300W)",
    "8x V100 SXM2 16GB", "nvidia-v100-sxm2-16gb-x8", "8x tesla v100-sxm2-16gb",
])
def test_spellings_of_one_gpu_give_one_key(spelling):
    assert canonical_key(spelling) == "nvidia-v100-sxm2-16gb-x8"
    assert Deployment.parse(spelling).key == "nvidia-v100-sxm2-16gb-x8"


@pytest.mark.parametrize(("mlperf", "smi"), [
    ("NVIDIA A100-SXM-80GB", "NVIDIA A100-SXM4-80GB"),
    ("NVIDIA A100-SXM-80GB CTS", "NVIDIA A100-SXM4-80GB"),
    ("NVIDIA A100-SXM-40GB", "NVIDIA A100-SXM4-40GB"),
    ("NVIDIA A100 - PCIe - 80 GB", "NVIDIA A100 80GB PCIe"),
    ("NVIDIA H100-SXM5-80GB", "NVIDIA H100 80GB HBM3"),
    ("NVIDIA H100-SXM-80GB", "NVIDIA H100 80GB HBM3"),
    ("NVIDIA H100-PCIe-80GB", "NVIDIA H100 PCIe"),
    ("NVIDIA H200-SXM5-141GB", "NVIDIA H200"),
    ("NVIDIA A30-PCIE-24GB", "NVIDIA A30"),
])
def test_mlperf_and_nvidia_smi_names_of_one_gpu_share_the_key(mlperf, smi):
    assert canonical_key(f"8x {mlperf}") == canonical_key(f"8x {smi}")
    assert Deployment(mlperf, 8, 2).key == Deployment(smi, 8, 2).key


@pytest.mark.parametrize(("name", "row"), sorted({**MLPERF_NAMES, **NVIDIA_SMI}.items()))
def test_every_mlperf_and_nvidia_smi_name_resolves_to_its_gpu(name, row):
    identity = gpu_identity(name)
    assert [s.name for s in identity.members] == [row]
    assert identity.slug == _row_slug(row)


@pytest.mark.parametrize(("name", "family"), sorted(MLPERF_FAMILIES.items()))
def test_mlperf_family_names_get_the_family_key(name, family):
    identity = gpu_identity(name)
    assert identity.is_family and {s.family for s in identity.members} == {family}
    assert identity.slug == f"nvidia-{family.lower()}"


def test_no_two_catalog_gpus_share_a_key():
    slugs = {spec.name: gpu_slug(spec) for spec in load_catalog()}
    for (a, slug_a), (b, slug_b) in combinations(slugs.items(), 2):
        assert slug_a != slug_b, (a, b)
    # and a GPU's key never equals a family's, however the family is spelled
    families = {gpu_identity(f).slug for f in family_names()}
    assert not families & set(slugs.values())


def test_every_spelling_resolves_to_its_own_row_and_key():
    for spec in load_catalog():
        slug = gpu_slug(spec)
        assert slug == accelerator_slug(spec.name), spec.name  # vendor hints know every row
        for label in (spec.name, *spec.aliases, slug, f"NVIDIA {spec.name}"):
            identity = gpu_identity(label)
            assert identity.members == (spec,), label
            assert identity.slug == slug, label


def test_keys_are_stable_under_reparsing():
    names = [s.name for s in load_catalog()] + family_names()
    names += ["V100 16GB", "A100 SXM", "H100 80GB"]
    for name in names:
        for text in (f"8x {name}", f"2x4 {name}"):
            key = canonical_key(text)
            assert canonical_key(key) == key, text
            assert Deployment.parse(key).count == Deployment.parse(text).count


@pytest.mark.parametrize(("name", "slug"), [
    ("Intel Gaudi2", "habana-gaudi2"), ("Habana Gaudi HL-205", "habana-gaudi-hl-205"),
    ("TPU v4", "google-tpu-v4"), ("TPU-v5p", "google-tpu-v5p"),
    ("Graphcore IPU GC200", "graphcore-ipu-gc200"), ("Ascend910", "ascend910"),
    ("AMD Radeon RX 7900 XTX", "amd-radeon-rx-7900-xtx"),
    ("Intel Xeon Platinum 8380H", "intel-xeon-platinum-8380h"),
    ("NVIDIA R100", "nvidia-r100"),  # a GPU newer than the catalog keeps its own slug
])
def test_accelerators_outside_the_catalog_keep_their_slug(name, slug):
    identity = gpu_identity(name)
    assert not identity.known and identity.spec is None
    assert identity.slug == slug == canonical_slug(name) == accelerator_slug(name)


def test_a_bare_family_name_is_a_family_and_resolves_for_hardware_figures():
    v100 = gpu_identity("V100")
    assert v100.is_family and v100.slug == "nvidia-v100"
    assert {s.name for s in v100.members} >= {"Tesla V100 SXM2 16GB", "Tesla V100 SXM2 32GB",
                                              "Tesla V100 SXM3 32GB", "Tesla V100 PCIe 32GB"}
    assert "Tesla V100S PCIe 32GB" not in {s.name for s in v100.members}  # V100S: another GPU
    assert v100.spec == resolve_gpu("V100") == resolve_gpu("Tesla V100-SXM2-16GB")
    assert resolve_gpu("A100").name == "A100 SXM4 40GB" and resolve_gpu("H100").name == "H100 SXM5"
    assert Deployment.parse("8x V100").interconnect().link == "nvlink"  # from the family's row


@pytest.mark.parametrize(("name", "members", "slug"), [
    ("A100 80GB", {"A100 SXM4 80GB", "A100 PCIe 80GB"}, "nvidia-a100-80gb"),
    ("80GB A100", {"A100 SXM4 80GB", "A100 PCIe 80GB"}, "nvidia-a100-80gb"),
    ("A100 SXM", {"A100 SXM4 40GB", "A100 SXM4 80GB"}, "nvidia-a100-sxm"),
    ("V100 16GB", {"Tesla V100 SXM2 16GB", "Tesla V100 PCIe 16GB"}, "nvidia-v100-16gb"),
    ("V100 SXM2", {"Tesla V100 SXM2 16GB", "Tesla V100 SXM2 32GB"}, "nvidia-v100-sxm2"),
    ("H100 80GB", {"H100 SXM5", "H100 PCIe"}, "nvidia-h100-80gb"),
    ("GH200", {"GH200 96GB", "GH200 144GB HBM3e"}, "nvidia-gh200"),
])
def test_part_of_a_family_is_a_smaller_family(name, members, slug):
    identity = gpu_identity(name)
    assert {s.name for s in identity.members} == members
    assert identity.slug == slug


HISTORY = [
    "nvidia-v100-sxm2-32gb-x8", "nvidia-v100-sxm2-16gb-x8", "nvidia-v100-sxm2-16gb-x4",
    "nvidia-v100s-pcie-32gb-x8", "nvidia-a100-sxm4-40gb-x8", "nvidia-v100-sxm2-16gb-x8-n2",
    "habana-gaudi2-x8", "not a key at all",
]


def test_8x_v100_matches_the_family_and_says_which_gpu_answered():
    dep = Deployment.parse("8x V100")
    assert dep.key == "nvidia-v100-x8" and dep.identity.is_family
    found = family_matches("8x V100", HISTORY)
    assert found == [
        FamilyMatch("nvidia-v100-sxm2-16gb-x8",
                    "family: asked 'V100', history has 'V100-SXM2-16GB'"),
        FamilyMatch("nvidia-v100-sxm2-32gb-x8",
                    "family: asked 'V100', history has 'V100-SXM2-32GB'"),
    ]  # the family's own order; never another count, node count, or GPU (V100S, A100)
    assert found[0] == ("nvidia-v100-sxm2-16gb-x8", found[0].how)  # a plain (key, how) pair


def test_exact_history_comes_first_and_alone():
    assert family_matches("8x Tesla V100-SXM2-16GB", HISTORY) == [
        ("nvidia-v100-sxm2-16gb-x8", "exact")]
    # a key stored in an older spelling is the same GPU
    assert family_matches("8x NVIDIA A100-SXM4-80GB", ["nvidia-a100-sxm-80gb-x8"]) == [
        ("nvidia-a100-sxm-80gb-x8", "exact")]
    assert family_matches("8x V100", ["nvidia-v100-x8", *HISTORY])[0] == ("nvidia-v100-x8", "exact")


def test_a_specific_gpu_never_takes_another_gpus_history():
    assert family_matches("8x V100-SXM2-32GB", ["nvidia-v100-sxm2-16gb-x8"]) == []
    assert family_matches("8x V100-SXM2-16GB", ["nvidia-v100-x4", "nvidia-a100-x8"]) == []
    assert family_matches("8x A100 80GB", ["nvidia-a100-sxm4-40gb-x8", "nvidia-a100-pcie-80gb-x8",
                                           "nvidia-a100-sxm4-80gb-x8"]) == [
        ("nvidia-a100-sxm4-80gb-x8", "family: asked 'A100-80GB', history has 'A100-SXM4-80GB'"),
        ("nvidia-a100-pcie-80gb-x8", "family: asked 'A100-80GB', history has 'A100-PCIE-80GB'"),
    ]
    assert family_matches("8x Intel Gaudi2", HISTORY) == [("habana-gaudi2-x8", "exact")]
    assert family_matches("8x TPU v4", HISTORY) == []


def test_a_gpu_asked_finds_history_filed_under_its_family():
    # issue 35: a system described as "Tesla V100" is stored under the family; asked with the
    # nvidia-smi name of its part, the same history answers, and says how it matched
    found = family_matches("8x Tesla V100-SXM2-16GB", ["nvidia-v100-x8", "nvidia-a100-x8"])
    assert found == [("nvidia-v100-x8",
                      "family: asked 'V100-SXM2-16GB', history has its family 'V100' (a member)")]
    # the most specific family first; never another count
    assert [m.key for m in family_matches(
        "8x A100-SXM4-80GB", ["nvidia-a100-x8", "nvidia-a100-80gb-x8", "nvidia-a100-x4"])] == [
        "nvidia-a100-80gb-x8", "nvidia-a100-x8"]


def test_family_history_keys_match_a_wider_family():
    assert family_matches("V100", ["nvidia-v100-16gb-x1", "nvidia-v100-sxm2-x1"]) == [
        ("nvidia-v100-16gb-x1", "family: asked 'V100', history has 'V100-16GB'"),
        ("nvidia-v100-sxm2-x1", "family: asked 'V100', history has 'V100-SXM2'"),
    ]
    assert family_matches("V100 16GB", ["nvidia-v100-sxm2-x1"]) == []  # SXM2 32GB is not 16GB


def test_members_are_in_catalog_order():
    order = [s.name for s in load_catalog()]
    for family in family_names():
        members = [s.name for s in gpu_members(family)]
        assert members == sorted(members, key=order.index)
        assert len(members) >= 2, family


HEADER = ("name,aliases,architecture,compute_capability,segment,memory_gb,memory_type,"
          "bandwidth_gbs,boost_clock_mhz,sm_count,cuda_cores,fp32_tflops,release_year,family")
ROW = "{name},{aliases},Volta,7.0,datacenter,{mem},HBM2,900,1500,10,640,1.92,2020,{family}"


def _catalog(tmp_path, *rows: dict, name: str = "catalog.csv"):
    path = tmp_path / name  # one name per content: catalogs are cached by path
    path.write_text("\n".join([HEADER, *(ROW.format(**r) for r in rows)]) + "\n")
    return path


def test_a_family_column_groups_rows_and_a_family_name_is_no_row(tmp_path):
    rows = [dict(name="Foo X1 16GB", aliases="", mem=16, family="Foo X1"),
            dict(name="Foo X1 8GB", aliases="", mem=8, family="Foo X1"),
            dict(name="Foo X2", aliases="", mem=8, family="")]
    path = _catalog(tmp_path, *rows)
    assert [s.name for s in gpu_members("NVIDIA Foo X1", path)] == ["Foo X1 16GB", "Foo X1 8GB"]
    assert resolve_gpu("Foo X1", path).name == "Foo X1 16GB"  # the first row stands for it
    assert [s.name for s in gpu_members("Foo X1 8GB", path)] == ["Foo X1 8GB"]
    assert family_names(path) == ["Foo X1"]
    clash = _catalog(tmp_path, rows[0], dict(rows[1], aliases="Foo X1"), name="clash.csv")
    with pytest.raises(ValueError, match="family 'Foo X1' is also a spelling of Foo X1 8GB"):
        gpu_members("Foo X1", clash)


@pytest.mark.parametrize(("spelled", "key"), [
    ("8x NVIDIA Blackwell GPU (B200-SXM-180GB)", "nvidia-b200-x8"),  # MLPerf v5.0 descriptions
    ("4x NVIDIA Blackwell GPU (GB200)", "nvidia-gb200-x4"),
    ("2x NVIDIA H100 NVL Tensor Core GPU (PCIe)", "nvidia-h100-nvl-x2"),  # v4.1, as filed
    ("8x NVIDIA A100-SXM4-40GB (400W)", "nvidia-a100-sxm4-40gb-x8"),
    ("8x NVIDIA RTX PRO 6000 Blackwell Server Edition",
     "nvidia-rtx-pro-6000-blackwell-server-edition-x8"),  # a part's own word stays
])
def test_an_architecture_named_before_the_part_is_the_part(spelled: str, key: str) -> None:
    assert Deployment.parse(spelled).key == key
