"""The route registry: every route the forecaster asks, with what the rest of the service
needs to know about it, in one registration.

A route is a class with ``name``, ``kinds``, ``costly`` and ``propose(ask)``
(:class:`jobcast.service.engine.candidates.Proposer`) and one :func:`register_route` call with a
:class:`RouteSpec`. Nothing else names a route: the candidate kinds, their fallback ranks,
which answers count as history and which price the network are read from here. A route class
is :class:`RegisteredRoute` (its ``route`` names its spec): its ``name`` and ``kinds`` are
the spec's, never a second literal. Every forecast's ``route`` is the registered name of the
route that made it (rate, whole-job, end-to-end, hybrid, layerwise); what kind of answer it is
(e.g. ``layerwise-calibrated``) is its candidate kind, ``details["candidate"]``.

Rules
-----
* **Order**: routes propose in registration order (``before`` inserts ahead of a named
  route); a costly route is skipped when none of its kinds can beat what came before
  (``jobcast.service.engine.forecaster``).
* **Kinds** (:func:`kinds`): every candidate kind of every route, ranked by its fallback
  expected error (:func:`fallback_errors`: the rank of a kind no backtest cell knows; ties in
  registration order). A kind belongs to one route.
* **History** (:func:`history_routes`, :func:`history_kinds`): a route that ``needs_history``
  is built only where the forecaster holds history; one that ``answers_from_history`` gives
  answers an ETA may scale by the job's own progress; ``history_kinds`` are the kinds answered
  by the asked job's own runs (ranked lower at a batch size their runs did not run; the flags
  a history answer cannot use are named).
* **Prices the network** (``prices_network``): the route's answers price the network layer by
  layer, so history-only flags (stack, tags) are named as unused.
* Names and kinds are unique: registering one that exists is a :class:`ValueError`
  (:class:`RouteRegistryError`); :func:`unregister_route` removes a route (a test's toy).
* The built-in routes (rate, whole-job, end-to-end, hybrid, layerwise) are registered here,
  at the end of this module, with their names and candidate kinds as this module's constants
  (the only place they are written: ``tests/test_architecture.py`` checks it); each builder
  asks the forecaster for its route, which imports the route module when it first builds its
  routes, so a forecaster without history loads neither pandas nor SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from jobcast.service.errors import ServiceError


class RouteRegistryError(ServiceError, ValueError):
    """A route registration that clashes with the registry (a name or kind taken)."""

    kind: ClassVar[str] = "route_registry"


@dataclass(frozen=True)
class RouteSpec:
    """One route of the registry (module rules); ``build(forecaster)`` makes the route (a
    :class:`jobcast.service.engine.candidates.Proposer`) from a
    :class:`jobcast.service.engine.forecaster.Forecaster`'s parts. (Typed ``Any`` here: this module
    imports neither, so every module may read the registry without an import cycle.)"""

    name: str
    build: Callable[[Any], Any]
    kinds: Mapping[str, float]  # candidate kind -> fallback expected |log error|
    needs_history: bool = False
    answers_from_history: bool = False
    history_kinds: Collection[str] = ()
    prices_network: bool = False
    before: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.kinds:
            raise RouteRegistryError(f"route {self.name!r} gives no candidate kinds")
        stray = set(self.history_kinds) - set(self.kinds)
        if stray:
            raise RouteRegistryError(f"route {self.name!r}: history kinds {sorted(stray)} are "
                                     "not among its kinds")


_ROUTES: list[RouteSpec] = []


def register_route(spec: RouteSpec) -> RouteSpec:
    """Add ``spec`` to the registry (at the end, or before ``spec.before``); module rules."""
    if any(s.name == spec.name for s in _ROUTES):
        raise RouteRegistryError(f"a route named {spec.name!r} is registered already")
    taken = {k: s.name for s in _ROUTES for k in s.kinds}
    clash = sorted(k for k in spec.kinds if k in taken)
    if clash:
        raise RouteRegistryError(f"route {spec.name!r}: kind(s) {', '.join(clash)} belong to "
                                 f"route {taken[clash[0]]!r}")
    where = len(_ROUTES)
    if spec.before is not None:
        names = [s.name for s in _ROUTES]
        if spec.before not in names:
            raise RouteRegistryError(f"route {spec.name!r}: no route {spec.before!r} to go "
                                     f"before (known: {', '.join(names)})")
        where = names.index(spec.before)
    _ROUTES.insert(where, spec)
    return spec


def unregister_route(name: str) -> RouteSpec:
    """Remove the route ``name`` and return its spec (:class:`RouteRegistryError` if none)."""
    for i, spec in enumerate(_ROUTES):
        if spec.name == name:
            return _ROUTES.pop(i)
    raise RouteRegistryError(f"no route named {name!r} (known: {', '.join(route_names())})")


def route_specs() -> tuple[RouteSpec, ...]:
    """The registered routes, in proposing order."""
    return tuple(_ROUTES)


def route_names() -> tuple[str, ...]:
    """The registered routes' names, in proposing order."""
    return tuple(s.name for s in _ROUTES)


def fallback_errors() -> dict[str, float]:
    """Every kind's fallback expected error, in rank order (:func:`kinds`)."""
    found = [(err, i, kind) for i, (kind, err) in
             enumerate((k, e) for s in _ROUTES for k, e in s.kinds.items())]
    return {kind: err for err, _, kind in sorted(found)}


def kinds() -> tuple[str, ...]:
    """Every candidate kind, ranked by fallback error (ties: registration order)."""
    return tuple(fallback_errors())


def history_kinds() -> frozenset[str]:
    """The kinds answered by the asked job's own runs (module rules)."""
    return frozenset(k for s in _ROUTES for k in s.history_kinds)


def history_routes() -> frozenset[str]:
    """The names of the routes built only where the forecaster holds history."""
    return frozenset(s.name for s in _ROUTES if s.needs_history)


def route_spec(name: str) -> RouteSpec:
    """The registered route ``name`` (:class:`RouteRegistryError` if none)."""
    for spec in _ROUTES:
        if spec.name == name:
            return spec
    raise RouteRegistryError(f"no route named {name!r} (known: {', '.join(route_names())})")


class RegisteredRoute:
    """A route class's ``name`` and ``kinds``, read from its registered spec (``route``)."""

    route: ClassVar[str]

    @property
    def name(self) -> str:
        """The registered route's name (every forecast it makes carries it as ``route``)."""
        return self.route

    @property
    def kinds(self) -> tuple[str, ...]:
        """The candidate kinds its spec registers."""
        return tuple(route_spec(self.route).kinds)


def spec_of_kind(kind: str) -> RouteSpec | None:
    """The route that gives candidates of ``kind`` (None for a kind no route gives)."""
    return next((s for s in _ROUTES if kind in s.kinds), None)


def answer_kind(details: Mapping[str, Any], route: str) -> str:
    """The candidate kind of an answer: ``details["candidate"]``, else its route's value (a
    forecast made by a route directly, without the forecaster's choice)."""
    return str(details.get("candidate") or route)


def answers_from_history(details: Mapping[str, Any], route: str) -> bool:
    """Whether an answer (its details and route) comes from history (module rules)."""
    spec = spec_of_kind(answer_kind(details, route))
    return spec is not None and spec.answers_from_history


def prices_network(details: Mapping[str, Any], route: str) -> bool:
    """Whether an answer prices the network layer by layer (module rules)."""
    spec = spec_of_kind(answer_kind(details, route))
    return spec is not None and spec.prices_network


# -- the built-in routes: their names and kinds, written once ---------------------------

RATE, WHOLE_JOB, END_TO_END, HYBRID, LAYERWISE = (
    "rate", "whole-job", "end-to-end", "hybrid", "layerwise")
# rate: a system's own seconds per iteration (mean and robust levels), else the fleet's
OWN_RATE, OWN_MEDIAN, OWN_RECENT, OWN_LINE, OWN_TREND, FLEET_RATE = (
    "own-rate", "own-median", "own-recent", "own-line", "own-trend", "fleet-rate")
WHOLE_JOB_KIND = "whole-job"  # a recurring job's own earlier runs, whole
OWN_MODEL, POOLED_MODEL, SCALED_COUNT = "own-model", "pooled-model", "scaled-count"
HYBRID_KIND = "hybrid"  # layerwise shape versus batch size, scaled by the key's history
LAYERWISE_CALIBRATED, LAYERWISE_KIND = "layerwise-calibrated", "layerwise"
RATE_LEVEL_KINDS = (OWN_MEDIAN, OWN_RECENT, OWN_TREND, OWN_LINE)  # the robust levels


# The builders ask the forecaster for its route (``Forecaster.rate_route()``, ...): it
# imports each route module on first use, and this module imports none of them.
def _rates(fc: Any) -> Any:
    return fc.rate_route()


def _whole_job(fc: Any) -> Any:
    return fc.whole_job_route()


def _end_to_end(fc: Any) -> Any:
    return fc.end_to_end


def _hybrid(fc: Any) -> Any:
    return fc.hybrid_route()


def _layerwise(fc: Any) -> Any:
    return fc.layerwise


# In proposing order. Fallback ranks: history at another batch size than asked ranks below
# the hybrid and the calibrated layerwise answers that know how time scales with the batch
# (docs/lab/batch-hybrid.md; candidates.OFF_BATCH_ERROR).
_RATE_KINDS = (OWN_RATE, *RATE_LEVEL_KINDS, FLEET_RATE)
BUILT_IN_ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec(RATE, _rates, {OWN_RATE: 0.01, OWN_MEDIAN: 0.0105, OWN_RECENT: 0.0105,
                             OWN_LINE: 0.0105, OWN_TREND: 0.011, FLEET_RATE: 0.04},
              needs_history=True, answers_from_history=True, history_kinds=_RATE_KINDS),
    RouteSpec(WHOLE_JOB, _whole_job, {WHOLE_JOB_KIND: 0.03}, needs_history=True,
              answers_from_history=True, history_kinds=(WHOLE_JOB_KIND,)),
    RouteSpec(END_TO_END, _end_to_end,
              {OWN_MODEL: 0.012, POOLED_MODEL: 0.05, SCALED_COUNT: 0.15},
              needs_history=True, answers_from_history=True,
              history_kinds=(OWN_MODEL, POOLED_MODEL)),
    RouteSpec(HYBRID, _hybrid, {HYBRID_KIND: 0.12}, needs_history=True),
    RouteSpec(LAYERWISE, _layerwise, {LAYERWISE_CALIBRATED: 0.2, LAYERWISE_KIND: 0.3},
              prices_network=True),
)
for _spec in BUILT_IN_ROUTES:
    if _spec.name not in route_names():  # a module reload registers nothing twice
        register_route(_spec)


__all__ = ["BUILT_IN_ROUTES", "RouteRegistryError", "RouteSpec", "RegisteredRoute",
           "answer_kind", "answers_from_history", "fallback_errors", "history_kinds",
           "history_routes", "kinds", "prices_network", "register_route", "route_names",
           "route_spec", "route_specs", "spec_of_kind", "unregister_route"]
