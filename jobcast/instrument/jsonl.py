"""Write jobcast JSON-lines training logs (docs/jsonl-format.md) from training scripts.

* :class:`JsonlWriter` is the JSON-lines sink: one line per event over a
  :class:`~jobcast.instrument.base.PhaseTracker` (not strict: the file's reader checks the
  ordering rules). It needs nothing but the standard library, so any training loop can
  use it.
* ``JobcastLogger(path, every_n_steps=..., network=..., deployment=..., batch_size=...)``
  is a Keras 3 callback on :func:`~jobcast.instrument.base.keras_callback_base`. It is
  created on first access, so importing this module does not import Keras or TensorFlow.

Keras mapping: ``on_train_begin`` -> ``run_start``; each epoch -> a ``train`` phase (it
ends when validation begins, or at ``on_epoch_end``); the validation pass inside ``fit``
-> a ``test`` phase with the same epoch; ``on_train_end`` -> ``run_end``. A standalone
``model.evaluate(callbacks=[logger])`` writes a run of its own (``kind: "evaluate"``)
holding one ``test`` phase. Times are host-side ``time.time()`` when the callback runs;
a train phase ends at its last batch's end, and the validation pass starts right there
(its set-up, e.g. tracing the test function, counts as test time).
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, Any

from jobcast.instrument.base import (
    Clock,
    PhaseTracker,
    check_batch_size,
    keras_callback_base,
    keras_framework,
    lazy_attributes,
)

FORMAT_VERSION = 1


class JsonlWriter:
    """Append jobcast events to a file, one JSON object per line, flushed at once.

    ``clock`` returns unix seconds (tests may pass their own). The file is opened on the
    first event and closed by :meth:`close` or at ``run_end``. Fields that are None are
    left out, except ``epoch`` (null for an evaluation outside ``fit``).
    """

    def __init__(self, path: str | os.PathLike[str], clock: Clock = time.time):
        self.path = os.fspath(path)
        self.clock = clock
        self.tracker = PhaseTracker(strict=False)
        self._file: IO[str] | None = None

    @property
    def run_open(self) -> bool:
        """A ``run_start`` was written and its ``run_end`` not yet."""
        return self.tracker.running

    @run_open.setter
    def run_open(self, value: bool) -> None:
        """Set True to append to a run an earlier writer left open in the file."""
        self.tracker.running = bool(value)

    @property
    def phase(self) -> tuple[str, int | None] | None:
        """``(phase, epoch)`` of the open phase, or None."""
        return self.tracker.current

    @property
    def active_phase(self) -> str | None:
        """The open phase's kind, or None."""
        return self.tracker.active

    def _now(self, at: float | None) -> float:
        return float(self.clock()) if at is None else float(at)

    def _write(self, event: str, now: float, **fields: Any) -> float:
        record = {"v": FORMAT_VERSION, "event": event, "time": now}
        record.update({k: v for k, v in fields.items() if v is not None or k == "epoch"})
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._file.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        self._file.flush()
        return now

    def run_start(self, *, network: str | None = None, deployment: str | dict | None = None,
                  batch_size: int | None = None, framework: str | None = None,
                  epochs: int | None = None, steps_per_epoch: int | None = None,
                  kind: str | None = None, run_id: str | None = None,
                  meta: dict | None = None) -> None:
        """Open a run; RuntimeError while one is open."""
        check_batch_size(batch_size)
        now = self._now(None)
        self.tracker.run_start(now, batch_size=batch_size, epochs=epochs,
                               steps_per_epoch=steps_per_epoch)
        self._write("run_start", now, network=network, deployment=deployment,
                    batch_size=batch_size, framework=framework, epochs=epochs,
                    steps_per_epoch=steps_per_epoch, kind=kind, run_id=run_id, meta=meta)

    def phase_start(self, phase: str, epoch: int | None, at: float | None = None) -> None:
        """Open a phase; ``at`` (unix seconds) back-dates it, e.g. to the previous end."""
        now = self._now(at)
        self.tracker.phase_start(phase, epoch, now)
        self._write("phase_start", now, phase=phase, epoch=epoch)

    def progress(self, step: int, at: float | None = None) -> None:
        """``step`` batches are done in the open phase (counted from its start)."""
        now = self._now(at)
        self.tracker.progress(step, now)
        phase, epoch = self.tracker.current or (None, None)
        self._write("progress", now, phase=phase, epoch=epoch, step=int(step))

    def phase_end(self, iterations: int, batch_size: int | None = None,
                  at: float | None = None) -> float:
        """Close the open phase; returns the time written."""
        current = self.tracker.current
        now = self._now(at)
        self.tracker.phase_end(iterations, now)
        phase, epoch = current or (None, None)
        return self._write("phase_end", now, phase=phase, epoch=epoch,
                           iterations=int(iterations), batch_size=batch_size)

    def run_end(self, status: str = "completed", at: float | None = None) -> None:
        """Close the run and the file; an open phase is left unclosed (the reader drops it)."""
        now = self._now(at)
        self.tracker.run_end(status, now)
        self._write("run_end", now, status=status)
        self.close()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _make_logger_class() -> type:
    callback_base: Any = keras_callback_base()  # built at run time: Keras is optional

    class JobcastLogger(callback_base):
        """Keras callback writing the jobcast JSON-lines format to ``path``.

        ``every_n_steps``: a ``progress`` event every so many batches (train and test).
        ``network``, ``deployment`` (key, ``"8x A100"`` or dict) and ``batch_size``
        (global) go into ``run_start``; ``test_batch_size`` into test ``phase_end``
        when it differs from ``batch_size``.
        """

        def __init__(self, path, every_n_steps: int = 50, network: str | None = None,
                     deployment: str | dict | None = None, batch_size: int | None = None,
                     test_batch_size: int | None = None, run_id: str | None = None,
                     meta: dict | None = None, clock: Clock = time.time):
            super().__init__(JsonlWriter(path, clock=clock))
            if every_n_steps < 1:
                raise ValueError("every_n_steps must be >= 1")
            self.every_n_steps = int(every_n_steps)
            self.network = network
            self.deployment = deployment
            self.batch_size = batch_size
            self.test_batch_size = test_batch_size
            self.run_id = run_id
            self.meta = meta

        @property
        def writer(self) -> JsonlWriter:
            return self.sink

        def start_run(self, kind: str) -> None:
            epochs, steps = self.planned() if kind == "fit" else (None, None)
            self.writer.run_start(
                network=self.network, deployment=self.deployment, batch_size=self.batch_size,
                framework=keras_framework(), epochs=epochs, steps_per_epoch=steps, kind=kind,
                run_id=self.run_id, meta=self.meta,
            )

        def progress_due(self, done: int, before: int) -> bool:
            return done // self.every_n_steps > before // self.every_n_steps

        def end_test_phase(self, steps: int) -> None:
            batch = self.test_batch_size
            if batch is not None and batch == self.batch_size:
                batch = None
            self.writer.phase_end(steps, batch_size=batch)

    return JobcastLogger


__getattr__ = lazy_attributes(__name__, {"JobcastLogger": _make_logger_class})
