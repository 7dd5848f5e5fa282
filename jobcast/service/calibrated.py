"""The calibrated layerwise route: layerwise forecasts scaled by what observed runs showed.

The factors are a :class:`models.calibration.ScaleCalibrator`; here they are learnt from the
store's runs (:func:`layerwise_observations`) and applied to forecasts (:func:`calibrate_result`).
The hardware key is the deployment key of the forecast's GPU and device count.
"""

from __future__ import annotations

import pandas as pd

from fleet.deployment import Deployment
from models.calibration import ScaleCalibrator, network_key

ROUTE = "layerwise-calibrated"


def hardware_key(device: str, devices: int = 1) -> str:
    """The hardware a forecast is for, as a deployment key (``nvidia-v100-sxm2-16gb-x8``)."""
    return Deployment(str(device), int(devices)).key


def layerwise_observations(runs: pd.DataFrame, predictor=None) -> tuple[pd.DataFrame, list[str]]:
    """Layerwise predictions for observed runs: the ``X`` (and ``actual``) of ``fit``.

    Runs whose network or hardware the layerwise path cannot price are left out and listed
    (``"<source>: <reason>"``). Each distinct network x deployment x batch is forecast once.
    """
    from jobcast.service.forecaster import JobRequest
    from jobcast.service.routes import layerwise_forecast

    rows, skipped, cache = [], [], {}
    for run in runs.itertuples(index=False):
        key = (run.network, run.deployment, int(run.batch_size))
        if key not in cache:
            req = JobRequest(network=run.network, deployment=run.deployment,
                             batch_size=int(run.batch_size), iterations=1)
            try:
                cache[key] = layerwise_forecast(req, "", predictor=predictor)
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
                "hardware": hardware_key(step["device"], step.get("devices", 1)),
                "batch_size": int(run.batch_size),
                "iterations": float(run.iterations),
                "predicted": float(step["seconds"]) * float(run.iterations),
                "actual": float(run.seconds),
            }
        )
    cols = ["run_id", "network", "hardware", "batch_size", "iterations", "predicted", "actual"]
    return pd.DataFrame(rows, columns=cols), skipped


def calibrate_result(result: dict, network: str, calibrator: ScaleCalibrator | None) -> dict:
    """A layerwise forecast dict scaled by its calibration factor (route ``layerwise-calibrated``).

    Other routes, errors, and forecasts with no applicable factor come back unchanged.
    """
    if calibrator is None or result.get("route") != "layerwise" or "error" in result:
        return result
    hardware = hardware_key(result["device"], result.get("devices", 1))
    scale = calibrator.scale_for(network, hardware)
    if scale is None:
        return result
    out = dict(result)
    for key in ("seconds", "low", "high"):
        out[key] = result[key] * scale.factor
    out.update(
        route=ROUTE,
        model=f"{result.get('model', 'layerwise')}+calibration/{scale.level}/{hardware}",
        calibration={"factor": scale.factor, "level": scale.level, "runs": scale.runs,
                     "hardware": hardware},
    )
    return out
