"""MLflow tracking of ``jobcast fit`` and ``jobcast layerwise train``.

Where runs go: the ``tracking_uri`` argument (``--tracking-uri``), else ``$MLFLOW_TRACKING_URI``,
else an embedded SQLite database ``mlflow.db`` in the folder of the jobcast store (the data
directory of :mod:`ingest.home` for a non-SQLite store), with artifacts in ``mlartifacts/``
beside it.

A fit run holds: parameters (form, counts, the store), the **training-data fingerprint** (SHA-256
over the sorted content hashes of the ingested files: the same files give the same fingerprint
whatever their names), cross-validated MAPE metrics (mean / median / max over models and one per
model), the fitted models as JSON, the held-out predictions as CSV and a predicted-vs-actual plot.
MLflow is imported inside the functions only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleet.credentials import hide_password
from ingest.home import default_tracking_uri, ensure_home, tracking_folder
from layerwise.predictor import layer_types, training_rows
from models.dataset import progress_points
from models.evaluation import held_out_predictions

FIT_EXPERIMENT = "jobcast-fit"
LAYERWISE_EXPERIMENT = "jobcast-layerwise"
ARTIFACTS_DIR = "mlartifacts"
_URI_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_RUN_ID",
                  "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT")


def store_folder(store_url: str | None) -> Path:
    """The folder of a SQLite store file; the data directory (:mod:`ingest.home`) for any
    other store."""
    return tracking_folder(store_url)


def resolve_tracking_uri(tracking_uri: str | None = None, store_url: str | None = None) -> str:
    """The argument, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///<store folder>/mlflow.db``."""
    if tracking_uri:
        return tracking_uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return default_tracking_uri(store_url)


def _artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """Local artifacts beside a SQLite tracking database; the server decides otherwise."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(tracking_uri).database
    if not database or database == ":memory:":
        return None
    return (Path(database).resolve().parent / ARTIFACTS_DIR / experiment).as_uri()


@contextmanager
def tracking(tracking_uri: str, experiment: str) -> Iterator[str]:
    """Point MLflow at ``tracking_uri`` (registry too) and ``experiment`` for a block.

    Yields the experiment id; the previous tracking and registry URIs are restored after.
    Inside ``mlflow run`` (``$MLFLOW_RUN_ID`` names a run of this tracking server) the block
    logs into that run and its experiment instead.
    """
    import mlflow
    from mlflow.tracking._model_registry import utils as registry_utils
    from mlflow.tracking._tracking_service import utils as tracking_utils

    # What was set explicitly (None: MLflow's default), not the resolved URIs, so that the
    # registry follows the tracking URI again afterwards; set_tracking_uri also exports
    # MLFLOW_TRACKING_URI, so the environment is put back as it was too.
    previous = (getattr(tracking_utils, "_tracking_uri", None),
                getattr(registry_utils, "_registry_uri", None))
    previous_env = {k: os.environ.get(k) for k in _URI_VARIABLES}
    try:
        # a tracking server makes MLflow print run URLs on stdout, where `--json` goes
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        ensure_home(tracking_uri)  # the default mlflow.db lives in the data directory
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_registry_uri(tracking_uri)
        client = mlflow.MlflowClient(tracking_uri)
        project_run = _project_run(client)
        found = client.get_experiment_by_name(experiment)
        if project_run is not None:  # inside `mlflow run`: log into the project's run
            experiment_id = project_run.info.experiment_id
        elif found is None:
            experiment_id = client.create_experiment(
                experiment, artifact_location=_artifact_location(tracking_uri, experiment)
            )
        else:
            experiment_id = found.experiment_id
        mlflow.set_experiment(experiment_id=experiment_id)
        yield experiment_id
    finally:
        # None puts MLflow's default back (it unsets the variable); its hints say str only
        mlflow.set_tracking_uri(previous[0])  # type: ignore[arg-type]
        mlflow.set_registry_uri(previous[1])  # type: ignore[arg-type]
        for key, value in previous_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _project_run(client):
    """The run ``mlflow run`` started for this process, if it lives on ``client``'s server.

    A ``$MLFLOW_RUN_ID`` that this server does not know is dropped for the block (restored
    after), so MLflow does not try to resume it.
    """
    from mlflow.exceptions import MlflowException

    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        return None
    try:
        return client.get_run(run_id)
    except MlflowException:
        os.environ.pop("MLFLOW_RUN_ID", None)
        return None


def data_fingerprint(store) -> str:
    """SHA-256 over the sorted content hashes of the files behind the store's runs."""
    hashes = sorted({run.content_hash for run in store.runs()})
    return fingerprint_hashes(hashes)


def fingerprint_hashes(hashes: Iterable[str]) -> str:
    """One SHA-256 over a set of hashes (order does not matter)."""
    digest = hashlib.sha256()
    for h in sorted(hashes):
        digest.update(h.encode("ascii") + b"\n")
    return digest.hexdigest()


def fingerprint_files(paths: Iterable[str | os.PathLike[str]]) -> str:
    """SHA-256 over the sorted SHA-256 of each file's content (names do not matter)."""
    hashes = []
    for path in paths:
        h = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
        hashes.append(h.hexdigest())
    return fingerprint_hashes(hashes)


# -- the plot -------------------------------------------------------------------------------


def predicted_vs_actual_figure(actual, predicted, labels=None, *, title: str, unit: str = "s"):
    """A log-log scatter of predicted against actual with the y = x line (matplotlib Figure)."""
    from matplotlib.figure import Figure

    actual = np.asarray(actual, dtype=float)
    predicted = np.asarray(predicted, dtype=float)
    fig = Figure(figsize=(6.4, 5.2), dpi=100)
    ax = fig.add_subplot()
    groups = pd.Series(labels if labels is not None else ["runs"] * len(actual))
    for label in dict.fromkeys(groups):
        mask = (groups == label).to_numpy()
        ax.scatter(actual[mask], predicted[mask], s=22, alpha=0.8, label=str(label))
    positive = np.concatenate([actual[actual > 0], predicted[predicted > 0]])
    if len(positive):
        lo, hi = positive.min() / 1.5, positive.max() * 1.5
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--", label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel(f"actual ({unit})")
    ax.set_ylabel(f"predicted ({unit})")
    ax.set_title(title, fontsize=10)
    if len(dict.fromkeys(groups)) <= 12:
        ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    return fig


def _metric_key(text: str) -> str:
    """MLflow metric names allow letters, digits, ``_ - . / :`` and spaces."""
    return re.sub(r"[^A-Za-z0-9_\-./: ]", "_", text)[:240]


def _summary(values: list[float], prefix: str) -> dict[str, float]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {}
    return {
        f"{prefix}_mean": float(np.mean(vals)),
        f"{prefix}_median": float(np.median(vals)),
        f"{prefix}_max": float(np.max(vals)),
    }


def fit_metrics(models: Sequence) -> dict[str, float]:
    """Cross-validated MAPE (%) summaries, overall and per phase, and one metric per model."""
    metrics: dict[str, float] = {"models": float(len(models))}
    cv = [m.estimator.cv_mape_ for m in models]
    metrics.update(_summary(cv, "cv_mape"))
    for phase in ("train", "test"):
        metrics.update(_summary([m.estimator.cv_mape_ for m in models if m.phase == phase],
                                f"cv_mape_{phase}"))
    metrics["models_validated"] = float(sum(v is not None and math.isfinite(v) for v in cv))
    for m in models:
        if m.estimator.cv_mape_ is not None and math.isfinite(m.estimator.cv_mape_):
            metrics[_metric_key(f"cv_mape/{m.model_id}")] = float(m.estimator.cv_mape_)
    return metrics


# -- the runs ---------------------------------------------------------------------------------


def log_fit_run(store, models: Sequence, tracking_uri: str | None = None, *,
                form: str = "auto", experiment: str = FIT_EXPERIMENT) -> str:
    """Log one ``jobcast fit`` as an MLflow run; returns the run id.

    ``models``: the ``FittedModel`` list ``fit_store`` returned for ``store``.
    """
    import mlflow
    from mlflow.data.pandas_dataset import from_pandas  # what mlflow.data.from_pandas is

    uri = resolve_tracking_uri(tracking_uri, store.url)
    points = progress_points(store)
    fingerprint = data_fingerprint(store)
    # The artifact keeps its documented columns (no interval, no source path).
    held_out = held_out_predictions(models, points).drop(columns=["source", "low", "high"])
    stored_runs = store.runs()
    params = {
        "form": form,
        "store": hide_password(store.url),
        "data_fingerprint": fingerprint,
        "files": len({r.content_hash for r in stored_runs}),
        "runs": len(stored_runs),
        "models": len(models),
        "networks": ",".join(sorted({m.network for m in models}))[:500],
        "deployments": len({m.deployment for m in models}),
    }
    with tracking(uri, experiment), mlflow.start_run(run_name="fit") as run:
        mlflow.set_tags({"jobcast.command": "fit", "jobcast.data_fingerprint": fingerprint})
        mlflow.log_params(params)
        mlflow.log_metrics(fit_metrics(models))
        if len(points):
            dataset = from_pandas(points, name="progress_points",
                                  digest=fingerprint[:36])
            mlflow.log_input(dataset, context="training")
        mlflow.log_dict({"models": [m.to_record() for m in models]}, "models.json")
        with tempfile.TemporaryDirectory() as tmp:
            csv_path = Path(tmp) / "held_out_predictions.csv"
            held_out.to_csv(csv_path, index=False)
            mlflow.log_artifact(str(csv_path))
        if len(held_out):
            fig = predicted_vs_actual_figure(
                held_out["actual"], held_out["predicted"],
                [f"{p}: {mid.split('/')[2]}" for p, mid in zip(held_out["phase"],
                                                                held_out["model_id"],
                                                                strict=True)],
                title="jobcast fit: held-out phase totals (cross-validated)",
            )
            mlflow.log_figure(fig, "predicted_vs_actual.png")
        return run.info.run_id


def log_layerwise_run(
    *,
    params: dict[str, Any],
    metrics: dict[str, float],
    actual_ms: Sequence[float] | None = None,
    predicted_ms: Sequence[float] | None = None,
    labels: Sequence[str] | None = None,
    data_paths: Sequence[str | os.PathLike[str]] = (),
    predictor_dir: str | os.PathLike[str] | None = None,
    tracking_uri: str | None = None,
    store_url: str | None = None,
    experiment: str = LAYERWISE_EXPERIMENT,
    title: str = "jobcast layerwise train: held-out layer times",
) -> str:
    """Log one ``jobcast layerwise train`` as an MLflow run; returns the run id.

    ``actual_ms`` / ``predicted_ms`` (/ ``labels``, e.g. layer type): rows to plot (say which
    in ``title``); they are also saved as ``predictions.csv``.
    ``data_paths``: the benchmark CSVs trained on (fingerprinted by content);
    ``predictor_dir``: the saved predictor, logged under ``predictor/``.
    """
    import mlflow

    uri = resolve_tracking_uri(tracking_uri, store_url)
    existing = [Path(p) for p in data_paths if Path(p).is_file()]
    fingerprint = fingerprint_files(existing) if existing else ""
    with tracking(uri, experiment), mlflow.start_run(run_name="layerwise-train") as run:
        mlflow.set_tags({"jobcast.command": "layerwise train",
                         "jobcast.data_fingerprint": fingerprint})
        mlflow.log_params({**{k: _param(v) for k, v in params.items()},
                           "data_fingerprint": fingerprint,
                           "data_files": ",".join(p.name for p in existing)[:500]})
        mlflow.log_metrics({_metric_key(k): float(v) for k, v in metrics.items()
                            if v is not None and math.isfinite(float(v))})
        if actual_ms is not None and predicted_ms is not None:
            frame = pd.DataFrame({"actual_ms": list(actual_ms),
                                  "predicted_ms": list(predicted_ms)})
            if labels is not None:
                frame["label"] = list(labels)
            with tempfile.TemporaryDirectory() as tmp:
                csv_path = Path(tmp) / "predictions.csv"
                frame.to_csv(csv_path, index=False)
                mlflow.log_artifact(str(csv_path))
            fig = predicted_vs_actual_figure(
                frame["actual_ms"], frame["predicted_ms"], labels,
                title=title, unit="ms",
            )
            mlflow.log_figure(fig, "predicted_vs_actual.png")
        if predictor_dir is not None and Path(predictor_dir).is_dir():
            mlflow.log_artifacts(str(predictor_dir), artifact_path="predictor")
        return run.info.run_id


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]


def log_layerwise_training(predictor, rows: pd.DataFrame, *, out_dir: str | os.PathLike[str],
                           data_paths: Sequence[str | os.PathLike[str]], params: dict[str, Any],
                           tracking_uri: str | None = None, plot_rows: int = 4000,
                           seed: int = 0) -> str:
    """``log_layerwise_run`` for a fitted ``LayerPredictor`` and the rows it was trained on.

    Metrics: the validation MAPE and RMSE of the model chosen for each layer type (from
    ``predictor.validation_table()``). The plot and CSV show up to ``plot_rows`` training rows
    predicted by the final (refitted) predictor, so they are in-sample: a visual check of fit
    and spread, not the validation error.
    """
    table = predictor.validation_table()
    chosen = table[table["chosen"]]
    metrics = {}
    for rec in chosen.to_dict(orient="records"):
        metrics[f"val_mape_{rec['layer']}"] = float(rec["mape"])
        metrics[f"val_rmse_ms_{rec['layer']}"] = float(rec["rmse_ms"])
    if len(chosen):
        metrics["val_mape_mean"] = float(chosen["mape"].mean())
    usable = training_rows(rows)
    sample = usable.sample(n=min(plot_rows, len(usable)), random_state=seed) if len(usable) \
        else usable
    predicted = predictor.predict(sample)["predicted_ms"] if len(sample) else pd.Series([])
    return log_layerwise_run(
        params={**params, "rows": len(rows), "layers": sorted(predictor.known_layers)},
        metrics=metrics, actual_ms=sample["time_ms_median"].to_numpy(float),
        predicted_ms=predicted.to_numpy(float), labels=list(layer_types(sample)),
        data_paths=data_paths, predictor_dir=out_dir, tracking_uri=tracking_uri,
        title="jobcast layerwise train: training rows, final predictor (in-sample)",
    )

