"""``jobcast report``: one self-contained HTML page about the store and every fitted model."""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ingest.store import Store
from models.dataset import progress_points
from models.e2e import FittedModel, load_models
from models.evaluation import held_out_predictions

# How the report names each kind of cross-validation.
KIND_LABELS = {"leave-one-run-out": "held out", "tail-holdout": "tail hold-out"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def predicted_vs_actual_png(pred: pd.DataFrame) -> str:
    """``held_out_predictions`` against the actual totals, log-log, as base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    for (cv_kind, phase), df in pred.groupby(["cv_kind", "phase"]):
        kind = KIND_LABELS.get(cv_kind, cv_kind)
        marker = "o" if kind == "held out" else "^"
        ax.errorbar(
            df["actual"],
            df["predicted"],
            yerr=[df["predicted"] - df["low"], df["high"] - df["predicted"]],
            fmt=marker,
            alpha=0.7,
            capsize=2,
            label=f"{phase}, {kind} ({len(df)})",
        )
    lo = max(min(pred["actual"].min(), pred["predicted"].min()) * 0.7, 1e-3)
    hi = max(pred["actual"].max(), pred["predicted"].max()) * 1.4
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="identity")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
    ax.set_xlabel("actual phase time of a run (s)")
    ax.set_ylabel("predicted (s), bars: 90 % interval")
    ax.set_title("End-to-end models: predicted vs actual run totals")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    data = _png(fig)
    plt.close(fig)
    return data


def _table(df: pd.DataFrame) -> str:
    return df.to_html(
        index=False, border=0, classes="t", na_rep="–", float_format=lambda v: f"{v:,.2f}"
    )


def _warnings(m: FittedModel) -> list[str]:
    e = m.estimator
    out = []
    if e.batch_range_[0] == e.batch_range_[1]:
        out.append(
            f"one batch size ({e.batch_range_[0]:.0f}): other batch sizes are extrapolated and "
            "bounded by the per-step and per-sample forms"
        )
    if e.n_runs_ < 2:
        out.append("one run: validated on the second half of its own curve only")
    if e.cv_mape_ is not None and e.cv_mape_ > 10:
        out.append(f"cross-validated error {e.cv_mape_:.1f} % is high")
    return out


CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.6em} h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em}
table.t{border-collapse:collapse;font-size:.85em;margin:.5em 0}
table.t th,table.t td{border:1px solid #ddd;padding:3px 8px;text-align:right}
table.t th{background:#f3f3f3}
table.t td:first-child,table.t th:first-child{text-align:left}
.warn{color:#a15c00} img{max-width:100%}
"""


def build_report(store: Store) -> str:
    """The HTML text of the report."""
    runs = store.runs()
    models = load_models(store)
    counts = store.counts()
    parts = [
        f"<h1>jobcast report</h1><p>Store <code>{html.escape(store.url)}</code>: "
        f"{counts['files']} files, {counts['runs']} runs, {counts['segments']} phase segments. "
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.</p>"
    ]
    if runs:
        frame = pd.DataFrame([{"network": r.network, "deployment": r.deployment} for r in runs])
        coverage = frame.groupby(["network", "deployment"]).size().unstack(fill_value=0)
        parts.append("<h2>Coverage: runs per network × deployment</h2>")
        parts.append(coverage.to_html(border=0, classes="t"))
    else:
        parts.append("<p>The store holds no runs yet: <code>jobcast ingest PATH</code>.</p>")
    if models:
        table = pd.DataFrame(
            [
                {
                    "model": m.model_id,
                    "form": m.estimator.form_,
                    "runs": m.estimator.n_runs_,
                    "CV MAPE %": m.estimator.cv_mape_,
                    "CV": m.estimator.cv_kind_,
                    "90 % interval ±%": 100 * m.estimator.half_width_,
                    "batch range": "–".join(f"{b:.0f}" for b in m.estimator.batch_range_),
                    "iterations range": "–".join(f"{i:,.0f}" for i in m.estimator.iteration_range_),
                }
                for m in models
            ]
        )
        parts += ["<h2>End-to-end models and their cross-validated error</h2>", _table(table)]
        pred = held_out_predictions(models, progress_points(store))
        if not pred.empty:
            ape = 100 * np.abs(pred["predicted"] - pred["actual"]) / pred["actual"]
            held = pred["cv_kind"] == "leave-one-run-out"
            inside = ((pred["low"] <= pred["actual"]) & (pred["actual"] <= pred["high"]))[held]
            summary = (
                f"Held-out runs: {int(held.sum())}, MAPE {ape[held].mean():.2f} %, "
                f"{inside.mean():.0%} inside their 90 % interval."
                if held.any()
                else "No model has two runs yet: every point below is a tail hold-out "
                "(the second half of a run predicted from its first half)."
            )
            parts += [
                "<h2>Predicted vs actual</h2>",
                f"<p>{summary}</p>",
                f'<img alt="predicted vs actual" src="data:image/png;base64,'
                f'{predicted_vs_actual_png(pred)}">',
            ]
        warn_rows = [(m.model_id, w) for m in models for w in _warnings(m)]
        parts.append("<h2>Extrapolation and data warnings</h2>")
        if warn_rows:
            parts.append(
                "<ul>"
                + "".join(
                    f"<li><code>{html.escape(k)}</code>: "
                    f'<span class="warn">{html.escape(w)}</span></li>'
                    for k, w in warn_rows
                )
                + "</ul>"
            )
        else:
            parts.append("<p>None.</p>")
    else:
        parts.append("<p>No fitted models: <code>jobcast fit</code>.</p>")
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>jobcast report</title><style>{CSS}</style></head><body>{body}</body></html>"
    )


def write_report(store: Store, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(build_report(store), encoding="utf-8")
    return path
