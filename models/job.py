"""What a job will do: its training steps and the evaluation passes it asks for.

The steps a request implies (``jobcast.service.engine.candidates.phase_steps``) are a plan's; the
whole-job forecast that prices them is the service's (``jobcast.service.engine.candidates``).
A :class:`JobPlan` checks its numbers when it is made and raises ``ValueError`` (which the
CLI and the service report as the job's error) unless: every number is finite; the batch
sizes are whole numbers in 1 .. :data:`~ingest.validate.MAX_BATCH_SIZE` (the bound stored
runs obey); ``iterations`` is a whole number >= 0; ``epochs`` and ``eval_every`` are >= 0;
``dataset_size`` and ``eval_size`` are whole numbers >= 1; and the job's train and test
steps are at most :data:`MAX_JOB_ITERATIONS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ingest.validate import MAX_BATCH_SIZE, MAX_ITERATIONS

MAX_JOB_ITERATIONS = MAX_ITERATIONS  # steps of one phase of a job: 1e9, the ingest bound


def _number(name: str, value: object, *, low: float, whole: bool = False,
            high: float = math.inf) -> None:
    """ValueError unless ``value`` is a finite number in [low, high] (whole if asked)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if whole and value != int(value):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not low <= value <= high:
        bound = f"between {low:g} and {high:,.0f}" if math.isfinite(high) else f">= {low:g}"
        raise ValueError(f"{name} must be {bound}, got {value:g}")


def _steps(name: str, value: float, check: str) -> int:
    """``ceil(value)`` as a step count, ValueError past :data:`MAX_JOB_ITERATIONS`."""
    if not value <= MAX_JOB_ITERATIONS:  # also catches inf and NaN
        raise ValueError(f"the job has {value:.3g} {name} steps, more than "
                         f"{MAX_JOB_ITERATIONS:.0e}: check {check}")
    return int(math.ceil(value))


def no_steps_message(phase: str) -> str:
    """Why a job has no step count for ``phase``: the one wording, for every route."""
    if phase == "test":
        return ("a test-phase forecast needs --iterations (evaluation steps), or --epochs "
                "with --dataset-size, --eval-every and --eval-size")
    return "give --iterations, or --epochs with --dataset-size"


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

    def __post_init__(self) -> None:
        """Check the numbers (rules in the module doc)."""
        _number("batch size", self.batch_size, low=1, high=MAX_BATCH_SIZE, whole=True)
        if self.eval_batch_size is not None:
            _number("eval batch size", self.eval_batch_size, low=1, high=MAX_BATCH_SIZE,
                    whole=True)
        if self.iterations is not None:
            _number("iterations", self.iterations, low=0, high=MAX_JOB_ITERATIONS, whole=True)
        for name, value in (("epochs", self.epochs), ("eval_every", self.eval_every)):
            if value is not None:
                _number(name, value, low=0)
        for name, value in (("dataset size", self.dataset_size), ("eval size", self.eval_size)):
            if value is not None:
                _number(name, value, low=1, whole=True)

    def train_iterations(self) -> int:
        """Training steps: ``iterations``, else epochs x ceil(dataset / batch); ValueError
        when neither is given or the count is past :data:`MAX_JOB_ITERATIONS`."""
        if self.iterations is not None:
            return int(self.iterations)
        if self.epochs is None or self.dataset_size is None:
            raise ValueError(no_steps_message("train"))
        return _steps("train", self.epochs * math.ceil(self.dataset_size / self.batch_size),
                      "--epochs, --dataset-size and --batch-size")

    def eval_passes(self) -> int:
        """Evaluation passes: one every ``eval_every`` epochs (0 without evaluations)."""
        if not self.eval_every or not self.epochs:
            return 0
        return math.floor(min(self.epochs / self.eval_every + 1e-9, 2.0 * MAX_JOB_ITERATIONS))

    def test_iterations(self) -> int:
        """Evaluation steps: passes x ceil(eval_size / eval batch) (0 without
        evaluations); ValueError when evaluations lack ``eval_size``."""
        if not self.eval_every or not self.epochs:
            return 0
        if not self.eval_size:
            raise ValueError("evaluations need --eval-size (samples per evaluation pass)")
        passes = self.eval_passes()
        per_pass = math.ceil(self.eval_size / (self.eval_batch_size or self.batch_size))
        return _steps("test", float(passes) * per_pass, "--eval-every and --eval-size")
