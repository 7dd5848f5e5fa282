"""What is priced is what was measured (issue 36, 2026-12-03): PROFET's classes per input side,
and the H100 sessions' GoogLeNet and Inception-v3 built without auxiliary classifiers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from layerwise.corpora.network_fit import AUX_HEADS, as_measured, network_sums
from layerwise.corpora.profet import profet_targets
from layerwise.corpora.torchvision_bench import first_session_targets, measured_targets
from layerwise.network import decompose

ROOT = Path(__file__).resolve().parents[2]


def _names(rows: list[dict]) -> set[str]:
    return {str(r["name"]) for r in rows}


def test_as_measured_resizes_the_classifier_and_nothing_else():
    rows = decompose("vgg16", batch_size=16, optimizer="sgd", framework="tensorflow",
                     image_size=32).rows
    before = [dict(r) for r in rows]
    out = as_measured(rows, classes=10)
    last = out[-1]
    assert (last["layer"], last["dim_output"]) == ("dense", 10)
    assert last["params"] == (rows[-1]["dim_input"] + 1) * 10
    assert 0 < last["flops"] < rows[-1]["flops"] / 50
    assert out[:-1] == rows[:-1] and rows == before  # the zoo's rows are not touched
    assert as_measured(rows) == rows and as_measured(rows, classes=1000) == rows


def test_profet_steps_train_ten_classes_at_32_px(shared_data):
    """PROFET's dataset_info.py: 10 classes at 32 px, 100 at 64 and 128, 1000 at 224 and 256."""
    from layerwise.shipped import default_predictor

    targets = profet_targets(shared_data / "profet")
    by_side = targets.groupby("image_size")["classes"].unique()
    assert by_side.map(list).to_dict() == {32: [10], 64: [100], 128: [100], 224: [1000],
                                           256: [1000]}
    pick = targets[(targets["network"] == "vgg16") & (targets["image_size"] == 32)].head(1)
    both = pd.concat([pick, pick.drop(columns="classes")], ignore_index=True)
    sums = network_sums(both, default_predictor(), framework="tensorflow")
    assert sums.loc[0, "sum_ms"] < sums.loc[1, "sum_ms"]  # the 4096x10 head, not 4096x1000


def test_h100_googlenet_and_inception_are_priced_without_aux_heads(shared_data):
    from layerwise.shipped import default_predictor

    targets = pd.concat([measured_targets(), first_session_targets()], ignore_index=True)
    no_aux = set(targets.loc[~targets["aux_heads"], "network"])
    assert no_aux == {"googlenet", "inception_v3"} == set(AUX_HEADS)
    zoo = decompose("googlenet", batch_size=64, framework="pytorch").rows
    kept = as_measured(zoo, aux_heads=False)
    assert any(n.startswith("aux1") for n in _names(zoo))
    assert not any(n.startswith(("aux1", "aux2")) for n in _names(kept))
    assert {"fc", "inception5b.branch4.1.conv"} <= _names(kept)
    row = targets[(targets["network"] == "googlenet") & (targets["precision"] == "fp32")].head(1)
    both = pd.concat([row, row.assign(aux_heads=True)], ignore_index=True)
    sums = network_sums(both, default_predictor(), framework="pytorch")
    assert sums.loc[0, "kernels"] < sums.loc[1, "kernels"]
    assert sums.loc[0, "sum_ms"] < sums.loc[1, "sum_ms"]
