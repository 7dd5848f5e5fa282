"""Boosted trees as flat numpy arrays: exported once from scikit-learn, evaluated with numpy.

A fitted ``HistGradientBoostingRegressor`` is exported by :meth:`Forest.from_sklearn` into a
handful of arrays (saved in the predictor's ``.npz``); :meth:`Forest.predict` walks them with
numpy alone. Rules:

* Inner node ``i`` sends a row left when ``x[feature[i]] <= threshold[i]`` (scikit-learn's rule
  for numerical splits on raw values; features here are finite, so its missing-value branch is
  never taken). A child (or a root) ``c >= 0`` is an inner node; ``c < 0`` is leaf ``~c``.
* Thresholds are float64 (exact: a row on a split keeps its side); leaf values are stored as
  float32, so a prediction equals scikit-learn's to float32 rounding of the leaves (relative
  error below 1e-6 on the summed log ratio), and fit-time and load-time predictions are equal
  because both use the exported arrays.
* Importing this module imports numpy only (no scikit-learn, scipy or pandas): the forecast
  path of a shipped network loads trees without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Forest:
    """Flat arrays of a boosted forest (see the module rules)."""

    feature: np.ndarray  # int16, per inner node
    threshold: np.ndarray  # float64, per inner node
    left: np.ndarray  # int32, per inner node
    right: np.ndarray  # int32, per inner node
    value: np.ndarray  # float64 (stored as float32), per leaf
    roots: np.ndarray  # int32, per tree
    baseline: float
    depth: int

    def __post_init__(self) -> None:
        # intp copies for indexing (built once; the saved arrays keep their compact types)
        self._feature = np.asarray(self.feature, dtype=np.intp)
        self._left = np.asarray(self.left, dtype=np.intp)
        self._right = np.asarray(self.right, dtype=np.intp)
        self._roots = np.asarray(self.roots, dtype=np.intp)

    def predict(self, X: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """Sum of the trees' leaf values plus the baseline, for each row of ``X``."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"expected a 2-d feature array, got shape {X.shape}")
        out = np.empty(len(X))
        for start in range(0, len(X), chunk):
            out[start:start + chunk] = self._predict_block(X[start:start + chunk])
        return out

    def _predict_block(self, X: np.ndarray) -> np.ndarray:
        n_rows = len(X)
        if n_rows == 0 or len(self._roots) == 0:
            return np.full(n_rows, self.baseline)
        roots = np.broadcast_to(self._roots, (n_rows, len(self._roots)))
        return self.baseline + walk(X, roots, self._feature, self.threshold, self._left,
                                    self._right, self.value)

    def arrays(self) -> dict[str, np.ndarray]:
        """The compact arrays saved in an ``.npz``."""
        return {
            "feature": self.feature.astype(np.int16),
            "threshold": self.threshold.astype(np.float64),
            "left": self.left.astype(np.int32),
            "right": self.right.astype(np.int32),
            "value": self.value.astype(np.float32),
            "roots": self.roots.astype(np.int32),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], baseline: float, depth: int) -> Forest:
        """A forest from :meth:`arrays` output (plus its baseline and depth)."""
        return cls(
            feature=arrays["feature"].astype(np.int16),
            threshold=arrays["threshold"].astype(np.float64),
            left=arrays["left"].astype(np.int32),
            right=arrays["right"].astype(np.int32),
            value=arrays["value"].astype(np.float64),
            roots=arrays["roots"].astype(np.int32),
            baseline=float(baseline),
            depth=int(depth),
        )

    @classmethod
    def from_sklearn(cls, model: Any) -> Forest:
        """Export a fitted single-output ``HistGradientBoostingRegressor``."""
        features, thresholds, lefts, rights, values, roots = [], [], [], [], [], []
        n_inner = n_leaf = depth = 0
        for (tree,) in model._predictors:  # one predictor per iteration (single output)
            nodes = tree.nodes
            if nodes["is_categorical"].any():
                raise ValueError("categorical splits are not supported in the export")
            leaf = nodes["is_leaf"].astype(bool)
            # New index of every node: inner nodes count up from n_inner, leaves are ~index.
            new = np.empty(len(nodes), dtype=np.int64)
            new[~leaf] = n_inner + np.arange((~leaf).sum())
            new[leaf] = ~(n_leaf + np.arange(leaf.sum()))
            inner = nodes[~leaf]
            features.append(inner["feature_idx"])
            thresholds.append(inner["num_threshold"])
            lefts.append(new[inner["left"].astype(np.int64)])
            rights.append(new[inner["right"].astype(np.int64)])
            values.append(nodes["value"][leaf])
            roots.append(new[0])
            depth = max(depth, int(nodes["depth"].max()))
            n_inner += int((~leaf).sum())
            n_leaf += int(leaf.sum())
        return cls(
            feature=np.concatenate(features).astype(np.int16),
            threshold=np.concatenate(thresholds).astype(np.float64),
            left=np.concatenate(lefts).astype(np.int32),
            right=np.concatenate(rights).astype(np.int32),
            value=np.concatenate(values).astype(np.float32).astype(np.float64),
            roots=np.asarray(roots, dtype=np.int32),
            baseline=float(np.ravel(model._baseline_prediction)[0]),
            depth=depth,
        )

    @property
    def n_nodes(self) -> int:
        """Inner nodes plus leaves (a size measure)."""
        return int(len(self.feature) + len(self.value))


class ForestGroup:
    """Several forests evaluated in one walk: row ``i`` goes through ``forests[group[i]]``
    (arrays side by side; a forest with fewer trees gets empty trees of value 0)."""

    def __init__(self, forests: list[Forest]):
        self.baselines = np.array([f.baseline for f in forests], dtype=float)
        n_trees = max((len(f.roots) for f in forests), default=0)
        inner = np.cumsum([0] + [len(f.feature) for f in forests])
        leaf = np.cumsum([0] + [len(f.value) for f in forests]) + 1  # leaf 0: value 0

        def moved(a: np.ndarray, j: int) -> np.ndarray:
            a = np.asarray(a, dtype=np.intp)
            return np.where(a >= 0, a + inner[j], a - leaf[j])

        self.roots = np.full((len(forests), n_trees), -1, dtype=np.intp)  # -1 = leaf 0
        for j, f in enumerate(forests):
            self.roots[j, :len(f.roots)] = moved(f.roots, j)
        self.feature = np.concatenate([np.asarray(f.feature, np.intp) for f in forests])
        self.threshold = np.concatenate([f.threshold for f in forests])
        self.left = np.concatenate([moved(f.left, j) for j, f in enumerate(forests)])
        self.right = np.concatenate([moved(f.right, j) for j, f in enumerate(forests)])
        self.value = np.concatenate([[0.0], *[f.value for f in forests]])

    def predict(self, X: np.ndarray, group: np.ndarray) -> np.ndarray:
        """Per row: its forest's baseline plus the sum of its trees' leaves."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        group = np.asarray(group, dtype=np.intp)
        if len(X) == 0 or self.roots.shape[1] == 0:
            return self.baselines[group]
        return self.baselines[group] + walk(X, self.roots[group], self.feature,
                                            self.threshold, self.left, self.right, self.value)


def walk(X: np.ndarray, roots: np.ndarray, feature: np.ndarray, threshold: np.ndarray,
         left: np.ndarray, right: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Sum over trees of the leaf each row reaches: ``roots`` is (rows x trees) of start
    nodes; every (row, tree) path moves at once, one level per step, only while inside."""
    n_rows, n_cols = X.shape
    n_trees = roots.shape[1]
    flat = X.ravel()
    node = np.array(roots, dtype=np.intp).ravel()  # path p = row * n_trees + tree
    base = np.repeat(np.arange(n_rows, dtype=np.intp) * n_cols, n_trees)
    live = np.flatnonzero(node >= 0)
    while len(live):
        at = node[live]
        go_left = flat[base[live] + feature[at]] <= threshold[at]
        nxt = np.where(go_left, left[at], right[at])
        node[live] = nxt
        live = live[nxt >= 0]
    return value[~node].reshape(n_rows, n_trees).sum(axis=1)
