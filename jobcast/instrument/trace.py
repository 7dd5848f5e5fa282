"""Offline Prometheus traces: sample registries like scrapes and write OpenMetrics text.

For ``promtool tsdb create-blocks-from openmetrics`` (backfill) and for tests that need a
job's metrics history without a server. Needs nothing but the registries' ``collect()``.
"""

from __future__ import annotations

import threading
import time


class TraceRecorder:
    """Samples registries' metrics at chosen times, like scrapes, and writes OpenMetrics.

    ``watch(registry)`` / ``unwatch(registry)`` choose what is sampled (e.g. one job after
    another); ``sample(at)`` records every sample of the watched registries stamped ``at``
    (unix seconds, default now);
    ``series()`` returns them shaped like a Prometheus range-vector answer
    (``[{"metric": {...}, "values": [[t, "v"], ...]}]``); ``openmetrics()`` writes text for
    ``promtool tsdb create-blocks-from openmetrics`` (families together, samples in time
    order, seconds timestamps, ``# EOF``).
    """

    def __init__(self, registry=None):
        self._registries = [registry] if registry is not None else []
        self._lock = threading.Lock()
        self._types: dict[str, str] = {}
        self._help: dict[str, str] = {}
        self._samples: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]]
        self._samples = {}
        self._family_of: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}

    def watch(self, registry) -> None:
        """Sample ``registry`` too from now on."""
        with self._lock:
            self._registries.append(registry)

    def unwatch(self, registry) -> None:
        """Stop sampling ``registry``."""
        with self._lock:
            self._registries.remove(registry)

    def sample(self, at: float | None = None) -> None:
        """Record every watched series' value at ``at`` (default: now)."""
        with self._lock:
            at = time.time() if at is None else float(at)
            for registry in self._registries:
                for family in registry.collect():
                    self._add(family, at)

    def _add(self, family, at: float) -> None:
        self._types.setdefault(family.name, family.type)
        self._help.setdefault(family.name, family.documentation)
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            self._family_of[key] = family.name
            values = self._samples.setdefault(key, [])
            if not values or at > values[-1][0]:
                values.append((at, float(s.value)))

    def series(self) -> list[dict]:
        """The samples as Prometheus query-API series (class doc)."""
        return [
            {"metric": {"__name__": name, **dict(labels)},
             "values": [[t, _fmt(v)] for t, v in values]}
            for (name, labels), values in self._samples.items()
        ]

    def openmetrics(self) -> str:
        """The samples as OpenMetrics text (class doc)."""
        lines: list[str] = []
        by_family: dict[str, list] = {}
        for key, values in self._samples.items():
            by_family.setdefault(self._family_of[key], []).append((key, values))
        for family in sorted(by_family):
            lines.append(f"# TYPE {family} {self._types[family]}")
            lines.append(f"# HELP {family} {_om_escape_help(self._help[family])}")
            for (name, labels), values in sorted(by_family[family]):
                label_text = ",".join(f'{k}="{_om_escape(v)}"' for k, v in labels)
                head = f"{name}{{{label_text}}}" if label_text else name
                lines.extend(f"{head} {_fmt(v)} {t:.3f}" for t, v in values)
        lines.append("# EOF")
        return "\n".join(lines) + "\n"


def _fmt(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def _om_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _om_escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")
