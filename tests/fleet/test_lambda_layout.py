"""Lambda's folder convention (fleet.lambda_layout): every rule of the module doc."""

from __future__ import annotations

import os

import pytest

from fleet.lambda_layout import (
    ConfigFolder,
    NetworkFolder,
    is_side_file,
    is_system_folder,
    parse_config,
    parse_log_path,
    parse_metadata,
    parse_network,
    parse_system,
)

SYSTEM = "Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt2_TF1_15.logs"


def test_system_folder_words_and_options():
    system = parse_system(SYSTEM)
    assert system.name == SYSTEM.removesuffix(".logs")
    assert system.words[:3] == ("Gold", "6230", "GeForce")
    assert system.xla and system.nvlink and system.has("trt2") and not system.has("trt")
    assert system.tf_version == "1.15"
    assert parse_system("7502-A100-PCIE-40GB") == parse_system("7502-A100-PCIE-40GB.logs")
    plain = parse_system("7502-GeForce_RTX_3070.logs")
    assert not plain.xla and not plain.nvlink and plain.tf_version is None
    assert not parse_system("x-XLAB_NVLinks.logs").xla  # whole words only
    assert not parse_system("x-XLAB_NVLinks.logs").nvlink
    assert parse_system("Platinum-V100_HP16_TF2_2.logs").tf_version == "2.2"
    assert parse_system("i9-TF1_15x.logs").tf_version is None
    assert is_system_folder(SYSTEM) and not is_system_folder("syn-replicated-fp32-1gpus")


def test_config_folder_rules():
    cfg = parse_config("real-replicated-fp16-2gpus-distortions-inference")
    assert cfg == ConfigFolder(data="real", update="replicated", precision="fp16", gpus=2,
                               inference=True, distortions=True)
    assert cfg.mode == "inference" and cfg.dataset == "real" and cfg.published
    train = parse_config("syn-parameter_server-fp32-8gpus")
    assert train.mode == "training" and train.dataset == "synthetic" and not train.distortions
    assert parse_config("syn-replicated-fp32-1gpus-inference-distortions").distortions
    unpublished = [parse_config(n) for n in ("syn-replicated-bf16-1gpus",
                                             "syn-independent-fp32-1gpus",
                                             "syn-replicated-fp32-0gpus")]
    assert all(c is not None and not c.published for c in unpublished)


@pytest.mark.parametrize("name", [
    "syn-replicated-fp32-1gpus-inference-inference", "syn-replicated-fp32-1gpus-x",
    "fake-replicated-fp32-1gpus", "syn-replicated-fp8-1gpus", "syn-replicated-fp32-gpus",
    "syn-Replicated-fp32-1gpus", "syn-replicated-fp32-1gpus-",
])
def test_config_folder_off_the_rules(name):
    assert parse_config(name) is None


def test_network_folder():
    assert parse_network("resnet50-64") == NetworkFolder("resnet50", 64)
    assert parse_network("Inception_v3.1-008") == NetworkFolder("Inception_v3.1", 8)
    for bad in ("resnet50", "resnet50-", "res net-64", "resnet50-6a"):
        assert parse_network(bad) is None, bad


def test_log_path_facts():
    parts = ["root", SYSTEM, "real-replicated-fp32-4gpus", "resnet50-64", "throughput", "2"]
    found = parse_log_path(os.sep.join(parts))
    assert found is not None
    assert found.config.gpus == 4 and found.network.batch == 64 and found.rep == "2"
    assert found.system.xla and found.folder == os.sep.join(parts[1:5])
    assert found.metadata == os.sep.join(["root", SYSTEM, "metadata"])
    for bad in (parts[:-2] + ["thermal", "2"], ["root", "x", *parts[2:]],
                parts[:2] + ["syn-x-fp32"] + parts[3:], parts[:3] + ["resnet50"] + parts[4:],
                parts[2:]):
        assert parse_log_path(os.sep.join(bad)) is None, bad


def test_side_files():
    root = os.sep.join(["r", SYSTEM])
    assert is_side_file(os.sep.join([root, "metadata"]))
    assert is_side_file(os.sep.join([root, "syn-replicated-fp32-1gpus", "vgg16-32", "thermal",
                                     "1"]))
    assert not is_side_file(os.sep.join([root, "syn-replicated-fp32-1gpus", "vgg16-32",
                                         "throughput", "1"]))
    assert not is_side_file(os.sep.join(["r", "other", "metadata"]))
    assert not is_side_file(os.sep.join([root, "cfg", "vgg16", "thermal", "1"]))


def test_metadata_text():
    text = "CPU\tGold 6230\nGPU 0\t GeForce RTX 2080 Ti \nno tab here\n\tempty key\nTF\t1.15\n" \
           "CPU\tlast wins\n"
    meta = parse_metadata(text)
    assert meta == {"CPU": "last wins", "GPU 0": "GeForce RTX 2080 Ti", "TF": "1.15"}
    assert list(meta) == ["CPU", "GPU 0", "TF"]
    assert parse_metadata("") == {}
