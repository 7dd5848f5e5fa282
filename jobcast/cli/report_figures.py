"""The report's figures: each function takes a small frame and returns a base64 PNG.

Rules: every figure has a title, labelled axes with units, and says "no data" instead of
raising when its frame is empty; colours come from one palette; matplotlib runs headless
(``Agg``) and every figure is closed after it is encoded.
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np
import pandas as pd

PALETTE = ["#3b6ea8", "#d9822b", "#4c9a5b", "#b2434b", "#7d5ba6", "#8c6d46", "#c45ca2", "#666"]
SHOWN = 40  # bars per per-model figure: the worst models are shown
KIND_LABELS = {"leave-one-run-out": "held-out run", "tail-holdout": "tail hold-out"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _encode(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _empty(title: str, why: str) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 1.6))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.4, why, ha="center", va="center", color="#666")
    return _encode(fig)


def timeline_png(runs: pd.DataFrame) -> str:
    """Runs per month by log format (``runs``: columns ``start_time`` (unix s), ``format``)."""
    title = "Data time span: runs per month by log format"
    dated = runs.dropna(subset=["start_time"])
    if dated.empty:
        return _empty(title, "no run has a start time")
    plt = _plt()
    months = pd.to_datetime(dated["start_time"], unit="s").dt.to_period("M")
    table = pd.crosstab(months, dated["format"]).sort_index()
    full = pd.period_range(table.index.min(), table.index.max(), freq="M")
    table = table.reindex(full, fill_value=0)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    bottom = np.zeros(len(table))
    x = np.arange(len(table))
    for i, col in enumerate(table.columns):
        ax.bar(x, table[col], bottom=bottom, color=PALETTE[i % len(PALETTE)], label=col, width=0.9)
        bottom += table[col].to_numpy()
    step = max(1, len(table) // 12)
    ax.set_xticks(x[::step], [str(p) for p in table.index[::step]], rotation=45, ha="right")
    ax.set_ylabel("runs started")
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=3)
    return _encode(fig)


def outcomes_png(rejected: pd.Series, repaired: pd.Series) -> str:
    """Files rejected by reason and runs repaired by kind (two series: label -> count)."""
    title = "Ingest: files rejected (by reason) and runs repaired (by kind)"
    if rejected.empty and repaired.empty:
        return _empty(title, "nothing rejected, nothing repaired")
    plt = _plt()
    rows = max(len(rejected), len(repaired), 1)
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * rows + 1.6))
    for ax, series, colour, label in (
        (axes[0], rejected, PALETTE[3], "files rejected"),
        (axes[1], repaired, PALETTE[1], "runs repaired"),
    ):
        if series.empty:
            ax.axis("off")
            ax.text(0.5, 0.5, f"no {label}", ha="center", va="center", color="#666")
            continue
        s = series.sort_values()
        ax.barh([_short(str(k), 48) for k in s.index], s.to_numpy(), color=colour)
        for y, v in enumerate(s.to_numpy()):
            ax.text(v, y, f" {v}", va="center", fontsize=8)
        ax.set_xlabel(label)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(title)
    return _encode(fig)


def coverage_png(coverage: pd.DataFrame) -> str:
    """Runs per network (rows) x deployment (columns), as an annotated heatmap."""
    title = "Coverage: runs per network × deployment"
    if coverage.empty:
        return _empty(title, "no runs")
    plt = _plt()
    n_rows, n_cols = coverage.shape
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * n_cols + 3), max(2.5, 0.4 * n_rows + 1.8)))
    values = coverage.to_numpy(dtype=float)
    shown = np.where(values > 0, np.log10(np.maximum(values, 1)) + 1, 0)
    image = ax.imshow(shown, cmap="Blues", aspect="auto", vmin=0)
    for (r, c), v in np.ndenumerate(values):
        if v > 0:
            colour = "white" if shown[r, c] > 0.6 * shown.max() else "black"
            ax.text(c, r, f"{int(v)}", ha="center", va="center", fontsize=7, color=colour)
    ax.set_xticks(range(n_cols), [_short(str(c), 34) for c in coverage.columns], rotation=60,
                  ha="right", fontsize=7)
    ax.set_yticks(range(n_rows), [str(i) for i in coverage.index], fontsize=8)
    ax.set_xlabel("deployment")
    ax.set_ylabel("network")
    ax.set_title(title)
    bar = fig.colorbar(image, ax=ax, fraction=0.03)
    bar.set_label("log10(runs) + 1")
    return _encode(fig)


def model_error_png(models: pd.DataFrame) -> str:
    """Cross-validated error per model (columns ``model``, ``cv_mape``, ``thin``), log scale."""
    title = "End-to-end models: cross-validated error (MAPE)"
    data = models.dropna(subset=["cv_mape"])
    data = data[np.isfinite(data["cv_mape"].astype(float))]
    if data.empty:
        return _empty(title, "no model has a cross-validated error")
    plt = _plt()
    total = len(data)
    data = data.sort_values("cv_mape").tail(SHOWN)
    if total > SHOWN:
        title = f"{title}: the {SHOWN} highest of {total}"
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(data) + 1.5))
    colours = [PALETTE[3] if t else PALETTE[0] for t in data["thin"]]
    ax.barh([_short(m, 70) for m in data["model"]], np.maximum(data["cv_mape"], 1e-3),
            color=colours)
    ax.set_xscale("log")
    ax.axvline(5, color="#999", ls="--", lw=1)
    ax.set_xlabel("cross-validated MAPE (%), log scale; dashed: 5 %")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title + ("  (red: one run or one point)" if data["thin"].any() else ""))
    return _encode(fig)


def interval_coverage_png(pred: pd.DataFrame) -> str:
    """Share of held-out actuals inside each model's 90 % interval (``held_out_predictions``)."""
    title = "Interval coverage: held-out actuals inside the 90 % interval"
    if pred.empty:
        return _empty(title, "no held-out predictions")
    plt = _plt()
    inside = (pred["low"] <= pred["actual"]) & (pred["actual"] <= pred["high"])
    table = (
        pd.DataFrame({"model": pred["model_id"], "inside": inside})
        .groupby("model")["inside"]
        .agg(["mean", "size"])
        .sort_values(["mean", "size"], ascending=[False, True])
    )
    worst = f", the {SHOWN} lowest of {len(table)} models shown" if len(table) > SHOWN else ""
    table = table.tail(SHOWN)
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(table) + 1.5))
    colours = [PALETTE[2] if v >= 0.9 else PALETTE[1] for v in table["mean"]]
    ax.barh([f"{_short(m, 60)} (n={n})" for m, n in zip(table.index, table["size"], strict=True)],
            100 * table["mean"], color=colours)
    ax.axvline(90, color="#333", ls="--", lw=1)
    ax.set_xlim(0, 105)
    ax.set_xlabel("held-out points inside the interval (%); dashed: nominal 90 %")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"{title}: {inside.mean():.0%} of {len(pred)} overall{worst}", fontsize=10)
    return _encode(fig)


def predicted_vs_actual_png(pred: pd.DataFrame) -> str:
    """``held_out_predictions`` against the actual totals, log-log; every row is plotted."""
    title = "End-to-end models: predicted vs actual run totals"
    if pred.empty:
        return _empty(title, "no held-out predictions")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for i, ((cv_kind, phase), df) in enumerate(pred.groupby(["cv_kind", "phase"])):
        kind = KIND_LABELS.get(cv_kind, cv_kind)
        ax.errorbar(
            df["actual"], df["predicted"],
            yerr=[df["predicted"] - df["low"], df["high"] - df["predicted"]],
            fmt="o" if kind == "held-out run" else "^", color=PALETTE[i % len(PALETTE)],
            alpha=0.7, capsize=2, label=f"{phase}, {kind} ({len(df)})",
        )
    lo = max(min(pred["actual"].min(), pred["predicted"].min()) * 0.7, 1e-3)
    hi = max(pred["actual"].max(), pred["predicted"].max()) * 1.4
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="identity")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    ax.set_xlabel("actual phase time of a run (s)")
    ax.set_ylabel("predicted (s), bars: 90 % interval")
    ax.set_title(f"{title} ({len(pred)} points)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return _encode(fig)


def layerwise_calibration_png(obs: pd.DataFrame) -> str:
    """Observed / layerwise-predicted time per network x hardware (``network``, ``hardware``,
    ``predicted``, ``actual``): 1 is a calibrated layerwise forecast."""
    title = "Layerwise calibration: observed / layerwise forecast per network × hardware"
    if obs.empty:
        return _empty(title, "no stored run that the layerwise route can price")
    plt = _plt()
    ratio = obs.assign(ratio=obs["actual"] / obs["predicted"])
    ratio = ratio[np.isfinite(ratio["ratio"]) & (ratio["ratio"] > 0)]
    if ratio.empty:
        return _empty(title, "no finite ratio")
    groups = ratio.groupby(["network", "hardware"])["ratio"]
    table = groups.median().sort_values()
    counts = groups.size()
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(table) + 1.6))
    labels = [f"{n} · {_short(h, 40)} (n={counts[(n, h)]})" for n, h in table.index]
    colours = [PALETTE[2] if 0.8 <= v <= 1.25 else PALETTE[3] for v in table.to_numpy()]
    ax.barh(labels, table.to_numpy(), color=colours)
    ax.axvline(1, color="#333", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("median observed / predicted (log); green: within 0.8–1.25")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title)
    return _encode(fig)


def examples_png(examples: pd.DataFrame) -> str:
    """Example forecasts (``job``, ``hours``, ``low_h``, ``high_h``, ``cost``) with intervals."""
    title = "Forecasts for the team's common jobs (hours, 90 % interval; cost in USD)"
    data = examples.dropna(subset=["hours"])
    if data.empty:
        return _empty(title, "no forecast could be made")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(data) + 1.5))
    y = np.arange(len(data))
    ax.barh(y, data["hours"], color=PALETTE[0], alpha=0.8)
    ax.errorbar(data["hours"], y, xerr=[data["hours"] - data["low_h"],
                                         data["high_h"] - data["hours"]],
                fmt="none", ecolor="#333", capsize=3)
    for yi, (h, cost) in enumerate(zip(data["high_h"], data["cost"], strict=True)):
        text = f"  ${cost:,.0f}" if cost is not None and math.isfinite(cost) else "  (no price)"
        ax.text(h, yi, text, va="center", fontsize=8)
    ax.set_yticks(y, [_short(j, 70) for j in data["job"]], fontsize=7)
    ax.set_xlabel("forecast wall-clock time (h)")
    ax.set_title(title)
    return _encode(fig)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
