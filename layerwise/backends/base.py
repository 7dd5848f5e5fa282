"""The timing-backend contract: how one configuration is timed, and the registry of backends.

A backend times one kind row on one device and describes that device. Rules: every backend
returns the same ``time_ms_median/min/max/std`` + ``runs`` dict (summarised by
:func:`summarise`), raises for a bad configuration or a framework error (the campaign turns
that into a failed row), and names its framework as the rows' ``framework`` column
(``tensorflow`` / ``pytorch``, the values :mod:`layerwise.sources` reads). A new backend is one
:func:`register_backend` call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet.precision import parse_precision


@dataclass(frozen=True)
class TimingPlan:
    """How one configuration is timed."""

    warmup: int = 5
    reps: int = 5
    runs: int = 0  # calls per repetition; 0 = adapt to target_rep_ms
    target_rep_ms: float = 50.0
    max_runs: int = 50
    grad_input: bool = True
    backward: str = "upstream"  # or "mse" (Justus et al.: MSE loss against a random target)

    def __post_init__(self) -> None:
        if self.backward not in ("upstream", "mse"):
            raise ValueError(f"backward must be 'upstream' or 'mse', got {self.backward!r}")


@dataclass(frozen=True)
class Backend:
    """One timing backend: ``time_config(row, device, plan)`` and ``detect(device)``."""

    name: str
    framework: str
    time_config: Callable[[dict, str, TimingPlan], dict]
    detect: Callable[[str], dict]
    precisions: tuple[str, ...]
    module: str  # the framework's import name (for a clear "not installed" error)


BACKENDS: dict[str, Backend] = {}
ALIASES = {"tf": "tensorflow", "keras": "tensorflow", "pytorch": "torch"}


def register_backend(backend: Backend) -> Backend:
    """Add a backend under its name (unique)."""
    if backend.name in BACKENDS:
        raise ValueError(f"backend {backend.name!r} is already registered")
    BACKENDS[backend.name] = backend
    return backend


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (``tf``/``pytorch`` accepted), with a clear error."""
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    try:
        return BACKENDS[key]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


def require_module(backend: Backend) -> None:
    """Raise a clear ``ValueError`` when the backend's framework is not installed."""
    import importlib.util

    if importlib.util.find_spec(backend.module) is None:
        raise ValueError(f"backend {backend.name!r} needs the Python package "
                         f"{backend.module!r}, which is not installed")


def check_precision(backend: Backend, precision: Any) -> str:
    """The precision name of a row, refused when the backend cannot time it."""
    name = str(parse_precision(precision))
    if name not in backend.precisions:
        raise ValueError(f"backend {backend.name!r} times {', '.join(backend.precisions)}, "
                         f"not {name}")
    return name


def summarise(times: list[float], runs: int) -> dict:
    """``time_ms_*`` of per-call repetition times (ms) and the calls per repetition."""
    return {
        "time_ms_median": statistics.median(times),
        "time_ms_min": min(times),
        "time_ms_max": max(times),
        "time_ms_std": statistics.pstdev(times) if len(times) > 1 else 0.0,
        "runs": runs,
    }


def adapt_runs(plan: TimingPlan, call: Callable[[], Any], sync: Callable[[Any], None]) -> int:
    """Calls per repetition: ``plan.runs``, or as many as fill ``target_rep_ms`` (1..max)."""
    if plan.runs > 0:
        return plan.runs
    start = time.perf_counter()
    sync(call())
    one = max(time.perf_counter() - start, 1e-6)
    return int(min(plan.max_runs, max(1, round(plan.target_rep_ms / 1000.0 / one))))
