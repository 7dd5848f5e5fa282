"""Expose a training job's progress as Prometheus metrics (``prometheus-client``).

* :class:`PromExporter` keeps the job's progress and renders it as metrics at every scrape;
  it needs nothing but ``prometheus-client``, so any training loop can drive it with
  ``run_start`` / ``phase_start`` / ``progress`` / ``phase_end`` / ``run_end`` (the same
  calls as :class:`jobcast.instrument.jsonl.JsonlWriter`).
* ``PromCallback(exporter)`` is a Keras 3 callback driving it from ``model.fit``; it is
  created on first access, so importing this module does not import Keras or TensorFlow.
* :class:`TraceRecorder` samples an exporter's metrics at chosen times and writes them as
  OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics`` (backfill).

The values are measured inside the job at each batch end, not at scrape time: every scrape
is an exact point of the job's cumulative progress curve, so scrape jitter and missed
scrapes cost points, never accuracy. Metric names, labels and their meaning are in
``docs/prometheus.md``; names and label names are configurable with :class:`MetricNames`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ingest.prometheus import PHASES, MetricNames

__all__ = ["MetricNames", "PromExporter", "TraceRecorder"]

_HELP = {
    "iterations": "Steps (batches) completed in this phase kind since the job started.",
    "seconds": "Wall seconds spent in this phase kind since the job started (as of the last step).",
    "phases": "Phases of this kind started since the job started (the current one included).",
    "offset_iterations": "iterations_total when the current (or last) phase of this kind began.",
    "offset_seconds": "phase_seconds_total when the current (or last) phase of this kind began.",
    "phase_start": "Unix time the current (or last) phase of this kind began.",
    "epoch": "Epoch (1-based) of the current (or last) phase of this kind.",
    "active": "1 while a phase of this kind runs, else 0 (the current phase).",
    "batch_size": "Global batch size (samples per step over all devices) of this phase kind.",
    "planned": "Steps of this phase kind the job plans in total (when known).",
    "planned_epochs": "Epochs the job plans (when known).",
    "job_start": "Unix time the job (this process) started.",
    "job_end": "Unix time the job ended; only present once it has.",
    "last_progress": "Unix time of the last progress update.",
    "info": "Static facts about the job.",
}


class _PhaseState:
    __slots__ = ("iterations", "seconds", "phases", "offset_iterations", "offset_seconds",
                 "start", "epoch", "batch_size", "planned")

    def __init__(self) -> None:
        self.iterations = 0.0
        self.seconds = 0.0
        self.phases = 0
        self.offset_iterations = 0.0
        self.offset_seconds = 0.0
        self.start: float | None = None
        self.epoch: int | None = None
        self.batch_size: int | None = None
        self.planned: int | None = None


class PromExporter:
    """One training job's progress as Prometheus metrics.

    ``job_id`` names the job (required, any string); ``network``, ``deployment`` (a jobcast
    key such as ``nvidia-a100-sxm4-80gb-x8`` or a free form such as ``"8x A100"``) and
    ``batch_size`` (global) become labels / gauges so ``jobcast ingest-prometheus`` can key
    the job's models. ``registry`` defaults to a registry of its own (pass
    ``prometheus_client.REGISTRY`` to share one with other metrics); ``clock`` returns unix
    seconds (tests may pass their own).
    """

    def __init__(self, job_id: str, *, network: str | None = None,
                 deployment: str | None = None, batch_size: int | None = None,
                 framework: str | None = None, names: MetricNames | None = None,
                 registry=None, clock=time.time):
        from prometheus_client import CollectorRegistry

        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id must be a non-empty string, got {job_id!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.names = names or MetricNames()
        self.names.validate()
        self.job_id = job_id
        self.network = network
        self.deployment = deployment
        self.batch_size = batch_size
        self.framework = framework
        self.clock = clock
        self.registry = registry if registry is not None else CollectorRegistry()
        self._lock = threading.Lock()
        self._scraped = threading.Condition(self._lock)
        self._phases = {p: _PhaseState() for p in PHASES}
        self._active: str | None = None
        self._job_start: float | None = None
        self._job_end: float | None = None
        self._status: str | None = None
        self._last_progress: float | None = None
        self._planned_epochs: int | None = None
        self._collects = 0
        self._server = None
        self.registry.register(_Collector(self))

    # -- the job's calls ---------------------------------------------------------------

    def run_start(self, *, epochs: int | None = None, steps_per_epoch: int | None = None,
                  planned_iterations: dict[str, int] | None = None,
                  at: float | None = None) -> None:
        """Open the job. ``epochs`` x ``steps_per_epoch`` gives the planned train steps."""
        with self._lock:
            if self._job_start is not None and self._job_end is None:
                raise RuntimeError("run_start while the job is running")
            now = self._now(at)
            self._phases = {p: _PhaseState() for p in PHASES}
            self._active = None
            self._job_start = self._last_progress = now
            self._job_end = self._status = None
            self._planned_epochs = epochs
            planned = dict(planned_iterations or {})
            if epochs and steps_per_epoch and "train" not in planned:
                planned["train"] = int(epochs) * int(steps_per_epoch)
            for phase, steps in planned.items():
                self._state(phase).planned = int(steps)
            self._phases["train"].batch_size = self.batch_size

    def plan(self, phase: str, iterations: int | None, epochs: int | None = None) -> None:
        """Set (or correct) the planned steps of a phase kind and the planned epochs."""
        with self._lock:
            self._state(phase).planned = None if iterations is None else int(iterations)
            if epochs is not None:
                self._planned_epochs = int(epochs)

    def phase_start(self, phase: str, epoch: int | None = None,
                    batch_size: int | None = None, at: float | None = None) -> None:
        """Open a phase; ``at`` (unix seconds) back-dates it, e.g. to the previous end."""
        with self._lock:
            self._require_run()
            if self._active is not None:
                raise RuntimeError(f"phase {self._active!r} is still open")
            st = self._state(phase)
            st.phases += 1
            st.offset_iterations = st.iterations
            st.offset_seconds = st.seconds
            st.start = self._now(at)
            st.epoch = epoch
            if batch_size is not None:
                st.batch_size = int(batch_size)
            elif st.batch_size is None:
                st.batch_size = self.batch_size
            self._active = phase
            self._last_progress = max(self._last_progress or st.start, st.start)

    def progress(self, step: int, at: float | None = None) -> None:
        """``step`` batches are done in the open phase (counted from its start)."""
        with self._lock:
            self._advance(step, at)

    def phase_end(self, iterations: int, at: float | None = None) -> float:
        """Close the open phase after ``iterations`` batches; returns the time used."""
        with self._lock:
            now = self._advance(iterations, at)
            self._active = None
            return now

    def run_end(self, status: str = "completed", at: float | None = None) -> None:
        """Close the job. A phase still open stays marked active: readers drop it."""
        with self._lock:
            self._require_run()
            self._job_end = self._now(at)
            self._status = status

    # -- serving -----------------------------------------------------------------------

    def serve(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP on ``addr:port`` (0: any free port); returns the port.

        A daemon thread answers; :meth:`close` stops it.
        """
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer

        if self._server is not None:
            raise RuntimeError("already serving")
        metrics_app = make_wsgi_app(self.registry)

        def app(environ, start_response):
            body = metrics_app(environ, start_response)
            if environ.get("PATH_INFO") == "/favicon.ico":
                return body
            return _AfterBody(body, self._scraped_now)

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args) -> None:
                pass

        server = make_server(addr, port, app, ThreadingWSGIServer, handler_class=Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self._server = (server, thread)
        return int(server.server_port)

    def wait_for_scrape(self, timeout: float) -> bool:
        """Block until a scrape happens after now (at most ``timeout`` s); True if one did.

        Call it after ``run_end`` so that Prometheus sees the job's final values.
        """
        deadline = time.monotonic() + timeout
        with self._scraped:
            seen = self._collects
            while self._collects == seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._scraped.wait(left)
            return True

    def close(self) -> None:
        """Stop serving (the metrics stay readable from the registry)."""
        if self._server is not None:
            server, thread = self._server
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
            self._server = None

    @property
    def scrapes(self) -> int:
        """How many times ``/metrics`` was served (HTTP scrapes only)."""
        return self._collects

    # -- internals ---------------------------------------------------------------------

    def _now(self, at: float | None) -> float:
        return float(self.clock()) if at is None else float(at)

    def _state(self, phase: str) -> _PhaseState:
        if phase not in self._phases:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        return self._phases[phase]

    def _require_run(self) -> None:
        if self._job_start is None or self._job_end is not None:
            raise RuntimeError("no running job: call run_start first")

    def _advance(self, step: int, at: float | None) -> float:
        if self._active is None:
            raise RuntimeError("progress outside a phase")
        st = self._phases[self._active]
        now = self._now(at)
        if step < st.iterations - st.offset_iterations:
            raise ValueError(f"step goes backwards ({st.iterations - st.offset_iterations:g} "
                             f"-> {step})")
        st.iterations = st.offset_iterations + int(step)
        st.seconds = max(st.seconds, st.offset_seconds + max(0.0, now - (st.start or now)))
        self._last_progress = max(self._last_progress or now, now)
        return now

    def _families(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            InfoMetricFamily,
        )

        n = self.names
        job_labels = [n.job_label, n.network_label, n.deployment_label]
        job_values = [self.job_id, self.network or "", self.deployment or ""]
        phase_labels = [*job_labels, n.phase_label]
        with self._lock:
            if self._job_start is None:
                return
            fams: dict[str, Any] = {}
            for key, kind in (("iterations", CounterMetricFamily),
                              ("seconds", CounterMetricFamily),
                              ("phases", CounterMetricFamily)):
                fams[key] = kind(n.family(key), _HELP[key], labels=phase_labels)
            for key in ("offset_iterations", "offset_seconds", "phase_start", "epoch",
                        "active", "batch_size", "planned"):
                fams[key] = GaugeMetricFamily(n.family(key), _HELP[key], labels=phase_labels)
            for phase, st in self._phases.items():
                values = [*job_values, phase]
                fams["iterations"].add_metric(values, st.iterations)
                fams["seconds"].add_metric(values, st.seconds)
                fams["phases"].add_metric(values, st.phases)
                fams["active"].add_metric(values, 1.0 if self._active == phase else 0.0)
                if st.batch_size is not None:
                    fams["batch_size"].add_metric(values, st.batch_size)
                if st.planned is not None:
                    fams["planned"].add_metric(values, st.planned)
                if st.phases:
                    fams["offset_iterations"].add_metric(values, st.offset_iterations)
                    fams["offset_seconds"].add_metric(values, st.offset_seconds)
                    fams["phase_start"].add_metric(values, st.start or 0.0)
                    if st.epoch is not None:
                        fams["epoch"].add_metric(values, st.epoch)
            for key, value in (("job_start", self._job_start), ("job_end", self._job_end),
                               ("last_progress", self._last_progress),
                               ("planned_epochs", self._planned_epochs)):
                fam = GaugeMetricFamily(n.family(key), _HELP[key], labels=job_labels)
                if value is not None:
                    fam.add_metric(job_values, value)
                fams[key] = fam
            info = InfoMetricFamily(n.family("info"), _HELP["info"],
                                    labels=job_labels)
            info.add_metric(job_values, {"framework": self.framework or "",
                                         "status": self._status or "running"})
            fams["info"] = info
        yield from fams.values()

    def _scraped_now(self) -> None:
        with self._lock:
            self._collects += 1
            self._scraped.notify_all()


class _Collector:
    """Adapter registered with the registry: renders the exporter's state at each collect."""

    def __init__(self, exporter: PromExporter):
        self._exporter = exporter

    def collect(self) -> Iterable[Any]:
        return list(self._exporter._families())

    def describe(self) -> Iterable[Any]:
        return []  # names depend on configuration; no collision check needed


class _AfterBody:
    """A WSGI body whose ``close()`` (called once it has been sent) reports the scrape."""

    def __init__(self, body, callback):
        self._body = body
        self._callback = callback

    def __iter__(self):
        return iter(self._body)

    def close(self) -> None:
        closer = getattr(self._body, "close", None)
        if closer is not None:
            closer()
        self._callback()


# -- Keras ------------------------------------------------------------------------------


def _make_callback_class():
    import keras

    from jobcast.instrument.jsonl import _framework

    class PromCallback(keras.callbacks.Callback):
        """Keras callback feeding a :class:`PromExporter` from ``model.fit``.

        Each epoch is a ``train`` phase (it ends at its last batch's end, where the
        validation pass, a ``test`` phase with the same epoch, begins), exactly as
        :class:`jobcast.instrument.jsonl.JobcastLogger` times them. ``validation_steps`` (batches
        per validation pass), when given, sets the planned test steps. At the end of
        ``fit`` it waits up to ``final_scrape_timeout`` seconds for one more scrape when the
        exporter serves HTTP, so the server sees the final values. ``model.evaluate``
        outside ``fit`` is not recorded (a job is one ``fit``).
        """

        def __init__(self, exporter: PromExporter, validation_steps: int | None = None,
                     final_scrape_timeout: float = 20.0):
            super().__init__()
            self.exporter = exporter
            self.validation_steps = validation_steps
            self.final_scrape_timeout = float(final_scrape_timeout)
            self._in_fit = False
            self._epoch: int | None = None
            self._steps = 0
            self._last_batch_end: float | None = None
            self._first_epoch: int | None = None

        def _step(self, batch: int) -> None:
            self._last_batch_end = float(self.exporter.clock())
            self._steps = int(batch) + 1
            self.exporter.progress(self._steps, at=self._last_batch_end)

        def _end_train_phase(self) -> float | None:
            if self.exporter._active == "train":
                return self.exporter.phase_end(self._steps, at=self._last_batch_end)
            return None

        def on_train_begin(self, logs=None):
            params = self.params or {}
            if self.exporter.framework is None:
                self.exporter.framework = _framework()
            self._in_fit = True
            self._first_epoch = None
            self.exporter.run_start(epochs=params.get("epochs"),
                                    steps_per_epoch=params.get("steps"))

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = int(epoch) + 1
            if self._first_epoch is None:
                # a resumed fit (initial_epoch > 0) plans only the epochs it will run
                self._first_epoch = self._epoch
                params = self.params or {}
                epochs, steps = params.get("epochs"), params.get("steps")
                if epochs and steps:
                    left = int(epochs) - self._epoch + 1
                    self.exporter.plan("train", left * int(steps), epochs=left)
                    if self.validation_steps:
                        self.exporter.plan("test", left * int(self.validation_steps))
            self._steps = 0
            self._last_batch_end = None
            self.exporter.phase_start("train", self._epoch)

        def on_train_batch_end(self, batch, logs=None):
            self._step(batch)

        def on_epoch_end(self, epoch, logs=None):
            self._end_train_phase()

        def on_train_end(self, logs=None):
            self._end_train_phase()
            self.exporter.run_end("completed")
            self._in_fit = False
            if self.exporter._server is not None and self.final_scrape_timeout > 0:
                self.exporter.wait_for_scrape(self.final_scrape_timeout)

        def on_test_begin(self, logs=None):
            if not self._in_fit:
                return
            start = self._end_train_phase()
            self._steps = 0
            self._last_batch_end = None
            self.exporter.phase_start("test", self._epoch, at=start)

        def on_test_batch_end(self, batch, logs=None):
            if self._in_fit:
                self._step(batch)

        def on_test_end(self, logs=None):
            if self._in_fit:
                self.exporter.phase_end(self._steps)

    return PromCallback


# -- offline traces (backfill) ------------------------------------------------------------


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
        with self._lock:
            self._registries.append(registry)

    def unwatch(self, registry) -> None:
        with self._lock:
            self._registries.remove(registry)

    def sample(self, at: float | None = None) -> None:
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
        return [
            {"metric": {"__name__": name, **dict(labels)},
             "values": [[t, _fmt(v)] for t, v in values]}
            for (name, labels), values in self._samples.items()
        ]

    def openmetrics(self) -> str:
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


_LAZY: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name == "PromCallback":
        if name not in _LAZY:
            _LAZY[name] = _make_callback_class()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
