"""The door of a ``jobcast serve`` worker: bearer tokens, failed-attempt limits, ``/metrics``.

Rules (tokens and their file: :mod:`jobcast.mlops.auth`):

* **Open paths.** ``GET /ping`` and ``/health`` answer without a token (liveness only: they
  say nothing about the model). Every other path, ``/metrics`` included, needs a token when
  the server has a token file.
* **Before the body.** The token is checked on the request's headers, before the
  application reads any of the body; a refused request is answered at once with
  ``Connection: close`` (its body is never read).
* **Answers.** 401 (no token, or not one well-formed bearer token; with
  ``WWW-Authenticate: Bearer``), 403 (a well-formed token that is unknown or revoked),
  429 (too many failures from this client, with ``Retry-After``): JSON with MLflow's
  ``error_code`` and ``message``, ``problem`` in the one error shape
  (:class:`fleet.errors.ErrorInfo`; kind ``unauthorized`` or ``rate_limited``), and the
  deprecated ``reason`` and ``error`` (the text, kept for one release, as in
  :mod:`jobcast.mlops.rest_app`): one fixed text per status, saying nothing of which part
  failed. The token never reaches a log.
* **Failures per client.** Each client address (the TCP peer; ``X-Forwarded-For`` is not
  trusted) has a bucket of ``max_failures`` failed attempts that refills fully over
  ``window_s``; a failure takes one. With the bucket empty every request but the open paths
  gets 429, a valid token included (a blocked client learns nothing by guessing), until one
  attempt has refilled. The buckets are per worker process (``--workers N``: at most N times
  as many attempts per window); at most :data:`MAX_CLIENTS` addresses are tracked (full
  buckets are dropped first).
* **Metrics.** ``jobcast_serve_auth_failures_total{reason}`` (``missing``, ``malformed``,
  ``invalid``, ``revoked``, ``rate_limited``) and ``jobcast_serve_auth_ok_total``, in the
  Prometheus text format at ``GET /metrics``; with ``$PROMETHEUS_MULTIPROC_DIR`` set (the
  supervisor sets it) the counts are those of all the workers.
"""

from __future__ import annotations

import json
import math
import os
import time

from fleet.errors import ErrorInfo
from jobcast.mlops.auth import TokenVerifier
from jobcast.mlops.limits import AuthLimits

OPEN_PATHS = ("/ping", "/health")
MAX_CLIENTS = 10_000
REASONS = ("missing", "malformed", "invalid", "revoked", "rate_limited")
ANSWERS = {
    401: ("UNAUTHENTICATED", "a valid bearer token is required "
          "(Authorization: Bearer <token>; see `jobcast token create`)"),
    403: ("PERMISSION_DENIED", "the bearer token is not accepted"),
    429: ("RESOURCE_EXHAUSTED", "too many failed attempts from this client; retry later"),
}


class FailureLimiter:
    """Per-client buckets of failed attempts (module rules). Single-threaded (one event loop)."""

    def __init__(self, limits: AuthLimits, clock=time.monotonic):
        self.limits, self.clock = limits, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (level, at)

    def _level(self, client: str, now: float) -> float:
        level, at = self._buckets.get(client, (float(self.limits.max_failures), now))
        rate = self.limits.max_failures / self.limits.window_s
        return min(float(self.limits.max_failures), level + (now - at) * rate)

    def retry_after(self, client: str) -> int:
        """0 when ``client`` may try; else whole seconds until one attempt has refilled."""
        if client not in self._buckets:
            return 0
        level = self._level(client, self.clock())
        if level >= 1.0:
            return 0
        return max(1, math.ceil((1.0 - level) * self.limits.window_s / self.limits.max_failures))

    def fail(self, client: str) -> None:
        """One failed attempt from ``client``: its bucket loses one."""
        now = self.clock()
        self._buckets[client] = (max(0.0, self._level(client, now) - 1.0), now)
        if len(self._buckets) > MAX_CLIENTS:
            self._forget(now)

    def _forget(self, now: float) -> None:
        full = [c for c in self._buckets if self._level(c, now) >= self.limits.max_failures]
        for client in full or sorted(self._buckets, key=lambda c: self._buckets[c][1]):
            del self._buckets[client]
            if len(self._buckets) <= MAX_CLIENTS // 2:
                return


class Metrics:
    """The door's counters and their exposition (module rules)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter

        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry()
        into = None if self.multiprocess else self.registry
        self.failures = Counter("jobcast_serve_auth_failures", "Requests refused by the "
                                "token check, by reason", ["reason"], registry=into)
        self.ok = Counter("jobcast_serve_auth_ok", "Requests that passed the token check",
                          registry=into)
        for reason in REASONS:
            self.failures.labels(reason)

    def exposition(self) -> bytes:
        """The counters in the Prometheus text format (all workers' with multiprocess)."""
        from prometheus_client import CollectorRegistry, generate_latest

        if not self.multiprocess:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)


class AuthGate:
    """ASGI middleware in front of :class:`jobcast.mlops.rest_app.RestApp` (module rules).
    ``verifier`` None: no tokens (every request passes; ``/metrics`` still answers)."""

    def __init__(self, app, verifier: TokenVerifier | None, limits: AuthLimits | None = None):
        self.app, self.verifier = app, verifier
        self.limiter = FailureLimiter(limits or AuthLimits())
        self.metrics = Metrics()

    async def __call__(self, scope, receive, send) -> None:
        """Check the token (module rules), then answer ``/metrics`` or pass to the app."""
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        if self.verifier is not None:
            client = (scope.get("client") or ("?", 0))[0]
            wait = self.limiter.retry_after(client)
            if wait:
                self.metrics.failures.labels("rate_limited").inc()
                return await _refuse(send, 429, [(b"retry-after", str(wait).encode())])
            header = None
            for key, value in scope.get("headers") or ():
                if key == b"authorization":
                    header = value
                    break
            verdict = self.verifier.check(header)
            if verdict != "ok":
                self.limiter.fail(client)
                self.metrics.failures.labels(verdict).inc()
                status = 401 if verdict in ("missing", "malformed") else 403
                extra = [(b"www-authenticate", b'Bearer realm="jobcast"')] if status == 401 \
                    else []
                return await _refuse(send, status, extra)
            self.metrics.ok.inc()
        if scope["path"] == "/metrics" and scope["method"] == "GET":
            data = self.metrics.exposition()
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/plain; version=0.0.4; charset=utf-8"),
                (b"content-length", str(len(data)).encode())]})
            return await send({"type": "http.response.body", "body": data})
        return await self.app(scope, receive, send)


async def _refuse(send, status: int, extra: list[tuple[bytes, bytes]]) -> None:
    code, text = ANSWERS[status]
    reason = "unauthorized" if status != 429 else "rate_limited"
    data = json.dumps({"error_code": code, "reason": reason, "error": text, "message": text,
                       "problem": ErrorInfo(kind=reason, message=text).as_dict()}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        (b"connection", b"close"), *extra]})
    await send({"type": "http.response.body", "body": data})
