"""Training time and prediction latency of the layer predictors.

* training: each estimator fitted on the same rows (published data, a random subsample of
  ``--train-rows`` per layer type), rounds interleaved, median seconds;
* loading the shipped default predictor (no TensorFlow import);
* prediction latency of the shipped predictor for 1, 100 and 10 000 rows, interleaved, median;
* the numpy forest evaluator against scikit-learn's own ``predict`` on the same trees (ratio).

    .venv/bin/python benchmarks/predictor_speed.py [--train-rows 20000] [--rounds 3]
        [--models gbt,linear,mlp,resmlp] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import lib  # noqa: F401  (sys.path: the repository, tests/)
import numpy as np
import pandas as pd

from layerwise.predictor import LayerPredictor
from layerwise.pricing import SHIPPED_DIR
from layerwise.published import load_published


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--train-rows", type=int, default=30000,
                        help="rows per layer type (GBT stops early below 20 000 training rows)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="gbt,linear,mlp,resmlp")
    parser.add_argument("--mlp-epochs", type=int, default=10)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    rows = load_published(args.data_dir)
    sample = rows.groupby("layer", group_keys=False).sample(
        n=args.train_rows, random_state=0)
    models = [m for m in args.models.split(",") if m]
    params = {"mlp": {"epochs": args.mlp_epochs}, "resmlp": {"epochs": args.mlp_epochs}}

    print(f"training on {args.train_rows} rows per layer type (conv + dense), "
          f"{args.rounds} interleaved rounds")
    fit_times: dict[str, list[float]] = {m: [] for m in models}
    for _ in range(args.rounds):
        for name in models:
            predictor = LayerPredictor(model=name, params=params, unseen_interval_refits=False,
                                       refit=False)
            fit_times[name].append(timed(lambda p=predictor: p.fit(sample)))
    for name, values in fit_times.items():
        extra = f" ({args.mlp_epochs} epochs)" if "mlp" in name else ""
        print(f"  fit {name:7s}{extra}: median {statistics.median(values):7.2f} s "
              f"(min {min(values):.2f}, max {max(values):.2f})")

    load_times = [timed(lambda: LayerPredictor.load(SHIPPED_DIR)) for _ in range(args.rounds)]
    print(f"load shipped predictor (warm process): median "
          f"{statistics.median(load_times) * 1e3:.1f} ms")
    cold = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from layerwise.shipped import default_predictor\n"
        "default_predictor()\n"
        "print(time.perf_counter() - t, 'tensorflow' in sys.modules)\n"
    )
    cold_runs = [subprocess.run([sys.executable, "-c", cold], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[1], check=True
                                ).stdout.split() for _ in range(args.rounds)]
    print(f"cold start (fresh process: imports + load): median "
          f"{statistics.median(float(r[0]) for r in cold_runs) * 1e3:.0f} ms; "
          f"tensorflow imported: {cold_runs[0][1]}")

    shipped = LayerPredictor.load(SHIPPED_DIR)
    batches = {n: rows.sample(n=n, random_state=n) for n in (1, 100, 10000)}
    lat: dict[int, list[float]] = {n: [] for n in batches}
    for _ in range(args.rounds):
        for n, batch in batches.items():
            lat[n].append(timed(lambda b=batch: shipped.predict(b)))
    for n, values in lat.items():
        med = statistics.median(values)
        print(f"predict {n:6d} rows: median {med * 1e3:9.1f} ms ({med / n * 1e6:8.1f} us/row)")

    # numpy forest vs scikit-learn predict on the same trees
    from sklearn.ensemble import HistGradientBoostingRegressor

    from layerwise.estimators.gbt import Forest
    from layerwise.features import feature_frame

    conv = sample[sample["layer"] == "conv"]
    X = feature_frame(conv, "conv").to_numpy()
    y = np.log(conv["time_ms_median"].to_numpy())
    model = HistGradientBoostingRegressor(max_iter=300, max_leaf_nodes=127).fit(X, y)
    forest = Forest.from_sklearn(model)
    probe = X[:5000]
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours.append(timed(lambda: forest.predict(probe)))
        theirs.append(timed(lambda: model.predict(probe)))
    print(f"forest of 300 trees x 127 leaves on 5000 rows: numpy "
          f"{statistics.median(ours) * 1e3:.0f} ms, scikit-learn "
          f"{statistics.median(theirs) * 1e3:.0f} ms, ratio "
          f"{statistics.median(ours) / statistics.median(theirs):.1f}x; max |diff| "
          f"{np.abs(forest.predict(probe) - model.predict(probe)).max():.2e}")
    size = sum(f.stat().st_size for f in SHIPPED_DIR.iterdir())
    print(f"shipped predictor size: {size / 1e6:.2f} MB")
    pd.set_option("display.width", 120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
