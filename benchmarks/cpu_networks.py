"""Must-show #3: layer microbenchmarks on this CPU -> predictor -> whole-network forecasts.

In ONE process:
1. run (or resume) a campaign of layer configurations from the ``cpu`` feature space
   (conv, dense, dwconv, pool, bn, act, add; time-bounded by ``--bench-minutes``);
2. train a layer predictor on the ok rows (helper C's ``LayerPredictor`` when importable,
   and/or a small HistGradientBoosting adapter on log time), report its per-layer-type
   error on a 10 % hold-out;
3. measure the real per-batch training-step time of three Keras networks (LeNet-style,
   a small VGG, MobileNetV2 at 96x96, ``weights=None``) with the chosen optimizer: Keras
   ``model.fit`` per-batch time (median of batch-to-batch intervals) and a bare
   ``tf.function`` train step, repetitions interleaved across networks;
4. forecast each network with ``forecast_network`` (per-call overhead counted once and
   per layer) and report the error against both measurements; the same forecast with the
   network's own layers timed directly ("measured-layers") separates the composition error
   from the predictor error; ``lono_*`` rescales a forecast by the measured/predicted ratio of
   the two other networks (leave-one-network-out calibration).

Usage (from the repository root):
    .venv/bin/python benchmarks/cpu_networks.py --samples 4000 --bench-minutes 14 \
        --csv benchmarks/results/cpu_bench.csv --json benchmarks/results/cpu_networks.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pandas as pd

from fleet.quiet_tf import quiet_import
from layerwise.bench import TimingPlan, bench_row, run_campaign
from layerwise.forecast import forecast_network
from layerwise.layers import KINDS, layer_of
from layerwise.network import build_application, spec_to_keras

LAYERS = ["conv", "dense", "dwconv", "pool", "bn", "act", "add"]

LENET = {
    "name": "lenet", "input_shape": [28, 28, 1],
    "layers": [
        {"type": "conv", "filters": 6, "kernel": 5, "padding": "same", "activation": "relu"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "conv", "filters": 16, "kernel": 5, "padding": "valid", "activation": "relu"},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "flatten"},
        {"type": "dense", "units": 120, "activation": "relu"},
        {"type": "dense", "units": 84, "activation": "relu"},
        {"type": "dense", "units": 10, "activation": "softmax"},
    ],
}
SMALL_VGG = {
    "name": "small-vgg", "input_shape": [32, 32, 3],
    "layers": [
        {"type": "conv", "filters": 32, "kernel": 3, "activation": "relu", "repeat": 2},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "conv", "filters": 64, "kernel": 3, "activation": "relu", "repeat": 2},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "conv", "filters": 128, "kernel": 3, "activation": "relu", "repeat": 2},
        {"type": "pool", "pool": "max", "size": 2},
        {"type": "flatten"},
        {"type": "dense", "units": 256, "activation": "relu"},
        {"type": "dense", "units": 10, "activation": "softmax"},
    ],
}
NETWORKS = [("lenet", 64), ("small-vgg", 16), ("mobilenetv2-96", 16)]


def build(name: str):
    """The Keras model of a benchmark network."""
    if name == "lenet":
        return spec_to_keras(LENET)
    if name == "small-vgg":
        return spec_to_keras(SMALL_VGG)
    return build_application("MobileNetV2", 96)


# --------------------------------------------------------------------------- predictors


class HgbLayerPredictor:
    """Fallback predictor: one HistGradientBoostingRegressor per layer type on log time.

    Features: the layer's hyper-parameters, optimizer/activation/padding/pool codes and the
    registry's derived costs (log FLOPs, bytes); interval from hold-out residual quantiles.
    """

    def __init__(self, random_state: int = 0):
        self.random_state = random_state

    @staticmethod
    def _features(rows: pd.DataFrame, layer: str) -> np.ndarray:
        spec = KINDS[layer]
        cols = []
        for col in (*spec.columns, "optimizer"):
            values = rows[col]
            if col in ("padding", "activation", "optimizer", "pool_type"):
                cats = {"padding": ("same", "valid"), "pool_type": ("max", "avg"),
                        "activation": ("none", "relu", "tanh", "sigmoid"),
                        "optimizer": ("none", "sgd", "adadelta", "adagrad", "momentum", "adam",
                                      "rmsprop")}[col]
                cols.append(values.astype(str).map({c: i for i, c in enumerate(cats)})
                            .fillna(-1).to_numpy(float))
            elif col == "use_bias":
                cols.append(values.astype(str).str.lower().isin(("true", "1", "1.0"))
                            .to_numpy(float))
            else:
                cols.append(pd.to_numeric(values).to_numpy(float))
        derived = pd.DataFrame([spec.features(r) for r in rows.to_dict("records")])
        for col in ("flops", "bytes_in", "bytes_out", "bytes_weights", "output_size"):
            cols.append(np.log1p(derived[col].to_numpy(float)))
        return np.column_stack(cols)

    def fit(self, rows: pd.DataFrame) -> HgbLayerPredictor:
        from sklearn.ensemble import HistGradientBoostingRegressor

        self.models_, self.bands_ = {}, {}
        rng = np.random.default_rng(self.random_state)
        for layer, part in rows.groupby(rows.apply(layer_of, axis=1)):
            x = self._features(part, layer)
            y = np.log(part["time_ms_median"].to_numpy(float))
            hold = rng.random(len(part)) < 0.15
            model = HistGradientBoostingRegressor(max_iter=400, learning_rate=0.06,
                                                  random_state=self.random_state)
            model.fit(x[~hold], y[~hold])
            resid = y[hold] - model.predict(x[hold]) if hold.sum() > 10 else np.array([0.0])
            self.bands_[layer] = (float(np.quantile(resid, 0.05)),
                                  float(np.quantile(resid, 0.95)))
            self.models_[layer] = model.fit(x, y)
        return self

    @property
    def known_layers(self) -> set[str]:
        return set(self.models_)

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        out = pd.DataFrame(index=rows.index, columns=["predicted_ms", "low_ms", "high_ms"],
                           dtype=float)
        kinds = rows.apply(layer_of, axis=1)
        for layer in kinds.unique():
            sel = kinds == layer
            if layer not in self.models_:
                raise ValueError(f"no model for layer type {layer!r}")
            log_ms = self.models_[layer].predict(self._features(rows[sel], layer))
            lo, hi = self.bands_[layer]
            out.loc[sel, "predicted_ms"] = np.exp(log_ms)
            out.loc[sel, "low_ms"] = np.exp(log_ms + lo)
            out.loc[sel, "high_ms"] = np.exp(log_ms + hi)
        return out


class MeasuredLayers:
    """"Oracle" predictor: times each requested layer row right now (bench_row, cached).

    Forecasting with it isolates the error of composing layer times into a network time
    from the error of the learned predictor.
    """

    def __init__(self, plan: TimingPlan):
        self.plan = plan
        self.cache: dict[tuple, dict] = {}
        self.known_layers = set(KINDS)

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        out = pd.DataFrame(index=rows.index, columns=["predicted_ms", "low_ms", "high_ms"],
                           dtype=float)
        for idx, row in rows.iterrows():
            layer = layer_of(row)
            cols = ("layer", *KINDS[layer].columns, "optimizer")
            clean = {c: row[c] for c in cols if c in row.index}
            clean["layer"] = layer
            key = tuple(sorted((k, str(v)) for k, v in clean.items()))
            if key not in self.cache:
                self.cache[key] = bench_row({**clean, "precision": 32, "index": 0}, "cpu",
                                            self.plan)
            rec = self.cache[key]
            if rec["status"] != "ok":
                raise RuntimeError(f"measuring {clean} failed: {rec['error']}")
            out.loc[idx] = [rec["time_ms_median"], rec["time_ms_min"], rec["time_ms_max"]]
        return out


def make_predictors(which: str) -> dict:
    """Name -> unfitted predictor; C's LayerPredictor when importable."""
    found = {}
    if which in ("auto", "layerwise", "both"):
        try:
            from layerwise.predictor import LayerPredictor

            found["LayerPredictor"] = LayerPredictor()
        except ImportError as exc:
            print(f"layerwise.predictor.LayerPredictor not available ({exc}); using the "
                  "HistGradientBoosting adapter", file=sys.stderr)
    if which in ("hgb", "both") or not found:
        found["hgb-adapter"] = HgbLayerPredictor()
    return found


def holdout_errors(predictor, train: pd.DataFrame, test: pd.DataFrame) -> dict:
    """Per-layer-type MAPE / RMSE (ms) / median APE on the hold-out."""
    pred = predictor.predict(test)["predicted_ms"].to_numpy(float)
    true = test["time_ms_median"].to_numpy(float)
    kinds = test.apply(layer_of, axis=1).to_numpy()
    report = {}
    for layer in sorted(set(kinds)):
        sel = kinds == layer
        ape = np.abs(pred[sel] - true[sel]) / true[sel]
        report[layer] = {"n": int(sel.sum()), "mape_pct": 100 * float(ape.mean()),
                         "median_ape_pct": 100 * float(np.median(ape)),
                         "rmse_ms": float(np.sqrt(np.mean((pred[sel] - true[sel]) ** 2)))}
    return report


# --------------------------------------------------------------------------- measurement


def _optimizer(keras, name: str):
    return {"sgd": lambda: keras.optimizers.SGD(0.01),
            "momentum": lambda: keras.optimizers.SGD(0.01, momentum=0.9),
            "adam": lambda: keras.optimizers.Adam(), "rmsprop": lambda: keras.optimizers.RMSprop(),
            "adagrad": lambda: keras.optimizers.Adagrad(),
            "adadelta": lambda: keras.optimizers.Adadelta()}[name]()


class _BatchClock:
    """Keras callback collecting batch-to-batch intervals (seconds)."""

    def __init__(self):
        self.stamps: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.stamps.append(time.perf_counter())


def measure_networks(optimizer: str, reps: int, steps: int) -> dict:
    """Median per-batch training time (ms) of each network: Keras fit and a bare train step."""
    keras = quiet_import("keras")
    tf = quiet_import("tensorflow")

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.inner = _BatchClock()

        def on_train_batch_end(self, batch, logs=None):
            self.inner.on_train_batch_end(batch, logs)

    setups = {}
    for name, batch in NETWORKS:
        keras.utils.set_random_seed(0)
        model = build(name)
        model.compile(optimizer=_optimizer(keras, optimizer),
                      loss="sparse_categorical_crossentropy")
        shape = (batch, *model.input_shape[1:])
        x = tf.random.normal(shape, seed=1)
        y = tf.random.uniform((batch,), 0, int(model.output_shape[-1]), dtype=tf.int32, seed=2)
        data = tf.data.Dataset.from_tensors((x, y)).repeat()
        model_b = build(name)  # a twin for the bare step, so optimizer states do not mix
        opt_b = _optimizer(keras, optimizer)
        loss_fn = keras.losses.SparseCategoricalCrossentropy()

        def make_step(model_b=model_b, opt_b=opt_b, loss_fn=loss_fn):
            @tf.function
            def step(images, labels):
                with tf.GradientTape() as tape:
                    loss = loss_fn(labels, model_b(images, training=True))
                grads = tape.gradient(loss, model_b.trainable_variables)
                opt_b.apply(grads, model_b.trainable_variables)
                return loss
            return step

        setups[name] = dict(model=model, data=data, x=x, y=y, step=make_step(), batch=batch)
        model.fit(data, epochs=1, steps_per_epoch=3, verbose=0)  # warm-up / trace
        for _ in range(3):
            setups[name]["step"](x, y).numpy()

    fit_ms = {name: [] for name in setups}
    step_ms = {name: [] for name in setups}
    for _ in range(reps):
        for name, s in setups.items():  # interleaved
            clock = Clock()
            s["model"].fit(s["data"], epochs=1, steps_per_epoch=steps + 1, verbose=0,
                           callbacks=[clock])
            fit_ms[name].extend(1000 * np.diff(clock.inner.stamps))
            start = time.perf_counter()
            for _ in range(steps):
                loss = s["step"](s["x"], s["y"])
            loss.numpy()
            step_ms[name].append(1000 * (time.perf_counter() - start) / steps)
    return {
        name: {"batch_size": setups[name]["batch"],
               "fit_ms_median": float(statistics.median(fit_ms[name])),
               "fit_ms_p10": float(np.percentile(fit_ms[name], 10)),
               "fit_ms_p90": float(np.percentile(fit_ms[name], 90)),
               "step_ms_median": float(statistics.median(step_ms[name])),
               "step_ms_min": float(min(step_ms[name])),
               "step_ms_max": float(max(step_ms[name])),
               "model": setups[name]["model"]}
        for name in setups
    }


# --------------------------------------------------------------------------- main


def calibrate_leave_one_network_out(results: list[dict]) -> None:
    """Add ``lono_ms``/``lono_error_pct``: the forecast scaled by the geometric mean of
    measured/predicted (Keras fit) of the OTHER networks, same predictor and overhead mode."""
    for r in results:
        others = [o for o in results if o["predictor"] == r["predictor"]
                  and o["call_overhead"] == r["call_overhead"] and o["network"] != r["network"]]
        factor = math.exp(statistics.mean(math.log(o["fit_ms"] / o["predicted_ms"])
                                          for o in others)) if others else 1.0
        r["lono_factor"] = factor
        r["lono_ms"] = r["predicted_ms"] * factor
        r["lono_error_pct"] = 100 * (r["lono_ms"] - r["fit_ms"]) / r["fit_ms"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default="benchmarks/results/cpu_bench.csv")
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bench-minutes", type=float, default=14.0)
    parser.add_argument("--target-ms", type=float, default=20.0)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--predictor", default="auto", choices=["auto", "layerwise", "hgb",
                                                                "both"])
    parser.add_argument("--reps", type=int, default=5, help="network measurement repetitions")
    parser.add_argument("--steps", type=int, default=15, help="batches per repetition")
    parser.add_argument("--json", default="benchmarks/results/cpu_networks.json")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()

    # 1. campaign
    last = [0.0]

    def progress(done: int, total: int, row: dict | None) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            print(f"  bench {done}/{total} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)

    camp = run_campaign(args.csv, LAYERS, args.samples, seed=args.seed, space="cpu",
                        device="cpu", plan=TimingPlan(warmup=3, reps=5,
                                                      target_rep_ms=args.target_ms),
                        max_seconds=60 * args.bench_minutes, progress=progress, isolate=True)
    bench_s = time.perf_counter() - t0
    rows = pd.read_csv(args.csv)
    ok = rows[rows["status"] == "ok"].reset_index(drop=True)
    print(f"campaign: {camp.written} new rows in {camp.seconds:.0f} s; file has {len(rows)} rows "
          f"({len(ok)} ok)", file=sys.stderr)

    # 2. predictors
    rng = np.random.default_rng(args.seed)
    test_mask = rng.random(len(ok)) < 0.1
    train, test = ok[~test_mask], ok[test_mask]
    fitted, holdout = {}, {}
    for name, predictor in make_predictors(args.predictor).items():
        start = time.perf_counter()
        fitted[name] = predictor.fit(train)
        holdout[name] = {"fit_seconds": time.perf_counter() - start,
                         "per_layer": holdout_errors(fitted[name], train, test)}
        print(f"{name}: fitted in {holdout[name]['fit_seconds']:.1f} s", file=sys.stderr)

    # 3. real networks, same process
    start = time.perf_counter()
    measured = measure_networks(args.optimizer, args.reps, args.steps)
    measure_s = time.perf_counter() - start

    # 4. forecasts (the oracle times each layer of the networks now, in this process)
    plan = TimingPlan(warmup=3, reps=5, target_rep_ms=args.target_ms)
    start = time.perf_counter()
    oracle = MeasuredLayers(plan)
    results = []
    for net, m in measured.items():
        for pname, predictor in [*fitted.items(), ("measured-layers", oracle)]:
            for overhead in ("once", "per-layer"):
                fc = forecast_network(m["model"], device="cpu", batch_size=m["batch_size"],
                                      optimizer=args.optimizer, predictor=predictor,
                                      call_overhead=overhead)
                pred_ms = 1000 * fc["batch_seconds"]
                results.append({
                    "network": net, "batch_size": m["batch_size"], "predictor": pname,
                    "call_overhead": overhead, "predicted_ms": pred_ms,
                    "low_ms": 1000 * fc["low"], "high_ms": 1000 * fc["high"],
                    "fit_ms": m["fit_ms_median"], "step_ms": m["step_ms_median"],
                    "error_vs_fit_pct": 100 * (pred_ms - m["fit_ms_median"]) / m["fit_ms_median"],
                    "error_vs_step_pct": 100 * (pred_ms - m["step_ms_median"])
                    / m["step_ms_median"],
                    "fit_in_interval": bool(fc["low"] * 1000 <= m["fit_ms_median"]
                                            <= fc["high"] * 1000),
                    "layers": fc["layers_count"], "rough_layers": len(fc["unknown_layers"]),
                    "gflops_per_batch": fc["flops_per_batch"] / 1e9,
                })
    oracle_s = time.perf_counter() - start
    calibrate_leave_one_network_out(results)
    summary = {
        "command": "python " + " ".join(sys.argv),
        "device": camp.device, "optimizer": args.optimizer,
        "bench": {"rows": len(rows), "ok": len(ok), "new_rows": camp.written,
                  "seconds": bench_s, "samples": args.samples, "seed": args.seed,
                  "per_layer_rows": ok["layer"].value_counts().to_dict()},
        "holdout": holdout,
        "measured": {k: {kk: vv for kk, vv in v.items() if kk != "model"}
                     for k, v in measured.items()},
        "measure_seconds": measure_s,
        "oracle_seconds": oracle_s,
        "forecasts": results,
        "total_seconds": time.perf_counter() - t0,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=2, default=float) + "\n")
    table = pd.DataFrame(results).drop(columns=["layers", "gflops_per_batch", "lono_factor",
                                                "lono_ms"])
    print(table.round(2).to_string(index=False))
    for name, h in holdout.items():
        print(f"\nhold-out ({name}):")
        print(pd.DataFrame(h["per_layer"]).T.round(2).to_string())
    print(f"\ntotal {summary['total_seconds']:.0f} s (bench {bench_s:.0f} s, "
          f"networks {measure_s:.0f} s, layer oracle {oracle_s:.0f} s)")
    return 0 if all(math.isfinite(r["predicted_ms"]) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
