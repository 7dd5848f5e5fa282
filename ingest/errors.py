"""The ``ingest`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class IngestError(JobcastError):
    """A log, trace, tracker or store could not be read or written (parsers, the store,
    Prometheus, secret files)."""

    kind: ClassVar[str] = "ingest"
