"""Typed forecasts: what every route returns.

A :class:`Forecast` is seconds with a 90 % interval (``low``, ``high``), the route and the id
of the model that answered, whether the job lies outside what the model saw
(``extrapolated``), and route-specific ``details`` (cross-validated error, phases, per-layer
breakdown, calibration, warnings). Beside the details, what other code reads is typed:
``why`` (the answering route's reason), ``chosen`` (why this answer was chosen, as clauses;
the JSON joins them with ``"; "``) and ``parts`` (:class:`ModelParts`: the end-to-end and
layerwise model ids the answer is made of, never parsed back out of ``model``). A job that
cannot be forecast gets a :class:`ForecastFailure` with the reason (and its
:class:`~fleet.errors.ErrorInfo`). ``to_dict()`` gives the JSON shape of
``jobcast predict --json``.

``Forecast.route`` is the registered name of the route that made it
(``jobcast.service.engine.route_registry.route_names()``: rate, whole-job, end-to-end, hybrid,
layerwise); what kind of answer it is, the candidate kind, is ``details["candidate"]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fleet.errors import ErrorInfo
from jobcast.service.engine.request import JobRequest


def percent_text(value: float) -> str:
    """A percentage as people read it: ``0.17``, ``4.2``, ``16``, ``320`` (never ``3.2e+02``)."""
    return f"{value:.2g}" if abs(value) < 10 else f"{value:.0f}"


@dataclass(frozen=True)
class ModelParts:
    """The models an answer is made of, as ids: the end-to-end model (also the one a hybrid
    scales by, or the one moved to another GPU count), the layerwise model, and the deployment
    key the end-to-end history was moved from (another GPU count). None where not used."""

    end_to_end: str | None = None
    layerwise: str | None = None
    scaled_from: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """``{"end_to_end", "layerwise", "scaled_from"}``."""
        return {"end_to_end": self.end_to_end, "layerwise": self.layerwise,
                "scaled_from": self.scaled_from}


@dataclass(frozen=True)
class Forecast:
    """Seconds with a 90 % interval, from one route and one model (module doc)."""

    job: JobRequest
    seconds: float
    low: float
    high: float
    route: str  # the registered name of the route that made it (route_registry)
    model: str
    extrapolated: bool = False
    unit: str = "s"
    details: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""  # the answering route's reason
    chosen: tuple[str, ...] = ()  # why this answer was chosen, clause by clause
    parts: ModelParts = field(default_factory=ModelParts)

    ok = True

    def scaled(self, factor: float, **changes: Any) -> Forecast:
        """The same forecast with seconds and interval multiplied by ``factor``."""
        return replace(
            self,
            seconds=self.seconds * factor,
            low=self.low * factor,
            high=self.high * factor,
            **changes,
        )

    def with_details(self, **details: Any) -> Forecast:
        """The same forecast with ``details`` updated."""
        return replace(self, details={**self.details, **details})

    def to_dict(self) -> dict:
        """``{"job", "seconds", "low", "high", "unit", "route", "model", "extrapolated", ...}``."""
        return {
            "job": self.job.describe(),
            **self.details,
            "seconds": self.seconds,
            "low": self.low,
            "high": self.high,
            "unit": self.unit,
            "route": str(self.route),
            "model": self.model,
            "extrapolated": self.extrapolated,
        }


NO_FORECAST = "no_forecast"  # the ErrorInfo kind of a job no route could answer


@dataclass(frozen=True)
class ForecastFailure:
    """A job no route could answer, and why: ``error`` is the reason as text, ``info`` the
    same in the one JSON error shape (kind ``no_forecast`` unless the error that stopped it
    says otherwise, e.g. ``request``)."""

    job: JobRequest
    error: str
    info: ErrorInfo | None = None

    ok = False

    @property
    def problem(self) -> ErrorInfo:
        """The failure as an :class:`ErrorInfo` (``info``, else kind ``no_forecast``)."""
        return self.info if self.info is not None else ErrorInfo(NO_FORECAST, self.error)

    def to_dict(self) -> dict:
        """``{"job", "error", "problem"}``: ``error`` the reason as text (as before, read by
        the CLI and scripts), ``problem`` the one JSON error shape (``{"kind", "message",
        "file", "line", "field", "row"}``, :class:`~fleet.errors.ErrorInfo`)."""
        return {"job": self.job.describe(), "error": self.error,
                "problem": self.problem.as_dict()}


Outcome = Forecast | ForecastFailure
