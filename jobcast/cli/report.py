"""``jobcast report``: one self-contained HTML page an ops lead reads at a glance.

Sections, in order: the data (time span, sources), ingest outcomes (files rejected, runs
repaired, why), coverage (heatmap), the end-to-end models (error, interval coverage,
predicted vs actual), which model serves each key and why, layerwise calibration, example
forecasts with time and cost for the store's most common jobs, and warnings grouped.

Rules: every number in a caption is computed from the same frame its figure plots; the page
fetches nothing (figures are inline PNG); a section whose data is missing says so instead of
failing, and anything a section could not compute is listed under "Warnings".
"""

from __future__ import annotations

import html
import re
import time
from collections import Counter
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from fleet.deployment import Deployment
from ingest.credentials import hide_password
from ingest.store import Store, StoredRun
from jobcast.cli import report_figures as figs
from jobcast.cli.errors import CliError
from models.dataset import progress_points
from models.e2e import FittedModel, load_models
from models.evaluation import held_out_predictions
from models.variant import UNSTATED, variant_dict, variant_key

EXAMPLE_JOBS = 6  # the most common network x deployment x batch size x variant in the store
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


def _pattern(text: str) -> str:
    """A message with its numbers, quoted names and paths blanked: messages that differ only
    there group together."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", str(text))
    text = re.sub(r"\S*/\S+", "…", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def runs_frame(runs: list[StoredRun]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"run_id": r.id, "source": r.source, "format": r.format, "network": r.network or "",
             "deployment": r.deployment or "", "batch_size": r.batch_size,
             "start_time": r.start_time, "system": str(r.meta.get("system") or "")}
            for r in runs
        ],
        columns=["run_id", "source", "format", "network", "deployment", "batch_size",
                 "start_time", "system"],
    )


def rejected_by_reason(store: Store) -> tuple[pd.Series, list[dict]]:
    """Rejections recorded by ingest (if the store keeps them), counted by reason pattern."""
    reader = getattr(store, "rejections", None)
    rows: list[dict] = []
    if callable(reader):
        try:
            rows = [{"source": r.source, "line": r.line, "reason": r.reason} for r in reader()]
        except (AttributeError, LookupError, ValueError):  # nothing usable recorded
            rows = []
    counts = Counter(_pattern(r.get("reason", "")) for r in rows)
    return pd.Series(counts, dtype=int), rows


def repaired_by_kind(runs: list[StoredRun]) -> pd.Series:
    kinds = Counter(
        str(rep.get("kind", "repair")) if isinstance(rep, dict) else "repair"
        for r in runs
        for rep in (r.meta.get("repairs") or [])
    )
    return pd.Series(kinds, dtype=int)


def model_table(models: list[FittedModel]) -> pd.DataFrame:
    rows = []
    for m in models:
        e = m.estimator
        rows.append(
            {
                "model": m.model_id,
                "form": e.form_,
                "runs": e.n_runs_,
                "cv_mape": float(e.cv_mape_) if e.cv_mape_ is not None else np.nan,
                "CV": e.cv_kind_,
                "interval ±%": 100 * e.half_width_,
                "batch range": "–".join(f"{b:.0f}" for b in e.batch_range_),
                "thin": e.n_runs_ < 2,
            }
        )
    return pd.DataFrame(rows, columns=["model", "form", "runs", "cv_mape", "CV", "interval ±%",
                                       "batch range", "thin"])


def model_warnings(m: FittedModel) -> list[str]:
    e = m.estimator
    out = []
    if e.batch_range_[0] == e.batch_range_[1]:
        out.append(f"one batch size ({e.batch_range_[0]:.0f}): other batch sizes are "
                   "extrapolated (the hybrid or layerwise route shapes them)")
    if e.n_runs_ < 2:
        out.append("one run: validated on the second half of its own curve only")
    if e.cv_mape_ is not None and e.cv_mape_ > 10:
        out.append(f"cross-validated error {e.cv_mape_:.1f} % is high")
    return out


def job_table(store: Store) -> pd.DataFrame:
    """Every network x deployment x phase x batch x variant (precision and tags, ``""`` when
    the logs state none) of the stored runs: runs and median steps."""
    points = progress_points(store)
    finals = points[points["final"]].assign(variant=lambda f: f["variant"].fillna(""))
    cols = ["network", "deployment", "phase", "batch_size", "variant", "iterations", "runs"]
    if finals.empty:
        return pd.DataFrame(columns=cols)
    grouped = finals.groupby(["network", "deployment", "phase", "batch_size", "variant"])[
        "iterations"]
    table = grouped.agg(iterations="median", runs="size").reset_index()
    return table.sort_values("runs", ascending=False, kind="stable")[cols]


def variant_request(variant: str) -> dict[str, str]:
    """The request fields that ask for a history's variant: its precision (when stated) and
    its other keys as ``tags``; ``{}`` for history that states none."""
    keys = variant_dict(variant or "")
    precision = keys.pop("precision", None)
    asked = {"precision": precision} if precision else {}
    return {**asked, "tags": variant_key(keys)} if keys else asked


def forecast_jobs(store: Store, jobs: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """Forecast each job through the one forecaster, with cost from the price table. A job
    asks for the variant of the history it is drawn from (``variant`` column, if any), so
    fp16 history is answered by fp16 models; ``precision`` says which (or ``unstated``)."""
    from jobcast.service.forecaster import Forecaster
    from jobcast.service.prices import load_prices
    from jobcast.service.request import JobRequest

    forecaster, prices, rows = Forecaster(store), load_prices(), []
    for job in jobs.itertuples(index=False):
        variant = str(getattr(job, "variant", "") or "")
        asked = variant_request(variant)
        req = JobRequest(network=job.network, deployment=job.deployment, phase=job.phase,
                         batch_size=int(job.batch_size), iterations=max(1, int(job.iterations)),
                         **asked)
        outcome = forecaster.forecast(req)
        label = (f"{job.network} · {job.deployment} · {job.phase} · batch "
                 f"{int(job.batch_size)} · {int(job.iterations):,} steps"
                 + (f" · {variant}" if variant else ""))
        if not outcome.ok:
            problems.append(f"forecast {label}: {outcome.error}")
            continue
        cost = None
        try:
            dep = Deployment.parse(job.deployment)
            cost = prices.cost(outcome.seconds, dep.accelerator, dep.count)
        except ValueError:
            pass
        cost = float("nan") if cost is None else cost  # shown as "–" (no price for the GPU)
        rows.append({"job": label, "precision": asked.get("precision", UNSTATED),
                     "variant": variant, "network": job.network, "deployment": job.deployment,
                     "phase": job.phase, "hours": outcome.seconds / 3600,
                     "low_h": outcome.low / 3600, "high_h": outcome.high / 3600, "cost": cost,
                     "route": str(outcome.route), "model": outcome.model,
                     "candidate": str(outcome.details.get("candidate", "") or ""),
                     "backtest %": (outcome.details.get("backtest") or {}).get(
                         "expected_error_percent", float("nan")),
                     "chosen": str(outcome.details.get("chosen", "") or "")})
    return pd.DataFrame(rows, columns=["job", "precision", "variant", "network", "deployment",
                                       "phase", "hours", "low_h", "high_h", "cost", "route",
                                       "model", "candidate", "backtest %", "chosen"])


def serving_table(store: Store, models: list[FittedModel], jobs: pd.DataFrame,
                  problems: list[str]) -> pd.DataFrame:
    """Keys served by more than one model (stacks, systems, variants): which one answers the
    key's most common job, and the reason the forecaster gives."""
    keys = Counter((m.network, m.deployment, m.phase) for m in models)
    shared = {k for k, n in keys.items() if n > 1}
    if not shared or jobs.empty:
        return pd.DataFrame()
    key_cols = ["network", "deployment", "phase"]
    wanted = jobs[[tuple(k) in shared for k in jobs[key_cols].itertuples(index=False)]]
    answers = forecast_jobs(store, wanted.drop_duplicates(key_cols), problems)
    answers["models"] = [keys[tuple(k)] for k in answers[key_cols].itertuples(index=False)]
    answers["why"] = answers["chosen"].replace("", "–")
    return answers[[*key_cols, "precision", "models", "model", "route", "why"]]


def layerwise_status(store: Store, problems: list[str]) -> pd.DataFrame:
    """Observed runs next to the layerwise forecast of the same work (calibration status)."""
    from jobcast.service.calibration import layerwise_observations
    from models.calibration import observed_runs

    try:
        obs, skipped = layerwise_observations(observed_runs(store))
    except (LookupError, ValueError, OSError) as exc:
        problems.append(f"layerwise calibration: {exc}")
        return pd.DataFrame(columns=["network", "hardware", "predicted", "actual"])
    if skipped:
        reasons = Counter(_pattern(s.split(": ", 1)[-1]) for s in skipped)
        problems += [f"layerwise calibration skipped {n} runs: {why}"
                     for why, n in reasons.most_common()]
    return obs


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


def build_report(store: Store) -> str:
    """The HTML text of the report."""
    stored = store.runs()
    runs = runs_frame(stored)
    models = load_models(store)
    counts = store.counts()
    problems: list[str] = []
    n_figures = 0
    shown_url = html.escape(hide_password(store.url))
    parts = [f"<h1>jobcast report</h1><p>Store <code>{shown_url}</code>. "
             f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.</p>"]

    # -- the data ------------------------------------------------------------------------
    dated = runs["start_time"].dropna()
    span = (f"{time.strftime('%Y-%m-%d', time.gmtime(dated.min()))} to "
            f"{time.strftime('%Y-%m-%d', time.gmtime(dated.max()))}" if len(dated) else "unknown")
    kpis = [("files", counts["files"]), ("runs", counts["runs"]),
            ("networks", runs["network"].nunique()), ("deployments", runs["deployment"].nunique()),
            ("systems", runs.loc[runs["system"] != "", "system"].nunique()),
            ("models", len(models))]
    parts.append("<h2>The data</h2><div>" + "".join(
        f'<span class="kpi"><b>{v:,}</b>{k}</span>' for k, v in kpis) + "</div>")
    parts.append(f"<p>Runs started {span}. Formats: " + ", ".join(
        f"{f} ({n})" for f, n in runs["format"].value_counts().items()) + ".</p>")
    parts.append(_figure("runs per month", figs.timeline_png(runs)))
    n_figures += 1

    # -- ingest outcomes -----------------------------------------------------------------
    rejected, rejection_rows = rejected_by_reason(store)
    repaired = repaired_by_kind(stored)
    parts.append("<h2>Ingest: rejected and repaired</h2>")
    parts.append(f"<p>{len(rejection_rows)} files rejected (recorded by ingest), "
                 f"{int(repaired.sum())} repairs in "
                 f"{sum(1 for r in stored if r.meta.get('repairs'))} stored runs.</p>")
    parts.append(_figure("rejected and repaired", figs.outcomes_png(rejected, repaired)))
    n_figures += 1

    # -- coverage ------------------------------------------------------------------------
    parts.append("<h2>Coverage</h2>")
    if runs.empty:
        parts.append("<p>The store holds no runs yet: <code>jobcast ingest PATH</code>.</p>")
        coverage = pd.DataFrame()
    else:
        coverage = pd.crosstab(runs["network"].replace("", "(unnamed)"), runs["deployment"])
        coverage.index.name = coverage.columns.name = None
    parts.append(_figure("coverage heatmap", figs.coverage_png(coverage)))
    n_figures += 1

    # -- models --------------------------------------------------------------------------
    parts.append("<h2>End-to-end models</h2>")
    table = model_table(models)
    pred = held_out_predictions(models, progress_points(store)) if models else pd.DataFrame(
        columns=["model_id", "phase", "actual", "predicted", "low", "high", "cv_kind"])
    if models:
        parts.append(f"<p>{len(models)} models; {int(table['thin'].sum())} from one run.</p>")
    else:
        parts.append("<p>No fitted models: <code>jobcast fit</code>.</p>")
    parts.append(_figure("model error", figs.model_error_png(table)))
    parts.append(_figure("interval coverage", figs.interval_coverage_png(pred)))
    n_figures += 2
    if not pred.empty:
        ape = 100 * np.abs(pred["predicted"] - pred["actual"]) / pred["actual"]
        inside = (pred["low"] <= pred["actual"]) & (pred["actual"] <= pred["high"])
        by_kind = pred["cv_kind"].map(figs.KIND_LABELS).fillna(pred["cv_kind"]).value_counts()
        parts.append(
            f"<p>{len(pred)} points plotted (" + ", ".join(f"{n} {k}" for k, n in
                                                          by_kind.items())
            + f"): MAPE {ape.mean():.2f} %, median {ape.median():.2f} %, "
            f"{inside.mean():.0%} inside their 90 % interval.</p>")
    parts.append(_figure("predicted vs actual", figs.predicted_vs_actual_png(pred)))
    n_figures += 1
    if models:
        parts.append("<details><summary>All models</summary>"
                     + _table(table.drop(columns="thin").rename(columns={"cv_mape": "CV MAPE %"}))
                     + "</details>")

    # -- examples and serving -------------------------------------------------------------
    jobs = job_table(store)
    train_jobs = jobs[jobs["phase"] == "train"].head(EXAMPLE_JOBS)
    examples = forecast_jobs(store, train_jobs, problems)
    parts.append("<h2>Forecasts for common jobs</h2>")
    parts.append(f"<p>The {len(train_jobs)} most common training jobs in the store, at their "
                 "median number of steps, through the same forecaster as "
                 "<code>jobcast predict</code>; cost from the price table.</p>")
    parts.append(_figure("example forecasts", figs.examples_png(examples)))
    n_figures += 1
    if not examples.empty:
        shown = examples.drop(columns=["variant", "network", "deployment", "phase", "cost"])
        parts.append(_table(shown.assign(**{"cost USD": examples["cost"]})))
    parts.append("<h2>Which model serves each key</h2>")
    serving = serving_table(store, models, jobs, problems) if models else pd.DataFrame()
    if serving.empty:
        parts.append("<p>Every key has one model.</p>")
    else:
        parts.append(f"<p>{len(serving)} keys have more than one model (stacks, systems or "
                     "variants); the model that answers the key's most common job, and why.</p>")
        table_html = _table(serving)
        parts.append(table_html if len(serving) <= 15 else
                     f"<details><summary>{len(serving)} keys</summary>{table_html}</details>")

    # -- layerwise calibration ------------------------------------------------------------
    parts.append("<h2>Layerwise calibration</h2>")
    obs = layerwise_status(store, problems) if not runs.empty else pd.DataFrame(
        columns=["network", "hardware", "predicted", "actual"])
    parts.append(f"<p>{len(obs)} stored runs priced by the layerwise route.</p>")
    parts.append(_figure("layerwise calibration", figs.layerwise_calibration_png(obs)))
    n_figures += 1

    # -- warnings ------------------------------------------------------------------------
    items = [(m.model_id, w) for m in models for w in model_warnings(m)]
    items += [(r.source, str(w)) for r in stored for w in (r.meta.get("warnings") or [])]
    items += [(r.get("source", ""), f"rejected: {r.get('reason', '')}") for r in rejection_rows]
    items += [("report", p) for p in problems]
    parts.append("<h2>Warnings (grouped)</h2>" + _grouped(items))
    body = "\n".join(parts)
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="jobcast-figures" content="{n_figures}">'
            f"<title>jobcast report</title><style>{CSS}</style>{LOADED}</head>"
            f"<body>{body}</body></html>")


class EmptyStoreError(CliError, ValueError):
    """The store holds no run: there is nothing to report (the message says what to do)."""

    kind: ClassVar[str] = "empty_store"


def write_report(store: Store, out: Path) -> Path:
    """Write ``out/report.html``; :class:`EmptyStoreError` (and no folder made) when the store
    holds no run. The page is built before the folder is made, so a failure leaves none."""
    if not store.counts()["runs"]:
        from jobcast.cli.store import shown

        raise EmptyStoreError(
            f"the store {shown(store.url)} holds no runs, so there is nothing to report: "
            "ingest logs first (`jobcast ingest LOGS...`), or point --store at a store with "
            "runs (after `make demo`: --store sqlite:///demo-out/jobcast.db)")
    text = build_report(store)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(text, encoding="utf-8")
    return path
