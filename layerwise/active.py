"""Active sampling: measure next the layer shapes the predictor is least certain about.

:class:`ActiveSampler` fits a small bagged ensemble of boosted trees on log time relative to a
roofline, with the kind's features (:func:`layerwise.features.feature_frame`) plus the GEMM
physics (:func:`layerwise.roofline.physics_frame`), and ranks unmeasured candidate rows by the
members' disagreement. :func:`replay` simulates a
measuring campaign on published timings. Rules:

* Target: ``log(measured_ms) - log(baseline)``; ``baseline="roofline"`` (default) is
  :func:`layerwise.features.roofline_ms` of the training-step work (FLOPs / peak, bytes /
  bandwidth; on the published GTX 1080 Ti conv rows the trees' MAPE came out about 0.4 points
  lower with it than with the bound), ``"bound"`` is ``physics_frame``'s ``bound_ms`` (wave
  quantisation, launch).
* Members: ``n_estimators`` ``HistGradientBoostingRegressor`` fits; member ``i`` (seed
  ``random_state + i``) sees ``max_samples`` x n of the measured rows, drawn with replacement
  (``bootstrap``) or without (subsampling, the default: each member keeps 80 % of the rows, so
  the ensemble mean loses less accuracy than with bootstraps). A forecast is
  ``baseline x exp(mean of the members)``; the disagreement of a row is the standard deviation
  of the members' log predictions (a relative spread, so it targets MAPE, not ms error).
* ``suggest(candidates, n)``: with ``selection="top"`` the ``n`` candidates of largest
  disagreement (ties by position); with ``"weighted"`` ``n`` drawn without replacement with
  probability proportional to ``disagreement ** power`` (dense regions of the pool keep being
  sampled). With ``diversity`` > 0 a candidate closer than ``diversity`` (Euclidean, in
  features scaled by the measured rows' spread) to one already picked in the batch is skipped
  while others remain (a guard against ``n`` near-duplicates of one uncertain shape);
  ``explore`` is the share of each batch drawn uniformly at random instead.
* Trees fit and predict on ``n_threads`` OpenMP threads (default 1: the fits are small, and
  several OpenMP threads beside a CPU-bound neighbour on a shared machine spin-wait and ran
  20-30x slower here; None = the library default).
* :func:`replay`: ``start`` random rows of the pool, then rounds of ``step`` rows picked by
  the strategy (``active``: :meth:`ActiveSampler.suggest` over the unmeasured pool;
  ``random``: uniform); after every round the ensemble is refitted and its MAPE on the fixed
  test rows recorded. ``reached_at`` is the first sample count with MAPE <= ``target_mape``
  (None when ``max_samples`` or the pool runs out first). Both strategies score with the same
  ensemble; everything is a function of ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from threadpoolctl import threadpool_limits

from layerwise.features import feature_frame
from layerwise.roofline import physics_frame

STRATEGIES = ("active", "random")


BASELINES = {"roofline": "log_roofline_ms", "bound": "log_bound"}


def design(rows: pd.DataFrame) -> pd.DataFrame:
    """Numeric features of kind rows (kind features + GEMM physics); kinds share one frame."""
    if rows.empty:
        raise ValueError("no rows: need at least one kind row")
    if "layer" not in rows.columns:
        raise ValueError("rows lack the 'layer' column (see layerwise.sources.kind_rows)")
    layer = rows["layer"].astype(str)
    parts = [feature_frame(rows.loc[layer == kind], kind) for kind in layer.unique()]
    feats = pd.concat(parts).reindex(rows.index).fillna(0.0)
    phys = physics_frame(rows)
    feats["log_bound"] = np.log(phys["bound_ms"])
    feats["wave_eff"] = phys["wave_eff"]
    feats["log_tiles"] = np.log(phys["tiles"])
    for axis in ("m", "n", "k"):
        feats[f"gemm_log_{axis}"] = np.log1p(phys[axis])
    return feats.astype(float)


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, in %."""
    measured = np.asarray(measured, float)
    return float(np.mean(np.abs(np.asarray(predicted, float) - measured) / measured) * 100.0)


class ActiveSampler(BaseEstimator):
    """Bagged boosted-tree ensemble that proposes the next rows to measure (module rules).

    Parameters: ``n_estimators`` (members, >= 2), ``max_iter``, ``learning_rate``,
    ``max_leaf_nodes``, ``min_samples_leaf``, ``max_features`` (each member's trees);
    ``bootstrap`` and ``max_samples`` (each member's rows: with or without replacement, share);
    ``selection`` (``top`` or ``weighted``) and ``power``; ``diversity`` (minimum scaled
    feature distance between the picks of one batch; 0 = off); ``explore`` (share of a batch
    drawn at random, 0-1); ``baseline`` (``roofline`` or ``bound``); ``n_threads``;
    ``random_state``.
    """

    def __init__(self, n_estimators: int = 5, max_iter: int = 200, learning_rate: float = 0.1,
                 max_leaf_nodes: int = 31, min_samples_leaf: int = 5, bootstrap: bool = False,
                 max_samples: float = 0.8, max_features: float = 1.0, selection: str = "top",
                 power: float = 2.0, diversity: float = 0.0, explore: float = 0.0,
                 baseline: str = "roofline", n_threads: int | None = 1,
                 random_state: int = 0):
        self.n_estimators = n_estimators
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.bootstrap = bootstrap
        self.max_samples = max_samples
        self.max_features = max_features
        self.selection = selection
        self.power = power
        self.diversity = diversity
        self.explore = explore
        self.baseline = baseline
        self.n_threads = n_threads
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(self, rows: pd.DataFrame, measured_ms: Any) -> ActiveSampler:
        """Fit the members on kind rows and their measured times (ms, positive, finite)."""
        y_ms = np.asarray(measured_ms, float)
        if len(y_ms) != len(rows):
            raise ValueError(f"{len(rows)} rows but {len(y_ms)} measured times")
        return self.fit_design(design(rows), np.log(_positive(y_ms)))

    def fit_design(self, X: pd.DataFrame, log_ms: np.ndarray) -> ActiveSampler:
        """Fit on a :func:`design` frame and log measured ms (replay's fast path)."""
        from sklearn.ensemble import HistGradientBoostingRegressor

        if self.n_estimators < 2:
            raise ValueError(f"n_estimators must be >= 2 to disagree, got {self.n_estimators}")
        if len(X) < 2:
            raise ValueError(f"need at least 2 measured rows, got {len(X)}")
        if not 0.0 < self.max_samples <= (np.inf if self.bootstrap else 1.0):
            raise ValueError(f"max_samples must be > 0 (and <= 1 without bootstrap), "
                             f"got {self.max_samples}")
        if not 0.0 <= self.explore <= 1.0:
            raise ValueError(f"explore must be within 0-1, got {self.explore}")
        data = X.to_numpy(np.float64)
        y = np.asarray(log_ms, float) - self._offset(X)
        self.feature_names_ = list(X.columns)
        self.center_ = data.mean(axis=0)
        spread = data.std(axis=0)
        self.scale_ = np.where(spread > 0, spread, 1.0)
        self.members_ = []
        for i in range(self.n_estimators):
            seed = self.random_state + i
            rng = np.random.default_rng(seed)
            size = max(2, int(round(self.max_samples * len(data))))
            pick = (rng.integers(0, len(data), size) if self.bootstrap
                    else np.sort(rng.permutation(len(data))[:size]))
            member = HistGradientBoostingRegressor(
                max_iter=self.max_iter, learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                min_samples_leaf=min(self.min_samples_leaf, max(1, len(pick) // 4)),
                max_features=self.max_features, early_stopping=False, random_state=seed)
            with threadpool_limits(self.n_threads):
                self.members_.append(member.fit(data[pick], y[pick]))
        self.n_train_ = len(data)
        return self

    def _offset(self, X: pd.DataFrame) -> np.ndarray:
        if self.baseline not in BASELINES:
            raise ValueError(f"unknown baseline {self.baseline!r}; choose from "
                             f"{', '.join(BASELINES)}")
        return X[BASELINES[self.baseline]].to_numpy(np.float64)

    # ------------------------------------------------------------------ prediction
    def member_predictions(self, X: pd.DataFrame) -> np.ndarray:
        """Log ratio to the baseline predicted by each member: (members, rows)."""
        if not getattr(self, "members_", None):
            raise RuntimeError("ActiveSampler is not fitted; call fit() first")
        data = X.reindex(columns=self.feature_names_, fill_value=0.0).to_numpy(np.float64)
        with threadpool_limits(self.n_threads):
            return np.stack([m.predict(data) for m in self.members_])

    def predict_design(self, X: pd.DataFrame) -> np.ndarray:
        """Forecast ms per row of a :func:`design` frame: baseline x exp(mean of members)."""
        return np.exp(self.member_predictions(X).mean(axis=0) + self._offset(X))

    def predict(self, rows: pd.DataFrame) -> pd.Series:
        """Forecast ms per row (same index)."""
        return pd.Series(self.predict_design(design(rows)), index=rows.index,
                         name="predicted_ms")

    def disagreement(self, rows: pd.DataFrame) -> pd.Series:
        """Standard deviation of the members' log predictions per row."""
        return pd.Series(self.member_predictions(design(rows)).std(axis=0), index=rows.index,
                         name="disagreement")

    def suggest(self, candidates: pd.DataFrame, n: int) -> pd.Index:
        """Index of the ``n`` candidates to measure next (by ``selection``; see module rules)."""
        _check_n(n, len(candidates))
        return candidates.index[self.suggest_design(design(candidates), n)]

    def suggest_design(self, X: pd.DataFrame, n: int) -> np.ndarray:
        """Positions in ``X`` (a :func:`design` frame) of the next ``n`` rows to measure."""
        _check_n(n, len(X))
        spread = self.member_predictions(X).std(axis=0)
        rng = np.random.default_rng([self.random_state, self.n_train_, len(X)])
        n_random = int(round(self.explore * n))
        if self.selection == "top":
            order = np.argsort(-spread, kind="stable")
        elif self.selection == "weighted":
            # exponential race: drawing without replacement with probability ∝ spread**power
            w = np.maximum(spread, 1e-12) ** self.power
            order = np.argsort(rng.exponential(size=len(X)) / w, kind="stable")
        else:
            raise ValueError(f"unknown selection {self.selection!r}; choose top or weighted")
        picked = self._diverse(X, order, n - n_random)
        if n_random:
            rest = np.setdiff1d(np.arange(len(X)), picked)
            picked = np.concatenate([picked, rng.choice(rest, n_random, replace=False)])
        return picked

    def _diverse(self, X: pd.DataFrame, order: np.ndarray, n: int) -> np.ndarray:
        """First ``n`` of ``order``, skipping picks within ``diversity`` of an earlier pick."""
        if n == 0:
            return np.empty(0, dtype=int)
        if self.diversity <= 0:
            return order[:n]
        data = X.reindex(columns=self.feature_names_, fill_value=0.0).to_numpy(np.float64)
        scaled = (data - self.center_) / self.scale_
        chosen: list[int] = []
        skipped: list[int] = []
        bank = np.empty((n, scaled.shape[1]))
        for pos in order:
            if len(chosen) == n:
                break
            if chosen:
                near = np.sum((bank[:len(chosen)] - scaled[pos]) ** 2, axis=1).min()
                if near < self.diversity ** 2:
                    skipped.append(int(pos))
                    continue
            bank[len(chosen)] = scaled[pos]
            chosen.append(int(pos))
        chosen += skipped[:n - len(chosen)]
        return np.asarray(chosen, dtype=int)


def _positive(y_ms: np.ndarray) -> np.ndarray:
    if not (np.isfinite(y_ms).all() and (y_ms > 0).all()):
        raise ValueError("measured times must be positive and finite")
    return y_ms


def _check_n(n: int, available: int) -> None:
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if n > available:
        raise ValueError(f"asked for {n} rows but only {available} candidates")


@dataclass
class ReplayResult:
    """One replayed campaign: the learning curve and when it first met the target."""

    strategy: str
    seed: int
    target_mape: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (samples, test MAPE %)
    reached_at: int | None = None

    @property
    def best_mape(self) -> float:
        """Lowest test MAPE of the campaign (%)."""
        return min(m for _, m in self.curve)

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {"strategy": self.strategy, "seed": self.seed, "target_mape": self.target_mape,
                "reached_at": self.reached_at, "best_mape": self.best_mape,
                "curve": [[n, m] for n, m in self.curve]}


def replay(rows: pd.DataFrame, times: Any, strategy: str, seed: int, start: int, step: int,
           target_mape: float, test_rows: pd.DataFrame, test_times: Any, max_samples: int,
           sampler: ActiveSampler | None = None, stop_at_target: bool = True,
           design_cache: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> ReplayResult:
    """Simulate a campaign on published rows (the pool) scored on fixed test rows (rules above).

    ``sampler``: the ensemble's settings (default :class:`ActiveSampler`; its
    ``random_state`` is replaced by ``seed``). ``stop_at_target``: end at the first round that
    meets the target. ``design_cache``: precomputed :func:`design` frames of
    (``rows``, ``test_rows``) to skip recomputing them across seeds.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")
    if rows.empty or test_rows.empty:
        raise ValueError("need a non-empty pool and a non-empty test set")
    y_ms = _positive(np.asarray(times, float))
    test_ms = _positive(np.asarray(test_times, float))
    if len(y_ms) != len(rows) or len(test_ms) != len(test_rows):
        raise ValueError("rows/times and test_rows/test_times must have equal lengths")
    if start < 2 or step < 1:
        raise ValueError(f"start must be >= 2 and step >= 1, got start={start}, step={step}")
    max_samples = min(int(max_samples), len(rows))
    if start > max_samples:
        raise ValueError(f"start={start} exceeds max_samples/pool size {max_samples}")
    X, X_test = design_cache or (design(rows), design(test_rows))
    if len(X) != len(rows) or len(X_test) != len(test_rows):
        raise ValueError("design_cache frames must match rows and test_rows in length")
    y = np.log(y_ms)
    model = clone(sampler or ActiveSampler()).set_params(random_state=int(seed))
    rng = np.random.default_rng(int(seed))
    measured = rng.permutation(len(rows))[:start]
    result = ReplayResult(strategy=strategy, seed=int(seed), target_mape=float(target_mape))
    while True:
        model.fit_design(X.iloc[measured], y[measured])
        score = mape(model.predict_design(X_test), test_ms)
        result.curve.append((len(measured), score))
        if score <= target_mape and result.reached_at is None:
            result.reached_at = len(measured)
            if stop_at_target:
                break
        take = min(step, max_samples - len(measured))
        if take <= 0:
            break
        pool = np.setdiff1d(np.arange(len(rows)), measured)
        if strategy == "active":
            new = pool[model.suggest_design(X.iloc[pool], take)]
        else:
            new = rng.choice(pool, take, replace=False)
        measured = np.concatenate([measured, new])
    return result
