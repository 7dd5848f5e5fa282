"""What ``jobcast serve`` lets one request and one client do: the limits' values, apart from
the server that enforces them (:mod:`jobcast.mlops.rest_app` for a request's,
:mod:`jobcast.mlops.gate` for a client's failed tokens), so the CLI can show their defaults
without loading the server. The rules are those modules'."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask (rules: :mod:`jobcast.mlops.rest_app`)."""

    max_body_bytes: int = 1024 * 1024
    max_rows: int = 1000
    timeout_s: float = 60.0
    max_waiting: int = 64
    body_timeout_s: float = 10.0


@dataclass(frozen=True)
class AuthLimits:
    """Failed attempts a client may make (rules: :mod:`jobcast.mlops.gate`)."""

    max_failures: int = 20
    window_s: float = 60.0
