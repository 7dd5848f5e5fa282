"""PyTorch instrumentation beside the Keras callback: a Lightning callback, a Hugging Face
``TrainerCallback`` and a plain-loop helper, all writing through the sinks of
:mod:`jobcast.instrument.jsonl` (JSON-lines) and :mod:`jobcast.instrument.prometheus`
(metrics) and so through their :class:`~jobcast.instrument.base.PhaseTracker`.

* :class:`PhaseRecorder` maps training-loop moments to sink events for one or more sinks
  (:class:`~jobcast.instrument.jsonl.JsonlWriter`, :class:`~jobcast.instrument.prometheus.
  PromExporter`): ``fit_start`` -> ``run_start`` (the JSON-lines writer also gets network,
  deployment, global batch and framework); ``train_epoch_start`` -> a ``train`` phase (epochs
  1-based); ``train_step`` -> ``progress`` every ``every_n_steps`` batches; ``eval_start``
  closes the open train phase at its last batch's end and opens a ``test`` phase there (its
  set-up counts as test time), ``eval_step``/``eval_end`` progress and close it;
  ``train_epoch_end`` closes a still open train phase at its last batch's end; a train step
  after an evaluation in the middle of an epoch opens a new train phase of that epoch where
  the evaluation ended (Lightning's ``val_check_interval``, the Trainer's ``eval_strategy=
  "steps"``); ``fit_end`` ->
  ``run_end``. Each moment's time is read once, from the first sink's ``clock``, and given
  to every sink (``at``), so the sinks agree to the microsecond. The Keras
  callback (:func:`~jobcast.instrument.base.keras_callback_base`) keeps the same rules.
* :class:`TrainingLog` is the plain-loop helper: ``with TrainingLog(sinks, ...) as log:``
  then ``log.epoch(e)`` / ``log.step()`` / ``log.evaluation()`` (context managers and calls;
  an exception inside ``with`` ends the run with status ``failed``).
* ``lightning_callback(sinks, ...)`` builds a ``Callback`` of the installed Lightning
  (``lightning.pytorch`` or ``pytorch_lightning``) on first call; ``trainer_callback(sinks,
  ...)`` a ``transformers.TrainerCallback``. Neither library is imported before.
  Lightning: the run opens at ``on_train_start`` (after the sanity check, which is not
  recorded); validation inside ``fit`` is a ``test`` phase
  of the epoch. Hugging Face: evaluations inside ``train`` are ``test`` phases (started at
  the first prediction step, ended at ``on_evaluate``); ``max_steps`` and
  ``num_train_epochs`` plan the run; the global batch is ``per_device_train_batch_size x
  gradient_accumulation_steps x world_size``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from jobcast.instrument.base import check_batch_size
from jobcast.instrument.jsonl import JsonlWriter
from jobcast.instrument.prometheus import PromExporter


def torch_framework(extra: str = "") -> str:
    """``"PyTorch <version>"`` (plus ``extra``, e.g. the trainer library) of the running torch."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    return ("PyTorch " + (version or "")).strip() + (f" / {extra}" if extra else "")


class PhaseRecorder:
    """Training-loop moments -> sink events for every sink (module rules)."""

    def __init__(self, sinks: Sequence[Any], *, every_n_steps: int = 1, network: str | None = None,
                 deployment: str | dict | None = None, batch_size: int | None = None,
                 framework: str | None = None, run_id: str | None = None):
        if not sinks:
            raise ValueError("give at least one sink (JsonlWriter or PromExporter)")
        if every_n_steps < 1:
            raise ValueError("every_n_steps must be >= 1")
        check_batch_size(batch_size)
        self.sinks = list(sinks)
        self.every_n_steps = int(every_n_steps)
        self.network, self.deployment, self.batch_size = network, deployment, batch_size
        self.framework, self.run_id = framework, run_id
        self.epoch: int | None = None
        self.steps = 0
        self.last_step_end: float | None = None
        self.eval_end_at: float | None = None
        self.train_end_at: float | None = None
        self.running = False

    # -- the sinks -------------------------------------------------------------------------

    def _clock(self) -> float:
        return float(self.sinks[0].clock())

    def _each(self, method: str, *args: Any, **kwargs: Any) -> None:
        for sink in self.sinks:
            getattr(sink, method)(*args, **kwargs)

    @property
    def phase(self) -> str | None:
        """The open phase's kind (the first sink's), or None."""
        return self.sinks[0].active_phase

    # -- moments ---------------------------------------------------------------------------

    def fit_start(self, epochs: int | None = None, steps_per_epoch: int | None = None) -> None:
        """Open the run."""
        for sink in self.sinks:
            if isinstance(sink, JsonlWriter):
                sink.run_start(network=self.network, deployment=self.deployment,
                               batch_size=self.batch_size, framework=self.framework,
                               epochs=epochs, steps_per_epoch=steps_per_epoch, kind="fit",
                               run_id=self.run_id)
            elif isinstance(sink, PromExporter):
                if sink.framework is None:
                    sink.framework = self.framework
                sink.run_start(epochs=epochs, steps_per_epoch=steps_per_epoch)
            else:
                sink.run_start()
        self.running = True

    def train_epoch_start(self, epoch: int) -> None:
        """Open the ``train`` phase of ``epoch`` (1-based)."""
        self.close_train()
        self.eval_end_at = None
        self.epoch = int(epoch)
        self.steps = 0
        self.last_step_end = None
        self._each("phase_start", "train", self.epoch, at=self._clock())

    def train_step(self) -> None:
        """One more batch of the open train phase is done; after an evaluation in the middle
        of an epoch, a new train phase of that epoch starts where the evaluation ended."""
        if self.phase is None and self.running and self.epoch is not None:
            self.steps, self.last_step_end = 0, None
            self._each("phase_start", "train", self.epoch, at=self.eval_end_at or self._clock())
        self._step()

    def _step(self) -> None:
        if self.phase is None:
            return
        self.last_step_end = self._clock()
        done, before = self.steps + 1, self.steps
        if done // self.every_n_steps > before // self.every_n_steps:
            self._each("progress", done, at=self.last_step_end)
        self.steps = done

    def close_train(self) -> float | None:
        """Close an open train phase at its last batch's end; returns that time."""
        if self.phase != "train":
            return None
        at = self.last_step_end if self.last_step_end is not None else self._clock()
        self._each("phase_end", self.steps, at=at)
        self.train_end_at = at
        return at

    def eval_start(self) -> None:
        """Open a ``test`` phase (of the current epoch) where the train phase ended."""
        if self.phase == "test":
            return
        at = self.close_train() or self.train_end_at or self._clock()
        self.steps, self.last_step_end = 0, None
        self._each("phase_start", "test", self.epoch, at=at)

    def eval_step(self) -> None:
        """One more batch of the open test phase is done."""
        if self.phase == "test":
            self._step()

    def eval_end(self) -> None:
        """Close the open ``test`` phase now."""
        if self.phase == "test":
            self.eval_end_at = self._clock()
            self._each("phase_end", self.steps, at=self.eval_end_at)

    def train_epoch_end(self) -> None:
        """Close a train phase still open at the epoch's end."""
        self.close_train()

    def fit_end(self, status: str = "completed") -> None:
        """Close the run (an open phase: its sinks' rules)."""
        if not self.running:
            return
        self.close_train()
        self._each("run_end", status, at=self._clock())
        self.running = False


class TrainingLog:
    """A plain PyTorch loop's helper over a :class:`PhaseRecorder` (module rules)::

        with TrainingLog([JsonlWriter("run.jsonl")], network="resnet18", batch_size=64,
                         epochs=3, steps_per_epoch=len(loader)) as log:
            for epoch in range(1, 4):
                with log.epoch(epoch):
                    for batch in loader:
                        ...
                        log.step()
                with log.evaluation():
                    for batch in val_loader:
                        ...
                        log.step()
    """

    def __init__(self, sinks: Sequence[Any], *, epochs: int | None = None,
                 steps_per_epoch: int | None = None, **recorder: Any):
        recorder.setdefault("framework", torch_framework())
        self.recorder = PhaseRecorder(sinks, **recorder)
        self.epochs, self.steps_per_epoch = epochs, steps_per_epoch

    def __enter__(self) -> TrainingLog:
        self.recorder.fit_start(self.epochs, self.steps_per_epoch)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.recorder.fit_end("failed" if exc_type is not None else "completed")

    @contextmanager
    def epoch(self, epoch: int) -> Iterator[None]:
        """The train phase of ``epoch`` (1-based) lasts until its last ``step()``."""
        self.recorder.train_epoch_start(epoch)
        yield
        self.recorder.train_epoch_end()

    @contextmanager
    def evaluation(self) -> Iterator[None]:
        """A test phase of the current epoch, from the train phase's end to the block's end."""
        self.recorder.eval_start()
        yield
        self.recorder.eval_end()

    def step(self) -> None:
        """One batch of the open phase (train or test) is done."""
        if self.recorder.phase == "test":
            self.recorder.eval_step()
        else:
            self.recorder.train_step()


# -- Lightning -----------------------------------------------------------------------------


def _lightning() -> Any:
    try:  # the unified package, by name: it need not be installed where types are checked
        return importlib.import_module("lightning.pytorch")
    except ImportError:
        import pytorch_lightning as pl
        return pl


def lightning_callback(sinks: Sequence[Any], *, every_n_steps: int = 1, network: str | None = None,
                       deployment: str | dict | None = None, batch_size: int | None = None,
                       run_id: str | None = None) -> Any:
    """A Lightning ``Callback`` feeding ``sinks`` (module rules). ``batch_size``: the global
    batch (default: the datamodule/loader batch x ``trainer.world_size``)."""
    pl = _lightning()
    callback_base: Any = pl.Callback  # Lightning is optional: found at run time

    class JobcastLightningCallback(callback_base):
        def __init__(self) -> None:
            super().__init__()
            self.recorder = PhaseRecorder(sinks, every_n_steps=every_n_steps, network=network,
                                          deployment=deployment, batch_size=batch_size,
                                          run_id=run_id,
                                          framework=torch_framework(f"Lightning {pl.__version__}"))

        def on_train_start(self, trainer, pl_module) -> None:
            # after the sanity check, with the train loader set up (its batch size known)
            if self.recorder.batch_size is None:
                loader = getattr(trainer, "train_dataloader", None)
                per = getattr(loader, "batch_size", None)
                if isinstance(per, int) and per > 0:
                    self.recorder.batch_size = per * max(1, int(trainer.world_size))
            steps = trainer.num_training_batches
            steps = int(steps) if isinstance(steps, int | float) and steps != float("inf") else None
            self.recorder.fit_start(trainer.max_epochs if trainer.max_epochs not in (None, -1)
                                    else None, steps)

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            self.recorder.train_epoch_start(trainer.current_epoch + 1)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self.recorder.train_step()

        def on_validation_start(self, trainer, pl_module) -> None:
            if not trainer.sanity_checking and self.recorder.running:
                self.recorder.eval_start()

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx,
                                    dataloader_idx=0) -> None:
            if not trainer.sanity_checking:
                self.recorder.eval_step()

        def on_validation_end(self, trainer, pl_module) -> None:
            if not trainer.sanity_checking:
                self.recorder.eval_end()

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            self.recorder.train_epoch_end()

        def on_fit_end(self, trainer, pl_module) -> None:
            self.recorder.fit_end("completed")

        def on_exception(self, trainer, pl_module, exception) -> None:
            self.recorder.fit_end("failed")

    return JobcastLightningCallback()


# -- Hugging Face --------------------------------------------------------------------------


def trainer_callback(sinks: Sequence[Any], *, every_n_steps: int = 1, network: str | None = None,
                     deployment: str | dict | None = None, batch_size: int | None = None,
                     run_id: str | None = None) -> Any:
    """A ``transformers.TrainerCallback`` feeding ``sinks`` (module rules)."""
    import transformers

    class JobcastTrainerCallback(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.recorder = PhaseRecorder(
                sinks, every_n_steps=every_n_steps, network=network, deployment=deployment,
                batch_size=batch_size, run_id=run_id,
                framework=torch_framework(f"Transformers {transformers.__version__}"))
            self.epoch = 0

        def on_train_begin(self, args, state, control, **kwargs):
            if self.recorder.batch_size is None:
                self.recorder.batch_size = int(args.per_device_train_batch_size
                                               * args.gradient_accumulation_steps
                                               * max(1, args.world_size))
            epochs = int(args.num_train_epochs) if args.max_steps <= 0 else None
            per_epoch = (state.max_steps // max(1, int(args.num_train_epochs))
                         if args.max_steps <= 0 else None)
            self.recorder.fit_start(epochs, per_epoch)

        def on_epoch_begin(self, args, state, control, **kwargs):
            self.epoch += 1
            self.recorder.train_epoch_start(self.epoch)

        def on_step_end(self, args, state, control, **kwargs):
            self.recorder.train_step()

        def on_epoch_end(self, args, state, control, **kwargs):
            self.recorder.train_epoch_end()

        def on_prediction_step(self, args, state, control, **kwargs):
            if self.recorder.running:
                self.recorder.eval_start()
                self.recorder.eval_step()

        def on_evaluate(self, args, state, control, **kwargs):
            self.recorder.eval_end()

        def on_train_end(self, args, state, control, **kwargs):
            self.recorder.fit_end("completed")

    return JobcastTrainerCallback()

