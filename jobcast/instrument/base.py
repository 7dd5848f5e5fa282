"""The phase state machine both sinks share, and the Keras callback base that drives a sink.

* :class:`PhaseTracker` is the one state machine: whether a run is open, which phase kind
  (``train`` / ``test``) runs, and per phase kind the cumulative steps and seconds, the
  phases started, the offsets where the current phase began, its start time, epoch, batch
  size and planned steps. The JSON-lines writer and the Prometheus exporter each own one.
* :class:`PhaseSink` is the event API both sinks implement (``run_start``, ``phase_start``,
  ``progress``, ``phase_end``, ``run_end``, ``active_phase``, ``clock``).
* :func:`keras_callback_base` returns ``KerasPhaseCallback``, the Keras callback base class
  mapping Keras hooks to sink events. It is built on first call, so importing this module
  (or a sink module) does not import Keras or TensorFlow.

Rules (both sinks): times are unix seconds; ``step`` counts batches since the phase began;
phases do not nest; a phase kind's ``seconds`` only grow (as of its last step) and its
``iterations`` are its offset plus the open phase's steps.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fleet.quiet_tf import quiet_import
from ingest.events import PHASES

Clock = Callable[[], float]


def check_batch_size(batch_size: int | None) -> None:
    """A batch size is None or a positive int; raise ValueError otherwise."""
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


@dataclass
class PhaseStats:
    """Cumulative progress of one phase kind since the run started.

    ``offset_*`` are ``iterations`` / ``seconds`` when the current (or last) phase began;
    ``start`` and ``epoch`` belong to that phase; ``phases`` counts phases started.
    """

    iterations: float = 0.0
    seconds: float = 0.0
    phases: int = 0
    offset_iterations: float = 0.0
    offset_seconds: float = 0.0
    start: float | None = None
    epoch: int | None = None
    batch_size: int | None = None
    planned: int | None = None

    @property
    def steps(self) -> float:
        """Steps done in the current (or last) phase."""
        return self.iterations - self.offset_iterations


class PhaseTracker:
    """The run / phase state machine; every transition takes its time ``at`` explicitly.

    ``strict`` (the exporter): phase events need a running run, steps never go backwards,
    and ``run_end`` needs a running run and leaves an open phase marked active (readers
    drop it). Not strict (the JSON-lines writer): the file's reader checks those rules;
    ``run_end`` is always accepted and forgets an open phase. Both: no ``run_start`` while
    a run is open, phase kinds are :data:`PHASES`, phases do not nest, ``progress`` and
    ``phase_end`` need an open phase.
    """

    def __init__(self, strict: bool = True) -> None:
        self.strict = strict
        self.running = False
        """A run started and has not ended (a sink may set it to adopt a run)."""
        self.stats: dict[str, PhaseStats] = {p: PhaseStats() for p in PHASES}
        self.active: str | None = None
        self.batch_size: int | None = None
        self.job_start: float | None = None
        self.job_end: float | None = None
        self.status: str | None = None
        self.last_progress: float | None = None
        self.planned_epochs: int | None = None

    @property
    def current(self) -> tuple[str, int | None] | None:
        """``(phase, epoch)`` of the open phase, or None."""
        if self.active is None:
            return None
        return self.active, self.stats[self.active].epoch

    def kind(self, phase: str) -> PhaseStats:
        """The stats of a phase kind; ValueError for an unknown kind."""
        if phase not in self.stats:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        return self.stats[phase]

    # -- transitions -----------------------------------------------------------------------

    def run_start(self, at: float, *, batch_size: int | None = None,
                  epochs: int | None = None, steps_per_epoch: int | None = None,
                  planned_iterations: Mapping[str, int] | None = None) -> None:
        """Open a run from scratch; ``epochs`` x ``steps_per_epoch`` plans the train steps."""
        if self.running:
            raise RuntimeError("run_start while a run is open")
        self.running = True
        self.stats = {p: PhaseStats() for p in PHASES}
        self.active = None
        self.batch_size = batch_size
        self.job_start = self.last_progress = at
        self.job_end = self.status = None
        self.planned_epochs = epochs
        planned = dict(planned_iterations or {})
        if epochs and steps_per_epoch and "train" not in planned:
            planned["train"] = int(epochs) * int(steps_per_epoch)
        for phase, steps in planned.items():
            self.kind(phase).planned = int(steps)
        self.stats["train"].batch_size = batch_size

    def plan(self, phase: str, iterations: int | None, epochs: int | None = None) -> None:
        """Set (or correct) the planned steps of a phase kind and the planned epochs."""
        self.kind(phase).planned = None if iterations is None else int(iterations)
        if epochs is not None:
            self.planned_epochs = int(epochs)

    def phase_start(self, phase: str, epoch: int | None, at: float,
                    batch_size: int | None = None) -> None:
        """Open a phase of kind ``phase``; its batch size defaults to the run's."""
        if self.strict and not self.running:
            raise RuntimeError("no running job: call run_start first")
        st = self.kind(phase)
        if self.active is not None:
            raise RuntimeError(f"phase {self.active!r} is still open")
        st.phases += 1
        st.offset_iterations = st.iterations
        st.offset_seconds = st.seconds
        st.start = at
        st.epoch = epoch
        if batch_size is not None:
            st.batch_size = int(batch_size)
        elif st.batch_size is None:
            st.batch_size = self.batch_size
        self.active = phase
        self.last_progress = max(self.last_progress or at, at)

    def progress(self, step: int, at: float) -> None:
        """``step`` batches are done in the open phase (counted from its start)."""
        if self.active is None:
            raise RuntimeError("progress outside a phase")
        st = self.stats[self.active]
        if self.strict and step < st.steps:
            raise ValueError(f"step goes backwards ({st.steps:g} -> {step})")
        st.iterations = st.offset_iterations + int(step)
        st.seconds = max(st.seconds, st.offset_seconds + max(0.0, at - (st.start or at)))
        self.last_progress = max(self.last_progress or at, at)

    def phase_end(self, iterations: int, at: float) -> None:
        """Close the open phase after ``iterations`` batches."""
        if self.active is None:
            raise RuntimeError("phase_end without an open phase")
        self.progress(iterations, at)
        self.active = None

    def run_end(self, status: str, at: float) -> None:
        """Close the run (see the class rules for an open phase)."""
        if self.strict and not self.running:
            raise RuntimeError("no running job: call run_start first")
        if not self.strict:
            self.active = None
        self.running = False
        self.job_end = at
        self.status = status


class PhaseSink(Protocol):
    """What ``KerasPhaseCallback`` needs of a sink (JsonlWriter, PromExporter).

    ``at`` (unix seconds) back-dates an event; None means ``clock()`` now. ``phase_end``
    returns the time it used.
    """

    clock: Clock

    @property
    def active_phase(self) -> str | None:
        """The open phase (``train``/``test``), else None."""
        ...

    def phase_start(self, phase: str, epoch: int | None, *,
                    at: float | None = None) -> Any:
        """Open a ``phase`` of ``epoch``."""
        ...

    def progress(self, step: int, *, at: float | None = None) -> Any:
        """``step`` batches done in the open phase."""
        ...

    def phase_end(self, iterations: int, *, at: float | None = None) -> float:
        """Close the open phase after ``iterations`` batches; returns the time used."""
        ...

    def run_end(self, status: str = "completed", *, at: float | None = None) -> Any:
        """Close the run with ``status``."""
        ...


# -- lazy Keras ---------------------------------------------------------------------------


def keras_framework() -> str:
    """``"Keras <version> / <backend> <version>"`` of the running Keras."""
    keras = quiet_import("keras")

    backend = keras.backend.backend()
    module = sys.modules.get(backend)
    version = getattr(module, "__version__", None)
    return f"Keras {keras.__version__} / {backend}" + (f" {version}" if version else "")


def lazy_attributes(module: str, factories: Mapping[str, Callable[[], Any]]
                    ) -> Callable[[str], Any]:
    """A module ``__getattr__`` building each named attribute on first access, once."""
    built: dict[str, Any] = {}

    def __getattr__(name: str) -> Any:
        if name not in factories:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name not in built:
            built[name] = factories[name]()
        return built[name]

    return __getattr__


class KerasPhaseLogic:
    """Keras hooks -> sink events: the body of ``KerasPhaseCallback``, which is this mixin
    on ``keras.callbacks.Callback`` (:func:`keras_callback_base`; a plain class here, so
    this module imports no Keras). Subclasses pick the run and output policies.

    Rules: ``fit`` is one run (kind ``"fit"``); each epoch is a ``train`` phase from
    ``on_epoch_begin`` to its last batch's end (``on_epoch_end`` or the start of the
    validation pass); the validation pass inside ``fit`` is a ``test`` phase with the
    same epoch, starting at that last batch's end; ``on_test_end`` closes it at the
    clock's time. ``model.evaluate`` outside ``fit`` is a run of its own (kind
    ``"evaluate"``, one ``test`` phase, epoch None) when :attr:`record_evaluate`, else
    ignored. Times come from ``sink.clock`` when the hook runs.
    """

    record_evaluate: bool = True
    params: dict | None  # set by Keras on the callback

    def __init__(self, sink: PhaseSink) -> None:
        """Drive ``sink``; Keras' own ``Callback.__init__`` runs first."""
        super().__init__()
        self.sink = sink
        self._in_fit = False
        self._epoch: int | None = None
        self._first_epoch: int | None = None
        self._steps = 0
        self._last_batch_end: float | None = None

    # -- policies subclasses override ------------------------------------------------
    def start_run(self, kind: str) -> None:
        """Open the sink's run; ``kind`` is ``"fit"`` or ``"evaluate"``."""
        raise NotImplementedError

    def first_epoch(self, epoch: int) -> None:
        """Called once per ``fit`` before its first phase (``epoch`` may be > 1)."""

    def progress_due(self, done: int, before: int) -> bool:
        """Whether ``done`` steps (``before`` at the last batch) go to the sink."""
        return True

    def end_test_phase(self, steps: int) -> None:
        """Close the sink's ``test`` phase after ``steps`` batches."""
        self.sink.phase_end(steps)

    def fit_ended(self) -> None:
        """Called after the ``fit`` run was closed."""

    # -- helpers ---------------------------------------------------------------------
    def planned(self) -> tuple[int | None, int | None]:
        """``(epochs, steps per epoch)`` Keras plans for this ``fit``."""
        params = self.params or {}
        return params.get("epochs"), params.get("steps")

    def _open_phase(self, phase: str, epoch: int | None, at: float | None = None) -> None:
        self._steps = 0
        self._last_batch_end = None
        self.sink.phase_start(phase, epoch, at=at)

    def _step(self, batch: int) -> None:
        self._last_batch_end = float(self.sink.clock())
        done = int(batch) + 1
        if self.progress_due(done, self._steps):
            self.sink.progress(done, at=self._last_batch_end)
        self._steps = done

    def _end_train_phase(self) -> float | None:
        """Close an open train phase at its last batch end; returns that time."""
        if self.sink.active_phase == "train":
            return self.sink.phase_end(self._steps, at=self._last_batch_end)
        return None

    def _records_test(self) -> bool:
        return self._in_fit or self.record_evaluate

    # -- fit -------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        """``fit`` starts: one run of kind ``"fit"``."""
        self._in_fit = True
        self._first_epoch = None
        self.start_run("fit")

    def on_epoch_begin(self, epoch, logs=None):
        """A ``train`` phase opens for epoch ``epoch + 1``."""
        self._epoch = int(epoch) + 1
        if self._first_epoch is None:
            self._first_epoch = self._epoch
            self.first_epoch(self._epoch)
        self._open_phase("train", self._epoch)

    def on_train_batch_end(self, batch, logs=None):
        """One train step done."""
        self._step(batch)

    def on_epoch_end(self, epoch, logs=None):
        """The train phase closes at its last batch end (if validation has not)."""
        self._end_train_phase()

    def on_train_end(self, logs=None):
        """``fit`` ends: its run is closed as completed."""
        self._end_train_phase()
        self.sink.run_end("completed")
        self._in_fit = False
        self._epoch = None
        self.fit_ended()

    # -- validation and evaluate -----------------------------------------------------
    def on_test_begin(self, logs=None):
        """A ``test`` phase opens (validation in ``fit``, or an ``evaluate`` run)."""
        if not self._records_test():
            return
        start = None
        if self._in_fit:
            start = self._end_train_phase()
        else:
            self.start_run("evaluate")
        self._open_phase("test", self._epoch if self._in_fit else None, at=start)

    def on_test_batch_end(self, batch, logs=None):
        """One test step done."""
        if self._records_test():
            self._step(batch)

    def on_test_end(self, logs=None):
        """The test phase closes (and an ``evaluate`` run with it)."""
        if not self._records_test():
            return
        self.end_test_phase(self._steps)
        if not self._in_fit:
            self.sink.run_end("completed")


def _make_callback_base() -> type:
    """``KerasPhaseCallback``: :class:`KerasPhaseLogic` on Keras' ``Callback``."""
    keras = quiet_import("keras")
    return type("KerasPhaseCallback", (KerasPhaseLogic, keras.callbacks.Callback),
                {"__doc__": KerasPhaseLogic.__doc__, "__module__": __name__})


__getattr__ = lazy_attributes(__name__, {"KerasPhaseCallback": _make_callback_base})


def keras_callback_base() -> type:
    """The ``KerasPhaseCallback`` class (imports Keras on the first call)."""
    return __getattr__("KerasPhaseCallback")
