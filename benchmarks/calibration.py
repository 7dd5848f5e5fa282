"""How fast calibration brings the layerwise error down with 1, 2, 3 observed runs.

Data (real, no synthetic timings):

* ``mlperf``: the MLPerf Training ResNet-50 logs in ``../shared/data/logs/mlperf`` (10 systems
  x 5 runs). Each run is one job: the whole train phase at the submitter's batch size; runs of a
  system differ in how many steps they needed to converge. For each system whose GPU the
  catalog knows, the runs are taken in file order; a calibrator fitted on the first ``k`` runs
  forecasts the train-phase seconds of each later run from its step count (the job plan).
  Compared per ``k``: raw layerwise (k = 0), calibrated layerwise, the end-to-end phase model
  fitted on the same ``k`` runs, and, at k = 0, the factor of *other* systems with the same
  hardware key (the fallback a new network gets).
* ``keras-cpu`` (``--keras``): real short Keras ``fit`` runs measured here on this CPU with
  ``jobcast.instrument.jsonl.JobcastLogger``: three small networks at four batch sizes, in shuffled
  order. A network's first ``k`` runs (other batch sizes) calibrate the forecast of its
  remaining ones; k = 0 uses the factor of the other networks on this CPU. The layerwise
  forecasts come from a GBT predictor trained here on the CPU layer benchmark rows
  (``--cpu-bench``), since the shipped predictor describes GPUs.

Errors are absolute percentage errors of the forecast seconds, summarised by median and mean
over all (system or network, held-out run) pairs at each ``k``.

Usage:
    .venv/bin/python benchmarks/calibration.py --predictor layerwise/data/default_predictor \
        --json benchmarks/results/calibration.json [--keras]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from lib import REPO

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from fleet.quiet_tf import quiet_import
from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.service.engine.scale_calibration import layerwise_observations
from models.dataset import progress_points
from models.e2e import choose, fit_points, forecast
from models.scale_calibration import (
    ScaleCalibrator,
    observed_runs,
)

MLPERF = REPO.parent / "shared" / "data" / "logs" / "mlperf"
MAX_K = 3


def ape(actual: float, predicted: float) -> float:
    return abs(actual - predicted) / actual * 100


def calibrated_errors(obs: pd.DataFrame, group: str, shrinkage: float) -> list[dict]:
    """Per group (system / network): errors of later runs after calibrating on the first k."""
    rows = []
    for key, runs in obs.groupby(group, sort=True):
        runs = runs.sort_values("order")
        others = obs[obs[group] != key]
        for k in range(0, min(MAX_K, len(runs) - 1) + 1):
            train, test = runs.iloc[:k], runs.iloc[k:]
            # k = 0: only the other groups (another stack or network on the same hardware);
            # k >= 1: the group's own first k runs (the others would pool software stacks).
            fit_on = others if k == 0 else train
            cal = ScaleCalibrator(shrinkage=shrinkage).fit(fit_on, fit_on["actual"])
            for run in test.itertuples(index=False):
                one = pd.DataFrame([run._asdict()])
                scale = cal.scale_for(run.network, run.hardware)
                rows.append({
                    "group": key, "k": k, "run": run.run_id, "method": "raw layerwise",
                    "ape": ape(run.actual, run.predicted)})
                if scale is not None:
                    rows.append({
                        "group": key, "k": k, "run": run.run_id,
                        "method": f"calibrated ({scale.level})",
                        "ape": ape(run.actual, float(cal.predict(one)[0]))})
    return rows


def e2e_errors(points: pd.DataFrame, obs: pd.DataFrame, group: str) -> list[dict]:
    """The end-to-end phase model fitted on the first k runs of a group, same held-out runs."""
    rows = []
    for key, runs in obs.groupby(group, sort=True):
        runs = runs.sort_values("order")
        for k in range(1, min(MAX_K, len(runs) - 1) + 1):
            ids = set(runs["run_id"].iloc[:k])
            pts = points[points["run_id"].isin(ids) & (points["phase"] == "train")].copy()
            pts["deployment"] = "bench"  # pool the group's runs whatever their labels
            pts["stack"] = ""
            pts["network"] = pts["network"].str.lower()
            try:
                model = choose(fit_points(pts), pts["network"].iloc[0], "bench", "train")
            except (LookupError, ValueError):
                continue
            for run in runs.iloc[k:].itertuples(index=False):
                pred = forecast(model, run.iterations, int(run.batch_size))["seconds"]
                rows.append({"group": key, "k": k, "run": run.run_id,
                             "method": "end-to-end model", "ape": ape(run.actual, pred)})
    return rows


def summarise(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    table = frame.groupby(["method", "k"])["ape"].agg(
        n="size", median="median", mean="mean", max="max").reset_index()
    return table.sort_values(["method", "k"]).reset_index(drop=True)


def mlperf_observations(predictor) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'mlperf.db'}")
        report = ingest_paths(store, [str(MLPERF)])
        if report.rejected:
            print(f"{len(report.rejected)} MLPerf files rejected", file=sys.stderr)
        runs = observed_runs(store)
        points = progress_points(store)
    obs, skipped = layerwise_observations(runs, predictor)
    meta = runs.set_index("run_id")
    obs["system"] = [meta.loc[r, "source"].split("/results/")[1].split("/")[0]
                     for r in obs["run_id"]]
    obs["order"] = [meta.loc[r, "source"] for r in obs["run_id"]]
    obs["batch_size"] = [int(meta.loc[r, "batch_size"]) for r in obs["run_id"]]
    return obs, points, skipped


def mlperf_part(predictor, shrinkage: float) -> dict:
    obs, points, skipped = mlperf_observations(predictor)
    print(f"MLPerf: {len(obs)} runs of {obs['system'].nunique()} systems priced; "
          f"{len(skipped)} runs skipped (hardware the catalog or predictor lacks)")
    per_system = obs.assign(ratio=obs["actual"] / obs["predicted"]).groupby(
        ["system", "hardware"])["ratio"].agg(["size", "median", "min", "max"])
    print(per_system.to_string(float_format=lambda v: f"{v:.3g}"))
    rows = calibrated_errors(obs, "system", shrinkage) + e2e_errors(points, obs, "system")
    table = summarise(rows)
    print(table.to_markdown(index=False, floatfmt=".1f"))
    return {"table": table.to_dict(orient="records"),
            "ratios": per_system.reset_index().to_dict(orient="records"), "skipped": skipped}


# -- real Keras runs on this CPU --------------------------------------------------------------

KERAS_NETS = {
    "lenet": {"name": "lenet", "input_shape": [28, 28, 1], "layers": [
        {"type": "conv", "filters": 6, "kernel": 5, "padding": "same", "activation": "relu"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "conv", "filters": 16, "kernel": 5, "activation": "relu"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "flatten"},
        {"type": "dense", "units": 120, "activation": "relu"},
        {"type": "dense", "units": 10}]},
    "smallvgg": {"name": "smallvgg", "input_shape": [32, 32, 3], "layers": [
        {"type": "conv", "filters": 32, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "conv", "filters": 32, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "conv", "filters": 64, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "flatten"},
        {"type": "dense", "units": 128, "activation": "relu"},
        {"type": "dense", "units": 10}]},
    "widedense": {"name": "widedense", "input_shape": [16, 16, 3], "layers": [
        {"type": "conv", "filters": 16, "kernel": 3, "padding": "same", "activation": "relu"},
        {"type": "flatten"},
        {"type": "dense", "units": 512, "activation": "relu"},
        {"type": "dense", "units": 256, "activation": "relu"},
        {"type": "dense", "units": 10}]},
}
KERAS_BATCHES = (16, 32, 64, 128)
EPOCHS = 3


def keras_runs(steps: int, seed: int) -> tuple[pd.DataFrame, list[str]]:
    """Train every network x batch, ``EPOCHS`` x ``steps`` steps (shuffled order), as jsonl."""
    keras = quiet_import("keras")

    from jobcast.instrument.jsonl import JobcastLogger
    from layerwise.network import spec_to_keras

    jobs = [(net, batch) for net in KERAS_NETS for batch in KERAS_BATCHES]
    random.Random(seed).shuffle(jobs)
    tmp = Path(tempfile.mkdtemp(prefix="jobcast-cal-"))
    logs = []
    rng = np.random.default_rng(seed)
    for i, (net, batch) in enumerate(jobs):
        model = spec_to_keras(KERAS_NETS[net])
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        shape = KERAS_NETS[net]["input_shape"]
        x = rng.standard_normal((batch * steps, *shape)).astype("float32")
        y = rng.integers(0, 10, batch * steps)
        path = tmp / f"{i:02d}_{net}_b{batch}.jsonl"
        logger = JobcastLogger(str(path), every_n_steps=5, network=net, deployment="cpu-x1",
                               batch_size=batch)
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=EPOCHS, verbose=0, callbacks=[logger])
        print(f"  {net} batch {batch}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
        logs.append(str(path))
    store = Store(f"sqlite:///{tmp / 'keras.db'}")
    report = ingest_paths(store, logs)
    if report.rejected:
        raise SystemExit(f"rejected: {[str(e) for e in report.rejected]}")
    runs = observed_runs(store)
    runs["order"] = runs["source"]
    return runs, progress_points(store), logs


def keras_observations(runs: pd.DataFrame, predictor) -> pd.DataFrame:
    from layerwise.forecast import forecast_network

    rows = []
    for run in runs.itertuples(index=False):
        step = forecast_network(KERAS_NETS[run.network], device="cpu",
                                batch_size=int(run.batch_size), optimizer="sgd",
                                predictor=predictor)
        rows.append({"run_id": run.run_id, "network": run.network, "hardware": "cpu-x1",
                     "batch_size": int(run.batch_size), "iterations": float(run.iterations),
                     "predicted": step["batch_seconds"] * float(run.iterations),
                     "actual": float(run.seconds), "order": run.order})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--predictor", type=Path, default=None,
                        help="Layer predictor folder (default: the shipped one).")
    parser.add_argument("--shrinkage", type=float, default=0.0)
    parser.add_argument("--keras", action="store_true", help="Also time real Keras CPU runs.")
    parser.add_argument("--no-mlperf", action="store_true", help="Skip the MLPerf part.")
    parser.add_argument("--cpu-bench", type=Path,
                        default=REPO / "benchmarks" / "results" / "cpu_bench.csv",
                        help="Keras: CPU layer benchmark rows to train the CPU predictor on.")
    parser.add_argument("--steps", type=int, default=60, help="Keras: steps per epoch.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    from layerwise.predictor import LayerPredictor
    from layerwise.shipped import default_predictor

    out: dict = {"predictor": str(args.predictor or "default"), "shrinkage": args.shrinkage}
    if not args.no_mlperf:
        predictor = LayerPredictor.load(args.predictor) if args.predictor \
            else default_predictor()
        out["mlperf"] = mlperf_part(predictor, args.shrinkage)
    if args.keras:
        t0 = time.perf_counter()
        cpu_predictor = LayerPredictor(model="gbt", random_state=args.seed).fit(
            pd.read_csv(args.cpu_bench))
        print(f"CPU predictor: GBT on {args.cpu_bench.name} "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        runs, kpoints, logs = keras_runs(args.steps, args.seed)
        kobs = keras_observations(runs, cpu_predictor)
        ratios = kobs.assign(ratio=kobs["actual"] / kobs["predicted"])
        print(ratios[["network", "batch_size", "iterations", "actual", "predicted", "ratio"]]
              .sort_values(["network", "batch_size"]).to_string(index=False,
                                                                float_format=lambda v: f"{v:.3g}"))
        krows = calibrated_errors(kobs, "network", args.shrinkage) + e2e_errors(
            kpoints, kobs, "network")
        ktable = summarise(krows)
        print(ktable.to_markdown(index=False, floatfmt=".1f"))
        out["keras_cpu"] = {"table": ktable.to_dict(orient="records"),
                            "cpu_bench": str(args.cpu_bench), "steps_per_epoch": args.steps,
                            "epochs": EPOCHS,
                            "runs": ratios.to_dict(orient="records"), "logs": logs}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
