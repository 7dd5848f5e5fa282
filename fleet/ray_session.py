"""Joining the fleet's Ray: one place for starting, joining and naming failures of Ray.

Rules: ``ray`` is imported only by :func:`import_ray` (a missing package is
:class:`RayMissing`, which says how to install it); :func:`connect` uses a Ray already running in
this process, else joins ``address``, else starts a local one without dashboard, telemetry or
worker logs on the driver, and returns whether the caller started it (and so shuts it down);
:func:`task_failure` is the one-line reason of a failed task.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

from fleet.errors import FleetError


class RayMissing(FleetError, ImportError):
    """Work on Ray was asked for but the ``ray`` package is not installed."""

    kind: ClassVar[str] = "missing_dependency"
    package: ClassVar[str] = "ray"

    def __init__(self, what: str = "This") -> None:
        self.what = what
        super().__init__(f"{what} needs the ray package, which is not installed: pip install ray")


class RayConnectError(FleetError, ConnectionError):
    """A Ray cluster that cannot be joined (the message names the address and Ray's reason)."""

    kind: ClassVar[str] = "ray"

    def __init__(self, address: str, reason: str) -> None:
        self.address = address
        super().__init__(f"cannot join Ray at {address}: {reason}")


def import_ray(what: str = "This") -> Any:
    """The ``ray`` module, or :class:`RayMissing` naming ``what`` needed it."""
    try:
        import ray
    except ImportError:
        raise RayMissing(what) from None
    return ray


def connect(ray: Any, address: str | None, num_cpus: int | None) -> bool:
    """Use the Ray already running here, else join ``address``, else start a local one.

    Returns True if Ray was started or joined here (the caller shuts it down); a cluster that
    cannot be joined is a :class:`RayConnectError` (a ``ConnectionError``) naming the address.
    """
    if ray.is_initialized():
        return False
    quiet = dict(log_to_driver=False, logging_level=logging.WARNING)
    if address is not None:
        try:
            ray.init(address=address, **quiet)
        except (ConnectionError, TimeoutError) as exc:
            raise RayConnectError(address, task_failure(exc)) from None
    else:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # offline tool: no telemetry
        ray.init(num_cpus=num_cpus, include_dashboard=False, **quiet)
    return True


def task_failure(exc: Exception) -> str:
    """One line for a failed task: the exception it raised, else Ray's first line."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0][:300]
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
