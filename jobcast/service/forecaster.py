"""One forecaster: end-to-end models where the job has history, layerwise otherwise."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, fields
from pathlib import Path

from fleet.deployment import normalise_deployment
from ingest.store import Store
from models.e2e import NoModelError, choose, forecast, load_models
from models.job import JobPlan, forecast_job

# End-to-end models fitted on fewer runs than this give way to the calibrated layerwise
# forecast at a batch size their runs did not use (see docs/mlflow.md, calibration results).
MIN_E2E_RUNS = 2
JOB_COLUMNS = ("network", "deployment", "batch_size", "iterations", "phase")
OPTIONAL_COLUMNS = (
    "device",
    "optimizer",
    "epochs",
    "dataset_size",
    "image_size",
    "eval_every",
    "eval_size",
    "stack",
)


class JobRequestError(ValueError):
    """A job request that cannot be forecast as written."""


@dataclass(frozen=True)
class JobRequest:
    network: str
    deployment: str | None = None
    batch_size: int | None = None
    iterations: int | None = None
    phase: str = "train"
    epochs: float | None = None
    dataset_size: int | None = None
    eval_every: float | None = None
    eval_size: int | None = None
    stack: str | None = None
    device: str | None = None
    optimizer: str = "sgd"
    image_size: int = 224

    def describe(self) -> dict:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


class Forecaster:
    """Routes each request to the end-to-end model of its key, else to the layerwise path.

    The end-to-end models come from ``store`` (read on first use) or are given as
    ``models`` (``FittedModel`` list, e.g. a snapshot packaged with an MLflow model).
    ``layer_predictor`` defaults to the shipped layerwise predictor. With a ``calibration``
    (``models.calibration.ScaleCalibrator``), layerwise answers are scaled by what the
    network's real runs showed (route ``layerwise-calibrated``), and an end-to-end model
    fitted on fewer than ``MIN_E2E_RUNS`` runs, asked about a batch size its runs did not
    use, gives way to that calibrated layerwise forecast (the layerwise model knows how time
    scales with the batch, the runs know the level; measured in docs/mlflow.md).
    """

    def __init__(
        self, store: Store | None = None, layer_predictor=None, models=None, calibration=None
    ):
        self.store = store
        self.layer_predictor = layer_predictor
        self.calibration = calibration
        self._models = models

    @property
    def models(self):
        if self._models is None:
            self._models = load_models(self.store) if self.store is not None else []
        return self._models

    def forecast(self, req: JobRequest) -> dict:
        """A forecast dict (seconds, low, high, unit, route, model, ...) or {"error": ...}."""
        try:
            _validate(req)
            if req.device is None and req.deployment is not None:
                try:
                    result = self._end_to_end(req)
                except NoModelError as exc:
                    e2e_miss = str(exc)
                else:
                    if self._few_runs_off_batch(req, result):
                        result = self._calibrated_layerwise(req) or result
                    return {"job": req.describe(), **result}
            else:
                e2e_miss = "no deployment given"
            return {"job": req.describe(), **self._layerwise(req, e2e_miss)}
        except (JobRequestError, ValueError, LookupError, OSError) as exc:
            return {"job": req.describe(), "error": str(exc)}

    def _end_to_end(self, req: JobRequest) -> dict:
        deployment = normalise_deployment(req.deployment)
        if req.epochs is not None and req.iterations is None:
            plan = JobPlan(
                network=req.network,
                deployment=deployment,
                batch_size=req.batch_size,
                epochs=req.epochs,
                dataset_size=req.dataset_size,
                eval_every=req.eval_every,
                eval_size=req.eval_size,
                stack=req.stack,
            )
            return forecast_job(self.models, plan)
        if req.iterations is None:
            raise JobRequestError("give iterations, or epochs with dataset_size")
        model = choose(
            self.models,
            req.network,
            deployment,
            req.phase,
            req.stack,
            req.iterations,
            req.batch_size,
        )
        return forecast(model, req.iterations, req.batch_size)

    def _layerwise(self, req: JobRequest, e2e_miss: str) -> dict:
        from jobcast.service.calibrated import calibrate_result
        from jobcast.service.routes import layerwise_forecast

        result = layerwise_forecast(req, e2e_miss, predictor=self.layer_predictor)
        return calibrate_result(result, req.network, self.calibration)

    def _few_runs_off_batch(self, req: JobRequest, result: dict) -> bool:
        """An end-to-end answer from fewer than MIN_E2E_RUNS runs at a batch size they lack."""
        if self.calibration is None or req.eval_every:
            return False
        model = next((m for m in self.models if m.model_id == result.get("model")), None)
        if model is None or model.estimator.n_runs_ >= MIN_E2E_RUNS:
            return False
        low, high = model.estimator.batch_range_
        return not low <= req.batch_size <= high

    def _calibrated_layerwise(self, req: JobRequest) -> dict | None:
        """The layerwise forecast scaled by this network's own runs on this hardware, if any."""
        from fleet.catalog import resolve_gpu
        from jobcast.service.calibrated import calibrate_result, hardware_key
        from jobcast.service.routes import device_for, layerwise_forecast
        from models.calibration import network_key

        try:  # cheap check first: is there a factor for this network on this hardware?
            device, count = device_for(req)
            hardware = hardware_key(resolve_gpu(device).name, count)
        except (LookupError, ValueError):
            return None
        if (network_key(req.network), hardware) not in self.calibration.pairs_:
            return None
        why = f"the end-to-end model has fewer than {MIN_E2E_RUNS} runs at other batch sizes"
        try:
            plain = layerwise_forecast(req, why, predictor=self.layer_predictor)
        except (LookupError, ValueError):
            return None
        calibrated = calibrate_result(plain, req.network, self.calibration)
        if calibrated.get("calibration", {}).get("level") != "network-hardware":
            return None
        return calibrated


def _validate(req: JobRequest) -> None:
    if not req.network or not str(req.network).strip():
        raise JobRequestError("network is missing")
    if req.batch_size is None or req.batch_size <= 0:
        raise JobRequestError(f"batch_size must be a positive integer, got {req.batch_size}")
    if req.phase not in ("train", "test"):
        raise JobRequestError(f"phase must be train or test, got {req.phase!r}")
    if req.iterations is not None and req.iterations < 0:
        raise JobRequestError(f"iterations must be >= 0, got {req.iterations}")
    if req.epochs is not None and req.epochs < 0:
        raise JobRequestError(f"epochs must be >= 0, got {req.epochs}")


def _number(value: str, name: str, kind: type, line: int, path: Path):
    if value is None or value.strip() == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise JobRequestError(f"{path}:{line}: {name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise JobRequestError(f"{path}:{line}: {name} must be finite, got {value!r}")
    if kind is int:
        if number != int(number):
            raise JobRequestError(f"{path}:{line}: {name} must be a whole number, got {value!r}")
        return int(number)
    return number


def read_jobs_csv(path: Path) -> list[JobRequest]:
    """Read a jobs CSV (columns of ``jobcast predict --jobs``); errors name file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise JobRequestError(f"cannot read {path}: {exc.strerror or exc}") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in ("network", "batch_size") if c not in header]
    if missing:
        raise JobRequestError(
            f"{path}:1: missing column(s) {', '.join(missing)}; need {JOB_COLUMNS}"
        )
    unknown = [h for h in header if h not in JOB_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise JobRequestError(f"{path}:1: unknown column(s) {', '.join(unknown)}")
    requests = []
    for line, raw in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k}
        requests.append(
            JobRequest(
                network=row.get("network", ""),
                deployment=row.get("deployment") or None,
                batch_size=_number(row.get("batch_size"), "batch_size", int, line, path),
                iterations=_number(row.get("iterations"), "iterations", int, line, path),
                phase=row.get("phase") or "train",
                epochs=_number(row.get("epochs"), "epochs", float, line, path),
                dataset_size=_number(row.get("dataset_size"), "dataset_size", int, line, path),
                eval_every=_number(row.get("eval_every"), "eval_every", float, line, path),
                eval_size=_number(row.get("eval_size"), "eval_size", int, line, path),
                stack=row.get("stack") or None,
                device=row.get("device") or None,
                optimizer=row.get("optimizer") or "sgd",
                image_size=_number(row.get("image_size"), "image_size", int, line, path) or 224,
            )
        )
    if not requests:
        raise JobRequestError(f"{path}: no jobs (only a header)")
    return requests
