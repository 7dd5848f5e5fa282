"""The ``jobcast.service`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class ServiceError(JobcastError):
    """A request, price table, check or ETA the service was given cannot be answered."""

    kind: ClassVar[str] = "service"
