"""The service door to layer-time predictors: train one on benchmark CSVs, predict per-layer
times for a CSV of layer rows, describe a saved one (what ``jobcast layerwise`` does).

Rules: a training run fits one model per layer type, chosen among ``models`` by validation
MAPE, with every OpenMP/BLAS pool (and TensorFlow's, when an MLP candidate is asked for)
capped at ``threads`` for the whole fit; ``threads`` defaults to the CPUs this process may
run on (at least 1), or ``$OMP_NUM_THREADS`` where that is set and smaller. ``predict`` never
imports TensorFlow (saved models are numpy arrays) and marks the rows no layer kind expresses
in an ``error`` column instead of failing. Every bad input is one
:class:`~fleet.errors.JobcastError` naming the file and the reason: the library's own (its
kind kept), else a :class:`LayerModelError`. Heavy modules are imported by the functions.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fleet.errors import JobcastError
from jobcast.service.errors import ServiceError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MODEL_NAMES", "LayerModelError", "LayerModelInfo", "PredictSummary",
           "TrainSummary", "TrainingData", "available_cpus", "default_threads",
           "layer_model_info", "limited_threads", "parse_models", "pool_sizes",
           "predict_layers", "read_rows", "read_table_file", "train_layer_model",
           "training_data"]

MODEL_NAMES = ("gbt", "mlp", "resmlp", "linear")
DEFAULT_MODELS = "gbt,linear,mlp,resmlp"
UNSUPPORTED = "no layer kind expresses this row"


class LayerModelError(ServiceError, ValueError):
    """A layer CSV, predictor folder or option that cannot be used (the message says which)."""

    kind: ClassVar[str] = "layer_model"


def read_table_file(path: Path) -> pd.DataFrame:
    """One CSV (optionally .gz) as it is; a clear ValueError for a missing or unreadable file."""
    import pandas as pd

    if not path.is_file():
        raise LayerModelError(f"{path}: no such file")
    try:
        frame = pd.read_csv(path)
    except pd.errors.ParserError as exc:
        raise LayerModelError(f"{path}: not a readable CSV ({exc})") from None
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise LayerModelError(f"{path}: cannot read ({exc})") from None
    except pd.errors.EmptyDataError:
        raise LayerModelError(f"{path}: empty file") from None
    if frame.empty:
        raise LayerModelError(f"{path}: no data rows")
    return frame


def read_rows(path: Path) -> pd.DataFrame:
    """Rows of one benchmark CSV (optionally .gz) with a ``layer`` column filled in."""
    from layerwise.predictor import layer_types

    frame = read_table_file(path)
    try:
        frame["layer"] = layer_types(frame)
    except JobcastError:
        raise  # the library's own error and kind
    except ValueError as exc:
        raise LayerModelError(str(exc)) from exc
    return frame


def parse_models(models: str) -> tuple[str, ...]:
    """``gbt,linear`` -> candidate names; unknown or no names are a :class:`LayerModelError`."""
    names = tuple(m.strip() for m in models.split(",") if m.strip())
    bad = [m for m in names if m not in MODEL_NAMES]
    if bad or not names:
        raise LayerModelError(
            f"--models: unknown model(s) {', '.join(bad) or '(none)'}; "
            f"choose from {', '.join(MODEL_NAMES)}"
        )
    return names


def available_cpus() -> int:
    """CPUs this process may run on (:func:`layerwise.local_device.usable_cpus`), at least 1."""
    from layerwise.local_device import usable_cpus

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


@dataclass
class TrainingData:
    """The rows a layer predictor is trained on, read and checked before any fit."""

    rows: pd.DataFrame
    files: int
    models: tuple[str, ...]


def training_data(data: Sequence[Path], models: str = DEFAULT_MODELS) -> TrainingData:
    """Read every benchmark CSV of ``data`` and check ``models`` (:class:`LayerModelError`)."""
    import pandas as pd

    names = parse_models(models)
    frames = [read_rows(Path(p)) for p in data]
    return TrainingData(rows=pd.concat(frames, ignore_index=True), files=len(frames),
                        models=names)


@dataclass
class TrainSummary:
    """A trained, saved predictor: its validation table and the thread pools of the fit."""

    out: Path
    validation: pd.DataFrame
    threads: int
    thread_pools: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """``jobcast layerwise train --json``: out, validation records, threads, pools."""
        return {"out": str(self.out), "validation": self.validation.to_dict("records"),
                "threads": self.threads, "thread_pools": self.thread_pools}


def train_layer_model(data: TrainingData | Sequence[Path], out: Path, *,
                      val_fraction: float = 0.1, seed: int = 0, gbt_iter: int = 1000,
                      mlp_epochs: int = 30, mlp_max_rows: int = 40000,
                      threads: int | None = None) -> TrainSummary:
    """Fit a layer predictor (one model per layer type) on ``data`` and save it to ``out``
    (module rules for ``threads``)."""
    from layerwise.features import FeatureError
    from layerwise.predictor import LayerPredictor

    training = data if isinstance(data, TrainingData) else training_data(data)
    params = {
        "gbt": {"max_iter": gbt_iter},
        "mlp": {"epochs": mlp_epochs, "max_rows": mlp_max_rows},
        "resmlp": {"epochs": mlp_epochs, "max_rows": mlp_max_rows},
    }
    threads = threads or default_threads()
    predictor = LayerPredictor(candidates=training.models, params=params,
                               val_fraction=val_fraction, random_state=seed)
    uses_tf = bool({"mlp", "resmlp"} & set(training.models))
    try:
        with limited_threads(threads, tensorflow=uses_tf) as pools:
            predictor.fit(training.rows)
            pools.update(pool_sizes())
    except ImportError as exc:
        raise LayerModelError(f"{exc}: MLP candidates need TensorFlow (pip install "
                              "'jobcast[tf]') or use --models gbt,linear") from exc
    except JobcastError:
        raise  # the library's own error and kind
    except (ValueError, FeatureError) as exc:
        raise LayerModelError(str(exc)) from exc
    predictor.save(out)
    return TrainSummary(out=out, validation=predictor.validation_table(), threads=threads,
                        thread_pools=pools)


def _load(model: Path | None) -> Any:
    from layerwise.shipped import default_predictor, load_predictor

    return load_predictor(model) if model is not None else default_predictor()


@dataclass
class PredictSummary:
    """What :func:`predict_layers` wrote: counts, layers and the total predicted time."""

    rows: int
    predicted: int
    unsupported: int
    out: Path
    layers: dict[str, int]
    total_predicted_ms: float

    def as_dict(self) -> dict[str, Any]:
        """``jobcast layerwise predict --json`` (``out`` as text)."""
        return {"rows": self.rows, "predicted": self.predicted, "unsupported": self.unsupported,
                "out": str(self.out), "layers": self.layers,
                "total_predicted_ms": self.total_predicted_ms}


def predict_layers(data: Path, out: Path, model: Path | None = None) -> PredictSummary:
    """Add predicted_ms, low_ms, high_ms (90 % interval) to every row of ``data`` (Justus,
    NeuSight or bench layout, detected from the columns) and write ``out``; rows no layer kind
    expresses get an ``error`` instead. ``model``: a saved predictor (default: the shipped)."""
    from layerwise.features import FeatureError
    from layerwise.sources import SourceFormatError, kind_rows, unsupported

    try:
        table = read_table_file(data)
        rows, _ = kind_rows(table)
        bad = unsupported(rows)
        predictor = _load(model)
        ok = rows.drop(index=bad)
        if not hasattr(predictor, "families_"):  # a per-layer-type predictor: bench layout
            from layerwise.predictor import layer_types

            ok = ok.assign(layer=layer_types(table.drop(index=bad)))
        pred = predictor.predict(ok)
    except JobcastError:
        raise  # the library's own error and kind
    except (ValueError, FeatureError, FileNotFoundError, SourceFormatError) as exc:
        raise LayerModelError(str(exc)) from exc
    keep = [c for c in ("predicted_ms", "low_ms", "high_ms") if c in pred.columns]
    result = table.drop(columns=[c for c in keep if c in table.columns]).join(pred[keep])
    if len(bad):
        result.loc[bad, "error"] = UNSUPPORTED
    out.parent.mkdir(parents=True, exist_ok=True)
    result.to_csv(out, index=False)
    return PredictSummary(
        rows=int(len(result)), predicted=int(len(pred)), unsupported=int(len(bad)), out=out,
        layers={k: int(v) for k, v in ok["layer"].value_counts().items()},
        total_predicted_ms=float(pred["predicted_ms"].sum()))


@dataclass
class LayerModelInfo:
    """A saved predictor described: ``efficiency`` (roofline families) or ``per-layer`` (one
    model per layer type); ``payload`` is the JSON ``jobcast layerwise info`` prints."""

    kind: str
    payload: dict[str, Any]


def layer_model_info(model: Path | None = None) -> LayerModelInfo:
    """Describe the predictor saved in ``model`` (default: the shipped one)."""
    try:
        predictor = _load(model)
    except JobcastError:
        raise  # the library's own error and kind
    except (ValueError, FileNotFoundError) as exc:
        raise LayerModelError(str(exc)) from exc
    if hasattr(predictor, "families_"):  # roofline efficiency (v2)
        comp = getattr(predictor, "composition_", None)
        return LayerModelInfo("efficiency", {
            "kind": "efficiency",
            "families": {name: {"n_train": f["n_train"], "features": f["features"]}
                         for name, f in predictor.families_.items()},
            "kinds_with_own_data": predictor.kinds_,
            "chips": predictor.chips_,
            "composition": comp.to_dict() if comp is not None else None,
            "info": predictor.info_,
        })
    return LayerModelInfo("per-layer", {
        "layers": {k: {"model": lm.model, "gpus": lm.gpus, "n_train": lm.n_train,
                       "validation": lm.validation.get(lm.model, {})}
                   for k, lm in sorted(predictor.layers_.items())},
        "info": predictor.info_,
    })
