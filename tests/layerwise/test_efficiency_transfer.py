"""Device trees where they learned, device-agnostic trees elsewhere; seen chips per kind."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from paths import DATA

from layerwise.efficiency import EfficiencyPredictor
from layerwise.efficiency_arrays import EfficiencyArrays, as_records
from layerwise.sources import kind_rows, unsupported


def _rows() -> tuple[pd.DataFrame, pd.Series]:
    parts, times = [], []
    for name in ("conv_slice", "dense_slice"):
        r, t = kind_rows(pd.read_csv(DATA / "justus2018" / f"{name}.csv.gz"))
        parts.append(r)
        times.append(t)
    for name in ("conv", "linear", "ln"):
        r, t = kind_rows(pd.read_csv(DATA / "neusight" / f"{name}_slice.csv.gz"))
        keep = r.index.difference(unsupported(r))
        parts.append(r.loc[keep])
        times.append(t.loc[keep])
    return pd.concat(parts, ignore_index=True), pd.concat(times, ignore_index=True)


@pytest.fixture(scope="module")
def models() -> dict[str, EfficiencyPredictor]:
    rows, ms = _rows()
    kw = dict(max_iter=25, unseen_interval_refits=False)
    return {"blend": EfficiencyPredictor(**kw).fit(rows, ms),
            "device": EfficiencyPredictor(transfer_scale=None, seen_by_kind=False,
                                          **kw).fit(rows, ms)}


def _conv(batch: int, gpu: str, side: int = 28) -> dict:
    return {"layer": "conv", "batchsize": batch, "matsize": side, "kernelsize": 3,
            "channels_in": 64, "channels_out": 64, "strides": 1, "padding": "same",
            "use_bias": True, "activation": "none", "optimizer": "none", "precision": "fp32",
            "framework": "pytorch", "gpu": gpu}


def _weights(model: EfficiencyPredictor, rows: pd.DataFrame) -> np.ndarray:
    arrays = model.arrays()
    entry = arrays.families["gemm"]
    records, columns = as_records(rows.to_dict("records"))
    from layerwise.efficiency_arrays import chip_of, feature_values
    from layerwise.roofline import physics_columns

    X = feature_values(entry["features"], records, columns, physics_columns(records))
    chips = np.array([chip_of(g) for g in rows["gpu"]], dtype=object)
    return arrays.device_weight(entry, X, list(entry["features"]), chips,
                                rows["layer"].to_numpy(dtype=object))


def test_inside_a_chips_own_rows_the_device_trees_answer_alone(models):
    from layerwise.roofline import physics_frame

    train, _ = _rows()
    picked = []
    for gpu in ("Tesla T4", "Tesla V100-PCIE-32GB"):  # a row of median size of each chip
        own = train[(train["gpu"] == gpu) & (train["layer"] == "conv")]
        bound = physics_frame(own)["bound_ms"]
        picked.append(own.loc[(bound - bound.median()).abs().idxmin()])
    rows = pd.DataFrame(picked).reset_index(drop=True)
    assert np.allclose(_weights(models["blend"], rows), 1.0)
    np.testing.assert_allclose(models["blend"].predict(rows)["predicted_ms"],
                               models["device"].predict(rows)["predicted_ms"], rtol=1e-12)


def test_far_outside_what_a_gpu_showed_the_agnostic_trees_take_over(models):
    from layerwise.efficiency_arrays import chip_of
    from layerwise.roofline import physics_frame

    train, _ = _rows()
    covered = models["blend"].arrays().families["gemm"]["chip_ranges"]
    # the chip whose own forward dense rows stop at the smallest size (below saturation)
    chip = min((c for c in covered if "dense/0" in covered[c]),
               key=lambda c: covered[c]["dense/0"][1])
    assert covered[chip]["dense/0"][1] < 0
    gpu = next(g for g in train["gpu"] if chip_of(g) == chip)
    dense = train[(train["layer"] == "dense") & (train["optimizer"] == "none")]
    biggest = dense.loc[physics_frame(dense)["bound_ms"].idxmax()]
    # ... and L4: fewer watts per FP32 TFLOP than any training GPU
    rows = pd.DataFrame([biggest.to_dict() | {"gpu": gpu},
                         _conv(16, "NVIDIA L4")]).reset_index(drop=True)
    w = _weights(models["blend"], rows)
    assert (w < 0.3).all() and (w > 0).all()
    blend = models["blend"].predict(rows)["predicted_ms"].to_numpy()
    device = models["device"].predict(rows)["predicted_ms"].to_numpy()
    assert np.isfinite(blend).all() and not np.allclose(blend, device)


def test_saved_and_loaded_arrays_predict_the_same(models, tmp_path):
    rows, _ = _rows()
    sample = pd.concat([rows.sample(300, random_state=0),
                        pd.DataFrame([_conv(4096, "NVIDIA L4", 224)])], ignore_index=True)
    model = models["blend"]
    model.save(tmp_path)
    again = EfficiencyPredictor.load(tmp_path).predict(sample)
    pd.testing.assert_frame_equal(model.predict(sample), again)
    records, columns = as_records(sample.to_dict("records"))
    arrays = EfficiencyArrays.load(tmp_path).predict_records(records, columns)
    np.testing.assert_array_equal(arrays["predicted_ms"], again["predicted_ms"].to_numpy())


def test_a_chip_counts_as_seen_only_for_kinds_it_has_rows_of(models):
    # the NeuSight slices time linear layers on the A100 but no convolutions
    rows = pd.DataFrame([_conv(16, "NVIDIA A100-PCIE-40GB")])
    assert not models["blend"].predict(rows)["seen_device"].iloc[0]
    assert models["device"].predict(rows)["seen_device"].iloc[0]
