"""``jobcast layerwise``: train layer predictors and predict layer times from CSV files.

The work is :mod:`jobcast.service.features.layer_models` (imported inside the commands, with
pandas, the
predictor and TensorFlow for MLP candidates); ``predict`` never imports TensorFlow (saved
models are numpy arrays).

Rules: ``train --threads N`` caps the OpenMP and BLAS pools (threadpoolctl) and TensorFlow's
pools for the whole fit, so a shared machine is not oversubscribed. Its default is the CPUs
this process may run on (at least 1), or ``$OMP_NUM_THREADS`` where that is set and smaller.
``--json`` records ``threads`` and the size every pool had at the end of the fit
(``thread_pools``). Names, paths and messages print as written (no markup).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fleet.errors import JobcastError
from jobcast.cli.options import AS_JSON, json_option
from jobcast.cli.output import console, emit_json, fail, note
from jobcast.service.features.layer_models import (  # light: the door imports its libraries lazily
    MODEL_NAMES,
    available_cpus,
    default_threads,
    limited_threads,
    pool_sizes,
    read_rows,
    read_table_file,
)

if TYPE_CHECKING:
    from jobcast.service.features.layer_models import LayerModelInfo

# The helpers that moved to jobcast.service.features.layer_models stay importable from here.
__all__ = ["MODEL_NAMES", "available_cpus", "default_threads", "info", "layerwise_app",
           "limited_threads", "pool_sizes", "predict", "read_rows", "read_table_file",
           "register", "train"]

PREDICTOR = typer.Option(
    None, "--model", help="Saved predictor folder (default: the shipped one).")

layerwise_app = typer.Typer(
    help="Layer-time predictors: train on benchmark CSVs, predict per-layer times.",
    no_args_is_help=True,
)

def register(app: typer.Typer) -> None:
    """Add the ``layerwise`` sub-command group to ``app``."""
    app.add_typer(layerwise_app, name="layerwise")


def _show_training_log() -> None:
    """The predictor's progress lines (``layerwise.predictor`` logger) on stderr, plain."""
    import logging

    logger = logging.getLogger("layerwise.predictor")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


@layerwise_app.command("train")
def train(
    data: list[Path] = typer.Option(..., "--data", help="Benchmark CSV(s) (repeat the option)."),
    out: Path = typer.Option(..., "--out", help="Folder to write the predictor to."),
    models: str = typer.Option(
        "gbt,linear,mlp,resmlp", "--models",
        help="Candidates, chosen per layer type by validation MAPE."),
    val_fraction: float = typer.Option(
        0.1, "--val-fraction", min=0.01, max=0.5, help="Validation share of each GPU's rows."),
    seed: int = typer.Option(0, "--seed", help="Random seed (split, models)."),
    gbt_iter: int = typer.Option(1000, "--gbt-iter", min=1, help="Boosting iterations."),
    mlp_epochs: int = typer.Option(30, "--mlp-epochs", min=1, help="MLP training epochs."),
    mlp_max_rows: int = typer.Option(
        40000, "--mlp-max-rows", min=100, help="MLPs train on a random subsample of this size."),
    threads: int | None = typer.Option(
        None, "--threads", min=1,
        help="Threads for OpenMP, BLAS and TensorFlow (default: the CPUs this process may use, "
             "or $OMP_NUM_THREADS if smaller)."),
    as_json: bool = json_option("Print the validation table as JSON."),
) -> None:
    """Train a layer predictor (one model per layer type) and save it to --out."""
    from jobcast.service.features.layer_models import train_layer_model, training_data

    try:
        training = training_data(data, models)
    except JobcastError as exc:
        fail(exc)
    threads = threads or default_threads()
    if not as_json:
        _show_training_log()
        note("", f"training on {len(training.rows)} rows from {len(data)} file(s): "
                 f"{', '.join(training.models)}; {threads} thread(s)", err=True)
    try:
        summary = train_layer_model(training, out, val_fraction=val_fraction, seed=seed,
                                    gbt_iter=gbt_iter, mlp_epochs=mlp_epochs,
                                    mlp_max_rows=mlp_max_rows, threads=threads)
    except JobcastError as exc:
        fail(exc)
    if as_json:
        emit_json(summary.as_dict())
        return
    from rich.table import Table
    from rich.text import Text

    view = Table(title=Text(f"validation ({val_fraction:.0%} per GPU) — saved to {out}"))
    for col in ("layer", "model", "chosen", "MAPE %", "RMSE ms", "rows", "fit s"):
        view.add_column(col)
    for rec in summary.validation.to_dict("records"):
        view.add_row(Text(str(rec["layer"])), Text(str(rec["model"])),
                     "yes" if rec["chosen"] else "",
                     f"{rec['mape']:.2f}", f"{rec['rmse_ms']:.4g}", str(rec["n"]),
                     f"{rec['fit_s']:.1f}")
    console.print(view)


@layerwise_app.command("predict")
def predict(
    data: Path = typer.Option(..., "--data", help="CSV of layer rows: Justus, NeuSight or bench "
                              "layout (detected from the columns)."),
    out: Path = typer.Option(..., "--out", help="CSV to write: the rows plus predictions."),
    model: Path | None = PREDICTOR,
    as_json: bool = json_option("Print a JSON summary."),
) -> None:
    """Add predicted_ms, low_ms, high_ms (90 % interval) to every row of --data; write --out."""
    from jobcast.service.features.layer_models import predict_layers

    try:
        summary = predict_layers(data, out, model)
    except JobcastError as exc:
        fail(exc)
    if as_json:
        emit_json(summary.as_dict())
    else:
        bad = summary.unsupported
        note("", f"wrote {summary.rows} rows with predicted_ms, low_ms, high_ms to {out}"
             + (f" ({bad} rows no kind expresses: error column)" if bad else ""))


@layerwise_app.command("info")
def info(
    model: Path | None = PREDICTOR,
    as_json: bool = AS_JSON,
) -> None:
    """Show the model chosen per layer type and its validation error."""
    from jobcast.service.features.layer_models import layer_model_info

    try:
        described = layer_model_info(model)
    except JobcastError as exc:
        fail(exc)
    if as_json:
        emit_json(described.payload)
    else:
        _show_info(described)


def _show_info(described: LayerModelInfo) -> None:
    """The text form of ``layerwise info``: one line per family or layer type."""
    payload = described.payload
    if described.kind == "efficiency":
        for name, f in payload["families"].items():
            note("", f"{name}: {f['n_train']} training rows, {len(f['features'])} features")
        note("", f"kinds with own timings: {', '.join(payload['kinds_with_own_data'])}; "
                 f"GPU chips: {', '.join(payload['chips'])}")
        return
    for layer, entry in payload["layers"].items():
        val = entry["validation"]
        note(
            "", f"{layer}: {entry['model']} trained on {entry['n_train']} rows "
            f"({', '.join(entry['gpus'])}); validation MAPE {val.get('mape', float('nan')):.2f} %,"
            f" RMSE {val.get('rmse_ms', float('nan')):.4g} ms")
