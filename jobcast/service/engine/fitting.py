"""``jobcast fit`` as one service call: the phase models, the run summaries and the backtest
selector, saved together.

Rules (:func:`fit_store_all`):

* The phase models are fitted as ``models.e2e.fit_report`` fits them (one per key, failures
  reported, skipped runs named).
* The run summaries (``models.history.run_table``) and the selector fitted on the store's
  own backtest (``jobcast.service.engine.backtest``: histories of :data:`FIT_FOLDS` runs, the next
  :data:`FIT_TARGETS` runs of at most ``max_systems`` systems, so a fit of a large store
  stays quick; ``backtest=False`` leaves the selector to the shipped prior) are
  saved with the models in one transaction (artifacts ``history`` and ``selector``): a
  forecast never mixes models of one fit with a selector of another.
* **Whole-job histories** (a scheduler's recurring jobs, ``ingest.whole_job``): every job
  is backtested on its own runs (``jobcast.service.engine.whole_job_route.recent_backtest``), and
  those rows join the selector's (kind ``whole-job``, system ``own``), so a store of
  scheduler history alone fits; :class:`WholeJobSummary` says per job how far off its own
  forecasts were beside the naive mean of its earlier runs.
* The backtest's summary (:class:`BacktestSummary`) says per candidate kind how many
  forecasts it judged and their mean error, for the CLI and the report; a bug in one of its
  asks does not stop the fit: it is in the summary's ``bugs`` (the one error shape, kind
  ``bug``) and warned about (``jobcast.service.engine.backtest``'s rules).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fleet.errors import ErrorInfo
from ingest.store import Store
from jobcast.service.engine.backtest import backtest as run_backtest
from jobcast.service.engine.backtest import fit_selector
from jobcast.service.engine.forecaster import HISTORY_ARTIFACT, SELECTOR_ARTIFACT
from jobcast.service.engine.route_registry import WHOLE_JOB_KIND
from models.dataset import collect_points
from models.e2e import FitReport, check_form, fit_report
from models.history import run_table, to_records
from models.relation import Relation, age_bucket, devices_bucket, runs_bucket
from models.selector import BacktestSelector

MAX_SYSTEMS = 40  # systems a fit's backtest forecasts (evenly spaced by name)
FIT_FOLDS = (1, 2)  # history sizes a fit's backtest tries (the shipped prior: 1, 2 and 3)
FIT_TARGETS = 2  # later runs a fit's backtest forecasts per system and fold


@dataclass
class BacktestSummary:
    """Per candidate kind: forecasts judged, mean |error| % and share inside its own
    interval; the systems and folds behind them."""

    systems: int = 0
    rows: int = 0
    kinds: dict[str, dict[str, float]] = field(default_factory=dict)
    bugs: list[ErrorInfo] = field(default_factory=list)

    @classmethod
    def of(cls, rows: pd.DataFrame, bugs: list[ErrorInfo] | None = None) -> BacktestSummary:
        """The summary of backtest ``rows`` (and the ``bugs`` met on the way)."""
        if rows.empty:
            return cls(bugs=list(bugs or []))
        kinds = {}
        for kind, g in rows.groupby("kind"):
            ape = 100 * np.abs(np.expm1(-g["error"].to_numpy()))
            kinds[str(kind)] = {"forecasts": int(len(g)), "mape": float(np.mean(ape)),
                                "median_ape": float(np.median(ape))}
        return cls(int(rows["target_system"].nunique()), int(len(rows)), kinds,
                   list(bugs or []))

    def as_dict(self) -> dict[str, Any]:
        """``systems``, ``forecasts``, ``kinds``; ``bugs`` (error shapes) only when any."""
        out: dict[str, Any] = {"systems": self.systems, "forecasts": self.rows,
                               "kinds": self.kinds}
        if self.bugs:
            out["bugs"] = [b.as_dict() for b in self.bugs]
        return out


@dataclass
class WholeJobSummary:
    """The recurring jobs' own backtests: jobs, their finished runs forecast, the mean
    |error| % of the whole-job model and of the naive mean of each job's earlier runs."""

    jobs: int = 0
    forecasts: int = 0
    mape: float = math.nan
    naive_mape: float = math.nan

    def as_dict(self) -> dict[str, Any]:
        """The summary as JSON (NaN as None)."""
        return {"jobs": self.jobs, "forecasts": self.forecasts,
                "mape": None if math.isnan(self.mape) else self.mape,
                "naive_mape": None if math.isnan(self.naive_mape) else self.naive_mape}


@dataclass
class FitOutcome:
    """What a fit gave: the model report, the selector and its backtest summary, and the
    recurring jobs' own backtests."""

    report: FitReport
    selector: BacktestSelector
    backtest: BacktestSummary
    whole_jobs: WholeJobSummary = field(default_factory=WholeJobSummary)


def whole_job_rows(store: Store) -> tuple[pd.DataFrame, WholeJobSummary]:
    """The recurring jobs' own backtest as selector rows, and their summary (module rules)."""
    from ingest.whole_job import whole_job_runs
    from jobcast.service.engine.whole_job_route import recent_backtest

    found = recent_backtest(whole_job_runs(store, traces=False))
    if not found:
        return pd.DataFrame(), WholeJobSummary()
    rows = []
    for r in found:
        relation = Relation(kind=WHOLE_JOB_KIND, target="job", system="own", batch="same",
                            variant="unstated", stack="none", runs=runs_bucket(r["history"]),
                            gpu="exact", devices=devices_bucket(int(r.get("gpus") or 1)),
                            age=age_bucket(r.get("last_when"), r.get("when") or 0.0))
        rows.append({**relation.as_dict(), "scale": math.log(r["high"] / r["low"]) / 2,
                     "error": math.log(r["actual"] / r["forecast"]),
                     "target_system": r["key"]})
    frame = pd.DataFrame(rows)
    ape = [abs(r["forecast"] / r["actual"] - 1) for r in found]
    naive = [abs(r["naive_mean"] / r["actual"] - 1) for r in found]
    summary = WholeJobSummary(len({(r["key"], r["deployment"]) for r in found}), len(found),
                              100 * float(np.mean(ape)), 100 * float(np.mean(naive)))
    return frame, summary


def fit_store_all(store: Store, form: str = "auto", *, backtest: bool = True,
                  max_systems: int | None = MAX_SYSTEMS, layer_predictor: Any = None,
                  progress: Callable[[int, int], None] | None = None) -> FitOutcome:
    """Fit and save models, run summaries and selector (module rules); ValueError for an
    unknown ``form``, :class:`ingest.store.StoreError` when they cannot be saved."""
    check_form(form)
    points, skipped = collect_points(store)
    report = fit_report(points, form=form, skipped=skipped)
    history = run_table(store)
    rows = pd.DataFrame()
    bugs: list[ErrorInfo] = []
    if backtest and report.models:
        rows = run_backtest(points, history, folds=FIT_FOLDS, max_targets=FIT_TARGETS,
                            max_systems=max_systems, layer_predictor=layer_predictor,
                            progress=progress, bugs=bugs)
    whole_rows, whole = whole_job_rows(store) if backtest else (pd.DataFrame(),
                                                                 WholeJobSummary())
    frames = [r for r in (rows, whole_rows) if not r.empty]
    selector = fit_selector(pd.concat(frames, ignore_index=True) if frames else rows)
    extra: dict[str, object] = {HISTORY_ARTIFACT: to_records(history)}
    if selector.n_:
        extra[SELECTOR_ARTIFACT] = selector.to_dict()
    store.save_models([m.to_record() for m in report.models], extra=extra)
    return FitOutcome(report, selector, BacktestSummary.of(rows, bugs), whole)
