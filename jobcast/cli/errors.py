"""The ``jobcast.cli`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class CliError(JobcastError):
    """A command's own set-up (the local PostgreSQL, the stack's secrets) failed."""

    kind: ClassVar[str] = "cli"
