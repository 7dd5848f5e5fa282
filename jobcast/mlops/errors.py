"""The ``jobcast.mlops`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class MlopsError(JobcastError):
    """Tracking, registering or serving the forecaster failed for a stated reason."""

    kind: ClassVar[str] = "mlops"
