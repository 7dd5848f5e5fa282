"""Whole-job forecasts: training plus the evaluation passes a plan asks for."""

from __future__ import annotations

import math
from dataclasses import dataclass

from models.e2e import FittedModel, choose, forecast


@dataclass(frozen=True)
class JobPlan:
    """What a job will do. Give ``iterations`` or ``epochs`` with ``dataset_size``."""

    network: str
    deployment: str
    batch_size: int
    iterations: int | None = None
    epochs: float | None = None
    dataset_size: int | None = None
    eval_every: float | None = None  # epochs between evaluations; None: no evaluation
    eval_size: int | None = None  # samples per evaluation pass
    eval_batch_size: int | None = None
    stack: str | None = None

    def train_iterations(self) -> int:
        if self.iterations is not None:
            if self.iterations < 0:
                raise ValueError(f"iterations must be >= 0, got {self.iterations}")
            return int(self.iterations)
        if self.epochs is None or self.dataset_size is None:
            raise ValueError("give --iterations, or --epochs with --dataset-size")
        if self.epochs < 0 or self.dataset_size <= 0:
            raise ValueError("epochs must be >= 0 and the dataset size positive")
        return int(math.ceil(self.epochs * math.ceil(self.dataset_size / self.batch_size)))

    def test_iterations(self) -> int:
        if not self.eval_every or not self.epochs:
            return 0
        if not self.eval_size:
            raise ValueError("evaluations need --eval-size (samples per evaluation pass)")
        passes = int(math.floor(self.epochs / self.eval_every + 1e-9))
        per_pass = math.ceil(self.eval_size / (self.eval_batch_size or self.batch_size))
        return passes * per_pass


def forecast_job(models: list[FittedModel], plan: JobPlan) -> dict:
    """Train and test phase forecasts and their sum; bounds add up (errors are correlated)."""
    phases = {}
    train_iters = plan.train_iterations()
    train = choose(
        models, plan.network, plan.deployment, "train", plan.stack, train_iters, plan.batch_size
    )
    phases["train"] = forecast(train, train_iters, plan.batch_size)
    test_iters = plan.test_iterations()
    if test_iters:
        test = choose(models, plan.network, plan.deployment, "test", plan.stack or train.stack)
        phases["test"] = forecast(test, test_iters, plan.eval_batch_size or plan.batch_size)
    total = {k: sum(p[k] for p in phases.values()) for k in ("seconds", "low", "high")}
    return {
        **total,
        "unit": "s",
        "model": train.model_id,
        "extrapolated": any(p["extrapolated"] for p in phases.values()),
        "phases": phases,
    }
