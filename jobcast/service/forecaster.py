"""One forecaster: end-to-end models where the job has history, layerwise otherwise.

Routing rules (the CLI and the served model decide the same way, here):

1. A request that names a deployment and no device goes to the end-to-end route.
2. If that route misses (no model for the key), or the request names a device, the
   layerwise route answers, calibrated by observed runs where a factor applies.
3. One exception to "history wins": an end-to-end model fitted on fewer than
   :data:`MIN_E2E_RUNS` runs, asked about a batch size its runs did not use, gives way to the
   layerwise forecast calibrated on that network's own runs on the same hardware (the
   layerwise model knows how time scales with the batch, the runs know the level; measured
   in docs/mlflow.md).
4. Before that exception: an end-to-end answer from history without the request's batch size
   (however many others it has) gives way to the hybrid
   route (:mod:`jobcast.service.hybrid`: the layerwise shape versus batch, scaled by that
   history; docs/batch-hybrid.md) wherever the layerwise route can price the network.

Every request gets an :class:`Outcome`: a :class:`Forecast`, or a :class:`ForecastFailure`
that says why no route could answer.
"""

from __future__ import annotations

from typing import Any

from ingest.store import Store
from jobcast.service.forecast import Forecast, ForecastFailure, Outcome
from jobcast.service.hybrid import HybridRoute
from jobcast.service.request import JobRequest, JobRequestError
from jobcast.service.routes import CalibratedRoute, EndToEndRoute, LayerwiseRoute, RouteMiss
from models.calibration import ScaleCalibrator
from models.e2e import FittedModel, load_models

# End-to-end models fitted on fewer runs than this give way to the calibrated layerwise
# forecast at a batch size their runs did not use (see docs/mlflow.md, calibration results).
MIN_E2E_RUNS = 2


class Forecaster:
    """Routes each request (see the module rules).

    The end-to-end models come from ``store`` (read on first use) or are given as
    ``models`` (``FittedModel`` list, e.g. a snapshot packaged with an MLflow model).
    ``layer_predictor`` defaults to the shipped layerwise predictor; ``calibration`` is a
    fitted :class:`ScaleCalibrator` (or None: layerwise answers stay uncalibrated).
    """

    def __init__(
        self,
        store: Store | None = None,
        layer_predictor: Any = None,
        models: list[FittedModel] | None = None,
        calibration: ScaleCalibrator | None = None,
    ):
        self.store = store
        self.layer_predictor = layer_predictor
        self.calibration = calibration
        self._models = models
        self._end_to_end: EndToEndRoute | None = None
        self._hybrid: HybridRoute | None = None
        self.layerwise = CalibratedRoute(LayerwiseRoute(layer_predictor), calibration)

    @property
    def models(self) -> list[FittedModel]:
        if self._models is None:
            self._models = load_models(self.store) if self.store is not None else []
        return self._models

    @property
    def end_to_end(self) -> EndToEndRoute:
        if self._end_to_end is None:
            self._end_to_end = EndToEndRoute(self.models)
        return self._end_to_end

    @property
    def hybrid(self) -> HybridRoute:
        if self._hybrid is None:
            self._hybrid = HybridRoute(self.layerwise.layerwise, self.end_to_end, self.store)
        return self._hybrid

    def forecast(self, req: JobRequest) -> Outcome:
        """A :class:`Forecast`, or a :class:`ForecastFailure` with the reason."""
        try:
            req.validate()
            if req.device is None and req.deployment is not None:
                try:
                    result = self.end_to_end.forecast(req)
                except RouteMiss as exc:
                    miss = str(exc)
                else:
                    hybrid = self.hybrid.answer(req, result)
                    if hybrid is not None:
                        return hybrid
                    if self._few_runs_off_batch(req, result):
                        return self._own_runs_layerwise(req) or result
                    return result
            else:
                miss = "no deployment given"
            return self.layerwise.forecast(req, miss)
        except (JobRequestError, ValueError, LookupError, OSError) as exc:
            return ForecastFailure(req, str(exc))

    def _few_runs_off_batch(self, req: JobRequest, result: Forecast) -> bool:
        """An end-to-end answer from fewer than MIN_E2E_RUNS runs at a batch size they lack."""
        if self.calibration is None or req.eval_every:
            return False
        model = self.end_to_end.model_of(result)
        if model is None or model.estimator.n_runs_ >= MIN_E2E_RUNS:
            return False
        low, high = model.estimator.batch_range_
        return not low <= req.batch_size <= high

    def _own_runs_layerwise(self, req: JobRequest) -> Forecast | None:
        """The layerwise forecast scaled by this network's own runs on this hardware, if any."""
        if not self.layerwise.has_own_runs(req):
            return None
        why = f"the end-to-end model has fewer than {MIN_E2E_RUNS} runs at other batch sizes"
        try:
            calibrated = self.layerwise.forecast(req, why)
        except (LookupError, ValueError):
            return None
        if calibrated.details.get("calibration", {}).get("level") != "network-hardware":
            return None
        return calibrated
