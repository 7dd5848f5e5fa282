"""The ``ingest`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class IngestError(JobcastError):
    """A log, trace, tracker or store could not be read or written (parsers, the store,
    Prometheus, secret files)."""

    kind: ClassVar[str] = "ingest"


class StoreError(IngestError, RuntimeError):
    """The store could not be opened, read, migrated or written; the message says what and
    why. :class:`ingest.migrations.SchemaVersionError` (a store at another revision) is one.
    Defined here, not in :mod:`ingest.store` (which re-exports it), so the migrations can
    derive from it without an import cycle."""

    kind: ClassVar[str] = "store"


class IngestOptionError(IngestError, ValueError):
    """A setting an ingest was given is not valid: a Prometheus selector, duration, time or
    metric/label name, a ``--job-key`` expression. The message names the value and what
    is accepted; ``field`` names the setting where known."""

    kind: ClassVar[str] = "option"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
