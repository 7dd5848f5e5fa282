"""Prometheus traces of training jobs -> runs of train/test segments in the store.

Three parts, usable apart:

* **Names and queries.** :class:`MetricNames` (the metric and label names the exporter
  ``jobcast.instrument.prometheus`` writes; all configurable) and :func:`selector` /
  :func:`promql_string`, which build PromQL with every label value escaped, so a job id
  such as ``a"} or vector(1)`` selects that job and nothing else.
* **Fetching.** :class:`PrometheusClient` wraps ``prometheus_api_client.PrometheusConnect``
  with time-outs, retries with back-off where they help (connection refused or reset, time
  outs, cut answers, HTTP 429/502/503/504), auth (bearer token, basic) and TLS options
  (CA file, insecure), and turns every failure into a :class:`PrometheusError` that says
  what went wrong and what to try. Raw samples come from range-vector selectors in chunks.
* **Reconstruction.** :func:`segments_from_samples` is a pure function from range-vector
  series to :class:`JobTrace` objects (one per job and attempt). The exporter measures its
  values inside the job, so each scrape is an exact point of the job's cumulative curve
  per phase kind; phase boundaries come from the per-phase offsets (the cumulative values
  when a phase began), so a boundary is exact whenever any later scrape is seen. Scrape
  jitter is therefore harmless, a gap only loses points (phases that began and ended
  inside one gap are merged into one segment spanning them), and a counter reset or a new
  ``job_start`` value starts a new attempt (a restarted job).

:func:`ingest_prometheus` ties them together and writes each finished job into the store in
one transaction, idempotently (see docs/prometheus.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote

from ingest.events import ParsedRun, ParseError, Segment

PHASES: tuple[str, ...] = ("train", "test")
FORMAT = "prometheus"

# metric key -> series name after the prefix (as Prometheus stores it)
SERIES: dict[str, str] = {
    "iterations": "iterations_total",
    "seconds": "phase_seconds_total",
    "phases": "phases_total",
    "offset_iterations": "phase_offset_iterations",
    "offset_seconds": "phase_offset_seconds",
    "phase_start": "phase_start_timestamp_seconds",
    "epoch": "phase_epoch",
    "active": "phase_active",
    "batch_size": "batch_size",
    "planned": "planned_iterations",
    "planned_epochs": "planned_epochs",
    "job_start": "job_start_timestamp_seconds",
    "job_end": "job_end_timestamp_seconds",
    "last_progress": "last_progress_timestamp_seconds",
    "info": "job_info",
}
PER_PHASE = {"iterations", "seconds", "phases", "offset_iterations", "offset_seconds",
             "phase_start", "epoch", "active", "batch_size", "planned"}
COUNTERS = ("iterations", "seconds", "phases")
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


class PrometheusError(RuntimeError):
    """Prometheus could not be asked or did not answer usefully; the message says why."""


# -- names and PromQL ----------------------------------------------------------------------


@dataclass(frozen=True)
class MetricNames:
    """Metric and label names shared by the exporter and the reader (docs/prometheus.md)."""

    prefix: str = "jobcast"
    job_label: str = "job_id"
    network_label: str = "network"
    deployment_label: str = "deployment"
    phase_label: str = "phase"

    def validate(self) -> MetricNames:
        if not _METRIC_NAME.fullmatch(self.prefix):
            raise ValueError(f"metric prefix {self.prefix!r} is not a valid Prometheus name")
        labels = (self.job_label, self.network_label, self.deployment_label, self.phase_label)
        for label in labels:
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"{label!r} is not a valid Prometheus label name")
        reserved = {"job", "instance", "framework", "status"}
        clash = reserved.intersection(labels)
        if clash:
            raise ValueError(f"label name(s) {sorted(clash)} are reserved (Prometheus target "
                             "labels or the exporter's own); choose others")
        if len(set(labels)) != len(labels):
            raise ValueError(f"label names must differ, got {labels}")
        return self

    def series(self, key: str) -> str:
        """The series name as stored in Prometheus, e.g. ``jobcast_iterations_total``."""
        return f"{self.prefix}_{SERIES[key]}"

    def family(self, key: str) -> str:
        """The name to give ``prometheus_client`` metric families (info drops ``_info``)."""
        name = self.series(key)
        return name[: -len("_info")] if key == "info" else name

    def key_of(self, series_name: str) -> str | None:
        head = self.prefix + "_"
        if not series_name.startswith(head):
            return None
        rest = series_name[len(head):]
        for key, suffix in SERIES.items():
            if rest == suffix:
                return key
        return None

    def name_regex(self) -> str:
        return f"{self.prefix}_({'|'.join(SERIES.values())})"


def promql_string(value: str) -> str:
    """``value`` as a double-quoted PromQL string literal (every special character escaped)."""
    out = []
    for ch in str(value):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_MATCHER = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)(.*)", re.S)


def parse_matcher(text: str) -> tuple[str, str, str]:
    """``'network=resnet50'`` -> ``('network', '=', 'resnet50')``; the value is taken as is.

    Operators: ``=``, ``!=``, ``=~``, ``!~``. The value may be quoted with ``"`` or ``'``
    (quotes are stripped); it is escaped again when the query is built.
    """
    m = _MATCHER.fullmatch(text)
    if not m:
        raise ValueError(f"bad selector {text!r}: write LABEL=VALUE (or !=, =~, !~)")
    label, op, value = m.group(1), m.group(2), m.group(3).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if label.startswith("__"):
        raise ValueError(f"bad selector {text!r}: labels starting with __ are reserved")
    return label, op, value


def selector(matchers: Iterable[tuple[str, str, str]]) -> str:
    """``{a="x",b=~"y"}`` from (label, op, value) triples; label names are checked."""
    parts = []
    for label, op, value in matchers:
        if not (label == "__name__" or _LABEL_NAME.fullmatch(label)):
            raise ValueError(f"{label!r} is not a valid label name")
        if op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"bad matcher operator {op!r}")
        parts.append(f"{label}{op}{promql_string(value)}")
    return "{" + ",".join(parts) + "}"


def job_selector(names: MetricNames, extra: Sequence[tuple[str, str, str]] = (),
                 job_id: str | None = None) -> str:
    """Selector of every exporter series (of one job when ``job_id`` is given)."""
    matchers = [("__name__", "=~", names.name_regex())]
    if job_id is None:
        matchers.append((names.job_label, "!=", ""))
    else:
        matchers.append((names.job_label, "=", job_id))
    return selector([*matchers, *extra])


# -- time arguments ------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str) -> float:
    """``'90s'``, ``'15m'``, ``'2h30m'``, ``'7d'`` -> seconds."""
    text = text.strip().lower()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"bad duration {text!r}: use e.g. 90s, 15m, 2h, 7d")
    return total


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds from ``'now'``, a duration ago (``'2h'``), unix seconds or ISO 8601.

    ISO times without a zone are UTC.
    """
    now = time.time() if now is None else now
    value = text.strip()
    if value.lower() == "now":
        return now
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"bad time {text!r}: use now, a duration ago (2h, 7d), unix seconds or ISO 8601"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


# -- fetching ------------------------------------------------------------------------------

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
        self.url = url
        self._conn = None
        self._last = None

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
                    progress: Callable[[int, int], None] | None = None) -> list[dict]:
        """Every raw sample of the selected series in ``[start, end]``, merged per series.

        Asks range vectors (``selector[chunk]`` at the chunk's end) so samples keep their
        scrape timestamps; chunks keep each answer small.
        """
        if not end > start:
            raise PrometheusError(f"the time range is empty (since {_iso(start)} is not "
                                  f"before until {_iso(end)})")
        if chunk <= 0:
            raise PrometheusError(f"chunk must be positive, got {chunk}")
        merged: dict[tuple, dict[float, str]] = {}
        labels_of: dict[tuple, dict] = {}
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
                for ts, value in item.get("values", []):
                    if lo <= float(ts) <= hi:
                        values[float(ts)] = value
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
            return (f"TLS error ({_short(exc)}); pass --ca-file with the server's CA "
                    "certificate, or --insecure to skip verification", False)
        if isinstance(exc, rex.ConnectTimeout | rex.ReadTimeout | rex.Timeout):
            return f"no answer within {self.timeout:g} s (--timeout)", True
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
            if status == 404:
                return ("HTTP 404: no Prometheus query API at this URL (give the server's "
                        "base URL, e.g. http://host:9090)", False)
            if status == 422 and "too many samples" in detail:
                return (f"HTTP 422: {detail}; use a smaller --chunk or a narrower "
                        "--selector", False)
            if status in RETRY_STATUS:
                return f"HTTP {status}: {detail or 'server busy'}", True
            return f"HTTP {status}: {detail or str(exc)[:200]}", False
        if isinstance(exc, ValueError | KeyError | TypeError):
            # a body that is not the JSON the API promises: usually a cut connection
            return f"unreadable answer ({type(exc).__name__}: {_short(exc)})", True
        return f"{type(exc).__name__}: {_short(exc)}", False


class _Partial(ValueError):
    pass


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
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    m = re.search(r"(certificate verify failed[^'\")]*)", text)
    if m:
        return m.group(1).strip()
    return text[:200]


def _error_detail(response) -> str:
    if response is None:
        return ""
    try:
        body = response.json()
        return str(body.get("error") or body)[:300]
    except ValueError:
        return response.text[:300].strip()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds")


# -- reconstruction -----------------------------------------------------------------------


@dataclass
class PhaseProgress:
    """Where a phase kind stands at the last scrape of an attempt (cumulative values)."""

    iterations: float = 0.0
    seconds: float = 0.0
    phases: int = 0
    active: bool = False
    epoch: int | None = None
    batch_size: int | None = None
    planned: int | None = None
    curve: list[tuple[float, float, float]] = field(default_factory=list)  # (t, iters, secs)


@dataclass
class JobTrace:
    """One attempt of one job as read back from Prometheus.

    ``status``: ``finished`` (the job said it ended), ``running`` (samples until the end of
    the window), ``lost`` (samples stopped without an end, e.g. a crash) or ``restarted``
    (a later attempt of the same job follows). ``run`` holds the closed segments only.
    """

    job_id: str
    attempt: int
    status: str
    run: ParsedRun
    progress: dict[str, PhaseProgress]
    labels: dict[str, str]
    job_start: float | None
    job_end: float | None
    last_progress: float | None
    first_seen: float
    last_seen: float
    planned_epochs: int | None = None
    first_phase_start: float | None = None  # when the first phase seen began
    notes: list[str] = field(default_factory=list)


def _float(value) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _job_series(series: Iterable[dict], names: MetricNames):
    """Group series by job id: job -> {(key, phase): {t: v}}, plus label values seen.

    Several targets exporting one job id at the same time (e.g. every worker of a
    data-parallel job) would interleave: only the target with most samples is kept.
    Targets one after the other (a job restarted on another host) are merged.
    """
    per_target: dict[tuple[str, str], dict[tuple[str, str | None], dict[float, float]]] = {}
    labels: dict[str, dict[str, str]] = {}
    for item in series:
        metric = item.get("metric") or {}
        key = names.key_of(str(metric.get("__name__", "")))
        job = metric.get(names.job_label)
        if key is None or not job:
            continue
        phase = metric.get(names.phase_label) if key in PER_PHASE else None
        if key in PER_PHASE and phase not in PHASES:
            continue
        points = item.get("values")
        if points is None and item.get("value") is not None:
            points = [item["value"]]
        target_id = f"{metric.get('job', '')}/{metric.get('instance', '')}"
        target = per_target.setdefault((job, target_id), {}).setdefault((key, phase), {})
        for ts, raw in points or []:
            t, v = _float(ts), _float(raw)
            if t is not None and v is not None:
                target[t] = v
        seen = labels.setdefault(job, {})
        for name, label in (("network", names.network_label),
                            ("deployment", names.deployment_label),
                            ("instance", "instance"), ("scrape_job", "job")):
            if metric.get(label):
                seen.setdefault(name, metric[label])
        if key == "info" and points:
            last_t = max(_float(p[0]) or 0.0 for p in points)
            for name in ("framework", "status"):
                prev = seen.get(f"_{name}_t")
                if metric.get(name) and (prev is None or last_t >= float(prev)):
                    seen[name] = metric[name]
                    seen[f"_{name}_t"] = str(last_t)
    jobs: dict[str, dict[tuple[str, str | None], dict[float, float]]] = {}
    dropped: dict[str, list[str]] = {}
    by_job: dict[str, list[tuple[float, float, int, str, dict]]] = {}
    for (job, target_id), data in per_target.items():
        times = [t for samples in data.values() for t in samples]
        if times:
            by_job.setdefault(job, []).append(
                (min(times), max(times), len(times), target_id, data))
    for job, targets in by_job.items():
        kept: list[tuple[float, float, int, str, dict]] = []
        for target in sorted(targets):
            if kept and target[0] <= kept[-1][1]:  # overlaps the previous one: concurrent
                loser = min(kept[-1], target, key=lambda x: x[2])
                dropped.setdefault(job, []).append(loser[3])
                if loser is kept[-1]:
                    kept[-1] = target
                continue
            kept.append(target)
        merged: dict[tuple[str, str | None], dict[float, float]] = {}
        for *_, data in kept:
            for key, samples in data.items():
                merged.setdefault(key, {}).update(samples)
        jobs[job] = merged
    return jobs, labels, dropped


def _attempt_bounds(data: dict[tuple[str, str | None], dict[float, float]]) -> list[float]:
    """Times where a new attempt starts: ``job_start`` changes or a counter goes down."""
    starts = {}
    for (key, phase), samples in data.items():
        if key == "job_start" or key in COUNTERS:
            starts[(key, phase)] = sorted(samples.items())
    bounds = set()
    for (key, _), samples in starts.items():
        for (_t0, v0), (t1, v1) in zip(samples, samples[1:], strict=False):
            if (key == "job_start" and v1 != v0) or (key in COUNTERS and v1 < v0 - 1e-9):
                bounds.add(t1)
    return sorted(bounds)


def _snapshots(data, lo: float, hi: float):
    """Forward-filled states at every sample time in ``[lo, hi)`` (values of this attempt)."""
    events = sorted(
        (t, key, v) for key, samples in data.items() for t, v in samples.items() if lo <= t < hi
    )
    state: dict[tuple[str, str | None], float] = {}
    snaps: list[tuple[float, dict]] = []
    for t, key, v in events:
        state[key] = v
        if snaps and snaps[-1][0] == t:
            snaps[-1] = (t, dict(state))
        else:
            snaps.append((t, dict(state)))
    return snaps


@dataclass
class _SegObs:
    off_i: float
    off_s: float
    start: float | None
    epoch: int | None
    batch: int | None
    first_seen: float
    points: list[tuple[float, float]] = field(default_factory=list)
    end: tuple[float, float] | None = None


def _phase_segments(snaps, phase: str) -> tuple[list[Segment], list[str], PhaseProgress]:
    obs: dict[int, _SegObs] = {}
    prog = PhaseProgress()
    for t, st in snaps:
        get = lambda key, st=st: st.get((key, phase))  # noqa: E731
        if get("iterations") is not None:
            prog.iterations = get("iterations")
            prog.seconds = get("seconds") or 0.0
            prog.curve.append((t, prog.iterations, prog.seconds))
        prog.planned = _int(get("planned"))
        prog.batch_size = _int(get("batch_size"))
        k = _int(get("phases")) or 0
        prog.phases = k
        prog.active = get("active") == 1.0
        prog.epoch = _int(get("epoch"))
        if k <= 0 or get("iterations") is None or get("offset_iterations") is None:
            continue
        seg = obs.get(k)
        if seg is None:
            seg = obs[k] = _SegObs(
                off_i=get("offset_iterations"), off_s=get("offset_seconds") or 0.0,
                start=get("phase_start"), epoch=_int(get("epoch")),
                batch=_int(get("batch_size")), first_seen=t,
            )
        rel = (get("iterations") - seg.off_i, (get("seconds") or 0.0) - seg.off_s)
        if get("active") == 1.0:
            seg.points.append(rel)
        else:
            seg.end = rel
    segments: list[Segment] = []
    notes: list[str] = []
    ks = sorted(obs)
    if ks and ks[0] > 1:
        first = obs[ks[0]]
        if first.off_i > 0 or first.off_s > 0:
            segments.append(_segment(phase, 0.0, 0.0, None, None, first.batch, [],
                                     (first.off_i, first.off_s), merged=ks[0] - 1))
            notes.append(f"{phase}: phases 1-{ks[0] - 1} were not scraped while running; "
                         "kept as one segment")
    for j, k in enumerate(ks):
        seg = obs[k]
        if j + 1 < len(ks):
            nxt = obs[ks[j + 1]]
            end = (nxt.off_i - seg.off_i, nxt.off_s - seg.off_s)
            merged = ks[j + 1] - k
            if merged > 1:
                notes.append(f"{phase}: phases {k}-{ks[j + 1] - 1} merged (the later ones "
                             "began and ended between two scrapes)")
        elif seg.end is not None:
            end, merged = seg.end, 1
        else:
            continue  # still open (or cut by a crash): dropped, as logs drop open phases
        segments.append(_segment(phase, seg.off_i, seg.off_s, seg.start, seg.epoch,
                                 seg.batch, seg.points, end, merged))
    return segments, notes, prog


def _segment(phase, off_i, off_s, start, epoch, batch, points, end, merged) -> Segment:
    iterations, seconds = max(0.0, end[0]), max(0.0, end[1])
    pts: list[tuple[float, float]] = []
    for it, sec in sorted(set(points)):
        if 0 < it < iterations and (not pts or it > pts[-1][0]):
            pts.append((it, min(max(sec, pts[-1][1] if pts else 0.0), seconds)))
    pts.append((iterations, seconds))
    return Segment(
        phase=phase,  # type: ignore[arg-type]
        iterations=iterations,
        seconds=seconds,
        batch_size=batch,
        start_time=start,
        epoch_start=float(epoch) if epoch is not None else None,
        epoch_end=float(epoch) if epoch is not None and merged == 1 else None,
        iteration_start=int(round(off_i)),
        iteration_end=int(round(off_i + iterations)),
        points=tuple(pts),
    )


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def segments_from_samples(series: Iterable[dict], names: MetricNames | None = None, *,
                          until: float | None = None, stale_after: float = 300.0,
                          ) -> list[JobTrace]:
    """Reconstruct every job (and attempt) in range-vector ``series`` (pure function).

    ``series`` is what ``/api/v1/query`` returns for a range vector (a list of
    ``{"metric": {labels}, "values": [[t, "v"], ...]}``; instant ``"value"`` pairs work
    too). A job whose samples stop more than ``stale_after`` seconds before ``until``
    without an end is ``lost``; without ``until`` such a job counts as ``running``.
    """
    from ingest.parsers.jsonl import deployment_from

    names = names or MetricNames()
    jobs, labels, dropped = _job_series(series, names)
    out: list[JobTrace] = []
    for job_id in sorted(jobs):
        data = jobs[job_id]
        seen = labels.get(job_id, {})
        times = sorted({t for samples in data.values() for t in samples})
        if not times:
            continue
        bounds = [times[0], *_attempt_bounds(data), math.inf]
        for attempt, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False), start=1):
            snaps = _snapshots(data, lo, hi)
            if not snaps:
                continue
            last = snaps[-1][1]
            job_start = last.get(("job_start", None))
            job_end = last.get(("job_end", None))
            segments: list[Segment] = []
            notes: list[str] = [
                f"target {t} also exported this job at the same time; ignored"
                for t in dropped.get(job_id, [])
            ]
            progress: dict[str, PhaseProgress] = {}
            first_seen: dict[int, float] = {}
            for phase in PHASES:
                segs, phase_notes, progress[phase] = _phase_segments(snaps, phase)
                segments += segs
                notes += phase_notes
            for i, seg in enumerate(segments):
                first_seen[i] = seg.start_time if seg.start_time is not None else -math.inf
            order = sorted(range(len(segments)), key=lambda i: (first_seen[i], i))
            segments = [segments[i] for i in order]
            if hi is not math.inf:
                status = "restarted"
            elif job_end is not None:
                status = "finished"
            elif until is not None and until - snaps[-1][0] > stale_after:
                status = "lost"
            else:
                status = "running"
            try:
                deployment = deployment_from(seen.get("deployment"), 0)
            except ParseError:
                deployment = None
                notes.append(f"deployment label {seen.get('deployment')!r} is not understood")
            meta: dict[str, object] = {
                "job_id": job_id, "attempt": attempt, "status": status,
                "scrapes": len(snaps),
            }
            if len(snaps) > 1:
                gaps = [b[0] - a[0] for a, b in zip(snaps, snaps[1:], strict=False)]
                meta["max_gap_s"] = round(max(gaps), 3)
                meta["median_interval_s"] = round(sorted(gaps)[len(gaps) // 2], 3)
            if status != "finished":
                meta["truncated"] = True
            for name in ("instance", "scrape_job"):
                if seen.get(name):
                    meta[name] = seen[name]
            phase_starts = [v for key, samples in data.items() if key[0] == "phase_start"
                            for t, v in samples.items() if lo <= t < hi]
            planned_epochs = _int(last.get(("planned_epochs", None)))
            if planned_epochs:
                meta["epochs"] = planned_epochs
            train = progress["train"]
            if planned_epochs and train.planned:
                meta["steps_per_epoch"] = train.planned // planned_epochs
            network = seen.get("network")
            run = ParsedRun(
                format=FORMAT,
                network=network.strip().lower() if network else None,
                deployment=deployment,
                framework=seen.get("framework") or None,
                batch_size=train.batch_size,
                start_time=job_start,
                segments=segments,
                meta=meta,
            )
            out.append(JobTrace(
                job_id=job_id, attempt=attempt, status=status, run=run, progress=progress,
                labels={k: v for k, v in seen.items() if not k.startswith("_")},
                job_start=job_start, job_end=job_end,
                last_progress=last.get(("last_progress", None)),
                first_seen=snaps[0][0], last_seen=snaps[-1][0],
                planned_epochs=planned_epochs,
                first_phase_start=min(phase_starts) if phase_starts else None, notes=notes,
            ))
    return out


# -- ingest --------------------------------------------------------------------------------


def job_source(url: str, job_id: str, job_start: float | None) -> str:
    start = f"&start={job_start:.3f}" if job_start is not None else ""
    return f"prometheus:{url}#job={quote(job_id, safe='')}{start}"


def canonical_hash(traces: Sequence[JobTrace]) -> tuple[str, int]:
    """SHA-256 (and size) of a canonical JSON of a job's attempts and segments."""
    doc = {
        "job_id": traces[0].job_id,
        "attempts": [
            {
                "job_start": _round(tr.job_start),
                "network": tr.run.network,
                "segments": [
                    [s.phase, _round(s.iterations), _round(s.seconds), _round(s.start_time),
                     s.batch_size, [[_round(a), _round(b)] for a, b in s.points]]
                    for s in tr.run.segments
                ],
            }
            for tr in traces
        ],
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), len(text)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


@dataclass
class PromIngestReport:
    added: list[dict] = field(default_factory=list)  # source, job_id, runs, segments
    duplicates: list[dict] = field(default_factory=list)  # source, job_id, first_source
    skipped: list[dict] = field(default_factory=list)  # job_id, reason (e.g. still running)
    rejected: list[ParseError] = field(default_factory=list)
    series: int = 0
    samples: int = 0
    requests: int = 0

    @property
    def ok(self) -> bool:
        return not self.rejected


def _check_job(traces: list[JobTrace], names: MetricNames) -> None:
    from ingest.pipeline import check_run

    for index, tr in enumerate(traces):
        run = tr.run
        if not any(s.phase == "train" for s in run.segments):
            raise ParseError(f"attempt {tr.attempt}: no complete train phase was scraped")
        if not run.network:
            raise ParseError(f"attempt {tr.attempt}: no {names.network_label!r} label; give "
                             "the exporter network=...")
        if not run.deployment:
            raise ParseError(f"attempt {tr.attempt}: no usable {names.deployment_label!r} "
                             "label; give the exporter deployment=... (e.g. '8x A100')")
        if not run.batch_size:
            raise ParseError(f"attempt {tr.attempt}: no train batch size; give the exporter "
                             "batch_size=...")
        check_run(run, index)


def ingest_prometheus(store, client: PrometheusClient, since: float, until: float, *,
                      matchers: Sequence[tuple[str, str, str]] = (),
                      names: MetricNames | None = None, chunk: float = 6 * 3600.0,
                      stale_after: float = 300.0,
                      progress: Callable[[int, int], None] | None = None) -> PromIngestReport:
    """Read the jobs in ``[since, until]`` and store each finished (or lost) one.

    Everything is fetched before anything is written, so a failed fetch writes nothing;
    each job is then written in one transaction (all its attempts as runs of one entry),
    keyed by the hash of its reconstruction and by its source
    (``prometheus:URL#job=ID&start=T``): ingesting again adds nothing. Running jobs are
    skipped (ingest them once they finish).
    """
    names = (names or MetricNames()).validate()
    series = client.raw_samples(job_selector(names, matchers), since, until, chunk=chunk,
                                progress=progress)
    report = PromIngestReport(series=len(series),
                              samples=sum(len(s["values"]) for s in series))
    traces = segments_from_samples(series, names, until=until, stale_after=stale_after)
    by_job: dict[str, list[JobTrace]] = {}
    for tr in traces:
        by_job.setdefault(tr.job_id, []).append(tr)
    known = {r.source for r in store.runs() if r.format == FORMAT}
    for job_id, attempts in by_job.items():
        final = attempts[-1]
        source = job_source(client.url, job_id, attempts[0].job_start)
        if final.status == "running":
            report.skipped.append({"job_id": job_id, "source": source, "reason": (
                f"still running (last scrape {_iso(final.last_seen)}); ingest it after it "
                "finishes")})
            continue
        if source in known:
            report.duplicates.append({"job_id": job_id, "source": source,
                                      "first_source": source})
            continue
        try:
            _check_job(attempts, names)
        except ParseError as exc:
            report.rejected.append(ParseError(f"job {job_id!r}: {exc.reason}", source=source))
            continue
        content_hash, size = canonical_hash(attempts)
        first = store.has_content(content_hash)
        if first is None:
            file_id = store.add_file(content_hash=content_hash, source=source, fmt=FORMAT,
                                     size=size, parsed=[tr.run for tr in attempts])
            if file_id is not None:
                report.added.append({
                    "job_id": job_id, "source": source, "runs": len(attempts),
                    "segments": sum(len(tr.run.segments) for tr in attempts),
                    "status": final.status, "notes": [n for tr in attempts for n in tr.notes],
                })
                known.add(source)
                continue
            first = store.has_content(content_hash)
        report.duplicates.append({"job_id": job_id, "source": source, "first_source": first})
    report.requests = client.requests_made
    return report
