"""Active sampling (layerwise.active) on synthetic conv rows with a known time function.

Rows come from the conv kind's ``sample()`` on a V100; the "measured" time is the roofline
bound times a known efficiency: flat (efficiency 1) except for stride-1 rows, whose efficiency
wiggles with the input channels (hard to learn), plus 1 % noise. No test depends on timing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from layerwise.active import STRATEGIES, ActiveSampler, ReplayResult, design, mape, replay
from layerwise.layers import KINDS
from layerwise.roofline import physics_frame

# the synthetic times are defined against physics_frame's bound, so the trees learn f alone
SMALL = {"n_estimators": 3, "max_iter": 40, "max_leaf_nodes": 15, "bootstrap": False,
         "max_samples": 0.8, "baseline": "bound"}


def _rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = pd.DataFrame([KINDS["conv"].sample(rng) for _ in range(n)])
    rows.index = [f"s{seed}:{i}" for i in range(n)]
    return rows.assign(gpu="V100", framework="tensorflow")


def _hard(rows: pd.DataFrame) -> np.ndarray:
    return (rows["strides"].to_numpy() == 1)


def _times(rows: pd.DataFrame, seed: int, wiggle: float = 0.8) -> pd.Series:
    """bound x exp(f) x (1 + 1 % noise); f = wiggle x sin(3 log C_in) on stride-1 rows, else 0."""
    rng = np.random.default_rng(seed)
    f = np.where(_hard(rows), wiggle * np.sin(3.0 * np.log(rows["channels_in"].to_numpy())), 0.0)
    bound = physics_frame(rows)["bound_ms"].to_numpy()
    noise = 1.0 + 0.01 * rng.standard_normal(len(rows))
    return pd.Series(bound * np.exp(f) * noise, index=rows.index)


@pytest.fixture(scope="module")
def data() -> dict:
    pool, test = _rows(900, 1), _rows(300, 2)
    return {"pool": pool, "pool_ms": _times(pool, 3), "test": test, "test_ms": _times(test, 4),
            "cache": (design(pool), design(test))}


@pytest.fixture(scope="module")
def fitted(data: dict) -> ActiveSampler:
    pool, ms = data["pool"], data["pool_ms"]
    return ActiveSampler(**SMALL).fit(pool.iloc[:300], ms.iloc[:300])


def _campaign(data: dict, strategy: str, seed: int, **kw: object) -> ReplayResult:
    args = {"start": 60, "step": 60, "target_mape": 10.0, "max_samples": 480,
            "sampler": ActiveSampler(**SMALL), "design_cache": data["cache"], **kw}
    return replay(data["pool"], data["pool_ms"], strategy, seed,
                  test_rows=data["test"], test_times=data["test_ms"], **args)


# ---------------------------------------------------------------- the estimator
def test_sklearn_contract_and_forecast(fitted: ActiveSampler, data: dict) -> None:
    assert clone(fitted).get_params() == fitted.get_params()
    assert len(fitted.members_) == SMALL["n_estimators"] and fitted.n_train_ == 300
    pred = fitted.predict(data["test"])
    assert list(pred.index) == list(data["test"].index) and (pred > 0).all()
    assert mape(pred.to_numpy(), data["test_ms"].to_numpy()) < 40.0
    spread = fitted.disagreement(data["test"])
    assert (spread >= 0).all() and spread.index.equals(data["test"].index)
    roof = clone(fitted).set_params(baseline="roofline").fit(data["pool"].iloc[:300],
                                                             data["pool_ms"].iloc[:300])
    assert mape(roof.predict(data["test"]).to_numpy(), data["test_ms"].to_numpy()) < 60.0


def test_suggest_returns_n_distinct_pool_rows(fitted: ActiveSampler, data: dict) -> None:
    candidates = data["pool"].iloc[300:]
    picked = fitted.suggest(candidates, 25)
    assert len(picked) == 25 and picked.is_unique and picked.isin(candidates.index).all()
    assert fitted.suggest(candidates, 25).equals(picked)  # deterministic


def test_suggest_prefers_high_disagreement_rows(fitted: ActiveSampler, data: dict) -> None:
    candidates = data["pool"].iloc[300:]
    spread = fitted.disagreement(candidates)
    picked = fitted.suggest(candidates, 40)
    assert spread.loc[picked].min() >= spread.drop(picked).max()
    hard = pd.Series(_hard(candidates), index=candidates.index)
    # the wiggly stride-1 region is ~1/4 of the pool but most of what the ensemble doubts
    assert hard.loc[picked].mean() > 2 * hard.mean()


def test_weighted_selection_and_exploration_draw_from_the_pool(data: dict) -> None:
    pool, ms = data["pool"], data["pool_ms"]
    candidates = pool.iloc[300:]
    for params in ({"selection": "weighted"}, {"explore": 0.5}):
        model = ActiveSampler(**SMALL, **params).fit(pool.iloc[:300], ms.iloc[:300])
        picked = model.suggest(candidates, 30)
        assert len(picked) == 30 and picked.is_unique and picked.isin(candidates.index).all()
        assert model.suggest(candidates, 30).equals(picked)


def test_diversity_guard_skips_near_duplicates(fitted: ActiveSampler, data: dict) -> None:
    candidates = data["pool"].iloc[300:400]
    top = fitted.suggest(candidates, 1)[0]
    copies = pd.DataFrame([candidates.loc[top]] * 5, index=[f"copy{i}" for i in range(5)])
    with_copies = pd.concat([candidates, copies])
    plain = fitted.suggest(with_copies, 6)
    assert plain.isin([top, *copies.index]).sum() == 6  # the copies crowd out everything else
    pool, ms = data["pool"], data["pool_ms"]
    guarded = clone(fitted).set_params(diversity=0.5).fit(pool.iloc[:300], ms.iloc[:300])
    picked = guarded.suggest(with_copies, 6)
    assert len(picked) == 6 and picked.isin([top, *copies.index]).sum() == 1


# ---------------------------------------------------------------- replay
def test_replay_is_deterministic_for_a_seed(data: dict) -> None:
    for strategy in STRATEGIES:
        a = _campaign(data, strategy, 7, max_samples=180, stop_at_target=False)
        b = _campaign(data, strategy, 7, max_samples=180, stop_at_target=False)
        assert a.curve == b.curve and a.reached_at == b.reached_at
        assert [n for n, _ in a.curve] == [60, 120, 180]
    c = _campaign(data, "random", 8, max_samples=180, stop_at_target=False)
    assert c.curve != b.curve


def test_replay_without_cache_matches_cached(data: dict) -> None:
    cached = _campaign(data, "active", 3, max_samples=120)
    plain = _campaign(data, "active", 3, max_samples=120, design_cache=None)
    assert cached.curve == plain.curve


def test_unreached_target_is_reported_not_raised(data: dict) -> None:
    result = _campaign(data, "active", 0, target_mape=0.0, max_samples=180)
    assert result.reached_at is None and [n for n, _ in result.curve] == [60, 120, 180]
    out = result.as_dict()
    assert out["reached_at"] is None and out["best_mape"] == min(m for _, m in result.curve)


def test_active_reaches_target_no_later_than_random(data: dict) -> None:
    """Median over three seeds; an unreached target counts as one step past the budget."""
    def need(strategy: str, seed: int) -> int:
        result = _campaign(data, strategy, seed)
        return result.reached_at if result.reached_at is not None else 540

    active = [need("active", s) for s in range(3)]
    random = [need("random", s) for s in range(3)]
    assert np.median(active) <= np.median(random), (active, random)
    assert np.median(active) < 540


# ---------------------------------------------------------------- bad input
def test_bad_inputs_raise_clear_errors(fitted: ActiveSampler, data: dict) -> None:
    pool, ms = data["pool"], data["pool_ms"]
    candidates = pool.iloc[300:310]
    with pytest.raises(ValueError, match="only 10 candidates"):
        fitted.suggest(candidates, 11)
    with pytest.raises(ValueError, match="positive integer"):
        fitted.suggest(candidates, 0)
    with pytest.raises(ValueError, match="no rows"):
        ActiveSampler().fit(pool.iloc[:0], [])
    with pytest.raises(ValueError, match="positive and finite"):
        ActiveSampler(**SMALL).fit(pool.iloc[:20], np.r_[ms.iloc[:19], -1.0])
    with pytest.raises(ValueError, match="measured times"):
        ActiveSampler(**SMALL).fit(pool.iloc[:20], ms.iloc[:19])
    with pytest.raises(ValueError, match="n_estimators"):
        ActiveSampler(n_estimators=1).fit(pool.iloc[:20], ms.iloc[:20])
    with pytest.raises(ValueError, match="unknown selection"):
        clone(fitted).set_params(selection="best").fit(pool.iloc[:20], ms.iloc[:20]) \
            .suggest(candidates, 2)
    with pytest.raises(ValueError, match="unknown baseline"):
        ActiveSampler(**{**SMALL, "baseline": "paper"}).fit(pool.iloc[:20], ms.iloc[:20])
    with pytest.raises(RuntimeError, match="not fitted"):
        ActiveSampler().suggest(candidates, 2)
    with pytest.raises(ValueError, match="unknown strategy 'greedy'"):
        _campaign(data, "greedy", 0)
    with pytest.raises(ValueError, match="non-empty"):
        replay(pool.iloc[:0], ms.iloc[:0], "random", 0, 10, 10, 5.0, data["test"],
               data["test_ms"], 100)
    with pytest.raises(ValueError, match="exceeds"):
        _campaign(data, "random", 0, start=700, max_samples=600)
