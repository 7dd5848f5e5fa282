"""Metric and label names of the exporter, PromQL building, and time arguments.

Rules
-----
* :class:`MetricNames` holds the metric and label names the exporter
  ``jobcast.instrument.prometheus`` writes (all configurable); the series a key maps to is
  ``<prefix>_<SERIES[key]>``. Names are checked (Prometheus syntax, no ``__`` labels, no
  clash with target labels or the exporter's own, all different).
* Label values are never pasted into PromQL: :func:`promql_string` escapes every special
  character, so a job id such as ``a"} or vector(1)`` selects that job and nothing else;
  :func:`selector` checks label names and operators (``=``, ``!=``, ``=~``, ``!~``).
* Durations are sums of ``<number><unit>`` (ms, s, m, h, d, w, y); times are ``now``, a
  duration ago, unix seconds or ISO 8601 (UTC when no zone is given), between 1970 and the
  year 9999 (``nan``, ``inf`` and dates before 1970 are errors).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ingest.errors import IngestOptionError

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


@dataclass(frozen=True)
class MetricNames:
    """Metric and label names shared by the exporter and the reader (docs/prometheus.md)."""

    prefix: str = "jobcast"
    job_label: str = "job_id"
    network_label: str = "network"
    deployment_label: str = "deployment"
    phase_label: str = "phase"

    def validate(self) -> MetricNames:
        """These names, if Prometheus accepts them as metric and label names; else ValueError."""
        if not _METRIC_NAME.fullmatch(self.prefix):
            raise IngestOptionError(f"metric prefix {self.prefix!r} is not a valid Prometheus name")
        labels = (self.job_label, self.network_label, self.deployment_label, self.phase_label)
        for label in labels:
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise IngestOptionError(f"{label!r} is not a valid Prometheus label name")
        reserved = {"job", "instance", "framework", "status"}
        clash = reserved.intersection(labels)
        if clash:
            raise IngestOptionError(f"label name(s) {sorted(clash)} are reserved (Prometheus "
                                    "target labels or the exporter's own); choose others")
        if len(set(labels)) != len(labels):
            raise IngestOptionError(f"label names must differ, got {labels}")
        return self

    def series(self, key: str) -> str:
        """The series name as stored in Prometheus, e.g. ``jobcast_iterations_total``."""
        return f"{self.prefix}_{SERIES[key]}"

    def family(self, key: str) -> str:
        """The name to give ``prometheus_client`` metric families (info drops ``_info``)."""
        name = self.series(key)
        return name[: -len("_info")] if key == "info" else name

    def key_of(self, series_name: str) -> str | None:
        """The :data:`SERIES` key of a series name of this prefix, else None."""
        head = self.prefix + "_"
        if not series_name.startswith(head):
            return None
        rest = series_name[len(head):]
        for key, suffix in SERIES.items():
            if rest == suffix:
                return key
        return None

    def name_regex(self) -> str:
        """A regex matching the names of every series of this prefix."""
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
        raise IngestOptionError(f"bad selector {text!r}: write LABEL=VALUE (or !=, =~, !~)")
    label, op, value = m.group(1), m.group(2), m.group(3).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if label.startswith("__"):
        raise IngestOptionError(f"bad selector {text!r}: labels starting with __ are reserved")
    return label, op, value


def selector(matchers: Iterable[tuple[str, str, str]]) -> str:
    """``{a="x",b=~"y"}`` from (label, op, value) triples; label names are checked."""
    parts = []
    for label, op, value in matchers:
        if not (label == "__name__" or _LABEL_NAME.fullmatch(label)):
            raise IngestOptionError(f"{label!r} is not a valid label name")
        if op not in ("=", "!=", "=~", "!~"):
            raise IngestOptionError(f"bad matcher operator {op!r}")
        parts.append(f"{label}{op}{promql_string(value)}")
    return "{" + ",".join(parts) + "}"


def job_selector(names: MetricNames, extra: Sequence[tuple[str, str, str]] = (),
                 job_id: str | None = None, key: str | None = None) -> str:
    """Selector of every exporter series (of one job when ``job_id`` is given; of the one
    series ``SERIES[key]`` when ``key`` is given)."""
    matchers = [("__name__", "=~", names.name_regex()) if key is None
                else ("__name__", "=", names.series(key))]
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
        raise IngestOptionError(f"bad duration {text!r}: use e.g. 90s, 15m, 2h, 7d")
    return total


MAX_TIME = 253402300799.0  # 9999-12-31T23:59:59Z


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds from ``'now'``, a duration ago (``'2h'``), unix seconds or ISO 8601.

    ISO times without a zone are UTC. Times must fall in 1970 .. 9999.
    """
    t = _parse_time(text.strip(), time.time() if now is None else now)
    if t is None:
        raise IngestOptionError(
            f"bad time {text!r}: use now, a duration ago (2h, 7d), unix seconds or ISO 8601")
    if not math.isfinite(t) or not 0 <= t <= MAX_TIME:
        raise IngestOptionError(f"bad time {text!r}: out of range (give a time between 1970 "
                                "and 9999)")
    return t


def _parse_time(value: str, now: float) -> float | None:
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
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def duration_at_least(seconds: float) -> str:
    """The shortest ``<n><unit>`` duration not below ``seconds``, in the largest unit that
    fits, e.g. ``9000`` -> ``'3h'`` (for "use at least ..." messages)."""
    seconds = max(1.0, float(seconds))
    for unit in ("y", "w", "d", "h", "m", "s"):
        size = _UNIT_S[unit]
        if seconds >= size:
            return f"{math.ceil(seconds / size - 1e-9)}{unit}"
    return "1s"


def iso_time(t: float) -> str:
    """Unix seconds as ISO 8601 UTC, for messages."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds")
