"""Fit one phase model per network x deployment x phase x software stack; look them up.

Runs of the same hardware with another framework version are not pooled: newer software
is often faster on the same GPUs. A forecast that names no stack uses the stack of the
most recent runs of that network and deployment.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from ingest.store import Store
from models.dataset import progress_points
from models.phase_model import PhaseTimeModel

MIN_POINTS = 2


def model_id(network: str, deployment: str, phase: str, stack: str) -> str:
    slug = re.sub(r"[^a-z0-9.]+", "-", stack.lower()).strip("-") or "any"
    return f"e2e/{network}/{deployment}/{phase}/{slug}"


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


def fit_points(points: pd.DataFrame, form: str = "auto") -> list[FittedModel]:
    """Fit every key of a progress-point table (see models.dataset) with enough data."""
    fitted = []
    keys = ["network", "deployment", "phase", "stack"]
    for (network, deployment, phase, stack), df in points.groupby(keys, sort=True):
        if len(df) < MIN_POINTS:
            continue
        est = PhaseTimeModel(form=form).fit(
            df[["iterations", "batch_size"]], df["seconds"], df["run_id"]
        )
        starts = df["start_time"].dropna()
        fitted.append(
            FittedModel(
                model_id=model_id(network, deployment, phase, stack),
                network=network,
                deployment=deployment,
                phase=phase,
                stack=stack,
                last_run_time=float(starts.max()) if len(starts) else 0.0,
                estimator=est,
                sources=sorted(df["source"].unique().tolist()),
            )
        )
    return fitted


def fit_store(store: Store, form: str = "auto") -> list[FittedModel]:
    """Fit all models from the store's runs and save them in the store."""
    models = fit_points(progress_points(store), form=form)
    store.save_models([m.to_record() for m in models])
    return models


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
    """The model for a key. Without a stack: among the stacks whose fitted range covers the
    job (no extrapolation), the one whose runs are newest; if none covers it, the newest."""
    matches = [
        m
        for m in models
        if m.network == network.lower()
        and m.deployment == deployment
        and m.phase == phase
        and (stack is None or m.stack == stack)
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
