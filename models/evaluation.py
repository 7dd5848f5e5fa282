"""Held-out evaluation of fitted end-to-end models, from their stored cross-validation errors.

Rules:

- A model's ``cv_errors_`` hold one signed relative error per run, in the order of the runs'
  final progress points (``groupby("run_id", sort=False)``), as ``PhaseTimeModel.fit`` scored
  them: leave-one-run-out (the run's total predicted by a fit without that run) or, for a
  single run, the tail hold-out (the total predicted from the first half of the run).
- ``predicted = actual / (1 + error)``; the 90 % interval around it is
  ``[predicted / (1 + h), predicted * (1 + h)]`` with ``h`` the model's ``half_width_``.
- A model's points are those of its key, the stack compared by ``models.dataset.stack_key``,
  the variant by its key, the system only for a system model (a pooled model's points are
  those of every system). A system model on the pooled shape has no errors of its own.
- A model whose errors no longer line up with the points (the store changed since the fit) is
  left out, and so is an error that is not finite or at most -1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from models.dataset import stack_key

if TYPE_CHECKING:
    from models.e2e import FittedModel

COLUMNS = ("model_id", "phase", "run_id", "source", "iterations", "batch_size", "actual",
           "predicted", "low", "high", "cv_kind")


def held_out_predictions(models: Sequence[FittedModel], points: pd.DataFrame) -> pd.DataFrame:
    """Each run's phase total as its model's cross-validation predicted it (what ``cv_mape``
    scores), with the model's 90 % interval; one row per run and model, columns ``COLUMNS``.

    ``points``: the ``progress_points`` frame the models were fitted on. The points are
    grouped by key once (linear in points plus models, not their product).
    """
    if points.empty:
        return pd.DataFrame([], columns=list(COLUMNS))
    keyed = points.assign(
        _stack=points["stack"].map(stack_key),
        _variant=(points["variant"].fillna("") if "variant" in points.columns else ""),
        _system=(points["system"].fillna("") if "system" in points.columns else ""),
    )
    groups = {k: g for k, g in keyed.groupby(
        ["network", "deployment", "phase", "_stack", "_variant"], sort=False)}
    rows = []
    for m in models:
        est = m.estimator
        errors = list(getattr(est, "cv_errors_", []) or [])
        if not errors:
            continue
        df = groups.get((m.network, m.deployment, m.phase, stack_key(m.stack), m.variant))
        if df is None:
            continue
        if m.system:
            df = df[df["_system"] == m.system]
        finals = df.groupby("run_id", sort=False).tail(1)
        if len(finals) != len(errors):
            continue  # the store changed since the fit: the errors no longer line up
        half = est.half_width_
        has_source = "source" in finals.columns
        for i, err in enumerate(errors):
            if not math.isfinite(err) or err <= -1:
                continue
            actual = float(finals["seconds"].iat[i])
            predicted = actual / (1.0 + err)
            rows.append(
                {
                    "model_id": m.model_id,
                    "phase": m.phase,
                    "run_id": int(finals["run_id"].iat[i]),
                    "source": finals["source"].iat[i] if has_source else None,
                    "iterations": float(finals["iterations"].iat[i]),
                    "batch_size": int(finals["batch_size"].iat[i]),
                    "actual": actual,
                    "predicted": predicted,
                    "low": predicted / (1 + half),
                    "high": predicted * (1 + half),
                    "cv_kind": est.cv_kind_,
                }
            )
    return pd.DataFrame(rows, columns=list(COLUMNS))
