"""Scale-calibration data: observed runs next to the layerwise route's forecast of the same
work.

:func:`layerwise_observations` gives the ``X`` (columns ``network``, ``deployment``,
``predicted``) and ``actual`` that fit a :class:`models.scale_calibration.ScaleCalibrator`;
the :class:`jobcast.service.engine.routes.ScaleCalibratedRoute` applies the fitted factors. The
column ``hardware`` (the old name of ``deployment``, same values) is kept for one release.
This module was ``jobcast.service.calibration``, which still re-exports it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fleet.deployment import deployment_key
from fleet.errors import JobcastError
from jobcast.service.engine.forecast import Forecast
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.routes import LayerwiseRoute, NoLayerwiseForecast
from models.scale_calibration import ScaleCalibrator, network_key, observed_runs

COLUMNS = ["run_id", "network", "deployment", "hardware", "batch_size", "iterations",
           "predicted", "actual"]


def layerwise_observations(runs: pd.DataFrame, predictor: Any = None
                           ) -> tuple[pd.DataFrame, list[str]]:
    """Layerwise predictions for observed runs: the ``X`` (and ``actual``) of ``fit``.

    Runs whose network or hardware the layerwise path cannot price are left out and listed
    (``"<source>: <reason>"``). Each distinct network x deployment x batch is forecast once.
    """
    route = LayerwiseRoute(predictor)
    rows, skipped = [], []
    cache: dict[tuple[str, str, int], Forecast | str] = {}
    for run in runs.itertuples(index=False):
        key = (run.network, run.deployment, int(run.batch_size))
        if key not in cache:
            req = JobRequest(network=run.network, deployment=run.deployment,
                             batch_size=int(run.batch_size), iterations=1)
            try:
                cache[key] = route.forecast(req)
            except NoLayerwiseForecast as exc:
                cache[key] = exc.reason
            except JobcastError as exc:
                cache[key] = str(exc)
        step = cache[key]
        if isinstance(step, str):
            skipped.append(f"{run.source}: {step}")
            continue
        deployment = deployment_key(step.details["device"], step.details.get("devices", 1))
        rows.append(
            {
                "run_id": run.run_id,
                "network": network_key(run.network),
                "deployment": deployment,
                "hardware": deployment,  # the old name, for one release
                "batch_size": int(run.batch_size),
                "iterations": float(run.iterations),
                "predicted": float(step.seconds) * float(run.iterations),
                "actual": float(run.seconds),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS), skipped


def fit_calibration(store: Any, predictor: Any, shrinkage: float = 0.0
                    ) -> tuple[ScaleCalibrator, pd.DataFrame, list[str]]:
    """Observed runs vs layerwise predictions -> (calibrator, observations, skipped)."""
    obs, skipped = layerwise_observations(observed_runs(store), predictor)
    calibrator = ScaleCalibrator(shrinkage=shrinkage).fit(obs, obs["actual"])
    return calibrator, obs, skipped
