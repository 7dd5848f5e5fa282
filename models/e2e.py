"""Fit one phase model per network x deployment x phase x software stack; look them up.

Runs of the same hardware with another framework version are not pooled: newer software
is often faster on the same GPUs. A forecast that names no stack uses the stack of the
most recent runs of that network and deployment.

Rules
-----
* Keys: stacks are compared by :func:`models.dataset.stack_key` (case- and
  whitespace-insensitive), so spellings of one stack fit one model; the model shows the
  spelling of the stack's earliest run.
* Model ids (:func:`assign_ids`) are ``e2e/<network>/<deployment>/<phase>/<slug>``, the slug
  being the stack key lower-cased with every run of characters other than ``a-z``, ``0-9``
  and ``.`` written ``-`` (``any`` for the unknown stack). Ids depend only on the key, never
  on the order of the data. Where distinct keys of one fit would share an id (stacks that
  differ in punctuation only, or a slug over :data:`SLUG_MAX` characters) each of them gets
  ``~`` and the first 10 hex digits of the SHA-1 of its stack key appended, so ids never
  collide.
* A fit never stops at one key: a key that cannot be fitted, for any reason (too few
  points, unusable values, an id that would still collide), is a :class:`FitFailure` with
  its key and reason in the :class:`FitReport`, and the other keys are fitted.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ingest.store import Store
from models.dataset import progress_points, stack_key
from models.phase_model import FORMS, PhaseTimeModel

MIN_POINTS = 2
SLUG_MAX = 160  # longer stack slugs are cut and qualified; ids stay within the store's 512
KEY_FIELDS = ("network", "deployment", "phase", "stack")

Key = tuple[str, str, str, str]  # network, deployment, phase, stack key


def stack_slug(stack: str | None) -> str:
    """The id part of a stack: its key with runs of other than ``[a-z0-9.]`` as ``-``."""
    return re.sub(r"[^a-z0-9.]+", "-", stack_key(stack)).strip("-") or "any"


def model_id(
    network: str, deployment: str, phase: str, stack: str, qualified: bool = False
) -> str:
    """The id of a key; ``qualified`` appends the stack key's digest (see the module doc)."""
    slug = stack_slug(stack)
    if qualified or len(slug) > SLUG_MAX:
        digest = hashlib.sha1(stack_key(stack).encode("utf-8")).hexdigest()[:10]
        slug = f"{slug[:SLUG_MAX]}~{digest}"
    return f"e2e/{network}/{deployment}/{phase}/{slug}"


def assign_ids(keys: list[Key]) -> dict[Key, str]:
    """One id per key: plain where unique among ``keys``, qualified where plain ids collide."""
    plain = {key: model_id(*key) for key in keys}
    shared = Counter(plain.values())
    return {key: model_id(*key, qualified=shared[pid] > 1) for key, pid in plain.items()}


@dataclass
class FittedModel:
    model_id: str
    network: str
    deployment: str
    phase: str
    stack: str
    last_run_time: float  # newest run start seen, to pick the current stack
    estimator: PhaseTimeModel
    sources: list[str]

    def to_record(self) -> dict:
        return {
            "model_id": self.model_id,
            "network": self.network,
            "deployment": self.deployment,
            "phase": self.phase,
            "stack": self.stack,
            "params": {
                **self.estimator.to_dict(),
                "last_run_time": self.last_run_time,
                "sources": self.sources,
            },
        }

    @classmethod
    def from_record(cls, rec: dict) -> FittedModel:
        p = rec["params"]
        return cls(
            model_id=rec["model_id"],
            network=rec["network"],
            deployment=rec["deployment"],
            phase=rec["phase"],
            stack=rec["stack"],
            last_run_time=p.get("last_run_time") or 0.0,
            estimator=PhaseTimeModel.from_dict(p),
            sources=p.get("sources", []),
        )


@dataclass(frozen=True)
class FitFailure:
    """A key that could not be fitted, and why."""

    model_id: str
    network: str
    deployment: str
    phase: str
    stack: str
    reason: str
    runs: int
    points: int

    def to_dict(self) -> dict:
        """The ``jobcast fit --json`` entry: the key, its size and ``error`` (the reason)."""
        return {
            "model": self.model_id,
            "network": self.network,
            "deployment": self.deployment,
            "phase": self.phase,
            "stack": self.stack,
            "runs": self.runs,
            "points": self.points,
            "error": self.reason,
        }

    def __str__(self) -> str:
        return f"{self.model_id} ({self.runs} runs, {self.points} points): {self.reason}"


@dataclass
class FitReport:
    """What a fit gave: the fitted models and the keys that failed, both in key order."""

    models: list[FittedModel] = field(default_factory=list)
    failures: list[FitFailure] = field(default_factory=list)


def check_form(form: str) -> None:
    """``form`` must be ``auto`` or one of :data:`models.phase_model.FORMS` (ValueError)."""
    if form != "auto" and form not in FORMS:
        raise ValueError(f"unknown form {form!r}; choose auto or one of {sorted(FORMS)}")


def _fit_key(df: pd.DataFrame, form: str) -> PhaseTimeModel:
    """The fitted estimator of one key's rows; raises with the reason it cannot be fitted."""
    if len(df) < MIN_POINTS:
        raise ValueError(f"{len(df)} progress point; a model needs at least {MIN_POINTS}")
    est = PhaseTimeModel(form=form).fit(
        df[["iterations", "batch_size"]], df["seconds"], df["run_id"]
    )
    if not (np.all(np.isfinite(est.coef_)) and math.isfinite(est.half_width_)):
        raise ValueError("the fit gave non-finite coefficients or interval")
    return est


def _reason(exc: Exception) -> str:
    text = str(exc) or "no message"
    return text if isinstance(exc, ValueError) else f"{type(exc).__name__}: {text}"


def fit_report(points: pd.DataFrame, form: str = "auto") -> FitReport:
    """Fit every key of a progress-point table (see models.dataset); see the module doc.

    Raises ValueError only for an unknown ``form``; every per-key problem is a failure.
    """
    check_form(form)
    report = FitReport()
    if points.empty:
        return report
    keyed = points.assign(stack=points["stack"].fillna("").astype(str).str.strip())
    keyed["_stack_key"] = keyed["stack"].map(stack_key)
    groups = list(keyed.groupby(["network", "deployment", "phase", "_stack_key"], sort=True))
    ids = assign_ids([key for key, _ in groups])
    taken: dict[str, Key] = {}
    for key, df in groups:
        network, deployment, phase, _ = key
        stack = str(df["stack"].iloc[0])  # the spelling of the key's first row
        mid = ids[key]
        try:
            if mid in taken:
                raise ValueError(f"model id also names the key {taken[mid]}")
            est = _fit_key(df, form)
        except Exception as exc:  # any reason: report the key, fit the others
            report.failures.append(
                FitFailure(mid, network, deployment, phase, stack, _reason(exc),
                           int(df["run_id"].nunique()), len(df))
            )
            continue
        taken[mid] = key
        starts = df["start_time"].dropna()
        report.models.append(
            FittedModel(
                model_id=mid,
                network=network,
                deployment=deployment,
                phase=phase,
                stack=stack,
                last_run_time=float(starts.max()) if len(starts) else 0.0,
                estimator=est,
                sources=sorted(df["source"].unique().tolist()),
            )
        )
    return report


def fit_points(points: pd.DataFrame, form: str = "auto") -> list[FittedModel]:
    """The models :func:`fit_report` fits (keys that cannot be fitted are left out)."""
    return fit_report(points, form=form).models


def fit_store_report(store: Store, form: str = "auto") -> FitReport:
    """Fit all keys of the store's runs, replace the store's models with those fitted.

    Raises ValueError for an unknown ``form``, :class:`ingest.store.StoreError` when the
    models cannot be saved; failures of single keys are in the report.
    """
    report = fit_report(progress_points(store), form=form)
    store.save_models([m.to_record() for m in report.models])
    return report


def fit_store(store: Store, form: str = "auto") -> list[FittedModel]:
    """Fit and save all models from the store's runs (see :func:`fit_store_report`)."""
    return fit_store_report(store, form=form).models


def load_models(store: Store) -> list[FittedModel]:
    return [FittedModel.from_record(r) for r in store.load_models()]


class NoModelError(LookupError):
    """No end-to-end model for the asked network x deployment x phase."""


def choose(
    models: list[FittedModel],
    network: str,
    deployment: str,
    phase: str,
    stack: str | None = None,
    iterations: float | None = None,
    batch_size: int | None = None,
) -> FittedModel:
    """The model for a key (``stack`` compared by :func:`stack_key`). Without a stack: among the
    stacks whose fitted range covers the job (no extrapolation), the one whose runs are newest;
    if none covers it, the newest."""
    wanted = None if stack is None else stack_key(stack)
    matches = [
        m
        for m in models
        if m.network == network.lower()
        and m.deployment == deployment
        and m.phase == phase
        and (wanted is None or stack_key(m.stack) == wanted)
    ]
    if not matches:
        known = sorted({f"{m.network} @ {m.deployment}" for m in models if m.phase == phase})
        hint = ", ".join(known[:12]) or "none (run `jobcast ingest` and `jobcast fit`)"
        raise NoModelError(
            f"no end-to-end {phase} model for network {network!r} on deployment {deployment!r}"
            + (f" with stack {stack!r}" if stack else "")
            + f"; models exist for: {hint}"
        )

    def covers(m: FittedModel) -> bool:
        if iterations is None or batch_size is None:
            return True
        return not m.estimator.extrapolates(iterations, batch_size)

    return max(matches, key=lambda m: (covers(m), m.last_run_time, m.estimator.n_runs_))


def forecast(model: FittedModel, iterations: float, batch_size: int) -> dict:
    """One phase forecast in seconds with its interval (the service names the route)."""
    if not (iterations >= 0 and math.isfinite(iterations)):
        raise ValueError(f"iterations must be a non-negative number, got {iterations}")
    if batch_size <= 0:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    row = model.estimator.predict_interval(
        pd.DataFrame({"iterations": [iterations], "batch_size": [batch_size]})
    ).iloc[0]
    return {
        "seconds": float(row["seconds"]),
        "low": float(row["low"]),
        "high": float(row["high"]),
        "unit": "s",
        "model": model.model_id,
        "extrapolated": bool(row["extrapolated"]),
        "cv_mape": model.estimator.cv_mape_,
    }
