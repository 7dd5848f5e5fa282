"""The REST application of one ``jobcast serve`` worker (ASGI): endpoints, limits, deadlines.

Rules (the processes around it: :mod:`jobcast.mlops.serving`):

* **Limits.** A body over ``max_body_bytes`` (``--max-body-bytes``, 1 MiB) gets 413: at once
  when ``Content-Length`` says so, else as soon as the body passes the limit. The rest of a
  refused body is read and dropped first (up to :data:`DRAIN_BYTES`; not when the client
  waits for ``100 Continue``), so that a client still sending reads the 413 rather than a
  reset connection. More than ``max_rows`` rows (``--max-rows``, 1000) get 413. Only
  ``application/json`` is read (415 otherwise).
* **Deadline.** A request has ``timeout_s`` (``--timeout``, 60 s) from its arrival: for its
  body (408; and the whole body must arrive within ``body_timeout_s``, ``--body-timeout``,
  10 s, so a slow client cannot hold a connection for the whole deadline), its wait for
  the worker's forecasting thread and its rows. The deadline is checked before every row,
  so the work stops within one row of it and the answer, 504, names the rows done; a
  request that waited past it does no work. A shutdown stops rows the same way (503). At
  most ``max_waiting`` (64) requests wait per worker; more get 503.
* **Input.** MLflow's scoring formats: ``dataframe_split``, ``dataframe_records``, ``inputs``
  or ``instances`` (records, or columns of equal length), and ``params``
  (``{"errors": "raise" | "row"}``). Each row is checked by
  :func:`jobcast.service.engine.request.requests_from_rows` (types, ranges, unknown columns, network
  names). JSON must be strict: ``NaN``/``Infinity`` are refused, and so is nesting deeper than
  Python parses.
* **Answers.** 200 ``{"predictions": [...]}`` (the pyfunc output columns). Anything else is
  JSON with MLflow's ``error_code`` and ``message`` (every bad row), ``problem``: the first
  problem in the one error shape (:class:`fleet.errors.ErrorInfo`: ``kind``, ``message``,
  ``file``, ``line``, ``field``, ``row``; ``row`` counts from 0), and ``errors``: up to 20
  bad rows, each in that shape plus its ``error`` text. Deprecated, kept for one release:
  the top-level ``error`` (the first problem's text), ``reason`` (the refusal in a word),
  ``row`` and ``field``; ``error`` stays a string because clients read it as one. A bug is
  logged and answered 500 (``problem.kind`` ``bug``) without a traceback. ``GET /ping``
  and ``/health``: 200; ``/ready``: what was loaded, how long it took, the limits;
  ``/version``: versions and the model URI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from fleet.errors import BUG_KIND, ErrorInfo
from jobcast.mlops.limits import ServeLimits

DRAIN_BYTES = 64 * 1024 * 1024  # read and drop at most this much of a refused body
MAX_ERRORS_LISTED = 20
STATUS = {400: "INVALID_PARAMETER_VALUE", 404: "ENDPOINT_NOT_FOUND", 405: "BAD_REQUEST",
          408: "REQUEST_TIMEOUT", 413: "REQUEST_TOO_LARGE", 415: "BAD_REQUEST",
          500: "INTERNAL_ERROR", 503: "TEMPORARILY_UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}




@dataclass
class ServedModel:
    """The loaded forecaster and what a client may ask about it (``GET /ready``)."""

    python_model: Any
    model_uri: str
    load_s: float
    warm_s: float
    warm_rows: int

    def info(self) -> dict:
        """What ``GET /ready`` says of the model: its URI and load and warm-up times."""
        return {"model_uri": self.model_uri, "load_s": self.load_s, "warm_s": self.warm_s,
                "warm_rows": self.warm_rows}


class _Refusal(Exception):
    """An answer other than 200: status, message, and where in the table (module rules).
    ``problem`` is the first problem in the one error shape (default: ``reason`` as its kind,
    ``error`` as its message); ``errors`` are the bad rows, each already in that shape."""

    def __init__(self, status: int, reason: str, message: str, *, row: int | None = None,
                 field: str | None = None, errors: list[dict] | None = None,
                 error: str | None = None, problem: ErrorInfo | None = None):
        super().__init__(message)
        self.status, self.reason, self.row, self.field = status, reason, row, field
        self.errors, self.error = errors, error or message
        self.problem = problem or ErrorInfo(kind=reason, message=self.error, row=row,
                                            field=field)

    def body(self) -> dict:
        """``problem``: the first problem (of row ``row``, column ``field``); ``message``: all;
        ``error``, ``reason``, ``row``, ``field``: the deprecated flat keys."""
        out: dict[str, Any] = {
               "error_code": STATUS.get(self.status, "BAD_REQUEST"), "reason": self.reason,
               "error": self.error, "row": self.row, "field": self.field,
               "message": str(self), "problem": self.problem.as_dict()}
        if self.errors:
            out["errors"] = self.errors[:MAX_ERRORS_LISTED]
        return out


def row_problem(info: ErrorInfo, row: int | None) -> dict:
    """One entry of ``errors``: the row's problem in the one shape, ``row`` set, plus its
    ``error`` text (the entry's deprecated key, as before)."""
    return {**replace(info, row=row).as_dict(), "error": info.message}


class _ForecastThread:
    """One daemon thread that runs a worker's forecasts in order (forecasting is CPU-bound:
    more threads would only share the GIL). Daemon: it never holds the process at exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="jobcast-forecast", daemon=True).start()

    def submit(self, fn: Callable, *args) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            loop, future, fn, args = self._jobs.get()
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _request_reason(error: Exception) -> str:
    """The refusal of a table whose first bad row is ``error``: ``unknown_column`` or
    ``invalid_row``, read from what the ``JobRequestError`` says is wrong in a word (its
    ``refusal``: ``unknown_column`` or ``invalid_value``); only an error that does not say
    it is told by its message."""
    word = getattr(error, "refusal", None)
    if not isinstance(word, str):
        word = "unknown_column" if str(error).startswith("unknown column") else "invalid_value"
    return "unknown_column" if word == "unknown_column" else "invalid_row"


def _loads(body: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON (send finite numbers)")

    try:
        return json.loads(body, parse_constant=refuse)
    except RecursionError:
        raise _Refusal(400, "invalid_json", "the JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Refusal(400, "invalid_json", f"the body is not valid JSON: {exc}") from None


def table_records(payload: Any, max_rows: int) -> tuple[list, str]:
    """The rows of a scoring request (module rules) and its error mode."""
    from jobcast.mlops.pyfunc_model import ERROR_MODES

    if not isinstance(payload, dict):
        raise _Refusal(400, "invalid_format", "the body must be a JSON object with one of "
                       "dataframe_split, dataframe_records, inputs, instances")
    keys = [k for k in payload if k != "params"]
    if len(keys) != 1 or keys[0] not in ("dataframe_split", "dataframe_records", "inputs",
                                         "instances"):
        raise _Refusal(400, "invalid_format", "the body must hold exactly one of "
                       f"dataframe_split, dataframe_records, inputs, instances; got {keys[:5]}")
    params = payload.get("params") or {}
    if not isinstance(params, dict) or set(params) - {"errors"}:
        raise _Refusal(400, "invalid_params", 'params may hold only "errors" ("raise" or '
                       f'"row"), got {str(params)[:80]}', field="params")
    mode = params.get("errors") or "raise"
    if mode not in ERROR_MODES:
        raise _Refusal(400, "invalid_params", f"params.errors must be one of "
                       f"{', '.join(ERROR_MODES)}, got {str(mode)[:40]!r}", field="errors")
    data = payload[keys[0]]
    if keys[0] == "dataframe_split":
        records = _split_records(data, max_rows)
    elif isinstance(data, dict) and keys[0] != "dataframe_records":
        records = _column_records(data, max_rows)
    elif isinstance(data, list):
        _check_rows(len(data), max_rows)
        records = data
    else:
        raise _Refusal(400, "invalid_format", f"{keys[0]} must be a list of rows")
    if not records:
        raise _Refusal(400, "invalid_format", "the table has no rows")
    return records, mode


def _check_rows(n: int, max_rows: int) -> None:
    if n > max_rows:
        raise _Refusal(413, "too_many_rows", f"{n} rows in one request, at most {max_rows} "
                       "(--max-rows): split the table")


def _split_records(data: Any, max_rows: int) -> list:
    if not isinstance(data, dict) or not isinstance(data.get("columns"), list) \
            or not isinstance(data.get("data"), list):
        raise _Refusal(400, "invalid_format",
                       'dataframe_split must be {"columns": [...], "data": [[...], ...]}')
    columns, rows = data["columns"], data["data"]
    if not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
        raise _Refusal(400, "invalid_format", "dataframe_split columns must be distinct names")
    _check_rows(len(rows), max_rows)
    records = []
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(columns):
            raise _Refusal(400, "invalid_row", f"row {i} must be a list of {len(columns)} "
                           "values, one per column", row=i)
        records.append(dict(zip(columns, row, strict=True)))
    return records


def _column_records(data: dict, max_rows: int) -> list:
    lengths = {len(v) if isinstance(v, list) else -1 for v in data.values()}
    if len(lengths) != 1 or -1 in lengths:
        raise _Refusal(400, "invalid_format", "inputs given as columns must be lists of one "
                       "length")
    n = lengths.pop()
    _check_rows(n, max_rows)
    return [{k: v[i] for k, v in data.items()} for i in range(n)]


class RestApp:
    """The ASGI application of one worker (module rules)."""

    def __init__(self, served: ServedModel, limits: ServeLimits,
                 stopping: threading.Event | None = None):
        self.served, self.limits = served, limits
        self.stopping = stopping or threading.Event()
        self._thread: _ForecastThread | None = None
        self.waiting = 0

    async def __call__(self, scope, receive, send) -> None:
        """Answer one ASGI request (module rules); every refusal is JSON, a bug a 500."""
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if path in ("/ping", "/health", "/ready", "/version"):
                if method != "GET":
                    raise _Refusal(405, "method", f"{method} {path}: use GET")
                await _respond(send, 200, self._about(path))
            elif path == "/invocations":
                if method != "POST":
                    raise _Refusal(405, "method", f"{method} {path}: use POST")
                await _respond(send, 200, await self._invocations(scope, receive))
            else:
                raise _Refusal(404, "not_found", f"no endpoint {path[:100]}: POST "
                               "/invocations; GET /ping, /health, /ready, /version")
        except _Refusal as refusal:
            close = refusal.status in (408, 413)
            await _respond(send, refusal.status, refusal.body(), close=close)
        except Exception as exc:  # noqa: BLE001 - a bug: logged here, never sent
            traceback.print_exc()
            text = (f"internal error (a bug in jobcast, please report it): "
                    f"{type(exc).__name__}; the server log has the details")
            await _respond(send, 500, _Refusal(500, "internal", text, problem=ErrorInfo(
                kind=BUG_KIND, message=text)).body())

    def _about(self, path: str) -> Any:
        if path in ("/ping", "/health"):
            return "\n"
        if path == "/version":
            from importlib.metadata import PackageNotFoundError, version

            out = {"model_uri": self.served.model_uri}
            for package in ("jobcast", "mlflow"):
                with contextlib.suppress(PackageNotFoundError):
                    out[package] = version(package)
            return out
        return {"ready": True, **self.served.info(), "limits": asdict(self.limits)}

    async def _invocations(self, scope, receive) -> dict:
        from jobcast.mlops.pyfunc_model import refusal_message
        from jobcast.service.engine.request import JobRequestError, requests_from_rows

        deadline = time.monotonic() + self.limits.timeout_s
        headers = dict(scope.get("headers") or [])
        ctype = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip()
        if ctype.lower() != "application/json":
            raise _Refusal(415, "media_type", f"content type {ctype[:60]!r}: send "
                           "application/json")
        body = await self._body(headers, receive,
                                min(deadline, time.monotonic() + self.limits.body_timeout_s))
        records, mode = table_records(_loads(body), self.limits.max_rows)
        requests = requests_from_rows(records)
        refused = [r for r in requests if isinstance(r, JobRequestError)]
        if refused and mode == "raise":
            first = refused[0]
            errors = [row_problem(e.info(), e.row) for e in refused]
            bad = [(e["row"], e["message"]) for e in errors]
            raise _Refusal(400, _request_reason(first), refusal_message(bad, len(requests)),
                           row=first.row, field=first.field, errors=errors, error=str(first),
                           problem=first.info())
        answers = await self._forecast(requests, deadline)
        rows = [row for row, _ in answers]
        failed = [(i, info) for i, (_, info) in enumerate(answers) if info is not None]
        if failed and mode == "raise":
            (at, info), errors = failed[0], [row_problem(e, i) for i, e in failed]
            raise _Refusal(400, "cannot_forecast",
                           refusal_message([(i, e.message) for i, e in failed], len(rows)),
                           row=at, error=info.message, errors=errors,
                           problem=replace(info, row=at))
        return {"predictions": rows}

    async def _body(self, headers: dict, receive, deadline: float) -> bytes:
        limit = self.limits.max_body_bytes
        declared = headers.get(b"content-length")
        waits = headers.get(b"expect", b"").lower() == b"100-continue"  # sends nothing yet
        if declared is not None:
            if not declared.strip().isdigit():
                raise _Refusal(400, "invalid_length", "Content-Length is not a number")
            if int(declared) > limit:
                if not waits and int(declared) <= DRAIN_BYTES:
                    await _drain(receive, deadline)
                raise _Refusal(413, "body_too_large", f"the body is {int(declared)} bytes, at "
                               f"most {limit} (--max-body-bytes)")
        chunks, size = [], 0
        while True:
            message = await _receive(receive, deadline)
            size += len(message.get("body", b""))
            if size > limit:
                if message.get("more_body"):
                    await _drain(receive, deadline)
                raise _Refusal(413, "body_too_large", f"the body is over {limit} bytes "
                               "(--max-body-bytes)")
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _forecast(self, requests: list, deadline: float
                        ) -> list[tuple[dict, ErrorInfo | None]]:
        if self.stopping.is_set():
            raise _Refusal(503, "stopping", "the server is shutting down")
        if self.waiting >= self.limits.max_waiting:
            raise _Refusal(503, "busy", f"{self.waiting} requests are waiting; retry later")
        if self._thread is None:
            self._thread = _ForecastThread()

        def stop(i: int) -> None:
            if self.stopping.is_set():
                raise _Refusal(503, "stopping", f"the server is shutting down: stopped "
                               f"after {i} of {len(requests)} rows", row=i)
            if time.monotonic() > deadline:
                raise _Refusal(504, "timeout", f"the request took longer than "
                               f"{self.limits.timeout_s:g} s: stopped after {i} of "
                               f"{len(requests)} rows; send fewer rows or raise --timeout", row=i)

        self.waiting += 1
        try:
            return await self._thread.submit(_answer_rows(self.served.python_model), requests,
                                             stop)
        finally:
            self.waiting -= 1


def _answer_rows(model: Any) -> Callable:
    """The model's ``answer_rows`` (each answer row with its problem in the one error shape,
    or None); for a model without it, its ``forecast_rows`` with each row's ``error`` text as
    a ``no_forecast`` problem."""
    if hasattr(model, "answer_rows"):
        return model.answer_rows

    def answers(requests: list, stop: Callable[[int], None]) -> list[tuple[dict, Any]]:
        rows = model.forecast_rows(requests, stop)
        return [(r, None if r["error"] is None else ErrorInfo("no_forecast", str(r["error"])))
                for r in rows]

    return answers


async def _respond(send, status: int, body: Any, close: bool = False) -> None:
    if isinstance(body, str):
        data, ctype = body.encode(), b"text/plain; charset=utf-8"
    else:
        data = json.dumps(body, allow_nan=False, default=_plain).encode()
        ctype = b"application/json"
    headers = [(b"content-type", ctype), (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _plain(value: Any) -> Any:
    """A numpy scalar as its Python value; anything else JSON does not know as text."""
    return value.item() if hasattr(value, "item") else str(value)


async def _receive(receive, deadline: float) -> dict:
    """The next body message, by the request's deadline (408 after it)."""
    try:
        message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        raise _Refusal(408, "body_timeout", "the body did not arrive in time "
                       "(--body-timeout, --timeout)") from None
    if message["type"] == "http.disconnect":
        raise _Refusal(400, "disconnected", "the client went away")
    return message


async def _drain(receive, deadline: float) -> None:
    """Read and drop a refused body before answering (a client that is still sending would
    see the connection reset, not the 413), up to :data:`DRAIN_BYTES`."""
    dropped = 0
    while dropped < DRAIN_BYTES:
        message = await _receive(receive, deadline)
        dropped += len(message.get("body", b""))
        if not message.get("more_body"):
            return
