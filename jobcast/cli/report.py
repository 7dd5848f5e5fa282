"""``jobcast report``: one self-contained HTML page an ops lead reads at a glance.

Sections, in order: the data (time span, sources), ingest outcomes (files rejected, runs
repaired, why), coverage (heatmap), the end-to-end models (error, interval coverage,
predicted vs actual), example forecasts with time and cost for the store's most common jobs,
which model serves each key and why, layerwise calibration, and warnings grouped.

This module only renders: every frame comes from
:func:`jobcast.service.features.report_data.report_data`.

Rules: every number in a caption is computed from the same frame its figure plots; the page
fetches nothing (figures are inline PNG); a section whose data is missing says so instead of
failing, and anything a section could not compute is listed under "Warnings".
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jobcast.cli import report_figures as figs
from jobcast.service.features.report_data import (
    ReportData,
    report_data,
)
from jobcast.service.features.report_data import pattern as _pattern

if TYPE_CHECKING:
    from jobcast.service.features.stores import Store

__all__ = ["build_report", "render_report", "write_report"]

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.6em} h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em}
table.t{border-collapse:collapse;font-size:.85em;margin:.5em 0}
table.t th,table.t td{border:1px solid #ddd;padding:3px 8px;text-align:right}
table.t th{background:#f3f3f3}
table.t td:first-child,table.t th:first-child{text-align:left}
.warn{color:#a15c00} img.fig{max-width:100%;display:block;margin:.6em 0}
.kpi{display:inline-block;margin:0 1.5em .5em 0} .kpi b{font-size:1.4em;display:block}
details{margin:.2em 0} summary{cursor:pointer}
"""
# After load, the page records how many figures the browser decoded (a headless check reads it).
LOADED = (
    "<script>addEventListener('load',()=>document.documentElement.setAttribute("
    "'data-figures-loaded',[...document.images].filter(i=>i.complete&&i.naturalWidth>0)"
    ".length))</script>"
)


def _table(df: pd.DataFrame) -> str:
    return df.to_html(index=False, border=0, classes="t", na_rep="–",
                      float_format=lambda v: f"{v:,.2f}")


def _figure(alt: str, png: str) -> str:
    return f'<img class="fig" alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'


def _grouped(items: list[tuple[str, str]]) -> str:
    """``(subject, message)`` pairs grouped by message pattern, largest group first."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for subject, message in items:
        groups.setdefault(_pattern(message), []).append((subject, message))
    parts = []
    for _pattern_text, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        first = members[0][1]
        listed = "".join(f"<li><code>{html.escape(s)}</code>: {html.escape(m)}</li>"
                         for s, m in members[:50])
        more = f"<li>… and {len(members) - 50} more</li>" if len(members) > 50 else ""
        parts.append(f'<details><summary><span class="warn">{len(members)} ×</span> '
                     f"{html.escape(first)}</summary><ul>{listed}{more}</ul></details>")
    return "".join(parts) or "<p>None.</p>"




def _data_section(d: ReportData) -> list[str]:
    """Key figures, the time span and formats of the runs, and runs per month."""
    runs = d.runs
    dated = runs["start_time"].dropna()
    span = (f"{time.strftime('%Y-%m-%d', time.gmtime(dated.min()))} to "
            f"{time.strftime('%Y-%m-%d', time.gmtime(dated.max()))}" if len(dated) else "unknown")
    kpis = [("files", d.counts["files"]), ("runs", d.counts["runs"]),
            ("networks", runs["network"].nunique()), ("deployments", runs["deployment"].nunique()),
            ("systems", runs.loc[runs["system"] != "", "system"].nunique()),
            ("models", len(d.models))]
    return [
        "<h2>The data</h2><div>" + "".join(
            f'<span class="kpi"><b>{v:,}</b>{k}</span>' for k, v in kpis) + "</div>",
        f"<p>Runs started {span}. Formats: " + ", ".join(
            f"{f} ({n})" for f, n in runs["format"].value_counts().items()) + ".</p>",
        _figure("runs per month", figs.timeline_png(runs)),
    ]


def _ingest_section(d: ReportData) -> list[str]:
    """Files ingest rejected and repairs it made, counted by reason and kind."""
    return [
        "<h2>Ingest: rejected and repaired</h2>",
        f"<p>{len(d.rejection_rows)} files rejected (recorded by ingest), "
        f"{int(d.repaired.sum())} repairs in {d.repaired_runs} stored runs.</p>",
        _figure("rejected and repaired", figs.outcomes_png(d.rejected, d.repaired)),
    ]


def _coverage_section(d: ReportData) -> list[str]:
    """The network x deployment heatmap of the stored runs."""
    parts = ["<h2>Coverage</h2>"]
    if d.runs.empty:
        parts.append("<p>The store holds no runs yet: <code>jobcast ingest PATH</code>.</p>")
    parts.append(_figure("coverage heatmap", figs.coverage_png(d.coverage)))
    return parts


def _held_out_summary(pred: pd.DataFrame) -> str:
    """One sentence on the held-out points the predicted-vs-actual figure plots."""
    ape = 100 * np.abs(pred["predicted"] - pred["actual"]) / pred["actual"]
    inside = (pred["low"] <= pred["actual"]) & (pred["actual"] <= pred["high"])
    by_kind = pred["cv_kind"].map(figs.KIND_LABELS).fillna(pred["cv_kind"]).value_counts()
    return (f"<p>{len(pred)} points plotted ("
            + ", ".join(f"{n} {k}" for k, n in by_kind.items())
            + f"): MAPE {ape.mean():.2f} %, median {ape.median():.2f} %, "
            f"{inside.mean():.0%} inside their 90 % interval.</p>")


def _models_section(d: ReportData) -> list[str]:
    """The end-to-end models: error, interval coverage, predicted vs actual, the table."""
    table, pred = d.model_table, d.held_out
    parts = ["<h2>End-to-end models</h2>"]
    if d.models:
        parts.append(f"<p>{len(d.models)} models; {int(table['thin'].sum())} from one run.</p>")
    else:
        parts.append("<p>No fitted models: <code>jobcast fit</code>.</p>")
    parts.append(_figure("model error", figs.model_error_png(table)))
    parts.append(_figure("interval coverage", figs.interval_coverage_png(pred)))
    if not pred.empty:
        parts.append(_held_out_summary(pred))
    parts.append(_figure("predicted vs actual", figs.predicted_vs_actual_png(pred)))
    if d.models:
        parts.append("<details><summary>All models</summary>"
                     + _table(table.drop(columns="thin").rename(columns={"cv_mape": "CV MAPE %"}))
                     + "</details>")
    return parts


def _examples_section(d: ReportData) -> list[str]:
    """Forecasts of the store's most common training jobs, and which model serves each key."""
    examples, serving = d.examples, d.serving
    parts = [
        "<h2>Forecasts for common jobs</h2>",
        f"<p>The {len(d.train_jobs)} most common training jobs in the store, at their "
        "median number of steps, through the same forecaster as "
        "<code>jobcast predict</code>; cost from the price table.</p>",
        _figure("example forecasts", figs.examples_png(examples)),
    ]
    if not examples.empty:
        shown = examples.drop(columns=["variant", "network", "deployment", "phase", "cost"])
        parts.append(_table(shown.assign(**{"cost USD": examples["cost"]})))
    parts.append("<h2>Which model serves each key</h2>")
    if serving.empty:
        parts.append("<p>Every key has one model.</p>")
    else:
        parts.append(f"<p>{len(serving)} keys have more than one model (stacks, systems or "
                     "variants); the model that answers the key's most common job, and why.</p>")
        table_html = _table(serving)
        parts.append(table_html if len(serving) <= 15 else
                     f"<details><summary>{len(serving)} keys</summary>{table_html}</details>")
    return parts


def _layerwise_section(d: ReportData) -> list[str]:
    """Stored runs next to the layerwise forecast of the same work."""
    return ["<h2>Layerwise calibration</h2>",
            f"<p>{len(d.layerwise)} stored runs priced by the layerwise route.</p>",
            _figure("layerwise calibration", figs.layerwise_calibration_png(d.layerwise))]


SECTIONS = (_data_section, _ingest_section, _coverage_section, _models_section,
            _examples_section, _layerwise_section)


def render_report(d: ReportData) -> str:
    """The HTML text of the report on ``d`` (sections in page order, then the warnings)."""
    parts = [f"<h1>jobcast report</h1><p>Store <code>{html.escape(d.url)}</code>. "
             f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.</p>"]
    for section in SECTIONS:
        parts += section(d)
    parts.append("<h2>Warnings (grouped)</h2>" + _grouped(d.warnings))
    body = "\n".join(parts)
    n_figures = body.count('<img class="fig"')
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="jobcast-figures" content="{n_figures}">'
            f"<title>jobcast report</title><style>{CSS}</style>{LOADED}</head>"
            f"<body>{body}</body></html>")


def build_report(store: Store) -> str:
    """The HTML text of the report on ``store`` (:class:`EmptyStoreError` when it holds no
    run)."""
    return render_report(report_data(store))


def write_report(store: Store, out: Path) -> Path:
    """Write ``out/report.html``; :class:`EmptyStoreError` (and no folder made) when the store
    holds no run. The page is built before the folder is made, so a failure leaves none."""
    text = build_report(store)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(text, encoding="utf-8")
    return path
