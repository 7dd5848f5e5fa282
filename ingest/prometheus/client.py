"""Asking Prometheus: :class:`PrometheusClient` and :class:`PrometheusError`.

Rules
-----
* The client wraps ``prometheus_api_client.PrometheusConnect`` with time-outs, auth
  (bearer token, basic) and TLS options (CA file, insecure; not both, and only with an
  ``https://`` URL: plain HTTP has no certificate to verify).
* Retries, with back-off (``backoff``, doubling, at most 10 s), only where they help:
  connection refused or reset, time outs, cut answers, unreadable bodies, HTTP
  429/502/503/504. Everything else fails at once.
* Every failure becomes a :class:`PrometheusError` that says what went wrong and what to
  try; answers marked partial (``warnings``) or not ``success`` are failures too. Messages
  name the server's URL, never a request's (URL-encoded) query; TLS failures say which side
  is wrong (a plain-HTTP server behind ``https://``, an HTTPS server behind ``http://``, an
  unverifiable or mismatched certificate).
* Raw samples come from range-vector selectors (``selector[chunk]`` at each chunk's end),
  so they keep their scrape timestamps; chunks keep each answer small and are merged per
  series. ``max_points`` stops a fetch that holds more samples than that (nothing is kept).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from ingest.errors import IngestError
from ingest.prometheus.names import iso_time


class PrometheusError(IngestError, RuntimeError):
    """Prometheus could not be asked or did not answer usefully; the message says why."""

    kind: ClassVar[str] = "prometheus"


RETRY_STATUS = (429, 502, 503, 504)


@dataclass
class PrometheusClient:
    """Ask a Prometheus server, with time-outs, retries, auth and TLS options.

    ``retries`` is how many times a failed request is tried again (waiting ``backoff``,
    then twice as long each time, at most 10 s). ``basic_auth`` is ``(user, password)``;
    ``ca_file`` a PEM bundle to verify the server's certificate with; ``insecure`` turns
    verification off. ``on_response(response)`` is called after every HTTP answer.
    """

    url: str
    timeout: float = 30.0
    retries: int = 3
    backoff: float = 0.5
    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    ca_file: str | None = None
    insecure: bool = False
    on_response: Callable | None = None
    requests_made: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        url = self.url.strip().rstrip("/")
        if not re.match(r"https?://[^/\s]+", url):
            raise PrometheusError(f"bad Prometheus URL {self.url!r}: it must start with "
                                  "http:// or https:// and name a host")
        if self.timeout <= 0:
            raise PrometheusError(f"timeout must be positive, got {self.timeout}")
        if self.retries < 0:
            raise PrometheusError(f"retries must be >= 0, got {self.retries}")
        if self.ca_file and self.insecure:
            raise PrometheusError("give --ca-file or --insecure, not both")
        if (self.ca_file or self.insecure) and url.lower().startswith("http://"):
            flag = "--insecure" if self.insecure else "--ca-file"
            raise PrometheusError(
                f"{flag} only applies to https:// URLs: {url} is plain HTTP, which has no "
                f"certificate to verify. Drop {flag}, or use https://{url[len('http://'):]} "
                "if the server serves TLS")
        self.url = url
        self._conn = None
        self._last = None
        self._tls_probe: bool | None = None

    def _connect(self):
        if self._conn is not None:
            return self._conn
        import requests
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        session = requests.Session()
        if self.ca_file:
            session.verify = self.ca_file
        elif self.insecure:
            session.verify = False
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        session.hooks["response"].append(self._hook)
        headers = {"Authorization": f"Bearer {self.bearer_token}"} if self.bearer_token else None
        # Retries are done here (one policy for every failure kind), not by urllib3.
        self._conn = PrometheusConnect(
            url=self.url, headers=headers, auth=self.basic_auth, session=session,
            timeout=self.timeout, retry=Retry(total=0, raise_on_status=False),
        )
        return self._conn

    def _hook(self, response, *args, **kwargs):
        self._last = response
        self.requests_made += 1
        if self.on_response is not None:
            self.on_response(response)
        return response

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        """An instant query (``/api/v1/query``); returns the ``result`` list."""
        params = {"timeout": f"{self.timeout:g}s"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._call(lambda c: c.custom_query(promql, params=params), promql)

    def raw_samples(self, series_selector: str, start: float, end: float,
                    chunk: float = 6 * 3600.0,
                    progress: Callable[[int, int], None] | None = None,
                    max_points: int | None = None) -> list[dict]:
        """Every raw sample of the selected series in ``[start, end]``, merged per series.

        Asks range vectors (``selector[chunk]`` at the chunk's end) so samples keep their
        scrape timestamps; chunks keep each answer small. More than ``max_points`` samples
        in all is a :class:`PrometheusError` (raised as soon as the count passes it).
        """
        if not end > start:
            raise PrometheusError(f"the time range is empty (since {iso_time(start)} is not "
                                  f"before until {iso_time(end)})")
        if chunk <= 0:
            raise PrometheusError(f"chunk must be positive, got {chunk}")
        merged: dict[tuple, dict[float, str]] = {}
        labels_of: dict[tuple, dict] = {}
        points = 0
        edges = []
        t = start
        while t < end:
            edges.append((t, min(end, t + chunk)))
            t += chunk
        for i, (lo, hi) in enumerate(edges):
            width = max(1, math.ceil(hi - lo))
            promql = f"{series_selector}[{width}s]"
            for item in self.query(promql, at=hi):
                metric = item.get("metric", {})
                key = tuple(sorted(metric.items()))
                labels_of[key] = metric
                values = merged.setdefault(key, {})
                before = len(values)
                for ts, value in item.get("values", []):
                    if lo <= float(ts) <= hi:
                        values[float(ts)] = value
                points += len(values) - before
            if max_points is not None and points > max_points:
                raise PrometheusError(
                    f"more than {max_points:,} samples (--max-points) after {i + 1:,} of "
                    f"{len(edges):,} requests; narrow --since/--until, add --selector "
                    "LABEL=VALUE, or raise --max-points")
            if progress:
                progress(i + 1, len(edges))
        return [{"metric": labels_of[k], "values": [[t, v] for t, v in sorted(vals.items())]}
                for k, vals in merged.items() if vals]

    def _call(self, fn, what: str):
        from prometheus_api_client.exceptions import PrometheusApiClientException
        from requests import exceptions as rex

        attempt = 0
        while True:
            self._last = None
            try:
                result = fn(self._connect())
                self._check_answer()
                return result
            except (PrometheusApiClientException, rex.RequestException, ValueError,
                    KeyError, TypeError) as exc:
                reason, retry = self._explain(exc)
            if not retry or attempt >= self.retries:
                tries = f" (tried {attempt + 1} times)" if attempt else ""
                raise PrometheusError(f"Prometheus at {self.url}: {reason}{tries}") from None
            time.sleep(min(10.0, self.backoff * 2**attempt))
            attempt += 1

    def _check_answer(self) -> None:
        """Reject answers that say they are partial (``warnings``) or not a success."""
        response = self._last
        if response is None or (b'"warnings"' not in response.content
                                and b'"status":"success"' in response.content):
            return
        try:
            body = response.json()
        except ValueError:
            return
        if isinstance(body, dict) and body.get("warnings"):
            raise _Partial("; ".join(map(str, body["warnings"])))
        if isinstance(body, dict) and body.get("status") not in (None, "success"):
            raise _Partial(f"status {body.get('status')!r}: {body.get('error', '')}")

    def _explain(self, exc: Exception) -> tuple[str, bool]:
        """(clear reason, worth retrying) for a failed request."""
        from prometheus_api_client.exceptions import PrometheusApiClientException
        from requests import exceptions as rex

        if isinstance(exc, _Partial):
            return (f"partial answer ({exc}); nothing was written. Narrow --since/--until "
                    "or retry when the server is healthy", False)
        if isinstance(exc, rex.SSLError):
            return self._explain_tls(_cause(exc)), False
        if isinstance(exc, rex.ConnectTimeout | rex.ReadTimeout | rex.Timeout):
            return f"no answer within {self.timeout:g} s (--timeout)", True
        dropped = ("reset", "aborted", "remotedisconnected")
        if (isinstance(exc, rex.ConnectionError | rex.ChunkedEncodingError)
                and self.url.lower().startswith("http://")
                and any(d in f"{type(_cause(exc)).__name__} {_cause(exc)}".lower()
                        for d in dropped)
                and self._speaks_tls()):
            return (f"the server speaks HTTPS, not plain HTTP: use "
                    f"https://{self.url.split('://', 1)[-1]}", False)
        if isinstance(exc, rex.ConnectionError):
            cause = _cause(exc)
            text = f"{type(cause).__name__} {cause}".lower()
            if "timeout" in text or "timed out" in text:
                return f"no answer within {self.timeout:g} s (--timeout)", True
            if "refused" in text:
                return "connection refused (is the server running, is the URL right?)", True
            if "name or service not known" in text or "nodename nor servname" in text:
                return f"unknown host in {self.url}", False
            if "remotedisconnected" in text or "aborted" in text or "reset" in text:
                return "the server closed the connection without answering", True
            return f"connection failed ({_short(cause)})", True
        if isinstance(exc, rex.ChunkedEncodingError | rex.ContentDecodingError):
            return f"the answer was cut off ({_short(_cause(exc))})", True
        if isinstance(exc, PrometheusApiClientException):
            status = self._last.status_code if self._last is not None else None
            detail = _error_detail(self._last)
            if status in (401, 403):
                return (f"HTTP {status}: not authorised; pass --bearer-token or "
                        f"--basic-auth USER:PASSWORD", False)
            if status == 400 and "HTTP request to an HTTPS server" in detail:
                return (f"the server speaks HTTPS, not plain HTTP: use "
                        f"https://{self.url.split('://', 1)[-1]}", False)
            if status == 404:
                return ("HTTP 404: no Prometheus query API at this URL (give the server's "
                        "base URL, e.g. http://host:9090)", False)
            if status == 422 and "too many samples" in detail:
                return (f"HTTP 422: {detail}; use a smaller --chunk or a narrower "
                        "--selector", False)
            if status in RETRY_STATUS:
                return f"HTTP {status}: {detail or 'server busy'}", True
            return f"HTTP {status}: {detail or _short(exc)}", False
        if isinstance(exc, ValueError | KeyError | TypeError):
            # a body that is not the JSON the API promises: usually a cut connection
            return f"unreadable answer ({type(exc).__name__}: {_short(exc)})", True
        return f"{type(exc).__name__}: {_short(exc)}", False


    def _speaks_tls(self) -> bool:
        """Whether the server completes a TLS handshake (asked once, after an ``http://``
        request was reset: a TLS server drops plain requests)."""
        if self._tls_probe is None:
            import socket
            import ssl
            from urllib.parse import urlsplit

            parts = urlsplit(self.url)
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            try:
                with socket.create_connection((parts.hostname, parts.port or 80),
                                              timeout=min(self.timeout, 2.0)) as raw, \
                        context.wrap_socket(raw, server_hostname=parts.hostname):
                    self._tls_probe = True
            except (OSError, ValueError):
                self._tls_probe = False
        return self._tls_probe

    def _explain_tls(self, cause: BaseException) -> str:
        """A TLS failure in words: which side is wrong and which flag fixes it."""
        text = str(cause)
        reason = _ssl_reason(text)
        plain = ("wrong version number", "record layer failure", "unknown protocol",
                 "packet length too long", "http request")
        if any(p in text.lower() for p in plain):
            return (f"the server does not speak TLS ({reason}); it looks like plain HTTP: use "
                    f"http://{self.url.split('://', 1)[-1]} instead of https://")
        if "certificate verify failed" in text.lower() or "hostname" in text.lower():
            if self.ca_file:
                return (f"the server's certificate does not verify against --ca-file "
                        f"{self.ca_file} ({reason}); give the CA that signed it, or "
                        "--insecure (without --ca-file) to skip verification")
            return (f"the server's certificate cannot be verified ({reason}); pass --ca-file "
                    "with the CA that signed it, or --insecure to skip verification")
        return f"TLS handshake failed ({reason})"


def _ssl_reason(text: str) -> str:
    """``'[SSL: X] certificate verify failed: self-signed (_ssl.c:1006)'`` -> the words."""
    text = re.sub(r"\(_ssl\.c:\d+\)", "", text)
    text = re.sub(r"\[SSL: [A-Z_]+\]\s*", "", text)
    return _short_text(text.strip(" ;:"))


class _Partial(ValueError):
    """An answer that says it is partial or not a success (never retried)."""


def _cause(exc: BaseException) -> BaseException:
    """The innermost useful error: urllib3's reason inside requests' wrapper, if any."""
    seen = 0
    while seen < 5:
        seen += 1
        inner = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None
        inner = getattr(exc, "reason", None) if inner is None else inner
        if not isinstance(inner, BaseException):
            inner = exc.__context__ if isinstance(exc.__context__, BaseException) else None
        if inner is None:
            return exc
        exc = inner
    return exc


def _short(exc: BaseException) -> str:
    """The words of an error, without urllib3's pool text and the request's encoded query."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    m = re.search(r"(certificate verify failed[^'\")]*)", text)
    if m:
        return m.group(1).strip()
    m = re.search(r"\(Caused by (\w+)\((.*)\)\)\s*$", text, re.S)
    if m:
        text = f"{m.group(1)}: {m.group(2)}"
    text = re.sub(r"HTTPS?ConnectionPool\([^)]*\):\s*", "", text)
    text = re.sub(r"(with )?url: \S+\s*", "", text)
    return _short_text(text)


def _short_text(text: str, limit: int = 200) -> str:
    """One line of at most ``limit`` characters, cut at a word with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def _error_detail(response) -> str:
    if response is None:
        return ""
    try:
        body = response.json()
        return str(body.get("error") or body)[:300]
    except ValueError:
        return response.text[:300].strip()
