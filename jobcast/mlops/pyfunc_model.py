"""The registered forecaster: one ``mlflow.pyfunc`` model that serves jobcast forecasts.

Input: a table of jobs, the columns of ``jobcast predict --jobs``. ``network``, ``deployment``,
``batch_size``, ``iterations`` and ``phase`` must be present as columns (``deployment`` may be
null in a row that names a ``device``, ``iterations`` in a row that gives ``epochs`` and
``dataset_size``, ``phase`` defaults to ``train``); ``device``, ``optimizer``, ``epochs``,
``dataset_size``, ``image_size``, ``eval_every``, ``eval_size`` and ``stack`` are optional.
Numbers other than ``batch_size`` may be null: :func:`jobs_frame` types them as doubles, and
the MLflow signature declares them ``Any``, so that an integer column (``int64``
``iterations``) is accepted as it is (MLflow refuses to convert int64 to a double column). Every
row's numbers are then checked by ``JobRequest`` (a number, finite, whole where it must be, in
range: ``jobcast.service.engine.request.LIMITS``). Columns the signature does not know are dropped
by MLflow with a warning; the REST server (``jobcast serve``) refuses them.

Output: one row per job with ``seconds, low, high, unit, route, model, extrapolated, error``.
``route`` is ``end-to-end`` (the network x deployment has history), ``layerwise-calibrated``
(no history, but observed runs give a scale factor: see ``models.scale_calibration``) or
``layerwise``; ``model`` is the id of the model that answered. One exception to "history
wins" (decided in ``jobcast.service.engine.forecaster.Forecaster``): an end-to-end model fitted on
fewer than ``MIN_E2E_RUNS`` runs, asked about a batch size its runs did not use, gives way to the
layerwise forecast calibrated on that network's own runs on the same hardware (a new
network's first runs: the layerwise model knows how time scales with the batch, the runs know
the level).

Errors: a table that does not match the signature (a required column missing, a wrong type) is
refused by MLflow with HTTP 400. A row that cannot be forecast (negative batch, unknown device
or network, no iterations, ...) makes the whole request fail with HTTP 400 and a message listing
every bad row, unless the request sends ``params: {"errors": "row"}``: then the answer is 200
with the reason in that row's ``error`` column (a string: the signature's). A row's error is
a :class:`fleet.errors.JobcastError`'s message (a bad value, no route answered); any other
exception while forecasting a row is a bug in jobcast and its row says so (``internal error
(a bug in jobcast, please report it): <Type>: <message>``, logged too). One
row never ends the table. :meth:`JobcastForecaster.answer_rows` gives each row's problem in
the one error shape too (:class:`fleet.errors.ErrorInfo`; the REST server's ``errors``).

Artifacts of the logged model: ``e2e_models`` (JSON snapshot of the fitted end-to-end models),
``calibration`` (JSON scale factors), ``layer_predictor`` (the predictor's folder, when one is
packaged). The packages ``jobcast``, ``ingest``, ``models``, ``layerwise`` and ``fleet`` travel as
``code_paths``, so serving with ``--env-manager local`` needs only their dependencies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Sequence
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, ClassVar

import mlflow
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.pyfunc import PythonModel
from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema, TensorSpec
from mlflow.types.schema import AnyType

from fleet.errors import ErrorInfo, JobcastError, bug_info, error_info
from jobcast.mlops.errors import MlopsError
from jobcast.service.engine.forecast import Forecast, ForecastFailure, Outcome
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import FIELDS, Field, JobRequest
from jobcast.service.engine.routes import LAYERWISE_MODEL
from layerwise.shipped import load_predictor
from models.e2e import FittedModel
from models.history import from_records
from models.scale_calibration import ScaleCalibrator
from models.selector import BacktestSelector

REPO_ROOT = Path(__file__).resolve().parents[2]
CODE_PACKAGES = ("jobcast", "ingest", "models", "layerwise", "fleet")
# The shipped predictor travels as an artifact, not twice.
_CODE_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "default_predictor", ".*")
_LOG = logging.getLogger(__name__)



def _signature_type(spec: Field) -> str:
    """MLflow column type: text is a string; a number that must be given (``batch_size``) is
    a long; other numbers are doubles, so that they may be null (whole numbers are checked
    per row by :meth:`JobRequest.from_mapping`)."""
    if spec.kind == "text":
        return "string"
    return "long" if spec.needed else "double"


REQUIRED_COLUMNS: dict[str, str] = {f.name: _signature_type(f) for f in FIELDS if f.core}
OPTIONAL_COLUMNS: dict[str, str] = {f.name: _signature_type(f) for f in FIELDS if not f.core}
OUTPUT_COLUMNS: dict[str, str] = {
    "seconds": "double",
    "low": "double",
    "high": "double",
    "unit": "string",
    "route": "string",
    "model": "string",
    "extrapolated": "boolean",
    "interconnect": "string",
    "assumed": "string",
    "chosen": "string",  # which candidate answered and why, with its backtest figure
    "candidate": "string",  # its kind (own-rate, own-model, ..., layerwise)
    "backtest_error_percent": "double",  # the selector's expected error of that candidate
    "error": "string",
}
# Null where they do not apply: errors, and interconnects of single-device forecasts.
OPTIONAL_OUTPUTS = ("error", "interconnect", "assumed", "chosen", "candidate",
                    "backtest_error_percent")
ERROR_MODES = ("raise", "row")

ARTIFACT_MODELS = "e2e_models"
ARTIFACT_CALIBRATION = "calibration"
ARTIFACT_PREDICTOR = "layer_predictor"


def _declared(kind: str) -> str | AnyType:
    """The signature's type of a column typed ``kind``: a nullable number is ``Any`` (see the
    module doc), checked per row by ``JobRequest``."""
    return AnyType() if kind == "double" else kind


def forecaster_signature() -> ModelSignature:
    """Input columns (required and optional), output columns and the ``errors`` parameter."""
    inputs: list[ColSpec | TensorSpec] = [
        ColSpec(_declared(t), n) for n, t in REQUIRED_COLUMNS.items()]
    inputs += [ColSpec(_declared(t), n, required=False) for n, t in OPTIONAL_COLUMNS.items()]
    outputs: list[ColSpec | TensorSpec] = [ColSpec(t, n, required=n not in OPTIONAL_OUTPUTS)
                                           for n, t in OUTPUT_COLUMNS.items()]
    params = ParamSchema([ParamSpec("errors", "string", "raise")])
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs), params=params)


def jobs_frame(jobs: list[JobRequest] | list[dict]) -> pd.DataFrame:
    """A table of jobs typed as the signature wants (doubles for the nullable numbers)."""
    records = [j.describe() if isinstance(j, JobRequest) else dict(j) for j in jobs]
    frame = pd.DataFrame(records)
    for name, kind in {**REQUIRED_COLUMNS, **OPTIONAL_COLUMNS}.items():
        if name not in frame.columns:
            if name not in REQUIRED_COLUMNS:
                continue
            frame[name] = None
        if kind == "double":
            frame[name] = pd.to_numeric(frame[name], errors="coerce").astype("float64")
        elif kind == "long":
            frame[name] = frame[name].astype("int64")
        else:
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    known = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if c in frame.columns]
    return frame[known]


# -- rows in, rows out --------------------------------------------------------------------


def request_from_row(row: dict) -> JobRequest:
    """One input row as a ``JobRequest``; ``JobRequestError`` (a ``ValueError``) names the
    bad field."""
    return JobRequest.from_mapping(row)


def error_row(message: str) -> dict:
    """The answer row of a job that cannot be forecast: only ``error`` is set."""
    return {name: None for name in OUTPUT_COLUMNS} | {"error": message}


def output_row(outcome: Outcome) -> dict:
    """One answer row (the columns of :data:`OUTPUT_COLUMNS`); a forecast whose numbers are
    not finite, or whose interval does not hold its point, is an error row, never an answer."""
    if not isinstance(outcome, Forecast):  # a ForecastFailure: ``outcome.ok`` is False
        return error_row(str(outcome.error))
    numbers = (outcome.seconds, outcome.low, outcome.high)
    if not all(math.isfinite(float(x)) for x in numbers) or not (
            0 <= outcome.low <= outcome.seconds <= outcome.high):
        return error_row(
            f"cannot forecast this job: the answer {outcome.seconds:g} s "
            f"[{outcome.low:g}, {outcome.high:g}] is not a finite interval around its point"
        )
    return {
        "seconds": float(outcome.seconds),
        "low": float(outcome.low),
        "high": float(outcome.high),
        "unit": outcome.unit,
        "route": str(outcome.route),
        "model": outcome.model,
        "extrapolated": bool(outcome.extrapolated),
        "interconnect": outcome.details.get("interconnect"),
        "assumed": "; ".join(outcome.details.get("assumed", [])) or None,
        "chosen": outcome.details.get("chosen"),
        "candidate": outcome.details.get("candidate"),
        "backtest_error_percent": (outcome.details.get("backtest") or {}).get(
            "expected_error_percent"),
        "error": None,
    }


class NoLayerPredictor(MlopsError, LookupError):
    """The forecaster was registered without a layerwise predictor: a job without history
    cannot be forecast (an ordinary miss of that row, not a bug)."""

    kind: ClassVar[str] = "no_forecast"


class _NoPredictor:
    """Stands in when no layer predictor was packaged: layerwise rows get a clear error."""

    @property
    def known_layers(self):
        """Never known: raises :class:`NoLayerPredictor`."""
        raise NoLayerPredictor(
            "this forecaster was registered without a layerwise predictor, so "
            "jobs without end-to-end history cannot be forecast"
        )


def directory_fingerprint(path: str | Path) -> str:
    """SHA-256 over the relative names and contents of all files under ``path``."""
    digest = hashlib.sha256()
    root = Path(path)
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()


class JobcastForecaster(PythonModel):
    """The pyfunc model (see the module doc). Results are cached per distinct job."""

    predictor_id: str | None = None  # content hash of the packaged predictor folder

    def __init__(self, cache_size: int = 4096):
        self.cache_size = cache_size

    def load_context(self, context) -> None:
        """Read the artifacts (models, history, selector, calibration, predictor)."""
        artifacts = context.artifacts
        with open(artifacts[ARTIFACT_MODELS], encoding="utf-8") as handle:
            snapshot = json.load(handle)
        models = [FittedModel.from_record(r) for r in snapshot["models"]]
        self.history = from_records(snapshot.get("history"))
        self.selector = (BacktestSelector.from_dict(snapshot["selector"])
                         if snapshot.get("selector") else None)
        calibration = ScaleCalibrator.empty()
        if ARTIFACT_CALIBRATION in artifacts:
            with open(artifacts[ARTIFACT_CALIBRATION], encoding="utf-8") as handle:
                calibration = ScaleCalibrator.from_dict(json.load(handle))
        predictor: Any = _NoPredictor()
        self.predictor_id = None
        if ARTIFACT_PREDICTOR in artifacts:
            predictor = load_predictor(artifacts[ARTIFACT_PREDICTOR])
            self.predictor_id = directory_fingerprint(artifacts[ARTIFACT_PREDICTOR])[:12]
        self.setup(models, calibration, predictor)

    def setup(self, models: list, calibration: ScaleCalibrator, predictor: Any) -> None:
        """Wire the parts (``load_context`` does it from the artifacts)."""
        self.calibration = calibration
        self.predictor = predictor
        self.forecaster = Forecaster(
            models=models, layer_predictor=predictor, calibration=calibration,
            history=getattr(self, "history", None), selector=getattr(self, "selector", None))
        self._models_by_id = {m.model_id: m for m in models}
        self._cache: OrderedDict[JobRequest, tuple[Outcome, ErrorInfo | None]] = \
            OrderedDict()

    def forecast(self, req: JobRequest) -> Outcome:
        """One job's forecast (cached), calibrated when the layerwise route has a factor."""
        return self._answer(req)[0]

    def _answer(self, req: JobRequest) -> tuple[Outcome, ErrorInfo | None]:
        """One job's outcome and, when it failed, its problem (module doc, "Errors"): a
        :class:`JobcastError` is the row's own error; any other exception is a bug, said so
        in the row and logged in one line (with its traceback when ``JOBCAST_DEBUG=1``),
        never cached, and never ends the table."""
        if req in self._cache:
            self._cache.move_to_end(req)
            return self._cache[req]
        try:
            result = self._name_layerwise(self.forecaster.forecast(req))
        except JobcastError as exc:
            answer: tuple[Outcome, ErrorInfo | None] = (ForecastFailure(req, str(exc)),
                                                        exc.info())
        except Exception as exc:  # noqa: BLE001 - one job's bug must not end the request
            info = bug_info(exc)
            _LOG.error("%s (forecasting %s)", info.message, req,
                       exc_info=os.environ.get("JOBCAST_DEBUG") == "1")
            return ForecastFailure(req, info.message), info
        else:
            answer = (result, None if result.ok else failure_info(result))
        self._cache[req] = answer
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return answer

    def _name_layerwise(self, outcome: Outcome) -> Outcome:
        """Name the packaged predictor by its content hash instead of ``layerwise/default``."""
        if (self.predictor_id and isinstance(outcome, Forecast)  # ``outcome.ok``
                and outcome.model.startswith(LAYERWISE_MODEL)):
            name = f"layerwise/{self.predictor_id}" + outcome.model[len(LAYERWISE_MODEL) :]
            return dataclasses.replace(outcome, model=name)
        return outcome

    def predict(self, context, model_input, params=None):
        """MLflow's door: a table of jobs in, the answer table out (module doc, "Errors")."""
        mode = str((params or {}).get("errors") or "raise")
        if mode not in ERROR_MODES:
            raise mlflow.exceptions.MlflowException.invalid_parameter_value(
                f"params.errors must be one of {', '.join(ERROR_MODES)}, got {mode!r}"
            )
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
        requests: list[JobRequest | Exception] = []
        for record in frame.to_dict(orient="records"):
            try:
                requests.append(request_from_row(record))
            except Exception as exc:  # noqa: BLE001 - the row's error (a bug says so)
                requests.append(exc)
        rows = self.forecast_rows(requests)
        bad = [(i, r["error"]) for i, r in enumerate(rows) if r["error"] is not None]
        if bad and mode == "raise":
            raise mlflow.exceptions.MlflowException.invalid_parameter_value(
                refusal_message(bad, len(rows)))
        return output_frame(rows)

    def forecast_rows(self, requests: Sequence[JobRequest | Exception],
                      stop: Callable[[int], None] | None = None) -> list[dict]:
        """Answer rows for parsed requests (an exception stands for a row that did not
        parse). ``stop(i)`` runs before row ``i`` and may raise to abandon the rest: the
        server's deadline and shutdown, checked between rows."""
        return [row for row, _ in self.answer_rows(requests, stop)]

    def answer_rows(self, requests: Sequence[JobRequest | Exception],
                    stop: Callable[[int], None] | None = None
                    ) -> list[tuple[dict, ErrorInfo | None]]:
        """:meth:`forecast_rows`, each row with its problem in the one error shape
        (:class:`fleet.errors.ErrorInfo`; None for an answer): the REST server's ``errors``."""
        answers: list[tuple[dict, ErrorInfo | None]] = []
        for i, req in enumerate(requests):
            if stop is not None:
                stop(i)
            if isinstance(req, Exception):
                refused = error_info(req)
                answers.append((error_row(refused.message), refused))
                continue
            outcome, info = self._answer(req)
            row = output_row(outcome)
            if row["error"] is not None and info is None:  # an answer output_row refused
                info = ErrorInfo(kind="no_forecast", message=row["error"])
            answers.append((row, info))
        return answers


def failure_info(failure: Any) -> ErrorInfo:
    """The problem of a :class:`ForecastFailure`: its own (``problem``, or ``info``) where it
    has one, else kind ``no_forecast`` with its reason."""
    for name in ("problem", "info"):
        own = getattr(failure, name, None)
        if isinstance(own, ErrorInfo):
            return own
    return ErrorInfo(kind="no_forecast", message=str(failure.error))


def refusal_message(bad: list[tuple[int, str]], total: int) -> str:
    """Why a table was refused: the first 20 bad rows (from 0) and their reasons."""
    listed = "; ".join(f"row {i}: {msg.rstrip('.')}" for i, msg in bad[:20])
    more = f"; and {len(bad) - 20} more" if len(bad) > 20 else ""
    return (f"{len(bad)} of {total} job(s) cannot be forecast (rows count from 0): "
            f'{listed}{more}. Send params {{"errors": "row"}} to get a per-row '
            "'error' column instead.")


def output_frame(rows: list[dict]) -> pd.DataFrame:
    """The answer table. Missing values are None, not NaN, so the REST answer is strict JSON
    (``null``): text columns are objects, and so are the numbers when a row carries an error.
    """
    frame = pd.DataFrame(
        {name: pd.Series([r[name] for r in rows], dtype=object) for name in OUTPUT_COLUMNS}
    )
    if all(r["error"] is None for r in rows):
        frame = frame.astype(
            {"seconds": "float64", "low": "float64", "high": "float64", "extrapolated": "bool"}
        )
    return frame


# -- logging ------------------------------------------------------------------------------


def stage_code(dest: Path) -> list[str]:
    """Copies of the four packages (no caches, no shipped predictor) for ``code_paths``."""
    paths = []
    for package in CODE_PACKAGES:
        target = Path(dest) / package
        shutil.copytree(REPO_ROOT / package, target, ignore=_CODE_IGNORE)
        paths.append(str(target))
    return paths


def pip_requirements(with_tensorflow: bool) -> list[str]:
    """The installed versions of what the served model imports (pinned)."""
    names = ["mlflow", "pandas", "numpy", "scipy", "scikit-learn", "sqlalchemy"]
    if with_tensorflow:
        names.append("tensorflow-cpu")
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={importlib_metadata.version(name)}")
        except importlib_metadata.PackageNotFoundError:
            if name == "tensorflow-cpu":
                with contextlib.suppress(importlib_metadata.PackageNotFoundError):
                    pins.append(f"tensorflow=={importlib_metadata.version('tensorflow')}")
    return pins


def example_jobs(models: list) -> pd.DataFrame | None:
    """One end-to-end job the snapshot can answer (an input example for the model page)."""
    for m in sorted(models, key=lambda m: m.model_id):
        if m.phase == "train":
            return jobs_frame(
                [
                    JobRequest(
                        network=m.network,
                        deployment=m.deployment,
                        batch_size=int(m.estimator.batch_range_[1]),
                        iterations=int(m.estimator.iteration_range_[1]),
                    )
                ]
            )
    return None


def log_forecaster(
    models: list,
    *,
    history: list[dict] | None = None,
    selector: dict | None = None,
    calibration: ScaleCalibrator | None = None,
    predictor_dir: str | Path | None = None,
    name: str = "forecaster",
    metadata: dict | None = None,
):
    """Log the forecaster in the active MLflow run; returns ``ModelInfo`` (registering a
    version is :func:`jobcast.mlops.registry.register_forecaster`'s)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        models_json = tmp_path / "e2e_models.json"
        models_json.write_text(json.dumps({"models": [m.to_record() for m in models],
                                            "history": history or [], "selector": selector}))
        calibration_json = tmp_path / "calibration.json"
        calibration_json.write_text(json.dumps((calibration or ScaleCalibrator.empty()).to_dict()))
        artifacts = {ARTIFACT_MODELS: str(models_json), ARTIFACT_CALIBRATION: str(calibration_json)}
        if predictor_dir is not None:
            artifacts[ARTIFACT_PREDICTOR] = str(predictor_dir)
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=JobcastForecaster(),
            artifacts=artifacts,
            code_paths=stage_code(tmp_path / "code"),
            signature=forecaster_signature(),
            input_example=example_jobs(models),
            pip_requirements=pip_requirements(with_tensorflow=predictor_dir is not None),
            metadata=metadata,
        )
