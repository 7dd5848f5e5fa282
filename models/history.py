"""Run summaries: one row per stored run with its phase totals and whole-job times.

The rate candidates (``jobcast.service.engine.candidates``), the whole-job forecast and the backtest
read a system's history from this table instead of the progress points: it is small enough to
ship with a registered forecaster and is saved by ``jobcast fit`` (artifact ``history``).

Rules
-----
* A run is summarised when the fit would use it (``models.dataset``: a network and a
  deployment, readable variant and system meta) and its train phase has iterations > 0 and
  seconds > 0; other runs are left out (the fit's report names them).
* ``train_*`` / ``test_*``: the sums of the run's segments of that phase (0 when none).
* ``wall_seconds``: **the user's clock**, the run's time from start to stop as its own
  records state it: MLPerf's ``run_start`` -> ``run_stop``; else the latest segment end minus
  the earliest segment start where the log times its segments; else the sum of its
  segments. Evaluation that ran beside training (asynchronous evals) is inside the wall, never
  added to it: the wall may be below train + evaluation seconds. Only a wall below the
  training seconds alone less 1 % (marks that contradict the log's own training segments) is
  not a clock: the run then gets the sum of its segments.
* ``init_seconds``: the start-up before the run's timed part (MLPerf ``init_start`` ->
  ``run_start``, ``meta["init_seconds"]``), NaN when the log does not say.
* ``evals``: the run's test segments (evaluation passes); ``overlap_seconds``: evaluation
  time that ran while training went on (``meta["eval_overlap_seconds"]``: NVIDIA's
  detection and UNet3D code evaluates asynchronously), at least what the wall implies
  (train + evaluation - wall), never more than the evaluation seconds;
  ``gap_seconds``: wall less train and the evaluation time outside training, at least 0.
  So the phases are a breakdown of the wall: train + (test - overlap) + gap = wall.
* ``stack_key``/``stack``: :func:`models.dataset.stack_key` and the stack as logged;
  ``variant``: the canonical key; ``system``: ``""`` when unknown.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ingest.store import Store, StoredRun
from models.dataset import software_stack, stack_key
from models.variant import BrokenMeta, run_system, variant_key

COLUMNS = [
    "run_id", "source", "network", "deployment", "system", "stack", "stack_key", "variant",
    "batch_size", "start_time", "train_iterations", "train_seconds", "test_iterations",
    "test_seconds", "evals", "wall_seconds", "init_seconds", "overlap_seconds", "gap_seconds",
]


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _wall(meta: Mapping, phases: dict[str, dict], train: float, total: float) -> float:
    """The run's wall clock (module rules): its own start/stop records, not a sum of phases."""
    start, stop = _finite(meta.get("run_start")), _finite(meta.get("run_stop"))
    if start is not None and stop is not None and stop > start:
        wall = stop - start
    else:
        firsts = [p["first_start"] for p in phases.values() if p.get("first_start") is not None]
        lasts = [p["last_end"] for p in phases.values() if p.get("last_end") is not None]
        wall = (max(lasts) - min(firsts)) if firsts and lasts else total
    return wall if wall >= 0.99 * train else total


def run_clock(meta: Mapping, phases: dict[str, dict]) -> tuple[float | None, str]:
    """(wall seconds, state) of any stored run, as ``jobcast runs`` shows it: a scheduler's
    whole-job run its recorded seconds and state (``ingest.whole_job``); a run with segments
    its wall clock (module rules) and ``completed``, or ``partial`` where the parser marked
    it truncated; None without either."""
    record = meta.get("whole_job") if isinstance(meta, Mapping) else None
    if isinstance(record, Mapping):
        return _finite(record.get("seconds")), str(record.get("state") or "")
    train, test = phases.get("train", {}), phases.get("test", {})
    t_s = float(train.get("seconds") or 0)
    total = t_s + float(test.get("seconds") or 0)
    if not (total > 0 and math.isfinite(total)):
        return None, ""
    return _wall(meta, phases, t_s, total), "partial" if meta.get("truncated") else "completed"


def summarise(run: StoredRun, phases: dict[str, dict]) -> dict | None:
    """One run's row (module rules), None when it is left out."""
    if not run.network or not run.deployment:
        return None
    meta = run.meta if isinstance(run.meta, dict) else {}
    try:
        variant, system = variant_key(meta.get("variant")), run_system(meta)
    except BrokenMeta:
        return None
    train, test = phases.get("train", {}), phases.get("test", {})
    t_it, t_s = float(train.get("iterations") or 0), float(train.get("seconds") or 0)
    if not (t_it > 0 and t_s > 0 and math.isfinite(t_it) and math.isfinite(t_s)):
        return None
    e_s = float(test.get("seconds") or 0)
    wall = _wall(meta, phases, t_s, t_s + e_s)
    init = _finite(meta.get("init_seconds"))
    stated = max(_finite(meta.get("eval_overlap_seconds")) or 0.0, 0.0)
    overlap = min(max(stated, t_s + e_s - wall), e_s)
    stack = software_stack(run.stack)
    return {
        "run_id": run.id, "source": run.source, "network": run.network,
        "deployment": run.deployment, "system": system, "stack": stack,
        "stack_key": stack_key(stack), "variant": variant, "batch_size": int(run.batch_size),
        "start_time": run.start_time if run.start_time is not None else math.nan,
        "train_iterations": t_it, "train_seconds": t_s,
        "test_iterations": float(test.get("iterations") or 0), "test_seconds": e_s,
        "evals": int(test.get("segments") or 0), "wall_seconds": wall,
        "init_seconds": init if init is not None and init >= 0 else math.nan,
        "overlap_seconds": overlap, "gap_seconds": max(0.0, wall - t_s - e_s + overlap),
    }


def run_table(store: Store) -> pd.DataFrame:
    """The summaries of the store's runs (module rules), in the store's run order."""
    totals: dict[int, dict[str, dict]] = {}
    for row in store.phase_totals():
        totals.setdefault(row["run_id"], {})[row["phase"]] = row
    rows = [r for run in store.runs() if (r := summarise(run, totals.get(run.id, {})))]
    return pd.DataFrame(rows, columns=COLUMNS)


def to_records(table: pd.DataFrame) -> list[dict]:
    """The table as JSON-able records (NaN as None)."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in table.to_dict("records")]


def from_records(records: Iterable[Mapping] | None) -> pd.DataFrame:
    """A table from :func:`to_records` (None or empty: an empty table)."""
    frame = pd.DataFrame(list(records or []), columns=COLUMNS)
    for col in ("start_time", "init_seconds"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["overlap_seconds"] = pd.to_numeric(frame["overlap_seconds"], errors="coerce").fillna(0.0)
    for col in ("system", "stack", "stack_key", "variant"):
        frame[col] = frame[col].fillna("").astype(str)
    return frame


def phase_shares(runs: pd.DataFrame) -> dict[str, float]:
    """Per train second of ``runs``: mean evaluation seconds outside training and gap
    seconds, the mean wall over train seconds, and mean init seconds (NaN when no run states
    it)."""
    if runs.empty:
        return {"test": 0.0, "gaps": 0.0, "wall": 1.0, "init": math.nan}
    train = runs["train_seconds"].to_numpy(float)
    init = runs["init_seconds"].to_numpy(float)
    evals = runs["test_seconds"].to_numpy(float) - runs["overlap_seconds"].fillna(0).to_numpy(float)
    return {
        "test": float(np.mean(evals / train)),
        "gaps": float(np.mean(runs["gap_seconds"].to_numpy(float) / train)),
        "wall": float(np.mean(runs["wall_seconds"].to_numpy(float) / train)),
        "init": float(np.nanmean(init)) if np.isfinite(init).any() else math.nan,
    }
