"""``jobcast layerwise``: train layer predictors and predict layer times from CSV files.

Heavy imports (pandas, the predictor, TensorFlow for MLP candidates) happen inside the
commands; ``predict`` never imports TensorFlow (saved models are numpy arrays).

Rules: ``train --threads N`` caps the OpenMP and BLAS pools (threadpoolctl) and TensorFlow's
pools for the whole fit, so a shared machine is not oversubscribed. Its default is the CPUs
this process may run on (at least 1), or ``$OMP_NUM_THREADS`` where that is set and smaller.
``--json`` records ``threads`` and the size every pool had at the end of the fit
(``thread_pools``). Names, paths and messages print as written (no markup).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from jobcast.cli.options import AS_JSON, json_option
from jobcast.cli.output import console, emit_json, fail, note

MODEL_NAMES = ("gbt", "mlp", "resmlp", "linear")
PREDICTOR = typer.Option(
    None, "--model", help="Saved predictor folder (default: the shipped one).")

layerwise_app = typer.Typer(
    help="Layer-time predictors: train on benchmark CSVs, predict per-layer times.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add the ``layerwise`` sub-command group to ``app``."""
    app.add_typer(layerwise_app, name="layerwise")


def read_rows(path: Path):
    """Rows of one benchmark CSV (optionally .gz) with a ``layer`` column filled in."""
    from layerwise.predictor import layer_types

    frame = read_table_file(path)
    frame["layer"] = layer_types(frame)
    return frame


def read_table_file(path: Path):
    """One CSV (optionally .gz) as it is; a clear ValueError for a missing or unreadable file."""
    import pandas as pd

    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    try:
        frame = pd.read_csv(path)
    except pd.errors.ParserError as exc:
        raise ValueError(f"{path}: not a readable CSV ({exc})") from None
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from None
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: empty file") from None
    if frame.empty:
        raise ValueError(f"{path}: no data rows")
    return frame


def _parse_models(models: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in models.split(",") if m.strip())
    bad = [m for m in names if m not in MODEL_NAMES]
    if bad or not names:
        raise ValueError(
            f"--models: unknown model(s) {', '.join(bad) or '(none)'}; "
            f"choose from {', '.join(MODEL_NAMES)}"
        )
    return names


def available_cpus() -> int:
    """CPUs this process may run on (:func:`layerwise.hardware.usable_cpus`), at least 1."""
    from layerwise.hardware import usable_cpus

    return max(1, usable_cpus() or 1)


def default_threads() -> int:
    """:func:`available_cpus`, or ``$OMP_NUM_THREADS`` where that is a smaller whole number."""
    cpus = available_cpus()
    asked = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(cpus, int(asked)) if asked.isdigit() and int(asked) >= 1 else cpus


@contextmanager
def limited_threads(threads: int, tensorflow: bool = False) -> Iterator[dict[str, int]]:
    """Cap OpenMP/BLAS pools at ``threads`` (and TensorFlow's, with ``tensorflow``) inside the
    block. Yields a dict the caller fills with :func:`pool_sizes` before leaving."""
    import sklearn.ensemble  # noqa: F401  (loads its OpenMP runtime before the limit is set)
    from threadpoolctl import threadpool_limits

    if tensorflow and importlib.util.find_spec("tensorflow") is not None:
        from fleet.quiet_tf import quiet_import

        tf = quiet_import("tensorflow")
        try:  # only possible before TensorFlow has run an op in this process
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass
    with threadpool_limits(limits=threads):
        yield {}


def pool_sizes() -> dict[str, int]:
    """Threads of every loaded OpenMP/BLAS pool (the largest per API) and of TensorFlow's."""
    from threadpoolctl import threadpool_info

    sizes: dict[str, int] = {}
    for pool in threadpool_info():
        api = str(pool.get("internal_api") or pool.get("user_api"))
        sizes[api] = max(sizes.get(api, 0), int(pool["num_threads"]))
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        sizes["tensorflow-intra-op"] = int(tf.config.threading.get_intra_op_parallelism_threads())
    return sizes


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
    import logging

    import pandas as pd

    from layerwise.features import FeatureError
    from layerwise.predictor import LayerPredictor

    try:
        names = _parse_models(models)
        frames = [read_rows(p) for p in data]
    except ValueError as exc:
        fail(str(exc))
    rows = pd.concat(frames, ignore_index=True)
    params = {
        "gbt": {"max_iter": gbt_iter},
        "mlp": {"epochs": mlp_epochs, "max_rows": mlp_max_rows},
        "resmlp": {"epochs": mlp_epochs, "max_rows": mlp_max_rows},
    }
    if not as_json:
        logger = logging.getLogger("layerwise.predictor")
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    threads = threads or default_threads()
    if not as_json:
        note("", f"training on {len(rows)} rows from {len(data)} file(s): {', '.join(names)}; "
                 f"{threads} thread(s)", err=True)
    predictor = LayerPredictor(candidates=names, params=params, val_fraction=val_fraction,
                               random_state=seed)
    try:
        with limited_threads(threads, tensorflow=bool({"mlp", "resmlp"} & set(names))) as pools:
            predictor.fit(rows)
            pools.update(pool_sizes())
    except (ValueError, FeatureError) as exc:
        fail(str(exc))
    except ImportError as exc:
        fail(f"{exc}: MLP candidates need TensorFlow (pip install 'jobcast[tf]') "
             "or use --models gbt,linear")
    predictor.save(out)
    table = predictor.validation_table()
    if as_json:
        emit_json({"out": str(out), "validation": table.to_dict("records"), "threads": threads,
                   "thread_pools": pools})
        return
    from rich.table import Table
    from rich.text import Text

    view = Table(title=Text(f"validation ({val_fraction:.0%} per GPU) — saved to {out}"))
    for col in ("layer", "model", "chosen", "MAPE %", "RMSE ms", "rows", "fit s"):
        view.add_column(col)
    for rec in table.to_dict("records"):
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
    from layerwise.features import FeatureError
    from layerwise.shipped import default_predictor, load_predictor
    from layerwise.sources import SourceFormatError, kind_rows, unsupported

    try:
        table = read_table_file(data)
        rows, _ = kind_rows(table)
        bad = unsupported(rows)
        predictor = load_predictor(model) if model is not None else default_predictor()
        ok = rows.drop(index=bad)
        if not hasattr(predictor, "families_"):  # a per-layer-type predictor: bench layout
            from layerwise.predictor import layer_types

            ok = ok.assign(layer=layer_types(table.drop(index=bad)))
        pred = predictor.predict(ok)
    except (ValueError, FeatureError, FileNotFoundError, SourceFormatError) as exc:
        fail(str(exc))
    keep = [c for c in ("predicted_ms", "low_ms", "high_ms") if c in pred.columns]
    result = table.drop(columns=[c for c in keep if c in table.columns]).join(pred[keep])
    if len(bad):
        result.loc[bad, "error"] = "no layer kind expresses this row"
    out.parent.mkdir(parents=True, exist_ok=True)
    result.to_csv(out, index=False)
    summary = {
        "rows": int(len(result)),
        "predicted": int(len(pred)),
        "unsupported": int(len(bad)),
        "out": str(out),
        "layers": {k: int(v) for k, v in ok["layer"].value_counts().items()},
        "total_predicted_ms": float(pred["predicted_ms"].sum()),
    }
    if as_json:
        emit_json(summary)
    else:
        note("", f"wrote {summary['rows']} rows with predicted_ms, low_ms, high_ms to {out}"
             + (f" ({len(bad)} rows no kind expresses: error column)" if len(bad) else ""))


@layerwise_app.command("info")
def info(
    model: Path | None = PREDICTOR,
    as_json: bool = AS_JSON,
) -> None:
    """Show the model chosen per layer type and its validation error."""
    from layerwise.shipped import default_predictor, load_predictor

    try:
        predictor = load_predictor(model) if model is not None else default_predictor()
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    if hasattr(predictor, "families_"):  # roofline efficiency (v2)
        comp = getattr(predictor, "composition_", None)
        payload = {
            "kind": "efficiency",
            "families": {name: {"n_train": f["n_train"], "features": f["features"]}
                         for name, f in predictor.families_.items()},
            "kinds_with_own_data": predictor.kinds_,
            "chips": predictor.chips_,
            "composition": comp.to_dict() if comp is not None else None,
            "info": predictor.info_,
        }
        if as_json:
            emit_json(payload)
            return
        for name, f in payload["families"].items():
            note("", f"{name}: {f['n_train']} training rows, {len(f['features'])} features")
        note("", f"kinds with own timings: {', '.join(predictor.kinds_)}; "
                 f"GPU chips: {', '.join(predictor.chips_)}")
        return
    payload = {
        "layers": {k: {"model": lm.model, "gpus": lm.gpus, "n_train": lm.n_train,
                       "validation": lm.validation.get(lm.model, {})}
                   for k, lm in sorted(predictor.layers_.items())},
        "info": predictor.info_,
    }
    if as_json:
        emit_json(payload)
        return
    for layer, entry in payload["layers"].items():
        val = entry["validation"]
        note(
            "", f"{layer}: {entry['model']} trained on {entry['n_train']} rows "
            f"({', '.join(entry['gpus'])}); validation MAPE {val.get('mape', float('nan')):.2f} %,"
            f" RMSE {val.get('rmse_ms', float('nan')):.4g} ms")
