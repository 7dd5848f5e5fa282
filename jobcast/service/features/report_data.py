"""The data of ``jobcast report``: every frame the HTML page shows, built from one store.

Rules: every number a caption states is computed from the same frame its figure plots, so
the page (``jobcast.cli.report``) only renders what :func:`report_data` returns. A section
whose data cannot be computed records why in ``problems`` instead of failing; a store that
holds no run is an :class:`EmptyStoreError` (nothing to report). Example jobs ask for the
variant of the history they are drawn from (fp16 history is answered by fp16 models), and
are forecast through the one :class:`~jobcast.service.engine.forecaster.Forecaster`, priced by the
price table.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from fleet.credentials import hide_password
from fleet.deployment import Deployment
from ingest.store import Store, StoredRun
from jobcast.service.errors import ServiceError
from models.dataset import progress_points
from models.e2e import FittedModel, load_models
from models.evaluation import held_out_predictions
from models.variant import UNSTATED, variant_dict, variant_key

__all__ = ["EXAMPLE_JOBS", "EmptyStoreError", "ReportData", "forecast_jobs", "job_table",
           "layerwise_status", "model_table", "model_warnings", "pattern", "rejected_by_reason",
           "repaired_by_kind", "report_data", "runs_frame", "serving_table", "variant_request",
           "Store"]

EXAMPLE_JOBS = 6  # the most common network x deployment x batch size x variant in the store
HELD_OUT_COLUMNS = ["model_id", "phase", "actual", "predicted", "low", "high", "cv_kind"]
LAYERWISE_COLUMNS = ["network", "hardware", "predicted", "actual"]


class EmptyStoreError(ServiceError, ValueError):
    """The store holds no run: there is nothing to report (the message says what to do)."""

    kind: ClassVar[str] = "empty_store"


def pattern(text: str) -> str:
    """A message with its numbers, quoted names and paths blanked: messages that differ only
    there group together."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", str(text))
    text = re.sub(r"\S*/\S+", "…", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)


def runs_frame(runs: list[StoredRun]) -> pd.DataFrame:
    """One row per stored run: id, source, format, network, deployment, batch, start, system."""
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
    counts = Counter(pattern(r.get("reason", "")) for r in rows)
    return pd.Series(counts, dtype=int), rows


def repaired_by_kind(runs: list[StoredRun]) -> pd.Series:
    """Repairs ingest made to the stored runs, counted by kind."""
    kinds = Counter(
        str(rep.get("kind", "repair")) if isinstance(rep, dict) else "repair"
        for r in runs
        for rep in (r.meta.get("repairs") or [])
    )
    return pd.Series(kinds, dtype=int)


def model_table(models: list[FittedModel]) -> pd.DataFrame:
    """One row per end-to-end model: form, runs, CV error, interval, batch range, thin."""
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
    """What an ops lead should know about one model: one batch size, one run, a high error."""
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


FORECAST_COLUMNS = ["job", "precision", "variant", "network", "deployment", "phase", "hours",
                    "low_h", "high_h", "cost", "route", "model", "candidate", "backtest %",
                    "chosen"]


def forecast_jobs(store: Store, jobs: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """Forecast each job through the one forecaster, with cost from the price table. A job
    asks for the variant of the history it is drawn from (``variant`` column, if any), so
    fp16 history is answered by fp16 models; ``precision`` says which (or ``unstated``)."""
    from jobcast.service.engine.forecast import ForecastFailure
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest
    from jobcast.service.features.prices import load_prices

    forecaster, prices, rows = Forecaster(store), load_prices(), []
    for job in jobs.itertuples(index=False):
        variant = str(getattr(job, "variant", "") or "")
        asked: dict[str, Any] = variant_request(variant)
        req = JobRequest(network=job.network, deployment=job.deployment, phase=job.phase,
                         batch_size=int(job.batch_size), iterations=max(1, int(job.iterations)),
                         **asked)
        outcome = forecaster.forecast(req)
        label = (f"{job.network} · {job.deployment} · {job.phase} · batch "
                 f"{int(job.batch_size)} · {int(job.iterations):,} steps"
                 + (f" · {variant}" if variant else ""))
        if isinstance(outcome, ForecastFailure):  # ``outcome.ok`` is False
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
    return pd.DataFrame(rows, columns=FORECAST_COLUMNS)


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
    from jobcast.service.engine.scale_calibration import layerwise_observations
    from models.scale_calibration import observed_runs

    try:
        obs, skipped = layerwise_observations(observed_runs(store))
    except (LookupError, ValueError, OSError) as exc:
        problems.append(f"layerwise calibration: {exc}")
        return pd.DataFrame(columns=LAYERWISE_COLUMNS)
    if skipped:
        reasons = Counter(pattern(s.split(": ", 1)[-1]) for s in skipped)
        problems += [f"layerwise calibration skipped {n} runs: {why}"
                     for why, n in reasons.most_common()]
    return obs


@dataclass
class ReportData:
    """Everything the report shows, section by section (``problems``: what could not be
    computed; ``warnings``: ``(subject, message)`` pairs the page groups)."""

    url: str  # the store's URL without its password
    counts: dict
    stored: list[StoredRun]
    runs: pd.DataFrame
    rejected: pd.Series
    rejection_rows: list[dict]
    repaired: pd.Series
    coverage: pd.DataFrame
    models: list[FittedModel]
    model_table: pd.DataFrame
    held_out: pd.DataFrame
    jobs: pd.DataFrame
    train_jobs: pd.DataFrame
    examples: pd.DataFrame
    serving: pd.DataFrame
    layerwise: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)

    @property
    def repaired_runs(self) -> int:
        """Stored runs that ingest repaired at least once."""
        return sum(1 for r in self.stored if r.meta.get("repairs"))


def coverage_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs per network (rows) x deployment (columns); empty when there are no runs."""
    if runs.empty:
        return pd.DataFrame()
    coverage = pd.crosstab(runs["network"].replace("", "(unnamed)"), runs["deployment"])
    coverage.index.name = coverage.columns.name = None
    return coverage


def report_data(store: Store) -> ReportData:
    """Build every frame of the report from ``store`` (:class:`EmptyStoreError` when it holds
    no run); sections are computed in page order, so ``problems`` keeps that order."""
    counts = store.counts()
    if not counts["runs"]:
        raise EmptyStoreError(
            f"the store {hide_password(store.url)} holds no runs, so there is nothing to "
            "report: ingest logs first (`jobcast ingest LOGS...`), or point --store at a store "
            "with runs (after `make demo`: --store sqlite:///demo-out/jobcast.db)")
    stored = store.runs()
    runs = runs_frame(stored)
    models = load_models(store)
    rejected, rejection_rows = rejected_by_reason(store)
    held_out = (held_out_predictions(models, progress_points(store)) if models
                else pd.DataFrame(columns=HELD_OUT_COLUMNS))
    jobs = job_table(store)
    train_jobs = jobs[jobs["phase"] == "train"].head(EXAMPLE_JOBS)
    problems: list[str] = []
    examples = forecast_jobs(store, train_jobs, problems)
    serving = serving_table(store, models, jobs, problems) if models else pd.DataFrame()
    layerwise = (layerwise_status(store, problems) if not runs.empty
                 else pd.DataFrame(columns=LAYERWISE_COLUMNS))
    warnings = [(m.model_id, w) for m in models for w in model_warnings(m)]
    warnings += [(r.source, str(w)) for r in stored for w in (r.meta.get("warnings") or [])]
    warnings += [(r.get("source", ""), f"rejected: {r.get('reason', '')}")
                 for r in rejection_rows]
    warnings += [("report", p) for p in problems]
    return ReportData(
        url=hide_password(store.url), counts=counts, stored=stored, runs=runs,
        rejected=rejected, rejection_rows=rejection_rows, repaired=repaired_by_kind(stored),
        coverage=coverage_table(runs), models=models, model_table=model_table(models),
        held_out=held_out, jobs=jobs, train_jobs=train_jobs, examples=examples,
        serving=serving, layerwise=layerwise, problems=problems, warnings=warnings)
