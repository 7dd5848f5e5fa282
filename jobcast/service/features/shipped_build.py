"""Build the data jobcast ships, by one library call per part (``jobcast build-shipped``).

Parts (:data:`PARTS`) and what each writes (paths inside the package):

* ``predictor``: the whole layerwise predictor (``layerwise/data/default_predictor``: layer
  efficiency, then compositions; :func:`layerwise.corpora.build_default.build`). Long.
* ``specialist``: the per-layer-type specialist the shipped predictor loads
  (``layerwise/data/default_predictor/specialist``: ``predictor.json``, ``conv.npz``,
  ``dense.npz``), trained on every Justus et al. row (``justus2018/*_*.csv.gz``) by
  :func:`jobcast.service.features.layer_models.train_layer_model` with the settings in
  :data:`SPECIALIST_SETTINGS` (what ``jobcast layerwise train`` does by default: candidates
  gbt, linear, mlp, resmlp, chosen per type by validation MAPE; the MLPs need TensorFlow).
  Long (15-25 minutes on 2 cores). The ``.npz`` files (the chosen trees, intervals) come out
  byte-identical; ``predictor.json`` differs in the time of the fit, each candidate's fit
  seconds, and the MLP candidates' validation scores in the 8th digit (TensorFlow).
* ``compositions``: only the compositions of the shipped layer predictor (the same build with
  ``composition_only``, on a copy; only the ``composition*.json`` files are written).
* ``scaling``: ``models/data/scaling.json`` (TensorFlow replicated variables, fitted on the
  Lambda tf_cnn_benchmarks runs, interval from fits that left the GPU model out) and
  ``models/data/scaling_pytorch.json`` (``nn.DataParallel``, fitted on
  ``torchvision_bench``); the targets are built here, the fits are the models'.
* ``selector-prior``: ``models/data/selector_prior.json``, the selector fitted on the
  backtest of a store (:mod:`jobcast.service.engine.backtest`, every system, history sizes 1,
  2 and 3); it needs a store. The shipped prior comes from the reference corpora: MLPerf
  Training v0.6-v3.1 CNN benchmarks (each system's first eight result files, exported with
  ``benchmarks/e2e_wallclock.py``'s ``export_round``), ``../shared`` logs and Lambda, ingested
  into one store (4,373 files; ``jobcast ingest DIRS --store S``, then
  ``jobcast build-shipped selector-prior --store S``). The report has the per-kind table.
* ``networks``: every zoo spec (``layerwise/zoo/data``: TensorFlow through
  :mod:`layerwise.zoo.build`, torchvision through :mod:`layerwise.zoo.build_torch`). A
  library that is not installed skips its networks, said in the report (a partial build).

Rules:

* Reference data comes from ``shared`` (``../shared/data`` by default,
  :func:`layerwise.corpora.tables.shared_data_dir`); a part whose inputs are missing raises
  :class:`ShippedInputError` naming the missing path, before anything is written.
* ``out``: ``None`` writes over the shipped files; a folder gets the same relative paths
  under it (``OUT/models/data/scaling.json``), so the shipped files stay as they are.
* No parts named: every part whose inputs are present (``selector-prior`` only with a
  store; ``compositions`` not when ``predictor``, which builds them, is there).
* Each part's :class:`PartReport` lists the files written, the inputs read, the seconds, and
  what it skipped with the reason. Library progress printing goes to stderr.
* Same inputs, same bytes: the writers are the models' own ``save``/:func:`save_prior`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from fleet.errors import JobcastError

PARTS = ("predictor", "specialist", "compositions", "scaling", "selector-prior", "networks")
LAMBDA_KEYS = ["system", "gpu", "precision", "network", "batch_per_gpu"]
Progress = Callable[[int, int, str], None]


class ShippedInputError(JobcastError):
    """A part's input is missing or unusable (a path, a store with nothing to backtest)."""

    kind: ClassVar[str] = "shipped"


@dataclass
class PartReport:
    """What one part did: files written, inputs read, seconds, skipped items with reasons,
    and a table to show (the selector prior's per-kind errors)."""

    part: str
    written: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON."""
        return asdict(self)


def package_root() -> Path:
    """The folder holding the ``models`` and ``layerwise`` packages (the repository)."""
    from models.replicated import DEFAULT_PATH

    return DEFAULT_PATH.parents[2]


def destination(shipped: Path, out: Path | None) -> Path:
    """Where a shipped path is written: itself, or the same relative path under ``out``."""
    return shipped if out is None else out / shipped.relative_to(package_root())


def shared_dir(given: Path | None = None) -> Path:
    """``given``, else the reference data folder the corpora loaders use by default."""
    from layerwise.corpora.tables import shared_data_dir

    return given if given is not None else shared_data_dir()


def _need(path: Path, part: str) -> Path:
    if not path.exists():
        raise ShippedInputError(f"{path}: not found, which the {part} part reads (give "
                                "--shared DIR, the folder of the reference data)")
    return path


INPUTS: dict[str, tuple[str, ...]] = {
    "predictor": ("justus2018", "neusight", "lambda", "profet", "torchvision_bench"),
    "specialist": ("justus2018",),
    "compositions": ("lambda", "profet", "torchvision_bench"),
    "scaling": ("lambda", "torchvision_bench"),
    "selector-prior": (),
    "networks": (),
}


def missing_inputs(part: str, shared: Path) -> list[Path]:
    """The reference folders ``part`` reads that are not under ``shared``."""
    return [shared / name for name in INPUTS[part] if not (shared / name).exists()]


def default_parts(shared: Path, store: bool) -> list[str]:
    """The parts a build with none named runs (module rules)."""
    parts = [p for p in PARTS if not missing_inputs(p, shared)]
    if not store:
        parts.remove("selector-prior")
    if "predictor" in parts and "compositions" in parts:
        parts.remove("compositions")
    return parts


@contextlib.contextmanager
def _shared_data(shared: Path) -> Iterator[None]:
    """Point the layerwise corpora loaders at ``shared`` and send their prints to stderr."""
    from layerwise.corpora.tables import ENV_VAR

    old = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(shared)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if old is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = old


# -- scaling -------------------------------------------------------------------------------


def lambda_scaling_targets(root: Path) -> pd.DataFrame:
    """Lambda tf_cnn_benchmarks multi-GPU steps (synthetic training) with their system's 1-GPU
    step, weight tensors, ring all-reduce ms and chip."""
    from fleet.deployment import Deployment
    from layerwise.corpora.lambda_runs import read_lambda
    from layerwise.corpora.network_fit import synthetic_training
    from layerwise.efficiency import chip_of
    from layerwise.network import decompose
    from models.scaling import allreduce_ms, weight_tensors

    frame, _ = read_lambda(root)
    part = frame.loc[synthetic_training(frame)].assign(
        step_ms=lambda f: f["step_seconds"] * 1000.0)
    med = part.groupby([*LAMBDA_KEYS, "gpu_count", "nvlink"], as_index=False)["step_ms"].median()
    one = med[med["gpu_count"] == 1][[*LAMBDA_KEYS, "step_ms"]].rename(
        columns={"step_ms": "step1_ms"})
    out = med[med["gpu_count"] > 1].merge(one, on=LAMBDA_KEYS)
    nets = {n: decompose(n, batch_size=1) for n in out["network"].unique()}
    params = {n: net.params for n, net in nets.items()}
    out["tensors"] = out["network"].map({n: weight_tensors(net) for n, net in nets.items()})
    ar = []
    for r in out.itertuples(index=False):
        dep = Deployment(str(r.gpu), int(r.gpu_count), 1, "nvlink" if r.nvlink else "")
        ar.append(allreduce_ms(params[r.network], str(r.precision), dep))
    out["allreduce_ms"] = ar
    out["gpus"] = out["gpu_count"]
    out["chip"] = out["gpu"].map(chip_of)
    return out


def torch_scaling_targets(root: Path) -> pd.DataFrame:
    """torchvision_bench fp32 multi-GPU steps with their 1-GPU step, layers, all-reduce and
    the DDP rule's step (``pred_ddp``)."""
    from fleet.deployment import Deployment
    from layerwise.efficiency import chip_of
    from layerwise.forecast import forecast_network
    from models.scaling import data_parallel_step
    from models.torch_parallel import gradient_allreduce_ms

    steps = pd.read_csv(root / "steps.csv.gz")
    steps = steps[steps["precision"] == "fp32"].assign(step_ms=lambda f: f["step_seconds"] * 1e3)
    one = steps[steps["n_gpus"] == 1].set_index(["gpu", "network"])["step_ms"]
    out = steps[steps["n_gpus"] > 1].copy()
    pairs = list(zip(out["gpu"], out["network"], strict=True))
    out["step1_ms"] = [one[key] for key in pairs]
    fc = {}
    for key in out[["gpu", "network"]].drop_duplicates().itertuples(index=False):
        fc[tuple(key)] = forecast_network(key.network, device=key.gpu, batch_size=12,
                                          optimizer="sgd", framework="pytorch")["layers"]
    out["layers"] = [len(fc[key]) for key in pairs]
    out["gpus"] = out["n_gpus"]
    params = {key: sum(float(e.get("params", 0) or 0) for e in layers)
              for key, layers in fc.items()}
    gpus = [int(k) for k in out["gpus"]]
    out["allreduce_ms"] = [gradient_allreduce_ms(params[key], Deployment(key[0], k))
                           for key, k in zip(pairs, gpus, strict=True)]
    out["pred_ddp"] = [
        data_parallel_step("pytorch", s1, Deployment(key[0], k), "fp32", fc[key]).ms
        for key, k, s1 in zip(pairs, gpus, out["step1_ms"], strict=True)]
    out["chip"] = out["gpu"].map(chip_of)
    return out.reset_index(drop=True)


def torch_leave_one_out(data: pd.DataFrame) -> tuple[pd.Series, Any]:
    """DataParallel steps predicted by fits that left the GPU model out; the
    :class:`models.torch_parallel.DataParallelFit` on all runs (its interval from those
    residuals)."""
    from models.torch_parallel import DataParallelFit

    pred = pd.Series(np.nan, index=data.index)
    rows = data[["step1_ms", "step_ms", "gpus", "layers", "allreduce_ms"]].to_dict("records")
    for chip in sorted(data["chip"].unique()):
        test = (data["chip"] == chip).to_numpy()
        fit = DataParallelFit().fit([r for r, t in zip(rows, test, strict=True) if not t])
        pred[test] = [fit.step(r["step1_ms"], r["gpus"], r["layers"], r["allreduce_ms"])[0]
                      for r, t in zip(rows, test, strict=True) if t]
    full = DataParallelFit().fit(rows, residuals=np.log(data["step_ms"] / pred))
    return pred, full


def build_scaling(shared: Path, out: Path | None = None) -> PartReport:
    """Fit both data-parallel models on all runs and write them (module rules)."""
    from models.replicated import DEFAULT_PATH, fit_all_runs
    from models.torch_parallel import DP_PATH

    lam = _need(shared / "lambda", "scaling")
    tv = _need(shared / "torchvision_bench", "scaling")
    replicated = fit_all_runs(lambda_scaling_targets(lam))
    _, dp = torch_leave_one_out(torch_scaling_targets(tv))
    written = [replicated.save(destination(DEFAULT_PATH, out)),
               dp.save(destination(DP_PATH, out))]
    return PartReport("scaling", [str(p) for p in written], [str(lam), str(tv)])


# -- layerwise predictor -------------------------------------------------------------------


def build_predictor(shared: Path, out: Path | None = None, *,
                    composition_only: bool = False) -> PartReport:
    """The layerwise predictor (or only its compositions) into its shipped folder or ``out``.

    ``composition_only`` refits on a copy of the shipped layer predictor and writes only the
    ``composition*.json`` files (a re-save would rewrite the layer predictor's own files)."""
    import tempfile

    from layerwise.corpora.build_default import build
    from layerwise.pricing import SHIPPED_DIR

    part = "compositions" if composition_only else "predictor"
    inputs = [_need(shared / name, part) for name in INPUTS[part]]
    target = destination(SHIPPED_DIR, out)
    if not composition_only:
        with _shared_data(shared):
            build(target)
        written = sorted(p for p in target.rglob("*") if p.is_file() and p.name != "README.md")
        return PartReport(part, [str(p) for p in written], [str(p) for p in inputs])
    with tempfile.TemporaryDirectory() as tmp, _shared_data(shared):
        work = Path(tmp) / "predictor"
        shutil.copytree(SHIPPED_DIR, work)
        build(work, composition_only=True)
        target.mkdir(parents=True, exist_ok=True)
        written = [Path(shutil.copyfile(p, target / p.name))
                   for p in sorted(work.glob("composition*.json"))]
    return PartReport(part, [str(p) for p in written], [str(p) for p in [*inputs, SHIPPED_DIR]])


# -- specialist ----------------------------------------------------------------------------

# The shipped specialist's training (``jobcast layerwise train``'s defaults, 2026-11-21).
SPECIALIST_MODELS = "gbt,linear,mlp,resmlp"
SPECIALIST_SETTINGS: dict[str, Any] = {"val_fraction": 0.1, "seed": 0, "gbt_iter": 1000,
                                       "mlp_epochs": 30, "mlp_max_rows": 40000}


def justus_files(shared: Path) -> list[Path]:
    """The Justus et al. tables (``justus2018/<layer>_<gpu>.csv.gz``) the specialist trains on."""
    folder = _need(shared / "justus2018", "specialist")
    files = sorted(folder.glob("*_*.csv.gz"))
    if not files:
        raise ShippedInputError(f"{folder}: no <layer>_<gpu>.csv.gz table, which the "
                                "specialist part trains on")
    return files


def build_specialist(shared: Path, out: Path | None = None, *,
                     models: str = SPECIALIST_MODELS, **settings: Any) -> PartReport:
    """Train the per-layer-type specialist on every Justus table and write it (module rules).

    ``models`` and ``settings`` (keywords of
    :func:`~jobcast.service.features.layer_models.train_layer_model`) replace the shipped
    recipe, e.g. for a quick check; the part itself uses the recipe."""
    from jobcast.service.features.layer_models import train_layer_model, training_data
    from layerwise.pricing import SHIPPED_DIR
    from layerwise.shipped import SPECIALIST_DIR

    files = justus_files(shared)
    try:
        training = training_data(files, models)
    except JobcastError as exc:  # a table that does not read: said before any fit
        raise ShippedInputError(str(exc)) from exc
    target = destination(SHIPPED_DIR / SPECIALIST_DIR, out)
    with contextlib.redirect_stdout(sys.stderr):
        train_layer_model(training, target, **{**SPECIALIST_SETTINGS, **settings})
    written = sorted(p for p in target.iterdir() if p.is_file() and p.name != "README.md")
    return PartReport("specialist", [str(p) for p in written], [str(p) for p in files])


# -- selector prior ------------------------------------------------------------------------


def kind_table(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Per candidate kind: forecasts, mean and median absolute percentage error."""
    ape = 100 * np.abs(np.expm1(-rows["error"]))
    table = (rows.assign(ape=ape).groupby("kind")["ape"]
             .agg(forecasts="size", mape="mean", median="median").reset_index())
    return [{"kind": str(r.kind), "forecasts": int(r.forecasts), "mape": round(float(r.mape), 2),
             "median": round(float(r.median), 2)} for r in table.itertuples(index=False)]


def build_selector_prior(store: Any, out: Path | None = None,
                         progress: Progress | None = None) -> PartReport:
    """Backtest ``store`` (every system), fit the selector and write it as the prior."""
    from jobcast.service.engine.backtest import backtest, fit_selector
    from models.dataset import collect_points
    from models.history import run_table
    from models.selector import PRIOR_PATH, RELATION_FIELDS, save_prior

    points, _ = collect_points(store)
    tick = None if progress is None else (lambda d, t: progress(d, t, "systems"))
    rows = backtest(points, run_table(store), progress=tick)
    if rows.empty:
        raise ShippedInputError(f"{store.url}: no system has two runs, so there is nothing to "
                                "backtest (the prior needs a store of reference runs)")
    for col in RELATION_FIELDS:
        rows[col] = rows[col].fillna("").astype(str)
    path = save_prior(fit_selector(rows), destination(PRIOR_PATH, out))
    return PartReport("selector-prior", [str(path)], [str(store.url)], table=kind_table(rows))


# -- zoo networks --------------------------------------------------------------------------


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _zoo_builders(out: Path | None) -> list[tuple[str, list[str], Callable[[str], Path]]]:
    """(library, network names, build-and-write) for each zoo; a library not installed
    gives no builder (its names are skipped by :func:`build_networks`)."""
    from layerwise import zoo
    from layerwise.zoo import torch_zoo

    builders: list[tuple[str, list[str], Callable[[str], Path]]] = []
    tf_names = list(zoo.CATALOG)
    torch_names = [e.name for e in torch_zoo.CATALOG.values()]
    if _installed("tensorflow"):
        from layerwise.zoo import build as tf_build

        tf_dir = destination(zoo.DATA_DIR, out)
        builders.append(("tensorflow", tf_names,
                         lambda n: tf_build.write_spec(tf_build.build_spec(n)[0], tf_dir)))
    else:
        builders.append(("tensorflow", tf_names, _missing("TensorFlow")))
    if _installed("torchvision"):
        from layerwise.zoo import build_torch

        torch_dir = str(destination(torch_zoo.TORCH_DIR, out))
        builders.append(("torchvision", torch_names,
                         lambda n: build_torch.write_packed(build_torch.build_spec(n),
                                                            torch_dir)))
    else:
        builders.append(("torchvision", torch_names, _missing("torchvision")))
    return builders


def _missing(library: str) -> Callable[[str], Path]:
    def build(name: str) -> Path:
        raise ShippedInputError(f"{library} is not installed")
    return build


def build_networks(out: Path | None = None, names: Sequence[str] = (),
                   progress: Progress | None = None) -> PartReport:
    """Every zoo network's spec (or those in ``names``); a network that fails or needs a
    library not installed is skipped with its reason."""
    report = PartReport("networks")
    work = [(lib, n, fn) for lib, all_names, fn in _zoo_builders(out)
            for n in all_names if not names or n in names]
    with contextlib.redirect_stdout(sys.stderr):
        for i, (lib, name, fn) in enumerate(work):
            if progress is not None:
                progress(i, len(work), name)
            try:
                report.written.append(str(fn(name)))
            except ShippedInputError as exc:
                report.skipped.append(f"{name} ({lib}): {exc}")
            except Exception as exc:  # noqa: BLE001 - one network never stops the others
                report.skipped.append(f"{name} ({lib}): {type(exc).__name__}: {exc}")
    report.inputs = sorted({lib for lib, _, _ in work})
    return report


# -- the build -----------------------------------------------------------------------------


def build_part(part: str, *, shared: Path, out: Path | None = None, store: Any = None,
               progress: Progress | None = None) -> PartReport:
    """Build one part (module rules), checked first by :func:`check_parts`, and time it."""
    check_parts([part], shared, store is not None)
    start = time.perf_counter()
    builders: dict[str, Callable[[], PartReport]] = {
        "scaling": lambda: build_scaling(shared, out),
        "predictor": lambda: build_predictor(shared, out),
        "compositions": lambda: build_predictor(shared, out, composition_only=True),
        "specialist": lambda: build_specialist(shared, out),
        "selector-prior": lambda: build_selector_prior(store, out, progress),
        "networks": lambda: build_networks(out, progress=progress),
    }
    report = builders[part]()
    report.seconds = round(time.perf_counter() - start, 1)
    return report


def check_parts(parts: Sequence[str], shared: Path, store: bool) -> None:
    """Refuse, before anything is built, an unknown part or one whose inputs are missing."""
    for part in parts:
        if part not in PARTS:
            raise ShippedInputError(f"unknown part {part!r}; parts: {', '.join(PARTS)}")
        if part == "selector-prior" and not store:
            raise ShippedInputError("the selector-prior part needs --store URL (a store of "
                                    "reference runs to backtest)")
        for path in missing_inputs(part, shared):
            _need(path, part)
