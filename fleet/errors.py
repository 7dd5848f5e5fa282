"""One family of errors for the whole project: :class:`JobcastError` and its one JSON shape.

Rules:

* Every error the library raises on purpose (bad input, a miss, a refusal) is a
  :class:`JobcastError`; each room has its own base next to it (``ingest/errors.py``
  :class:`IngestError`, ``layerwise/errors.py``, ``models/errors.py``,
  ``jobcast/service/errors.py``, ``jobcast/mlops/errors.py``, ``jobcast/cli/errors.py``), and
  this room's is :class:`FleetError`. The base lives here because ``fleet`` is the room every
  other room may import.
* A class keeps the built-in base it had (``class ParseError(IngestError, ValueError)``), so
  code that catches ``ValueError`` and scikit-learn's contract (``ValueError`` on bad
  parameters) keep working while catches are narrowed to ``JobcastError``.
* :attr:`JobcastError.kind` names the kind of failure in a word (``"parse"``,
  ``"unknown_gpu"``); :meth:`JobcastError.info` gives the one shape a failure takes in JSON,
  :class:`ErrorInfo` (``kind``, ``message``, ``file``, ``line``, ``field``, ``row``; absent
  values are null), read from the exception's ``source``/``file``, ``line``, ``field`` and
  ``row`` attributes where it has them.
* Anything else that escapes is a bug in jobcast, never an ordinary "cannot forecast":
  :func:`bug_info` says so (kind ``"bug"``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

BUG_KIND = "bug"


@dataclass(frozen=True)
class ErrorInfo:
    """A failure as JSON shows it (module rules): what kind, why, and where when known."""

    kind: str
    message: str
    file: str | None = None
    line: int | None = None
    field: str | None = None
    row: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """All six keys, absent values as None."""
        return asdict(self)


class JobcastError(Exception):
    """An error jobcast raises on purpose (module rules); subclasses set :attr:`kind`."""

    kind: ClassVar[str] = "error"

    def info(self) -> ErrorInfo:
        """This error in the one JSON shape (module rules)."""
        where = getattr(self, "source", None) or getattr(self, "file", None)
        line, row = getattr(self, "line", None), getattr(self, "row", None)
        field = getattr(self, "field", None)
        return ErrorInfo(kind=self.kind, message=str(self),
                         file=None if where is None else str(where),
                         line=line if isinstance(line, int) else None,
                         field=None if field is None else str(field),
                         row=row if isinstance(row, int) else None)


class FleetError(JobcastError):
    """What a job runs on could not be named or read (GPU, deployment, precision, catalog)."""

    kind: ClassVar[str] = "fleet"


class DeploymentError(FleetError, ValueError):
    """A deployment that cannot be read: empty, no accelerator named, a count below one, an
    unknown network word (``fleet.deployment``, ``fleet.names``, ``fleet.interconnect``).
    It lives here, not in ``fleet/deployment.py``, because ``fleet.names`` and
    ``fleet.identity`` (which ``fleet.deployment`` imports) raise it too; ``fleet.deployment``
    re-exports it."""

    kind: ClassVar[str] = "deployment"


def bug_info(exc: BaseException) -> ErrorInfo:
    """An exception that is not a :class:`JobcastError`, reported as the bug it is."""
    return ErrorInfo(kind=BUG_KIND, message=f"internal error (a bug in jobcast, please "
                                            f"report it): {type(exc).__name__}: {exc}")


def error_info(exc: BaseException) -> ErrorInfo:
    """The JSON shape of any exception: its own for a :class:`JobcastError`, else a bug."""
    return exc.info() if isinstance(exc, JobcastError) else bug_info(exc)
