"""The ``models`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class ModelError(JobcastError):
    """A fitted model is missing or unusable for what was asked."""

    kind: ClassVar[str] = "models"
