"""Which candidate answer to trust, learned by backtesting: the expected error of a candidate
from how it relates to the request, and its 90 % interval.

A forecast request gets several candidate answers (a system's own rate, its own phase model,
pooled models, the hybrid, layerwise; ``jobcast.service.engine.candidates``). Each carries a
**relation** to the request: its ``kind``, whether its history is the named system's own, was
run at the asked batch size, states the asked variant, comes from the newest stack, how many
runs stand behind it, and whether the GPU matched exactly or by family. Backtesting a store
(``jobcast.service.engine.backtest``: fit on each system's earlier runs, forecast its later ones,
asked as a user asks) gives, per candidate, the signed log error ``ln(actual / forecast)`` and
the candidate's own scale (its 90 % log half-width: kept with the backtest rows for analysis).

Rules of :class:`BacktestSelector`:

* **Age**: how old the history is when the forecast is made (a system's software, drivers
  and data change between rounds; the backtest measures what that costs).
* **Cells.** Relations are grouped at the levels of :data:`LEVELS` (intervals) and
  :data:`RANK_LEVELS` (the same without ``age``: the ranking), finest first; a level's cell
  is used when it holds at least ``min_count`` backtest errors, else the next coarser one
  (the last level is the candidate kind alone, then everything).
* **Expected error** of a candidate: the cell's mean absolute log error, shrunk toward the
  coarser cell's with weight ``shrink`` (``(n mean + k parent) / (n + k)``), so a cell of a
  few lucky forecasts does not win outright (``shrink`` 20, chosen on the reference backtest
  after seeing it: 5 / 20 / 50 gave 0.51 / 0.47 / 0.47 % for a named system, cross-fitted
  over halves of the systems; docs/lab/e2e-accuracy.md). ``jobcast.service.engine.choice`` takes the
  candidate of lowest expected error (ties: the registry's order).
* **Interval**: the cell's quantiles of the signed log error at ``(1 - coverage - slack) / 2``
  and its complement, widened by ``1 + 1 / sqrt(n)`` for the cell's sample size, never
  narrower than +-:data:`MIN_SCALE`. ``slack`` is 0 (5 % / 95 % for a 90 % interval). It was
  0.04 (3 % / 97 %) when the truth was the sum of the phases: the held-out ResNet benchmark
  then held 83.7 % across rounds. On the wall clock (issue 35) the intervals held 95.6-98.5 %
  on the held-out rounds; on the tuning rounds v3.0-v3.1 (in the prior's corpus, no held-out
  data spent) slack 0 took the named asks from 96.9 / 98.9 / 97.3 % (ResNet / SSD / UNet3D)
  to 95.5 / 97.2 / 94.4 % (docs/lab/e2e-wallclock.md); set after seeing those figures.
  (Quantiles of the error over the candidate's own scale were tried first: a candidate's
  scale means something else with one run of history than with three, and a store whose
  backtest holds only one kind of it gave intervals 100x too narrow or wide; cells of runs
  and age keep the interval of a steady system narrow instead.)
* **Prior**: a selector fitted on the reference corpora ships with the package
  (``models/data/selector_prior.json``); a store's own backtest is combined with it by
  :meth:`BacktestSelector.combine`: a cell only one of them holds is that one's; a cell both
  hold is the store's shrunk toward the prior's with weight ``shrink`` (``(n own + k prior)
  / (n + k)`` for the mean error, bias and quantiles), so a handful of the store's own errors
  cannot outrank what the prior learnt from thousands (issue 35: a store of two runs per
  system backtests one-run histories only, where a pooled model looks better than it is at
  two; with the store's 14 errors winning outright, MLPerf UNet3D's named asks went to the
  pooled model, 1.6 % against 0.25 % for the own line; changed after seeing that).
* The prior's file is :meth:`SelectorCells.to_dict` as compact JSON (no NaN):
  :func:`save_prior` writes it (``jobcast build-shipped selector-prior``),
  :func:`models.relation.load_prior` reads it.
* Fitted attributes: ``cells_`` (level -> cell key -> statistics), ``n_`` (errors seen),
  ``kinds_``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from models.relation import (
    LEVELS,
    PRIOR_PATH,
    RANK_LEVELS,
    RELATION_FIELDS,
    Cell,
    Relation,
    SelectorCells,
    _key,
)


class BacktestSelector(BaseEstimator, SelectorCells):
    """Expected error and interval of candidate answers from backtest errors (module rules).

    ``fit(X, y)``: X a frame of relation fields (:data:`RELATION_FIELDS`), y the signed log
    errors ``ln(actual / forecast)``.
    """

    # __init__ (min_count, shrink, coverage, slack) is SelectorCells': one definition.

    def fit(self, X: pd.DataFrame, y: Iterable[float]) -> BacktestSelector:
        """Fit the cells from backtest errors (``X``, ``y`` as in the class doc);
        returns ``self``."""
        err = np.asarray(list(y), dtype=float)
        if len(err) != len(X):
            raise ValueError(f"{len(X)} relations but {len(err)} errors")
        ok = np.isfinite(err)
        frame = X.loc[ok].copy()
        defaults = Relation(kind="").as_dict()
        for col in RELATION_FIELDS:  # rows written before a field existed: its default
            if col not in frame:
                frame[col] = defaults[col]
        frame["_e"] = err[ok]
        tail = self.tail
        self.cells_: dict[str, dict[str, list[float]]] = {}
        self.n_ = int(len(frame))
        self.kinds_ = sorted(frame["kind"].unique().tolist()) if len(frame) else []
        if frame.empty:
            return self
        for level in dict.fromkeys(LEVELS + RANK_LEVELS):
            name = ",".join(level) or "*"
            self.cells_[name] = {}
            groups = frame.groupby(list(level), sort=True) if level else [((), frame)]
            for values, rows in groups:
                values = values if isinstance(values, tuple) else (values,)
                key = _key(dict(zip(level, values, strict=True)), level)
                self.cells_[name][key] = Cell.of(rows["_e"].to_numpy(), tail).as_list()
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Expected |log error| of each row of relations; NaN when unknown."""
        out = []
        for row in X.to_dict("records"):
            j = self.judge(row)
            out.append(math.nan if j is None else j.expected)
        return np.asarray(out)


def save_prior(selector: SelectorCells, path: Path = PRIOR_PATH) -> Path:
    """Write ``selector`` as the prior file :func:`load_prior` reads (module rules)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(selector.to_dict(), separators=(",", ":"), allow_nan=False))
    return path
