"""Gradient-boosted trees on log time relative to the roofline estimate.

Trained with scikit-learn's ``HistGradientBoostingRegressor``; the fitted trees are then
exported to flat numpy arrays and evaluated in numpy, so a saved model loads without
scikit-learn pickles and predicts identically on any scikit-learn version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from layerwise.estimators.base import OFFSET, Estimator, check_fitted


@dataclass
class Forest:
    """Flat arrays of a boosted forest: node ``i`` splits on ``feature[i] <= threshold[i]``."""

    feature: np.ndarray  # int32, -1 for leaves
    threshold: np.ndarray  # float64
    left: np.ndarray  # int32, global node index
    right: np.ndarray  # int32
    value: np.ndarray  # float64 leaf values (0 for inner nodes)
    roots: np.ndarray  # int32, first node of each tree
    baseline: float
    depth: int

    def predict(self, X: np.ndarray, chunk: int = 4096) -> np.ndarray:
        """Sum of the trees' leaf values plus the baseline, for each row of ``X``."""
        X = np.asarray(X, dtype=np.float64)
        out = np.empty(len(X))
        is_leaf = self.feature < 0
        feature = np.where(is_leaf, 0, self.feature)
        for start in range(0, len(X), chunk):
            block = X[start:start + chunk]
            node = np.broadcast_to(self.roots, (len(block), len(self.roots))).copy()
            rows = np.arange(len(block))[:, None]
            for _ in range(self.depth):
                leaf = is_leaf[node]
                if leaf.all():
                    break
                go_left = block[rows, feature[node]] <= self.threshold[node]
                step = np.where(go_left, self.left[node], self.right[node])
                node = np.where(leaf, node, step)
            out[start:start + chunk] = self.baseline + self.value[node].sum(axis=1)
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "feature": self.feature, "threshold": self.threshold, "left": self.left,
            "right": self.right, "value": self.value, "roots": self.roots,
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], baseline: float, depth: int) -> Forest:
        return cls(
            feature=arrays["feature"].astype(np.int32),
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
        offset, depth = 0, 0
        for (tree,) in model._predictors:  # one predictor per iteration (single output)
            nodes = tree.nodes
            if nodes["is_categorical"].any():
                raise ValueError("categorical splits are not supported in the export")
            leaf = nodes["is_leaf"].astype(bool)
            features.append(np.where(leaf, -1, nodes["feature_idx"]).astype(np.int32))
            thresholds.append(np.where(leaf, 0.0, nodes["num_threshold"]))
            lefts.append(np.where(leaf, 0, nodes["left"].astype(np.int64) + offset))
            rights.append(np.where(leaf, 0, nodes["right"].astype(np.int64) + offset))
            values.append(np.where(leaf, nodes["value"], 0.0))
            roots.append(offset)
            depth = max(depth, int(nodes["depth"].max()))
            offset += len(nodes)
        baseline = float(np.ravel(model._baseline_prediction)[0])
        return cls(
            feature=np.concatenate(features),
            threshold=np.concatenate(thresholds).astype(np.float64),
            left=np.concatenate(lefts).astype(np.int32),
            right=np.concatenate(rights).astype(np.int32),
            value=np.concatenate(values).astype(np.float64),
            roots=np.asarray(roots, dtype=np.int32),
            baseline=baseline,
            depth=depth,
        )


@dataclass
class GbtEstimator(Estimator):
    """HistGradientBoosting on ``log(time) - log(roofline time)``."""

    name: ClassVar[str] = "gbt"

    max_iter: int = 600
    learning_rate: float = 0.1
    max_leaf_nodes: int = 63
    min_samples_leaf: int = 10
    l2_regularization: float = 0.0
    random_state: int = 0

    def __post_init__(self) -> None:
        self._forest: Forest | None = None
        self.feature_names_: list[str] = []

    def fit(self, X: pd.DataFrame, y_log: np.ndarray, gpu: np.ndarray) -> GbtEstimator:
        from sklearn.ensemble import HistGradientBoostingRegressor

        self.feature_names_ = list(X.columns)
        model = HistGradientBoostingRegressor(
            max_iter=self.max_iter,
            learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=min(self.min_samples_leaf, max(1, len(X) // 4)),
            l2_regularization=self.l2_regularization,
            early_stopping=False,
            random_state=self.random_state,
        )
        model.fit(X.to_numpy(np.float64), np.asarray(y_log) - X[OFFSET].to_numpy())
        self._forest = Forest.from_sklearn(model)
        return self

    def predict(self, X: pd.DataFrame, gpu: np.ndarray) -> np.ndarray:
        check_fitted(self, "_forest")
        matrix = X[self.feature_names_].to_numpy(np.float64)
        return self._forest.predict(matrix) + X[OFFSET].to_numpy()

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        check_fitted(self, "_forest")
        meta = {
            "baseline": self._forest.baseline,
            "depth": self._forest.depth,
            "feature_names": self.feature_names_,
        }
        return meta, self._forest.arrays()

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._forest = Forest.from_arrays(arrays, meta["baseline"], meta["depth"])
        self.feature_names_ = list(meta["feature_names"])

    @property
    def n_nodes(self) -> int:
        check_fitted(self, "_forest")
        return len(self._forest.feature)
