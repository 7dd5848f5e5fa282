"""Write jobcast JSON-lines training logs (docs/jsonl-format.md) from training scripts.

* :class:`JsonlWriter` writes the events; it needs nothing but the standard library, so
  any training loop can use it.
* ``JobcastLogger(path, every_n_steps=..., network=..., deployment=..., batch_size=...)``
  is a Keras 3 callback built on it. It is created on first access, so importing this
  module does not import Keras or TensorFlow.

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
import sys
import time
from typing import IO, Any

FORMAT_VERSION = 1


class JsonlWriter:
    """Append jobcast events to a file, one JSON object per line, flushed at once.

    ``clock`` returns unix seconds (tests may pass their own). The file is opened on the
    first event and closed by :meth:`close` or at ``run_end``.
    """

    def __init__(self, path: str | os.PathLike[str], clock=time.time):
        self.path = os.fspath(path)
        self.clock = clock
        self._file: IO[str] | None = None
        self.run_open = False
        self.phase: tuple[str, int | None] | None = None

    def _write(self, event: str, at: float | None = None, **fields: Any) -> float:
        now = float(self.clock()) if at is None else float(at)
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
        if self.run_open:
            raise RuntimeError("run_start while a run is open")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self._write("run_start", network=network, deployment=deployment,
                    batch_size=batch_size, framework=framework, epochs=epochs,
                    steps_per_epoch=steps_per_epoch, kind=kind, run_id=run_id, meta=meta)
        self.run_open = True

    def phase_start(self, phase: str, epoch: int | None, at: float | None = None) -> None:
        """Open a phase; ``at`` (unix seconds) back-dates it, e.g. to the previous end."""
        if phase not in ("train", "test"):
            raise ValueError(f"phase must be 'train' or 'test', got {phase!r}")
        if self.phase is not None:
            raise RuntimeError(f"phase {self.phase[0]!r} is still open")
        self._write("phase_start", at, phase=phase, epoch=epoch)
        self.phase = (phase, epoch)

    def progress(self, step: int, at: float | None = None) -> None:
        if self.phase is None:
            raise RuntimeError("progress outside a phase")
        self._write("progress", at, phase=self.phase[0], epoch=self.phase[1], step=int(step))

    def phase_end(self, iterations: int, batch_size: int | None = None,
                  at: float | None = None) -> float:
        """Close the open phase; returns the time written."""
        if self.phase is None:
            raise RuntimeError("phase_end without an open phase")
        phase, epoch = self.phase
        now = self._write("phase_end", at, phase=phase, epoch=epoch,
                          iterations=int(iterations), batch_size=batch_size)
        self.phase = None
        return now

    def run_end(self, status: str = "completed") -> None:
        if self.phase is not None:
            self.phase = None  # an open phase is left unclosed: the reader drops it
        self._write("run_end", status=status)
        self.run_open = False
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _framework() -> str:
    import keras

    backend = keras.backend.backend()
    module = sys.modules.get(backend)
    version = getattr(module, "__version__", None)
    return f"Keras {keras.__version__} / {backend}" + (f" {version}" if version else "")


def _make_logger_class():
    import keras

    class JobcastLogger(keras.callbacks.Callback):
        """Keras callback writing the jobcast JSON-lines format to ``path``.

        ``every_n_steps``: a ``progress`` event every so many batches (train and test).
        ``network``, ``deployment`` (key, ``"8x A100"`` or dict) and ``batch_size``
        (global) go into ``run_start``; ``test_batch_size`` into test ``phase_end``
        when it differs from ``batch_size``.
        """

        def __init__(self, path, every_n_steps: int = 50, network: str | None = None,
                     deployment: str | dict | None = None, batch_size: int | None = None,
                     test_batch_size: int | None = None, run_id: str | None = None,
                     meta: dict | None = None, clock=time.time):
            super().__init__()
            if every_n_steps < 1:
                raise ValueError("every_n_steps must be >= 1")
            self.writer = JsonlWriter(path, clock=clock)
            self.every_n_steps = int(every_n_steps)
            self.network = network
            self.deployment = deployment
            self.batch_size = batch_size
            self.test_batch_size = test_batch_size
            self.run_id = run_id
            self.meta = meta
            self._in_fit = False
            self._epoch: int | None = None
            self._steps = 0
            self._last_batch_end: float | None = None

        # -- helpers ----------------------------------------------------------
        def _start_run(self, kind: str) -> None:
            params = self.params or {}
            self.writer.run_start(
                network=self.network, deployment=self.deployment, batch_size=self.batch_size,
                framework=_framework(), epochs=params.get("epochs") if kind == "fit" else None,
                steps_per_epoch=params.get("steps") if kind == "fit" else None, kind=kind,
                run_id=self.run_id, meta=self.meta,
            )

        def _step(self, batch: int) -> None:
            self._last_batch_end = float(self.writer.clock())
            done = int(batch) + 1
            if done // self.every_n_steps > self._steps // self.every_n_steps:
                self.writer.progress(done, at=self._last_batch_end)
            self._steps = done

        def _end_train_phase(self) -> float | None:
            """Close the train phase at its last batch end; returns that time."""
            if self.writer.phase is not None and self.writer.phase[0] == "train":
                return self.writer.phase_end(self._steps, at=self._last_batch_end)
            return None

        # -- fit --------------------------------------------------------------
        def on_train_begin(self, logs=None):
            self._in_fit = True
            self._start_run("fit")

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = int(epoch) + 1
            self._steps = 0
            self._last_batch_end = None
            self.writer.phase_start("train", self._epoch)

        def on_train_batch_end(self, batch, logs=None):
            self._step(batch)

        def on_epoch_end(self, epoch, logs=None):
            self._end_train_phase()

        def on_train_end(self, logs=None):
            self._end_train_phase()
            self.writer.run_end("completed")
            self._in_fit = False
            self._epoch = None

        # -- validation and evaluate -------------------------------------------
        def on_test_begin(self, logs=None):
            start = None
            if self._in_fit:
                start = self._end_train_phase()
                epoch = self._epoch
            else:
                self._start_run("evaluate")
                epoch = None
            self._steps = 0
            self._last_batch_end = None
            self.writer.phase_start("test", epoch, at=start)

        def on_test_batch_end(self, batch, logs=None):
            self._step(batch)

        def on_test_end(self, logs=None):
            batch = self.test_batch_size
            if batch is not None and batch == self.batch_size:
                batch = None
            self.writer.phase_end(self._steps, batch_size=batch)
            if not self._in_fit:
                self.writer.run_end("completed")

    return JobcastLogger


_LAZY: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name == "JobcastLogger":
        if name not in _LAZY:
            _LAZY[name] = _make_logger_class()
        return _LAZY[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
