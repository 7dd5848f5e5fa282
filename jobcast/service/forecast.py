"""Typed forecasts: what every route returns, and the one list of route names.

A :class:`Forecast` is seconds with a 90 % interval (``low``, ``high``), the route and the id
of the model that answered, whether the job lies outside what the model saw
(``extrapolated``), and route-specific ``details`` (cross-validated error, phases, per-layer
breakdown, calibration, warnings). A job that cannot be forecast gets a
:class:`ForecastFailure` with the reason. ``to_dict()`` gives the JSON shape of
``jobcast predict --json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from jobcast.service.request import JobRequest


def percent_text(value: float) -> str:
    """A percentage as people read it: ``0.17``, ``4.2``, ``16``, ``320`` (never ``3.2e+02``)."""
    return f"{value:.2g}" if abs(value) < 10 else f"{value:.0f}"


class Route(StrEnum):
    """How a forecast was made."""

    END_TO_END = "end-to-end"  # phase models fitted on this job's own history
    LAYERWISE = "layerwise"  # per-layer predictions summed over the network
    LAYERWISE_CALIBRATED = "layerwise-calibrated"  # layerwise, scaled by observed runs
    HYBRID = "hybrid"  # layerwise shape versus batch size, scaled by the key's history
    PACE = "pace"  # a live job's remaining steps at the pace it shows (ETA only)


@dataclass(frozen=True)
class Forecast:
    """Seconds with a 90 % interval, from one route and one model."""

    job: JobRequest
    seconds: float
    low: float
    high: float
    route: Route
    model: str
    extrapolated: bool = False
    unit: str = "s"
    details: Mapping[str, Any] = field(default_factory=dict)

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


@dataclass(frozen=True)
class ForecastFailure:
    """A job no route could answer, and why."""

    job: JobRequest
    error: str

    ok = False

    def to_dict(self) -> dict:
        return {"job": self.job.describe(), "error": self.error}


Outcome = Forecast | ForecastFailure
