"""Across batch size on held-out CaffeNet-128 logs: the hybrid route against the end-to-end
model and a linear-in-batch rule (docs/lab/batch-hybrid.md).

Data: ducha-aiki/caffenet-benchmark. History = the two logs in ``../shared/data/logs/caffe``
(batch 512, and batch 128 killed at iteration 980); held out = every other log of
``/work/corpora/caffenet/logs/batch_size`` (batch 1, 32, 64, 1024, and two more batch-512
runs). The logs name no GPU except ``bs1024_lr004`` and ``bs1``: "GeForce GTX TITAN X" (one
GPU, ``Using GPUs 0``), so all are ingested as ``1x GTX Titan X``; the network is
``caffenet128`` (the benchmark's CaffeNet: 128-pixel crops, fc 2048; ``layerwise/zoo``).

Target: each held-out run's training seconds for its iterations (train phase; the logs' test
passes are left out). Methods, all from the same history:

* ``hybrid``: :class:`jobcast.service.engine.hybrid.HybridRoute` (what ``Forecaster`` answers; the
  shape of the eager composition, as the Caffe stack maps);
* ``hybrid_split``: the same with per-step and per-sample scales fitted apart
  (``BatchShapeFit(mode="split")``, not the route's default);
* ``hybrid_tf``: the same as ``hybrid`` with the TensorFlow composition's shape (the
  request's default framework);
* ``e2e``: the end-to-end phase model fitted on the history (:mod:`models.e2e`);
* ``linear``: seconds per step linear in the batch through the history's per-step times
  (two batch sizes: the line through them, more: least squares; one: proportional to the
  batch), plus the history's one-off seconds;
* ``proportional``: the per-step time of the nearest history batch size (in log) times
  B / b: constant seconds per sample;
* ``layerwise``: the uncalibrated layerwise forecast (for reference).

Three splits: the fit above (history 512 + 128); leave one batch size out (history: all
runs of the other batch sizes; the hybrid is asked directly, also where the forecaster would
interpolate end-to-end); one batch size of history, each to every other.

``--shape-prior`` recomputes the hybrid's prior shape rate (``SHAPE_RATE_90``) from the
measured H100 whole-network steps (imports TensorFlow for torchvision's 224-pixel AlexNet).

Run: ``.venv/bin/python benchmarks/batch_hybrid.py [--out docs/lab/batch-hybrid.md]``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from lib import REPO as ROOT
from lib import SHARED

from ingest.pipeline import IngestOptions, ingest_paths
from ingest.store import Store
from jobcast.service.engine.e2e_route import EndToEndRoute
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.hybrid import (
    BatchShapeFit,
    HybridRoute,
    history_from_points,
    key_points,
)
from jobcast.service.engine.request import JobRequest
from jobcast.service.engine.routes import LayerwiseRoute
from models.dataset import progress_points
from models.e2e import fit_points

CAFFE_LOGS = SHARED / "logs" / "caffe"
HELD_OUT = Path("/work/corpora/caffenet/logs/batch_size")
NETWORK, DEPLOYMENT = "caffenet128", "1x GTX Titan X"
METHODS = ("hybrid", "hybrid_split", "hybrid_tf", "e2e", "linear", "proportional", "layerwise")
H100_NETWORKS = ROOT / "layerwise" / "data" / "measured" / \
    "h100-sxm5_torch2.11_2026-11-23_networks.csv"


def load_points(held_out: Path) -> tuple[pd.DataFrame, set[str], Store]:
    """Train-phase progress points of all CaffeNet-128 logs, the history's sources, the store."""
    tmp = tempfile.mkdtemp(prefix="batch-hybrid-")
    store = Store(f"sqlite:///{tmp}/store.db")
    over = IngestOptions(network=NETWORK, deployment=DEPLOYMENT)
    fit = ingest_paths(store, [str(p) for p in sorted(CAFFE_LOGS.glob("ducha_caffenet128_*.log"))],
                       over)
    rest = ingest_paths(store, [str(held_out)], over)
    for report in (fit, rest):
        for err in report.rejected:
            print(f"rejected: {err}", file=sys.stderr)
    points = progress_points(store)
    return points[points["phase"] == "train"].copy(), {s for s, _ in fit.added}, store


def rules(history_points: pd.DataFrame, batch: int, iterations: int) -> dict[str, float]:
    """Seconds of the linear and proportional rules (see the module doc)."""
    hist = history_from_points(history_points)
    b = np.array([o.batch_size for o in hist.observations], float)
    t = np.array([o.step_seconds for o in hist.observations], float)
    near = int(np.argmin(np.abs(np.log(b / batch))))
    proportional = t[near] * batch / b[near]
    if len(b) == 1:
        step = proportional
    else:
        slope, intercept = np.polyfit(b, t, 1)
        step = intercept + slope * batch
    return {"linear_s": hist.const_seconds + iterations * max(step, 1e-12),
            "proportional_s": hist.const_seconds + iterations * proportional}


def evaluate(points: pd.DataFrame, history: set[str], store: Store, split: str) -> pd.DataFrame:
    """One row per held-out run (every run whose source is not in ``history``); ``route`` is
    what the forecaster chose, ``hybrid`` the hybrid route asked directly."""
    models = [m for m in fit_points(points[points["source"].isin(history)])
              if m.phase == "train"]
    forecaster = Forecaster(store=store, models=models)
    e2e = EndToEndRoute(models)
    hybrid = HybridRoute(LayerwiseRoute(), e2e, store)
    hybrid_tf = HybridRoute(LayerwiseRoute(), e2e, store, framework="tensorflow")
    hybrid_split = HybridRoute(LayerwiseRoute(), e2e, store,
                               calibrator=BatchShapeFit(mode="split"))
    layerwise = LayerwiseRoute()
    hist_points = key_points(points, models[0])
    rows = []
    for run_id, run in points[~points["source"].isin(history)].groupby("run_id"):
        final = run.sort_values("iterations").iloc[-1]
        req = JobRequest(network=NETWORK, deployment=str(final["deployment"]),
                         batch_size=int(final["batch_size"]), iterations=int(final["iterations"]))
        chosen = forecaster.forecast(req)
        if not chosen.ok:
            raise SystemExit(f"run {run_id}: {chosen.error}")
        hyb = hybrid.forecast(req)
        if chosen.route == hyb.route and chosen.seconds != hyb.seconds:
            raise SystemExit(f"run {run_id}: the forecaster's hybrid differs from the route's")
        answers = {"hybrid": hyb, "hybrid_split": hybrid_split.forecast(req),
                   "hybrid_tf": hybrid_tf.forecast(req), "e2e": e2e.forecast(req),
                   "layerwise": layerwise.forecast(req)}
        actual = float(final["seconds"])
        row = {"split": split, "run": Path(str(final["source"])).name,
               "batch": int(final["batch_size"]), "iterations": int(final["iterations"]),
               "actual_s": actual, "route": str(chosen.route)}
        for name, ans in answers.items():
            row[f"{name}_s"] = ans.seconds
            row[f"{name}_in"] = ans.low <= actual <= ans.high
        row.update(rules(hist_points, req.batch_size, req.iterations))
        for name in METHODS:
            row[f"{name}_ape"] = 100 * abs(row[f"{name}_s"] - actual) / actual
        row["hybrid_low"], row["hybrid_high"] = hyb.low, hyb.high
        row["hybrid_width"] = hyb.high / hyb.low
        row["hybrid_mode"] = hyb.details.get("hybrid", {}).get("mode", "")
        rows.append(row)
    return pd.DataFrame(rows)


def floor_ape(step_seconds: pd.Series) -> float:
    """The lowest MAPE any forecast can reach on runs of one batch size: a forecast is one
    seconds-per-step value c for all of them, and mean |c / s_i - 1| is convex and piecewise
    linear in c, so its minimum is at one of the runs' own s_i. One run: 0 (unknowable)."""
    s = step_seconds.to_numpy(float)
    return float(min(np.mean(np.abs(c / s - 1)) for c in s) * 100)


def by_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """MAPE per held-out batch size and method, the floor (:func:`floor_ape`: how far the runs
    of that batch size are from each other), interval hits of hybrid and e2e, and the hybrid
    interval's median width (high / low)."""
    step = frame["actual_s"] / frame["iterations"]
    floor = step.groupby(frame["batch"]).agg(floor_ape).rename("floor %")
    out = frame.groupby("batch").agg(
        runs=("run", "size"), route=("route", lambda r: ",".join(sorted(set(r)))),
        **{f"{m} %": (f"{m}_ape", "mean") for m in METHODS},
        hybrid_in=("hybrid_in", "sum"), e2e_in=("e2e_in", "sum"),
        hybrid_width=("hybrid_width", "median")).join(floor).reset_index()
    return out


def summary_line(frame: pd.DataFrame, label: str) -> str:
    per_batch = frame.groupby("batch")[[f"{m}_ape" for m in METHODS]].mean()
    runs = " · ".join(f"{m} {frame[f'{m}_ape'].mean():.1f} %" for m in METHODS)
    batches = " · ".join(f"{m} {per_batch[f'{m}_ape'].mean():.1f} %" for m in METHODS)
    hits = int(frame["hybrid_in"].sum())
    return (f"**{label}** ({len(frame)} runs, {frame['batch'].nunique()} batch sizes): "
            f"MAPE over runs: {runs}; mean of per-batch MAPE: {batches}; hybrid 90 % interval "
            f"holds {hits}/{len(frame)}.")


def leave_one_batch_out(points: pd.DataFrame, store: Store) -> pd.DataFrame:
    frames = []
    for b in sorted(points["batch_size"].unique()):
        history = set(points.loc[points["batch_size"] != b, "source"])
        frames.append(evaluate(points, history, store, f"leave {b} out"))
    return pd.concat(frames, ignore_index=True)


def one_batch_history(points: pd.DataFrame, store: Store) -> pd.DataFrame:
    """History of one batch size (all its runs), each other batch size held out."""
    frames = []
    for b in sorted(points["batch_size"].unique()):
        history = set(points.loc[points["batch_size"] == b, "source"])
        if history & set(points.loc[points["batch_size"] != b, "source"]):
            continue  # a file with runs of two batch sizes cannot be one side only
        frame = evaluate(points, history, store, f"history {b}")
        frames.append(frame.assign(history=b))
    return pd.concat(frames, ignore_index=True)


def shape_prior() -> tuple[float, pd.DataFrame]:
    """The 90 % quantile of the layerwise shape error rate on the H100 network steps."""
    from layerwise import zoo
    from layerwise.forecast import forecast_network

    data = pd.read_csv(H100_NETWORKS)
    rows = []
    for (net, prec), g in data.groupby(["network", "precision"]):
        side = int(g["image_size"].iloc[0])
        known = zoo.lookup(net)
        size = None if known and zoo.load(known).image_size == side else side
        step = {int(r.batch_size): float(r.step_ms) for r in g.itertuples()}
        lw = {b: forecast_network(net, device=str(g["gpu"].iloc[0]), batch_size=b,
                                  optimizer="sgd", precision=prec, framework="pytorch",
                                  image_size=size)["batch_seconds"] for b in step}
        for b1, b2 in itertools.permutations(sorted(step), 2):
            err = math.log(step[b2] / step[b1]) - math.log(lw[b2] / lw[b1])
            rows.append({"network": net, "precision": prec, "from": b1, "to": b2,
                         "rate": abs(err) / abs(math.log(b2 / b1)),
                         "hybrid_ape": 100 * abs(step[b1] * lw[b2] / lw[b1] / step[b2] - 1),
                         "linear_ape": 100 * abs(step[b1] * b2 / b1 / step[b2] - 1)})
    frame = pd.DataFrame(rows)
    return float(frame["rate"].quantile(0.9)), frame


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--held-out", type=Path, default=HELD_OUT)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown here")
    ap.add_argument("--shape-prior", action="store_true",
                    help="also recompute the prior shape rate on the H100 network steps")
    args = ap.parse_args()
    points, history, store = load_points(args.held_out)
    main_split = evaluate(points, history, store, "history 512 + 128")
    lobo = leave_one_batch_out(points, store)
    single = one_batch_history(points, store)
    fmt = {"floatfmt": ".1f", "index": False}
    cols = ["run", "batch", "iterations", "actual_s", "hybrid_s", "hybrid_low", "hybrid_high",
            "route", "hybrid_mode", *[f"{m}_ape" for m in METHODS]]
    out = [
        "## History 512 + 128 (the shared logs), every other run held out", "",
        main_split[cols].sort_values(["batch", "run"]).to_markdown(**fmt), "",
        by_batch(main_split).to_markdown(**fmt), "",
        summary_line(main_split, "outside the history's batch sizes")
        if (off := main_split[~main_split["batch"].isin([128, 512])]).empty
        else summary_line(off, "outside the history's batch sizes"), "",
        "## Leave one batch size out (hybrid asked directly)", "",
        by_batch(lobo).to_markdown(**fmt), "", summary_line(lobo, "leave one batch size out"),
        "", "## One batch size of history, every other held out", "",
        single.groupby(["history", "batch"])[[f"{m}_ape" for m in METHODS]].mean()
        .reset_index().to_markdown(**fmt), "", summary_line(single, "one batch size"), "",
    ]
    if args.shape_prior:
        rate, frame = shape_prior()
        out += ["## Prior shape rate (H100 whole-network steps, batch 32/64/128)", "",
                f"90 % quantile of |shape error| per e-fold of batch: **{rate:.2f}** "
                f"(median {frame['rate'].median():.2f}; {len(frame)} ordered pairs). From one "
                f"batch size: layerwise-shape ratio MAPE {frame['hybrid_ape'].mean():.1f} %, "
                f"proportional-to-batch {frame['linear_ape'].mean():.1f} %.", ""]
    text = "\n".join(out)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
