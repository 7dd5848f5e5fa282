"""The selector's light judging half (``models.relation``) judges as the fitted estimator does."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import clone

from models.relation import RELATION_FIELDS, Relation, SelectorCells, load_prior
from models.selector import BacktestSelector


def _fitted() -> BacktestSelector:
    rng = np.random.default_rng(3)
    kinds = ["own-rate"] * 30 + ["layerwise"] * 30
    frame = pd.DataFrame([{f: getattr(Relation(k), f) for f in RELATION_FIELDS} for k in kinds])
    errors = np.r_[rng.normal(0.0, 0.05, 30), rng.normal(0.1, 0.3, 30)]
    return BacktestSelector(min_count=4).fit(frame, errors)


def test_cells_read_back_judge_as_the_fitted_selector():
    sel = _fitted()
    light = SelectorCells.from_dict(sel.to_dict())
    assert light.get_params() == sel.get_params()
    for kind in ("own-rate", "layerwise", "pooled-model"):
        assert light.judge(Relation(kind)) == sel.judge(Relation(kind))


def test_combining_keeps_the_own_selectors_class_and_params():
    sel = _fitted()
    prior = load_prior()
    assert isinstance(prior, SelectorCells)
    both = sel.combine(prior)
    assert type(both) is BacktestSelector and both.get_params() == sel.get_params()
    assert both.n_ == sel.n_ + prior.n_
    assert clone(sel).get_params() == sel.get_params()  # still a scikit-learn estimator
    # a cell both hold: the store's errors shrunk toward the prior's, between the two
    mine, theirs = sel.judge(Relation("own-rate")), prior.judge(Relation("own-rate"))
    assert mine is not None and theirs is not None
    got = both.judge(Relation("own-rate"))
    assert got is not None
    assert min(mine.expected, theirs.expected) <= got.expected <= max(mine.expected,
                                                                       theirs.expected)
    assert got.expected != theirs.expected or mine.expected == theirs.expected
