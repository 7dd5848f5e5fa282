"""Expose a training job's progress as Prometheus metrics (``prometheus-client``).

* :class:`PromExporter` is the Prometheus sink: a strict
  :class:`~jobcast.instrument.base.PhaseTracker` under a lock, rendered as metrics at
  every scrape. It needs nothing but ``prometheus-client``, so any training loop can drive
  it with ``run_start`` / ``phase_start`` / ``progress`` / ``phase_end`` / ``run_end`` (the
  same calls as :class:`jobcast.instrument.jsonl.JsonlWriter`).
* ``PromCallback(exporter)`` is a Keras 3 callback on
  :func:`~jobcast.instrument.base.keras_callback_base` driving it from ``model.fit``
  through the exporter's public API; it is created on first access, so importing this
  module does not import Keras or TensorFlow.
* :class:`TraceRecorder` (from :mod:`jobcast.instrument.trace`, re-exported here) samples
  an exporter's metrics at chosen times and writes them as OpenMetrics text for
  ``promtool tsdb create-blocks-from openmetrics`` (backfill).

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

from ingest.prometheus import MetricNames
from jobcast.instrument.base import (
    Clock,
    PhaseTracker,
    check_batch_size,
    keras_callback_base,
    keras_framework,
    lazy_attributes,
)
from jobcast.instrument.trace import TraceRecorder

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
                 registry: Any = None, clock: Clock = time.time):
        from prometheus_client import CollectorRegistry

        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id must be a non-empty string, got {job_id!r}")
        check_batch_size(batch_size)
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
        self._tracker = PhaseTracker(strict=True)
        self._collects = 0
        self._server: tuple[Any, threading.Thread] | None = None
        self.registry.register(_Collector(self))

    # -- the job's calls ---------------------------------------------------------------

    def run_start(self, *, epochs: int | None = None, steps_per_epoch: int | None = None,
                  planned_iterations: dict[str, int] | None = None,
                  at: float | None = None) -> None:
        """Open the job. ``epochs`` x ``steps_per_epoch`` gives the planned train steps."""
        with self._lock:
            self._tracker.run_start(self._now(at), batch_size=self.batch_size, epochs=epochs,
                                    steps_per_epoch=steps_per_epoch,
                                    planned_iterations=planned_iterations)

    def plan(self, phase: str, iterations: int | None, epochs: int | None = None) -> None:
        """Set (or correct) the planned steps of a phase kind and the planned epochs."""
        with self._lock:
            self._tracker.plan(phase, iterations, epochs)

    def phase_start(self, phase: str, epoch: int | None = None,
                    batch_size: int | None = None, at: float | None = None) -> None:
        """Open a phase; ``at`` (unix seconds) back-dates it, e.g. to the previous end."""
        with self._lock:
            self._tracker.phase_start(phase, epoch, self._now(at), batch_size)

    def progress(self, step: int, at: float | None = None) -> None:
        """``step`` batches are done in the open phase (counted from its start)."""
        with self._lock:
            self._tracker.progress(step, self._now(at))

    def phase_end(self, iterations: int, at: float | None = None) -> float:
        """Close the open phase after ``iterations`` batches; returns the time used."""
        with self._lock:
            now = self._now(at)
            self._tracker.phase_end(iterations, now)
            return now

    def run_end(self, status: str = "completed", at: float | None = None) -> None:
        """Close the job. A phase still open stays marked active: readers drop it."""
        with self._lock:
            self._tracker.run_end(status, self._now(at))

    # -- reading its state -------------------------------------------------------------

    @property
    def active_phase(self) -> str | None:
        """The open phase's kind, or None (after ``run_end``: the phase left open)."""
        return self._tracker.active

    @property
    def job_start(self) -> float | None:
        """Unix time of the last ``run_start``, or None before it."""
        return self._tracker.job_start

    @property
    def job_end(self) -> float | None:
        """Unix time of ``run_end``, or None while the job runs (or before it starts)."""
        return self._tracker.job_end

    @property
    def serving(self) -> bool:
        """:meth:`serve` runs an HTTP server (until :meth:`close`)."""
        return self._server is not None

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
            run = self._tracker
            if run.job_start is None:
                return
            fams: dict[str, Any] = {}
            for key, kind in (("iterations", CounterMetricFamily),
                              ("seconds", CounterMetricFamily),
                              ("phases", CounterMetricFamily)):
                fams[key] = kind(n.family(key), _HELP[key], labels=phase_labels)
            for key in ("offset_iterations", "offset_seconds", "phase_start", "epoch",
                        "active", "batch_size", "planned"):
                fams[key] = GaugeMetricFamily(n.family(key), _HELP[key], labels=phase_labels)
            for phase, st in run.stats.items():
                values = [*job_values, phase]
                fams["iterations"].add_metric(values, st.iterations)
                fams["seconds"].add_metric(values, st.seconds)
                fams["phases"].add_metric(values, st.phases)
                fams["active"].add_metric(values, 1.0 if run.active == phase else 0.0)
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
            for key, value in (("job_start", run.job_start), ("job_end", run.job_end),
                               ("last_progress", run.last_progress),
                               ("planned_epochs", run.planned_epochs)):
                fam = GaugeMetricFamily(n.family(key), _HELP[key], labels=job_labels)
                if value is not None:
                    fam.add_metric(job_values, value)
                fams[key] = fam
            info = InfoMetricFamily(n.family("info"), _HELP["info"],
                                    labels=job_labels)
            info.add_metric(job_values, {"framework": self.framework or "",
                                         "status": run.status or "running"})
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


def _make_callback_class() -> type:
    callback_base: Any = keras_callback_base()  # built at run time: Keras is optional

    class PromCallback(callback_base):
        """Keras callback feeding a :class:`PromExporter` from ``model.fit``.

        Each epoch is a ``train`` phase (it ends at its last batch's end, where the
        validation pass, a ``test`` phase with the same epoch, begins), exactly as
        :class:`jobcast.instrument.jsonl.JobcastLogger` times them (both share
        ``KerasPhaseCallback``). Every batch end is a progress update. The plan is set at
        the first epoch: a resumed fit (``initial_epoch`` > 0) plans only the epochs it
        will run; ``validation_steps`` (batches per validation pass), when given, sets the
        planned test steps. At the end of ``fit`` it waits up to ``final_scrape_timeout``
        seconds for one more scrape when the exporter serves HTTP, so the server sees the
        final values. ``model.evaluate`` outside ``fit`` is not recorded (a job is one
        ``fit``).
        """

        record_evaluate = False

        def __init__(self, exporter: PromExporter, validation_steps: int | None = None,
                     final_scrape_timeout: float = 20.0):
            super().__init__(exporter)
            self.validation_steps = validation_steps
            self.final_scrape_timeout = float(final_scrape_timeout)

        @property
        def exporter(self) -> PromExporter:
            return self.sink

        def start_run(self, kind: str) -> None:
            if self.exporter.framework is None:
                self.exporter.framework = keras_framework()
            epochs, steps = self.planned()
            self.exporter.run_start(epochs=epochs, steps_per_epoch=steps)

        def first_epoch(self, epoch: int) -> None:
            epochs, steps = self.planned()
            if epochs and steps:
                left = int(epochs) - epoch + 1
                self.exporter.plan("train", left * int(steps), epochs=left)
                if self.validation_steps:
                    self.exporter.plan("test", left * int(self.validation_steps))

        def fit_ended(self) -> None:
            if self.exporter.serving and self.final_scrape_timeout > 0:
                self.exporter.wait_for_scrape(self.final_scrape_timeout)

    return PromCallback


__getattr__ = lazy_attributes(__name__, {"PromCallback": _make_callback_class})
