"""Calibration data: observed runs next to the layerwise route's forecast of the same work.

:func:`layerwise_observations` gives the ``X`` (columns ``network``, ``hardware``,
``predicted``) and ``actual`` that fit a :class:`models.calibration.ScaleCalibrator`; the
:class:`jobcast.service.routes.CalibratedRoute` applies the fitted factors.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fleet.deployment import deployment_key
from jobcast.service.request import JobRequest
from jobcast.service.routes import LayerwiseRoute
from models.calibration import ScaleCalibrator, network_key, observed_runs

COLUMNS = ["run_id", "network", "hardware", "batch_size", "iterations", "predicted", "actual"]


def layerwise_observations(runs: pd.DataFrame, predictor: Any = None
                           ) -> tuple[pd.DataFrame, list[str]]:
    """Layerwise predictions for observed runs: the ``X`` (and ``actual``) of ``fit``.

    Runs whose network or hardware the layerwise path cannot price are left out and listed
    (``"<source>: <reason>"``). Each distinct network x deployment x batch is forecast once.
    """
    route = LayerwiseRoute(predictor)
    rows, skipped, cache = [], [], {}
    for run in runs.itertuples(index=False):
        key = (run.network, run.deployment, int(run.batch_size))
        if key not in cache:
            req = JobRequest(network=run.network, deployment=run.deployment,
                             batch_size=int(run.batch_size), iterations=1)
            try:
                cache[key] = route.forecast(req)
            except (LookupError, ValueError) as exc:
                cache[key] = str(exc).split("no layerwise forecast: ", 1)[-1]
        step = cache[key]
        if isinstance(step, str):
            skipped.append(f"{run.source}: {step}")
            continue
        rows.append(
            {
                "run_id": run.run_id,
                "network": network_key(run.network),
                "hardware": deployment_key(step.details["device"], step.details.get("devices", 1)),
                "batch_size": int(run.batch_size),
                "iterations": float(run.iterations),
                "predicted": float(step.seconds) * float(run.iterations),
                "actual": float(run.seconds),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS), skipped


def fit_calibration(store, predictor: Any, shrinkage: float = 0.0
                    ) -> tuple[ScaleCalibrator, pd.DataFrame, list[str]]:
    """Observed runs vs layerwise predictions -> (calibrator, observations, skipped)."""
    obs, skipped = layerwise_observations(observed_runs(store), predictor)
    calibrator = ScaleCalibrator(shrinkage=shrinkage).fit(obs, obs["actual"])
    return calibrator, obs, skipped
