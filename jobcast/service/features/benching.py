"""The service door to the layer microbenchmark: a typed request in, a typed result out.

``jobcast bench`` (and any other caller) builds a :class:`BenchRequest` that mirrors its flags,
checks it with :func:`plan_bench` (every bad value is one
:class:`~fleet.errors.JobcastError` whose message names it: the library's own, else a
:class:`BenchError`) and runs it with :func:`run_bench`, here or on Ray.

Rules: ``backend="auto"`` is TensorFlow where it is installed, else PyTorch
(:func:`resolve_backend`, the library's rule); the framework must be importable here unless
a Ray cluster's workers time the rows (``ray_address`` given). ``use_ray`` is implied by
``ray_address``; ``accelerator_type`` needs Ray. The feature space defaults to ``cpu`` on a
CPU and ``paper`` on a GPU. A rerun with the same request skips every configuration already
in ``out``. Heavy modules (the timing backends, Ray) are imported by the functions, not by
this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fleet.errors import JobcastError
from jobcast.service.errors import ServiceError

if TYPE_CHECKING:
    from layerwise.backends import TimingPlan
    from layerwise.bench import CampaignResult

__all__ = ["BenchError", "BenchPlan", "BenchRequest", "BenchResult", "parse_device",
           "parse_layers", "parse_precisions", "plan_bench", "resolve_backend", "run_bench"]

Progress = Callable[[int, int, "dict | None"], None]


class BenchError(ServiceError, ValueError):
    """A benchmark request that cannot run, where the library's own error is not a
    :class:`~fleet.errors.JobcastError` (a bad value, a failure while timing); the message
    says which."""

    kind: ClassVar[str] = "bench"


def parse_layers(text: str) -> list[str]:
    """``conv,dense`` (or ``all``) -> layer type names (:func:`layerwise.bench.parse_layers`)."""
    from layerwise.bench import parse_layers as parse

    return parse(text)


def parse_precisions(text: str | Sequence[str]) -> tuple[str, ...]:
    """``fp32,bf16`` or a sequence of such texts -> unique precision names in order."""
    from layerwise.bench import parse_precisions as parse

    parts = [text] if isinstance(text, str) else list(text)
    return parse([name for part in parts for name in str(part).split(",")])


def parse_device(device: str) -> tuple[str, int]:
    """``cpu``, ``gpu`` or ``gpu:N`` -> (kind, index) (the local device rows are timed on)."""
    from layerwise.local_device import parse_device as parse

    return parse(device)


def resolve_backend(name: str, installed: bool = True) -> str:
    """``auto`` -> tensorflow when installed, else torch; other names checked (a
    ``BackendError``): :func:`layerwise.backends.resolve_backend`, the one rule.

    ``installed``: the framework must be importable here (not so for a Ray cluster's driver).
    """
    from layerwise.backends import resolve_backend as resolve

    return resolve(name, installed)


@dataclass(frozen=True)
class BenchRequest:
    """What ``jobcast bench`` was asked: one field per flag, with the flags' defaults."""

    out: Path
    layers: str = "conv,dense"
    samples: int = 100
    device: str = "cpu"
    seed: int = 0
    space: str = ""
    backend: str = "auto"
    precisions: str | Sequence[str] = "fp32"
    reps: int = 5
    runs: int = 0
    target_ms: float = 25.0
    warmup: int = 5
    grad_input: bool = True
    backward: str = "upstream"
    isolate: bool = True
    use_ray: bool = False
    ray_address: str | None = None
    accelerator_type: str | None = None
    max_minutes: float | None = None

    @property
    def on_ray(self) -> bool:
        """Rows are timed in Ray tasks (``use_ray``, or implied by ``ray_address``)."""
        return self.use_ray or self.ray_address is not None


@dataclass(frozen=True)
class BenchPlan:
    """A checked :class:`BenchRequest`: the names the campaign runs with."""

    request: BenchRequest
    layers: list[str]
    space: str
    backend: str
    precisions: tuple[str, ...]
    timing: TimingPlan

    @property
    def max_seconds(self) -> float | None:
        """``max_minutes`` in seconds (None: no limit)."""
        minutes = self.request.max_minutes
        return None if minutes is None else 60.0 * minutes


@dataclass
class BenchResult:
    """What one benchmark run did: the campaign's own summary plus the plan it ran."""

    campaign: CampaignResult
    plan: BenchPlan

    def as_dict(self) -> dict[str, Any]:
        """The JSON summary of ``jobcast bench --json`` (the campaign's keys, then the plan's)."""
        summary = self.campaign.as_dict()
        summary.update(layers=self.plan.layers, seed=self.plan.request.seed,
                       space=self.plan.space, backend=self.plan.backend,
                       precisions=list(self.plan.precisions), ray=self.plan.request.on_ray,
                       total_rows=self.campaign.skipped_existing + self.campaign.written)
        return summary


def plan_bench(req: BenchRequest) -> BenchPlan:
    """Check every value of ``req`` before anything is timed; the first bad one is a
    :class:`~fleet.errors.JobcastError` naming it (the library's, or a :class:`BenchError`
    with the same text)."""
    from layerwise.backends import TimingPlan
    from layerwise.layers import get_space

    try:
        names = parse_layers(req.layers)
        kind, _ = parse_device(req.device)
        space_name = get_space(req.space or ("cpu" if kind == "cpu" else "paper")).name
        engine = resolve_backend(req.backend, installed=req.ray_address is None)
        wanted = parse_precisions(req.precisions)
        timing = TimingPlan(warmup=req.warmup, reps=req.reps, runs=req.runs,
                            target_rep_ms=req.target_ms, grad_input=req.grad_input,
                            backward=req.backward)
    except JobcastError:
        raise  # the library's own error and kind (a device, backend, precision, ...)
    except ValueError as exc:
        raise BenchError(str(exc)) from exc
    if req.accelerator_type and not req.on_ray:
        raise BenchError("--accelerator-type needs --ray (or --ray-address)")
    return BenchPlan(request=req, layers=names, space=space_name, backend=engine,
                     precisions=wanted, timing=timing)


def run_bench(req: BenchRequest | BenchPlan, *, progress: Progress | None = None) -> BenchResult:
    """Run (or resume) the campaign ``req`` asks for, here or on Ray; ``progress(done, total,
    row)`` as :func:`layerwise.bench.run_campaign` calls it. Every failure is a
    :class:`~fleet.errors.JobcastError` (rows written before it are kept)."""
    plan = req if isinstance(req, BenchPlan) else plan_bench(req)
    try:
        campaign = _run_ray(plan, progress) if plan.request.on_ray else _run_here(plan, progress)
    except (ValueError, OSError, RuntimeError) as exc:  # OSError: ConnectionError too
        if isinstance(exc, JobcastError):
            raise  # the library's own kind: a campaign file, a missing framework, ...
        raise BenchError(str(exc)) from exc
    return BenchResult(campaign=campaign, plan=plan)


def _run_here(plan: BenchPlan, progress: Progress | None) -> CampaignResult:
    from layerwise.bench import run_campaign

    r = plan.request
    return run_campaign(
        r.out, plan.layers, r.samples, seed=r.seed, space=plan.space, device=r.device,
        plan=plan.timing, max_seconds=plan.max_seconds, progress=progress, isolate=r.isolate,
        backend=plan.backend, precisions=plan.precisions)


def _run_ray(plan: BenchPlan, progress: Progress | None) -> CampaignResult:
    from layerwise.ray_campaign import run_ray_campaign

    r = plan.request
    return run_ray_campaign(
        r.out, plan.layers, r.samples, seed=r.seed, space=plan.space, device=r.device,
        plan=plan.timing, backend=plan.backend, precisions=plan.precisions,
        address=r.ray_address, accelerator_type=r.accelerator_type,
        max_seconds=plan.max_seconds, progress=progress)
