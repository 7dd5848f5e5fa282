"""Accuracy of the layer predictors on the published six-GPU data (Justus et al. 2018).

1. Random 80/10/10 split per GPU (as the paper): every model trains on the 80 %, the 10 %
   validation split picks the per-layer-type default ("auto"), and the 10 % test split is
   scored per GPU (RMSE in ms and MAPE), next to the paper's MLP RMSE. Also reports the
   coverage of the 90 % intervals on the test split and the data's noise floor (row CVs).
2. Leave-one-GPU-out: train on five GPUs (hardware features from the GPU catalog), predict
   every row of the sixth.

    .venv/bin/python benchmarks/layerwise_accuracy.py [--data-dir DIR] [--models gbt,linear]
        [--logo-models gbt,linear] [--mlp-max-rows 40000] [--mlp-epochs 30] [--json FILE]
        [--markdown FILE]

MLPs train on a random subsample (``--mlp-max-rows``) for a bounded number of epochs so the
script stays within minutes on a few CPU cores; the tables say so.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import lib  # noqa: F401  (sys.path: the repository, tests/)
import numpy as np
import pandas as pd

from layerwise.predictor import LayerPredictor, metrics
from layerwise.published import (
    PAPER_RMSE_MS,
    PUBLISHED_GPUS,
    PUBLISHED_LAYERS,
    load_published,
)

LAYERS = PUBLISHED_LAYERS


def split_80_10_10(rows: pd.DataFrame, seed: int) -> pd.Series:
    """'train' / 'val' / 'test' label per row, random within each (layer, GPU) file."""
    rng = np.random.default_rng(seed)
    label = pd.Series("train", index=rows.index, dtype=object)
    for _, idx in rows.groupby(["layer", "gpu"]).groups.items():
        perm = rng.permutation(np.asarray(idx))
        n = len(perm)
        label[perm[int(0.8 * n):int(0.9 * n)]] = "val"
        label[perm[int(0.9 * n):]] = "test"
    return label


def model_params(args: argparse.Namespace) -> dict[str, dict]:
    mlp = {"epochs": args.mlp_epochs, "max_rows": args.mlp_max_rows}
    return {
        "gbt": {"max_iter": args.gbt_iter, "max_leaf_nodes": args.gbt_leaves},
        "mlp": dict(mlp),
        "resmlp": dict(mlp),
    }


def per_gpu_scores(rows: pd.DataFrame, pred: pd.DataFrame) -> pd.DataFrame:
    records = []
    for (layer, gpu), part in rows.groupby(["layer", "gpu"]):
        p = pred.loc[part.index]
        t = part["time_ms_median"].to_numpy()
        inside = (t >= p["low_ms"].to_numpy()) & (t <= p["high_ms"].to_numpy())
        records.append({"layer": layer, "gpu": gpu, **metrics(t, p["predicted_ms"].to_numpy()),
                        "coverage": float(inside.mean())})
    return pd.DataFrame(records)


def noise_floor(rows: pd.DataFrame) -> pd.DataFrame:
    cv = rows["time_ms_std"] / rows["time_ms_median"]
    return (cv.groupby([rows["layer"], rows["gpu"]]).median() * 100).rename("median_cv_pct")


def random_split_study(rows: pd.DataFrame, models: list[str], args) -> dict:
    label = split_80_10_10(rows, args.seed)
    train, val, test = (rows[label == s] for s in ("train", "val", "test"))
    params = model_params(args)
    results, fit_s, validation = {}, {}, []
    for name in models:
        single = LayerPredictor(model=name, params=params, refit=False,
                                unseen_interval_refits=False,
                                random_state=args.seed)
        start = time.perf_counter()
        single.fit(train, validation=val)
        fit_s[name] = time.perf_counter() - start
        results[name] = per_gpu_scores(test, single.predict(test))
        validation.append(single.validation_table())
        print(f"[random split] {name}: fitted in {fit_s[name]:.0f} s", flush=True)
    validation = pd.concat(validation, ignore_index=True).drop(columns="chosen")
    # "auto" = per layer type, the model with the lowest validation MAPE (as LayerPredictor).
    chosen = {layer: part.sort_values("mape")["model"].iloc[0]
              for layer, part in validation.groupby("layer")}
    results["auto"] = pd.concat(
        [results[m][results[m]["layer"] == layer] for layer, m in chosen.items()],
        ignore_index=True)
    return {"results": results, "chosen": chosen, "validation": validation,
            "fit_seconds": fit_s, "noise": noise_floor(rows)}


def logo_study(rows: pd.DataFrame, models: list[str], args) -> pd.DataFrame:
    params = model_params(args)
    records = []
    for held in PUBLISHED_GPUS:
        train = rows[rows["gpu"] != held]
        test = rows[rows["gpu"] == held]
        for name in models:
            start = time.perf_counter()
            pred = LayerPredictor(model=name, params=params, refit=False,
                                  unseen_interval_refits=not args.logo_no_intervals,
                                  random_state=args.seed).fit(train).predict(test)
            for layer in LAYERS:
                sel = test["layer"] == layer
                t = test.loc[sel, "time_ms_median"].to_numpy()
                p = pred.loc[sel]
                inside = (t >= p["low_ms"].to_numpy()) & (t <= p["high_ms"].to_numpy())
                records.append({"held_out": held, "model": name, "layer": layer,
                                **metrics(t, p["predicted_ms"].to_numpy()),
                                "coverage": float(inside.mean())})
            print(f"[leave-one-out] {held} {name}: {time.perf_counter() - start:.0f} s",
                  flush=True)
    return pd.DataFrame(records)


def paper_table(study: dict, layer: str) -> pd.DataFrame:
    best = study["results"]["auto"]
    best = best[best["layer"] == layer].set_index("gpu")
    out = pd.DataFrame(index=list(PUBLISHED_GPUS))
    out["paper_rmse_ms"] = pd.Series(PAPER_RMSE_MS[layer])
    out["target_rmse_ms"] = out["paper_rmse_ms"] / 2
    out["rmse_ms"] = best["rmse_ms"]
    out["mape_pct"] = best["mape"]
    out["coverage90"] = best["coverage"]
    out["noise_cv_pct"] = study["noise"].loc[layer]
    for name, res in study["results"].items():
        if name == "auto":
            continue
        res = res[res["layer"] == layer].set_index("gpu")
        out[f"{name}_rmse"] = res["rmse_ms"]
        out[f"{name}_mape"] = res["mape"]
    return out


def to_markdown(frame: pd.DataFrame, digits: int = 3) -> str:
    frame = frame.copy()
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join([frame.index.name or ""] + cols) + " |",
             "|" + "---|" * (len(cols) + 1)]
    for idx, row in frame.iterrows():
        cells = [f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join([str(idx)] + cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="justus2018 folder")
    parser.add_argument("--models", default="gbt,linear,mlp,resmlp")
    parser.add_argument("--logo-models", default="gbt,linear")
    parser.add_argument("--gbt-iter", type=int, default=1000)
    parser.add_argument("--gbt-leaves", type=int, default=127)
    parser.add_argument("--mlp-epochs", type=int, default=30)
    parser.add_argument("--mlp-max-rows", type=int, default=40000)
    parser.add_argument("--nrows", type=int, default=None, help="rows per file (quick runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-logo", action="store_true")
    parser.add_argument("--skip-random", action="store_true")
    parser.add_argument("--logo-no-intervals", action="store_true",
                        help="skip the leave-one-device-out interval calibration (faster)")
    parser.add_argument("--json", dest="json_out", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    rows = load_published(args.data_dir, nrows=args.nrows)
    models = [m for m in args.models.split(",") if m]
    print(f"{len(rows)} rows; models {models}", flush=True)
    md: list[str] = []
    payload: dict = {"args": vars(args)}
    if not args.skip_random:
        study = random_split_study(rows, models, args)
        md += ["## Random 80/10/10 split per GPU (test 10 %)", ""]
        md.append(f"Default chosen by validation MAPE: {study['chosen']}; fit seconds "
                  f"{ {k: round(v) for k, v in study['fit_seconds'].items()} }")
        payload.update(chosen=study["chosen"], fit_seconds=study["fit_seconds"])
        for layer in LAYERS:
            table = paper_table(study, layer)
            table.index.name = "gpu"
            md += ["", f"### {layer}", "", to_markdown(table, 3 if layer == "conv" else 4)]
            payload[f"random_{layer}"] = table.reset_index().to_dict("records")
        val = study["validation"].set_index(["layer", "model"])
        md += ["", "### validation split (all GPUs pooled)", "", to_markdown(val, 4)]
        payload["validation"] = study["validation"].to_dict("records")
        print("\n".join(md), flush=True)
    n_random = len(md)

    if not args.skip_logo:
        logo_models = [m for m in args.logo_models.split(",") if m]
        logo = logo_study(rows, logo_models, args)
        payload["leave_one_gpu_out"] = logo.to_dict("records")
        for layer in LAYERS:
            part = logo[logo["layer"] == layer].pivot(
                index="held_out", columns="model", values=["mape", "rmse_ms", "coverage"])
            part.columns = [f"{m}_{k}" for k, m in part.columns]
            part = part.reindex(list(PUBLISHED_GPUS))
            part.index.name = "held_out"
            md += ["", f"## Leave-one-GPU-out, {layer}", "", to_markdown(part, 3)]
    text = "\n".join(md)
    print("\n".join(md[n_random:]))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(payload, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
