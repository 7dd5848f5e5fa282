"""Backtesting a store: every candidate's error on runs it did not see, asked as a user asks;
the rows the selector (``models.selector``) is fitted on.

Rules (:func:`backtest`):

* **Systems** are the runs' ``system`` (``models.history``); a system's runs are ordered by
  start time (undated ones by source). Runs without a system are history in every fold and
  never a target.
* **Folds**: for each history size k in ``folds``, the training set is every system's first
  k runs (and the runs without a system); the targets are each system's next
  ``max_targets`` runs. The phase models are fitted on the training set's progress points
  only (``models.e2e.fit_report``), the run summaries and hybrid history are restricted to
  it: nothing of a target or of any run after it is seen.
* **Asks**, as a user asks (``jobcast predict``): network, the deployment as stored, batch
  size, the target's iterations, the target phase (``train``, and ``job`` where the run's
  wall time is known); with the system named and without; with no precision and, where the
  run states one, with it; asked when the target run started (its history's age). Never the
  stack or anything else read from the target.
* **Rows**: one per candidate of every ask (every route asked: ``exhaustive``), with its
  relation fields, ``scale``, ``seconds``, the actual seconds and ``error`` =
  ``ln(actual / seconds)``; plus ``fold``, ``target_system``, ``ask`` and ``target_run``.
* Bounded: at most ``max_systems`` systems a fold (every one by default), chosen
  deterministically (sorted names, evenly spaced), so a fit on a huge store stays quick.
* **Misses and bugs.** An ask no route can answer (a :class:`fleet.errors.JobcastError`)
  gives no rows. Any other exception is a bug in jobcast, never an ordinary miss: it
  propagates, or, when the caller passes a ``bugs`` list, it is recorded there in the one
  error shape (:func:`fleet.errors.bug_info`), warned about, and the ask gives no rows.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fleet.errors import ErrorInfo, JobcastError, bug_info
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from models.e2e import fit_report
from models.selector import RELATION_FIELDS, BacktestSelector
from models.variant import variant_dict

FOLDS = (1, 2, 3)
MAX_TARGETS = 3


def ordered_systems(history: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """System -> its runs in start order (undated ones by source)."""
    named = history[history["system"] != ""].copy()
    named["_t"] = named["start_time"].fillna(-math.inf)
    return {s: g.sort_values(["_t", "source"]).drop(columns="_t")
            for s, g in named.groupby("system", sort=True)}


def _pick(names: list[str], limit: int | None) -> list[str]:
    if limit is None or len(names) <= limit:
        return names
    idx = np.linspace(0, len(names) - 1, limit).round().astype(int)
    return [names[i] for i in sorted(set(idx))]


def asks(run: pd.Series) -> list[tuple[str, dict]]:
    """The user-like requests of one target run (module rules): (label, request fields)."""
    base = {"network": run["network"], "deployment": run["deployment"],
            "batch_size": int(run["batch_size"]), "iterations": max(1, int(round(
                run["train_iterations"])))}
    targets = ["train"] + (["job"] if run["wall_seconds"] > 0 else [])
    precision = variant_dict(run["variant"]).get("precision")
    out = []
    for phase in targets:
        out.append((f"{phase}/named", {**base, "phase": phase, "system": run["system"]}))
        out.append((f"{phase}/anon", {**base, "phase": phase}))
        if precision:
            out.append((f"{phase}/named+precision", {**base, "phase": phase,
                                                     "system": run["system"],
                                                     "precision": precision}))
    return out


def _actual(run: pd.Series, phase: str) -> float:
    return float(run["wall_seconds"] if phase == "job" else run["train_seconds"])


def backtest(points: pd.DataFrame, history: pd.DataFrame, *, folds: Sequence[int] = FOLDS,
             max_targets: int = MAX_TARGETS, max_systems: int | None = None,
             layer_predictor: Any = None, calibration: Any = None,
             progress: Callable[[int, int], None] | None = None,
             bugs: list[ErrorInfo] | None = None) -> pd.DataFrame:
    """Every candidate's backtest error (module rules); an empty frame when no system has two
    runs. ``bugs``: where a bug in an ask is recorded instead of raised (module rules)."""
    systems = ordered_systems(history)
    names = _pick(sorted(s for s, g in systems.items() if len(g) >= 2), max_systems)
    unnamed = set(history.loc[history["system"] == "", "run_id"])
    rows: list[dict] = []
    plan = [(k, [s for s in names if len(systems[s]) > k]) for k in folds]
    total = sum(len(s) for _, s in plan)
    done = 0
    for k, fold_systems in plan:
        if not fold_systems:
            continue
        train_ids = set(unnamed)
        for runs in systems.values():
            train_ids |= set(runs["run_id"].iloc[:k])
        fold_points = points[points["run_id"].isin(train_ids)]
        models = fit_report(fold_points).models if len(fold_points) else []
        fc = Forecaster(models=models, history=history[history["run_id"].isin(train_ids)],
                        points=fold_points, layer_predictor=layer_predictor,
                        calibration=calibration, prior=False)
        for system in fold_systems:
            for _, run in systems[system].iloc[k:k + max_targets].iterrows():
                rows += _rows(fc, run, k, bugs)
            done += 1
            if progress is not None:
                progress(done, total)
    return pd.DataFrame(rows)


def _rows(fc: Forecaster, run: pd.Series, fold: int,
          bugs: list[ErrorInfo] | None = None) -> list[dict]:
    out = []
    for label, fields in asks(run):
        req = JobRequest.from_mapping(fields)
        actual = _actual(run, req.phase)
        if not actual > 0:
            continue
        _, judged, _ = _candidates(fc, req, run["start_time"], bugs)
        for cand, _ in judged:
            f = cand.forecast
            out.append({**cand.relation.as_dict(), "scale": cand.scale, "seconds": f.seconds,
                        "actual": actual, "error": math.log(actual / f.seconds),
                        "in_own_interval": bool(f.low <= actual <= f.high), "fold": fold,
                        "target_system": run["system"], "ask": label,
                        "target_run": int(run["run_id"]),
                        "model": f.model})
    return out


def _candidates(fc: Forecaster, req: JobRequest, now: float,
                bugs: list[ErrorInfo] | None = None):
    """Every candidate of ``req`` as if asked when the target run started (``now``; NaN for
    an undated run: its history's age is unknown); none for a miss, and for a bug when
    ``bugs`` records it (module rules)."""
    try:
        return fc.candidates(req, exhaustive=True, now=now if math.isfinite(now) else 0.0)
    except JobcastError:
        return None, [], []
    except Exception as exc:
        if bugs is None:
            raise
        info = bug_info(exc)
        bugs.append(info)
        warnings.warn(f"backtest of {req.network} on {req.deployment}: {info.message}",
                      RuntimeWarning, stacklevel=2)
        return None, [], []


def fit_selector(rows: pd.DataFrame, **params: Any) -> BacktestSelector:
    """The selector fitted on backtest rows (an unfitted-looking empty one when none)."""
    sel = BacktestSelector(**params)
    if rows.empty:
        return sel.fit(pd.DataFrame(columns=[*RELATION_FIELDS, "scale"]), [])
    return sel.fit(rows[[*RELATION_FIELDS, "scale"]], rows["error"])
