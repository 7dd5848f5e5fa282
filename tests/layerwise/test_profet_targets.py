"""PROFET's whole training steps as TensorFlow targets (issue 36): read, sized, priced by side."""

from __future__ import annotations

import re

import pandas as pd

from layerwise.corpora.profet import INSTANCES, NOT_THE_ZOOS, ZOO_NAMES, profet_targets
from layerwise.corpora.torchvision_bench import TARGET_COLUMNS


def test_targets_hold_the_four_gpus_and_one_median_per_workload(shared_data):
    targets = profet_targets(shared_data / "profet")
    assert set(TARGET_COLUMNS) | {"image_size", "classes"} == set(targets.columns)
    assert targets["chip"].nunique() == len(INSTANCES) == 4
    assert set(targets["network"]) <= set(ZOO_NAMES.values())
    assert (targets["step_ms"] > 0).all() and targets["step_ms"].notna().all()
    assert not targets.duplicated(["gpu", "network", "image_size", "batch_per_gpu"]).any()
    # torchvision specs are shipped at 224 only: ResNet18/34 keep that side alone
    small = targets[targets["network"].isin(["resnet18", "resnet34"])]
    assert set(small["image_size"]) == {224}
    # a bigger batch of the same workload never runs faster per step
    same = targets.sort_values("batch_per_gpu").groupby(["gpu", "network", "image_size"])
    assert same["step_ms"].apply(lambda s: s.is_monotonic_increasing).mean() > 0.9


def test_network_sums_price_each_input_side(shared_data):
    from layerwise.corpora.network_fit import network_sums
    from layerwise.shipped import default_predictor

    targets = profet_targets(shared_data / "profet")
    pick = targets[(targets["network"] == "vgg11") & (targets["batch_per_gpu"] == 32)
                   & (targets["gpu"] == targets["gpu"].iloc[0])
                   & targets["image_size"].isin([64, 224])]
    sums = network_sums(pd.DataFrame(pick), default_predictor(), framework="tensorflow")
    by_side = sums.set_index("image_size")["sum_ms"]
    assert by_side[224] > 4 * by_side[64]  # 12x the pixels: the sides are priced, not one


def test_profet_alexnet_is_left_out_because_it_is_not_the_zoos(shared_data):
    """PROFET's published Keras AlexNet opens with 96 filters of 11x11 at stride 1; the zoo's
    alexnet is another network, so pricing PROFET's steps with it prices other work (issue 36:
    those steps set the TensorFlow composition's per-step constant)."""
    from layerwise.network import decompose

    text = (shared_data / "profet" / "model_info.py.txt").read_text()
    body = text[text.index("def AlexNet"):text.index("def InceptionV3")]
    filters, size = re.search(r"Conv2D\((\d+),\s*\((\d+),", body).groups()
    zoo = decompose("alexnet", batch_size=1, image_size=224, framework="tensorflow").rows[0]
    assert (zoo["channels_out"], zoo["kernelsize"], zoo["strides"]) != (int(filters), int(size), 1)
    assert "AlexNet" in NOT_THE_ZOOS and "AlexNet" not in ZOO_NAMES
    targets = profet_targets(shared_data / "profet")
    assert "alexnet" not in set(targets["network"])
    assert {"vgg11", "resnet50", "mobilenetv2"} <= set(targets["network"])
