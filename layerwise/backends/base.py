"""The timing-backend contract: how one configuration is timed, and the registry of backends.

A backend times one kind row on one device and describes that device. Rules: every backend
returns the same ``time_ms_median/min/max/std`` + ``runs`` dict (summarised by
:func:`summarise`), raises for a bad configuration or a framework error (the campaign turns
that into a failed row), and names its framework as the rows' ``framework`` column
(``tensorflow`` / ``pytorch``, the values :mod:`layerwise.sources` reads, so one of
:data:`fleet.framework.FRAMEWORKS`: :func:`register_backend` refuses any other). A new backend is
one :func:`register_backend` call (:func:`unregister_backend` removes one). ``auto`` is the first
backend of :data:`AUTO_ORDER` whose framework is installed (:func:`resolve_backend`). A spawned
campaign child or a Ray worker has only the built-in backends registered: it finds another one
by importing the module that defines it (:attr:`Backend.home`: a module that registers it on
import, or holds it as a module-level :class:`Backend`; :func:`ensure_backend`). Every bad
name, framework or precision is a :class:`BackendError` (a ``ValueError``).
"""

from __future__ import annotations

import importlib
import importlib.util
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from fleet.framework import FRAMEWORKS
from fleet.precision import parse_precision
from layerwise.errors import LayerwiseError


class BackendError(LayerwiseError, ValueError):
    """A timing backend that cannot be used: an unknown name, a framework that is not
    installed or not one of :data:`fleet.framework.FRAMEWORKS`, a precision it cannot time,
    a name registered twice."""

    kind: ClassVar[str] = "backend"


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
            raise BackendError(f"backward must be 'upstream' or 'mse', got {self.backward!r}")


@dataclass(frozen=True)
class Backend:
    """One timing backend: ``time_config(row, device, plan)`` and ``detect(device)``."""

    name: str
    framework: str
    time_config: Callable[[dict, str, TimingPlan], dict]
    detect: Callable[[str], dict]
    precisions: tuple[str, ...]
    module: str  # the framework's import name (for a clear "not installed" error)
    defined_in: str = ""  # the module defining it; "" = the module of time_config

    @property
    def home(self) -> str:
        """The module another process imports to get this backend (module rules)."""
        return self.defined_in or str(getattr(self.time_config, "__module__", "") or "")


BACKENDS: dict[str, Backend] = {}
ALIASES = {"tf": "tensorflow", "keras": "tensorflow", "pytorch": "torch"}
AUTO_ORDER = ("tensorflow", "torch")  # ``auto``: the first installed (the last when none is)


def _key(name: str) -> str:
    text = str(name).strip().lower()
    return ALIASES.get(text, text)


def register_backend(backend: Backend) -> Backend:
    """Add a backend under its name (unique); its ``framework`` must be one of
    :data:`fleet.framework.FRAMEWORKS` (the rows' ``framework`` column)."""
    if backend.name in BACKENDS:
        raise BackendError(f"backend {backend.name!r} is already registered")
    if backend.framework not in FRAMEWORKS:
        raise BackendError(f"backend {backend.name!r}: framework {backend.framework!r} is not "
                           f"one of {', '.join(FRAMEWORKS)} (the rows' framework column)")
    BACKENDS[backend.name] = backend
    return backend


def unregister_backend(name: str) -> Backend:
    """Remove the backend called ``name`` (aliases accepted) and return it."""
    backend = get_backend(name)
    del BACKENDS[backend.name]
    return backend


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, in registration order (for help texts)."""
    return tuple(BACKENDS)


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (``tf``/``pytorch`` accepted), with a clear error."""
    try:
        return BACKENDS[_key(name)]
    except KeyError:
        raise BackendError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}") from None


def ensure_backend(name: str, home: str = "") -> Backend:
    """The backend ``name``; where this process has not registered it (a spawned campaign
    child, a Ray worker), ``home`` (:attr:`Backend.home`) is imported first, and a
    module-level :class:`Backend` of that name found there is registered."""
    if _key(name) not in BACKENDS and home:
        try:
            module = importlib.import_module(home)
        except ModuleNotFoundError as exc:
            raise BackendError(
                f"backend {name!r} is defined in module {home!r}, which this process cannot "
                f"import ({exc}); a spawned campaign child or a Ray worker needs that module "
                "on its path (install it; on Ray, or ship it with runtime_env)") from None
        if _key(name) not in BACKENDS:
            found = [v for v in vars(module).values()
                     if isinstance(v, Backend) and v.name == _key(name)]
            if found:
                register_backend(found[0])
    return get_backend(name)


def require_module(backend: Backend) -> None:
    """Raise a clear :class:`BackendError` when the backend's framework is not installed."""
    if importlib.util.find_spec(backend.module) is None:
        raise BackendError(f"backend {backend.name!r} needs the Python package "
                           f"{backend.module!r}, which is not installed")


def resolve_backend(name: str, installed: bool = True) -> str:
    """The name of the backend ``name`` asks for: ``auto`` is the first of
    :data:`AUTO_ORDER` whose framework is installed (tensorflow, else torch); any other name
    is checked (:func:`get_backend`). ``installed``: its framework must be importable here
    (not so for the driver of a Ray cluster, whose workers time the rows)."""
    if str(name).strip().lower() == "auto":
        found = [b for b in AUTO_ORDER if b in BACKENDS
                 and importlib.util.find_spec(BACKENDS[b].module) is not None]
        name = found[0] if found else AUTO_ORDER[-1]
    engine = get_backend(name)
    if installed:
        require_module(engine)
    return engine.name


def check_precision(backend: Backend, precision: Any) -> str:
    """The precision name of a row, refused when the backend cannot time it."""
    name = str(parse_precision(precision))
    if name not in backend.precisions:
        raise BackendError(f"backend {backend.name!r} times {', '.join(backend.precisions)}, "
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
