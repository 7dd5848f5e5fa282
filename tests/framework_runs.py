"""Real tiny training runs with PyTorch Lightning and the Hugging Face Trainer, on this CPU.

Each run trains a tiny CNN on random tensors and writes what its library writes (Lightning's
console bars + ``CSVLogger`` folder; the Trainer's ``output_dir`` with checkpoints and the
final ``trainer_state.json``). The run also measures itself with a callback of its own
(``time.perf_counter`` at the hooks), so a test can check what jobcast stored against what
the run measured. Shared by tests/ingest/test_parse_frameworks.py and
tests/data/frameworks/make_samples.py. Heavy imports happen inside the functions.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

IMAGE = 32
CLASSES = 10


@dataclass
class Measured:
    """What a run measured: per train epoch (steps, seconds from its start to its last step),
    the first step's seconds, validation passes (batches, seconds), the total train steps and
    seconds, the batch size."""

    batch_size: int
    epochs: list[tuple[int, float]] = field(default_factory=list)
    first_step: float = 0.0
    validations: list[tuple[int, float]] = field(default_factory=list)
    train_steps: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0


def tiny_cnn():
    """A small conv net: 3 -> 16 -> 32 channels, global pool, linear (CPU-cheap)."""
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, CLASSES))


def _tensors(n: int, seed: int):
    import torch

    torch.set_num_threads(1)  # one thread: steady steps on a shared 2-core machine
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, IMAGE, IMAGE, generator=g), torch.randint(0, CLASSES, (n,),
                                                                        generator=g)


def lightning_run(folder: Path, epochs: int, steps: int, batch: int = 16, val_steps: int = 2,
                  bar: str = "tqdm") -> Measured:
    """Fit a tiny LightningModule; stdout (the bars) to ``folder/train.log``, the CSVLogger
    to ``folder/lightning_logs/version_0``; returns what the run measured."""
    import pytorch_lightning as pl
    import torch
    import torch.nn.functional as F
    from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar
    from pytorch_lightning.loggers import CSVLogger

    class Module(pl.LightningModule):
        def __init__(self, batch_size: int, lr: float = 0.05, model: str = "tinycnn"):
            super().__init__()
            self.save_hyperparameters()
            self.net = tiny_cnn()

        def training_step(self, b, i):
            loss = F.cross_entropy(self.net(b[0]), b[1])
            self.log("train_loss", loss)
            return loss

        def validation_step(self, b, i):
            self.log("val_loss", F.cross_entropy(self.net(b[0]), b[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    measured = Measured(batch)

    class Timer(pl.Callback):
        def on_train_epoch_start(self, *_):
            self.start = time.perf_counter()
            self.last = self.start
            self.steps = 0

        def on_train_batch_end(self, *_):
            self.last = time.perf_counter()
            self.steps += 1
            if not measured.epochs and self.steps == 1:
                measured.first_step = self.last - self.start

        def on_validation_start(self, trainer, *_):
            if not trainer.sanity_checking:
                measured.epochs.append((self.steps, self.last - self.start))

        def on_validation_end(self, trainer, *_):
            if not trainer.sanity_checking:
                measured.validations.append((val_steps, time.perf_counter() - self.last))

    torch.manual_seed(0)
    x, y = _tensors(steps * batch, 0)
    vx, vy = _tensors(val_steps * batch, 1)
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(vx, vy), batch_size=batch)
    folder.mkdir(parents=True, exist_ok=True)
    progress = TQDMProgressBar() if bar == "tqdm" else RichProgressBar()
    start = time.perf_counter()
    with (folder / "train.log").open("w") as out, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(out):
        trainer = pl.Trainer(
            max_epochs=epochs, accelerator="cpu", devices=1, logger=CSVLogger(folder, name=""),
            # the timer first: its hooks run just before the bar's (reset, update), so both
            # bracket the same steps
            callbacks=[Timer(), progress], enable_checkpointing=False, log_every_n_steps=4,
            num_sanity_val_steps=0, enable_model_summary=False, default_root_dir=folder)
        trainer.fit(Module(batch), train, val)
    measured.wall_seconds = time.perf_counter() - start
    measured.train_steps = sum(s for s, _ in measured.epochs)
    measured.train_seconds = sum(t for _, t in measured.epochs)
    return measured


def hf_run(folder: Path, max_steps: int, batch: int = 16, evaluate: bool = True,
           save: bool = True) -> Measured:
    """Train a tiny CNN with ``transformers.Trainer`` (one epoch = 10 steps), evaluating and
    checkpointing each epoch; ``trainer.save_state()`` at the end."""
    import torch
    import torch.nn.functional as F
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = tiny_cnn()

        def forward(self, pixel_values=None, labels=None):
            logits = self.net(pixel_values)
            return {"loss": F.cross_entropy(logits, labels), "logits": logits}

    class Data(torch.utils.data.Dataset):
        def __init__(self, n: int, seed: int):
            self.x, self.y = _tensors(n, seed)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"pixel_values": self.x[i], "labels": self.y[i]}

    measured = Measured(batch)

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.begin = self.last = time.perf_counter()
            self.eval_start = None

        def on_step_end(self, args, state, control, **kw):
            self.last = time.perf_counter()
            if state.global_step == 1:
                measured.first_step = self.last - self.begin

        def on_epoch_end(self, args, state, control, **kw):
            self.last = time.perf_counter()

        def on_prediction_step(self, args, state, control, **kw):
            if self.eval_start is None:
                self.eval_start = self.last

        def on_evaluate(self, args, state, control, **kw):
            now = time.perf_counter()
            measured.validations.append((2, now - (self.eval_start or now)))
            self.eval_start, self.last = None, now

        def on_train_end(self, args, state, control, **kw):
            measured.wall_seconds = time.perf_counter() - self.begin
            measured.train_steps = state.global_step

    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(folder), per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
        max_steps=max_steps, logging_steps=5, eval_strategy="epoch" if evaluate else "no",
        save_strategy="epoch" if save else "no", report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=Net(), args=args, train_dataset=Data(10 * batch, 0),
                      eval_dataset=Data(2 * batch, 1), callbacks=[Timer()])
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        trainer.train()
    trainer.save_state()
    measured.train_seconds = measured.wall_seconds - sum(s for _, s in measured.validations)
    return measured
