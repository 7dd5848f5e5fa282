"""``jobcast register``: log the forecaster, register a version, move the alias if not worse.

Validation error of a version (``validation_mape``, in %): the mean, over the end-to-end
**train-phase** models it packages, of each model's cross-validated MAPE of run totals
(leave-one-run-out where a model has two or more runs, else the run's total predicted from
its first half; see ``models.phase_model``). Train models only, because the train phase is
almost all of a job's time and test-phase models on one or two runs are very noisy.

Alias rule: the alias (default ``champion``) moves to the new version when no version holds it
yet, or when the new ``validation_mape`` is not larger than the holder's (ties move it: the
newer data wins). A version with no validated model never takes the alias from another.
Caveat: each version is scored on the data it was fitted on; when data is added the two
numbers describe different run sets. The layerwise calibration's leave-one-run-out error is
logged as ``calibration_loo_mape`` but does not decide the alias.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from fleet.credentials import hide_password
from jobcast.mlops.errors import MlopsError
from jobcast.mlops.pyfunc_model import directory_fingerprint, log_forecaster
from jobcast.mlops.serving import model_uri_of
from jobcast.mlops.tracking import data_fingerprint, resolve_tracking_uri, tracking
from jobcast.service.engine.forecaster import HISTORY_ARTIFACT, SELECTOR_ARTIFACT
from jobcast.service.engine.scale_calibration import fit_calibration
from layerwise.shipped import load_predictor
from models.e2e import load_models
from models.history import run_table, to_records
from models.scale_calibration import ScaleCalibrator

DEFAULT_NAME = "jobcast-forecaster"
DEFAULT_ALIAS = "champion"
EXPERIMENT = "jobcast-forecaster"
VALIDATION_TAG = "validation_mape"


class RegistryError(MlopsError, RuntimeError):
    """Registering or resolving the forecaster failed for a reason the user can act on."""

    kind: ClassVar[str] = "registry"


@dataclass
class Registration:
    name: str
    version: str
    run_id: str
    model_uri: str
    validation_mape: float | None
    alias: str
    previous_version: str | None
    previous_validation_mape: float | None
    promoted: bool
    reason: str
    calibration_pairs: int
    calibration_skipped: list[str]

    def as_dict(self) -> dict:
        """The registration as JSON (every field)."""
        return asdict(self)


def validation_mape(models) -> float | None:
    """Mean cross-validated MAPE (%) of the train-phase models; None when none is validated."""
    values = [
        m.estimator.cv_mape_
        for m in models
        if m.phase == "train" and m.estimator.cv_mape_ is not None
        and math.isfinite(m.estimator.cv_mape_)
    ]
    return float(np.mean(values)) if values else None


def should_promote(new: float | None, current: float | None, has_holder: bool) -> tuple[bool, str]:
    """The alias rule (module doc) as (move it?, why)."""
    if not has_holder:
        return True, "no version holds the alias yet"
    if new is None:
        return False, "the new version has no validated model"
    if current is None:
        return True, "the alias holder has no recorded validation error"
    if new <= current:
        return True, f"validation MAPE {new:.4g} % <= {current:.4g} % of the alias holder"
    return False, f"validation MAPE {new:.4g} % > {current:.4g} % of the alias holder"


def calibration_loo_errors(obs: pd.DataFrame, shrinkage: float = 0.0) -> np.ndarray:
    """Errors, relative to the observed time, of each run forecast by a calibrator fitted
    without it (runs with no factor left are left out)."""
    errors = []
    for i in range(len(obs)):
        rest = obs.drop(index=obs.index[i])
        row = obs.iloc[[i]]
        if rest.empty:
            break
        cal = ScaleCalibrator(shrinkage=shrinkage).fit(rest, rest["actual"])
        if cal.scale_for(row["network"].iloc[0], row["hardware"].iloc[0]) is None:
            continue
        pred = float(cal.predict(row)[0])
        actual = float(row["actual"].iloc[0])
        errors.append((actual - pred) / actual)
    return np.asarray(errors, dtype=float)


def default_predictor_dir() -> Path | None:
    """The shipped layerwise predictor's folder, if this checkout has one."""
    from layerwise.pricing import SHIPPED_DIR as path

    return path if path.is_dir() and any(path.iterdir()) else None


def _history(store) -> list[dict]:
    """The run summaries a registered forecaster ships: the fit's, else summarised now (a
    store fitted by an older jobcast), so served answers equal ``jobcast predict``'s."""
    saved = store.load_artifact(HISTORY_ARTIFACT)
    return saved if saved is not None else to_records(run_table(store))


def register_forecaster(
    store,
    *,
    name: str = DEFAULT_NAME,
    alias: str = DEFAULT_ALIAS,
    tracking_uri: str | None = None,
    predictor_dir: str | Path | None = None,
    use_default_predictor: bool = True,
    calibrate: bool = True,
    shrinkage: float = 0.0,
) -> Registration:
    """Log the forecaster built from ``store``'s fitted models, register it, apply the rule."""
    import mlflow
    models = load_models(store)
    if not models:
        raise RegistryError(
            f"no fitted models in {hide_password(store.url)}: run `jobcast fit` first"
        )
    if predictor_dir is None and use_default_predictor:
        predictor_dir = default_predictor_dir()
    if predictor_dir is not None and not Path(predictor_dir).is_dir():
        raise RegistryError(f"layer predictor folder {predictor_dir} does not exist")
    predictor = None
    if predictor_dir is not None:
        predictor = load_predictor(predictor_dir)
    skipped: list[str] = []
    calibrator, obs = ScaleCalibrator.empty(), pd.DataFrame()
    if calibrate and predictor is not None:
        calibrator, obs, skipped = fit_calibration(store, predictor, shrinkage)

    score = validation_mape(models)
    uri = resolve_tracking_uri(tracking_uri, store.url)
    fingerprint = data_fingerprint(store)
    metrics = {"models": float(len(models)), "calibration_runs": float(len(obs)),
               "calibration_pairs": float(len(calibrator.pairs_))}
    if score is not None:
        metrics[VALIDATION_TAG] = score
    if len(obs) >= 2:
        loo = calibration_loo_errors(obs, shrinkage)
        if len(loo):
            metrics["calibration_loo_mape"] = float(np.mean(np.abs(loo)) * 100)
        raw = (obs["actual"] - obs["predicted"]) / obs["actual"]
        metrics["layerwise_raw_mape"] = float(np.mean(np.abs(raw)) * 100)
    predictor_id = directory_fingerprint(predictor_dir)[:12] if predictor_dir else ""
    with tracking(uri, EXPERIMENT), mlflow.start_run(run_name="register") as run:
        mlflow.set_tags({"jobcast.command": "register", "jobcast.data_fingerprint": fingerprint})
        mlflow.log_params({
            "store": hide_password(store.url), "data_fingerprint": fingerprint,
            "registered_model": name, "alias": alias, "predictor": predictor_id or "none",
            "calibration_shrinkage": shrinkage, "calibrate": calibrate,
        })
        mlflow.log_metrics(metrics)
        if len(obs):
            mlflow.log_table(obs, "calibration_observations.json")
        if skipped:
            mlflow.log_text("\n".join(skipped) + "\n", "calibration_skipped.txt")
        info = log_forecaster(
            models, history=_history(store),
            selector=store.load_artifact(SELECTOR_ARTIFACT),
            calibration=calibrator, predictor_dir=predictor_dir,
            metadata={"data_fingerprint": fingerprint, VALIDATION_TAG: score,
                      "predictor": predictor_id},
        )
        client = mlflow.MlflowClient(uri)
        version = _new_version(client, name, info, run.info.run_id)
        client.set_model_version_tag(name, version, VALIDATION_TAG,
                                     "" if score is None else repr(score))
        client.set_model_version_tag(name, version, "data_fingerprint", fingerprint)
        previous, previous_score = _alias_holder(client, name, alias)
        promote, reason = should_promote(score, previous_score, previous is not None)
        if promote:
            client.set_registered_model_alias(name, alias, version)
        mlflow.set_tags({"jobcast.promoted": str(promote), "jobcast.alias_reason": reason})
        return Registration(
            name=name, version=version, run_id=run.info.run_id,
            model_uri=f"models:/{name}/{version}", validation_mape=score, alias=alias,
            previous_version=previous, previous_validation_mape=previous_score,
            promoted=promote, reason=reason, calibration_pairs=len(calibrator.pairs_),
            calibration_skipped=skipped,
        )


def _new_version(client, name: str, info, run_id: str) -> str:
    """Register ``info``'s logged model as a new version of ``name`` (the registered model
    made first when missing) through the client, so that MLflow's own progress lines
    ("Successfully registered model ...") never reach the user's terminal."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    made = client.create_model_version(name=name, source=info.model_uri, run_id=run_id,
                                       model_id=info.model_id)
    return str(made.version)


def _alias_holder(client, name: str, alias: str) -> tuple[str | None, float | None]:
    from mlflow.exceptions import MlflowException

    try:
        holder = client.get_model_version_by_alias(name, alias)
    except MlflowException:
        return None, None
    text = (holder.tags or {}).get(VALIDATION_TAG, "")
    try:
        value = float(text)
    except ValueError:
        value = None
    return str(holder.version), value if value is not None and math.isfinite(value) else None


def resolve_model_uri(name: str, alias: str | None, version: str | None,
                      tracking_uri: str) -> str:
    """``models:/NAME/VERSION`` or ``models:/NAME@ALIAS``, checked to exist in the registry."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient(tracking_uri, registry_uri=tracking_uri)
    try:
        if version:
            client.get_model_version(name, str(version))
        else:
            client.get_model_version_by_alias(name, alias or DEFAULT_ALIAS)
        return model_uri_of(name, alias or DEFAULT_ALIAS, version)
    except MlflowException as exc:
        what = f"version {version}" if version else f"alias {alias or DEFAULT_ALIAS!r}"
        raise RegistryError(
            f"registered model {name!r} has no {what} in {tracking_uri} "
            f"({exc.message.splitlines()[0]}); run `jobcast register` first"
        ) from None
