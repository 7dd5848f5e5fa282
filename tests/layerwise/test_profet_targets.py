"""PROFET's whole training steps as TensorFlow targets (issue 36): read, sized, priced by side."""

from __future__ import annotations

import pandas as pd

from layerwise.corpora.profet import INSTANCES, ZOO_NAMES, profet_targets
from layerwise.corpora.torchvision_bench import TARGET_COLUMNS


def test_targets_hold_the_four_gpus_and_one_median_per_workload(shared_data):
    targets = profet_targets(shared_data / "profet")
    assert set(TARGET_COLUMNS) | {"image_size"} == set(targets.columns)
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
