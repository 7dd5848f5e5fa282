"""Boosted trees evaluated from their exported numpy arrays equal scikit-learn's evaluation."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from paths import DATA

from layerwise.efficiency import EfficiencyPredictor
from layerwise.efficiency_arrays import EfficiencyArrays, as_records
from layerwise.forest import Forest, ForestGroup
from layerwise.pricing import SHIPPED_DIR
from layerwise.sources import kind_rows


def _fitted(seed: int, n: int = 3000, iters: int = 60):
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    X[:, 2] = np.round(X[:, 2], 1)  # many rows exactly on a split threshold
    y = np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + rng.normal(scale=0.1, size=n)
    model = HistGradientBoostingRegressor(max_iter=iters, max_leaf_nodes=31,
                                          random_state=seed).fit(X, y)
    return model, X


def test_exported_trees_equal_sklearn_on_many_rows():
    model, X = _fitted(0)
    rows = np.vstack([X, np.random.default_rng(9).normal(scale=3.0, size=(20000, 6))])
    ours = Forest.from_sklearn(model).predict(rows)
    # leaves are stored as float32: equal to that rounding, nothing more
    np.testing.assert_allclose(ours, model.predict(rows), rtol=1e-6, atol=1e-6)


def test_saved_arrays_predict_what_the_fitted_forest_did(tmp_path):
    model, X = _fitted(1)
    forest = Forest.from_sklearn(model)
    np.savez_compressed(tmp_path / "f.npz", **forest.arrays())
    with np.load(tmp_path / "f.npz") as npz:
        loaded = Forest.from_arrays(dict(npz), forest.baseline, forest.depth)
    np.testing.assert_array_equal(loaded.predict(X), forest.predict(X))


def test_a_group_of_forests_equals_each_forest_alone():
    (m1, X1), (m2, _) = _fitted(2, iters=40), _fitted(3, iters=25)
    f1, f2 = Forest.from_sklearn(m1), Forest.from_sklearn(m2)
    group = np.random.default_rng(4).integers(0, 2, len(X1))
    both = ForestGroup([f1, f2]).predict(X1, group)
    np.testing.assert_array_equal(both[group == 0], f1.predict(X1[group == 0]))
    np.testing.assert_array_equal(both[group == 1], f2.predict(X1[group == 1]))


@pytest.fixture(scope="module")
def layer_rows() -> pd.DataFrame:
    frames = []
    for name in ("conv", "dense"):
        rows, _ = kind_rows(pd.read_csv(DATA / "justus2018" / f"{name}_slice.csv.gz"))
        frames.append(rows.head(150))
    for name in ("linear", "ln", "elementwise"):
        rows, _ = kind_rows(pd.read_csv(DATA / "neusight" / f"{name}_slice.csv.gz"))
        frames.append(rows.head(100))
    rows = pd.concat(frames)
    return pd.concat([rows, rows.head(50).assign(gpu="NVIDIA L4", precision="bf16")])


def test_row_dicts_and_frames_get_the_same_answer(layer_rows):
    shipped = EfficiencyPredictor.load(SHIPPED_DIR)
    frame = shipped.predict(layer_rows)
    dicts = [{k: v for k, v in r.items() if not (isinstance(v, float) and np.isnan(v))}
             for r in layer_rows.to_dict("records")]
    records, columns = as_records(dicts)
    arrays = EfficiencyArrays.load(SHIPPED_DIR).predict_records(records, columns)
    for col in frame.columns:
        np.testing.assert_array_equal(np.asarray(arrays[col]), frame[col].to_numpy(), col)


def test_the_arrays_load_and_predict_without_pandas_sklearn_or_scipy():
    code = ("import sys\n"
            "from layerwise.efficiency_arrays import EfficiencyArrays\n"
            "from layerwise.pricing import SHIPPED_DIR\n"
            "m = EfficiencyArrays.load(SHIPPED_DIR)\n"
            "out = m.predict_records([{'layer': 'conv', 'batchsize': 8, 'matsize': 32,\n"
            "    'kernelsize': 3, 'channels_in': 16, 'channels_out': 32, 'strides': 1,\n"
            "    'padding': 'same', 'use_bias': True, 'activation': 'relu',\n"
            "    'optimizer': 'sgd', 'precision': 'fp32', 'gpu': 'V100'}])\n"
            "assert out['predicted_ms'][0] > 0\n"
            "print(sorted(m for m in ('sklearn', 'scipy', 'pandas') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
