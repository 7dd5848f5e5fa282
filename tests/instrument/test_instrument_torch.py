"""jobcast.instrument.pytorch: the Lightning callback, the Hugging Face TrainerCallback and the
plain-loop helper, in real tiny runs on this CPU, each writing JSON-lines and Prometheus
metrics through the one phase state machine.

* The JSON-lines file reads back (ingest.parsers.jsonl) into the run's epochs and validation
  passes: steps exactly as the library ran them, train seconds within 1 % of the run's own
  measurement (its hooks' clock) and of the file the library wrote itself (Lightning's bars,
  the Trainer's ``trainer_state.json``).
* The Prometheus exporter fed by the same callback ends with the same totals per phase kind.
* The plain-loop helper, driven by a settable clock, writes exactly the phases it was told,
  and an exception inside it ends the run ``failed``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clock import T0, Clock
from framework_runs import Measured, tiny_cnn

from ingest.events import ParseContext
from ingest.parsers import jsonl as jsonl_parser
from jobcast.instrument.jsonl import JsonlWriter
from jobcast.instrument.prometheus import PromExporter
from jobcast.instrument.pytorch import (
    PhaseRecorder,
    TrainingLog,
    lightning_callback,
    trainer_callback,
)

CTX = ParseContext(source="test")


def _read(path: Path):
    [run] = jsonl_parser.parse(path.read_text().splitlines(), CTX)
    return run


def _exported(exporter: PromExporter) -> dict[str, tuple[float, float]]:
    """(iterations, seconds) per phase kind from the exporter's metrics."""
    out: dict[str, list[float]] = {}
    for family in exporter.registry.collect():
        for sample in family.samples:
            phase = sample.labels.get("phase")
            if phase and sample.name.endswith(("iterations_total", "phase_seconds_total")):
                slot = 0 if sample.name.endswith("iterations_total") else 1
                out.setdefault(phase, [0.0, 0.0])[slot] = sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def _totals(run, phase):
    segs = [s for s in run.segments if s.phase == phase]
    return sum(s.iterations for s in segs), sum(s.seconds for s in segs)


@pytest.fixture(scope="module")
def lightning_logged(tmp_path_factory):
    import pytorch_lightning as pl
    import torch
    import torch.nn.functional as F
    from framework_runs import _tensors

    folder = tmp_path_factory.mktemp("lightning_cb")
    writer = JsonlWriter(folder / "run.jsonl")
    exporter = PromExporter("lightning-job", network="tinycnn", deployment="1x cpu",
                            batch_size=16)
    measured = Measured(16)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = tiny_cnn()

        def training_step(self, b, i):
            return F.cross_entropy(self.net(b[0]), b[1])

        def validation_step(self, b, i):
            self.log("val_loss", F.cross_entropy(self.net(b[0]), b[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    class Timer(pl.Callback):
        def on_train_epoch_start(self, *_):
            self.start = self.last = writer.clock()
            self.steps = 0

        def on_train_batch_end(self, *_):
            self.last, self.steps = writer.clock(), self.steps + 1

        def on_validation_start(self, trainer, *_):
            if not trainer.sanity_checking:
                measured.epochs.append((self.steps, self.last - self.start))

    x, y = _tensors(6 * 16, 0)
    vx, vy = _tensors(2 * 16, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(vx, vy), batch_size=16)
    callback = lightning_callback([writer, exporter], network="tinycnn", deployment="1x cpu")
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=1,
                         callbacks=[callback, Timer()])
    trainer.fit(Module(), loader, val)
    return _read(folder / "run.jsonl"), exporter, measured


def test_lightning_callback_writes_the_epochs_it_saw(lightning_logged):
    run, _, measured = lightning_logged
    train = [s for s in run.segments if s.phase == "train"]
    assert [s.iterations for s in train] == [n for n, _ in measured.epochs] == [6, 6]
    for seg, (_, seconds) in zip(train, measured.epochs, strict=True):
        assert seg.seconds == pytest.approx(seconds, rel=0.01, abs=0.02)  # or a time slice
    tests = [s for s in run.segments if s.phase == "test"]
    assert [s.iterations for s in tests] == [2, 2]  # the sanity check is not a phase
    assert run.batch_size == 16 and run.stack.startswith("PyTorch")
    assert "Lightning" in run.stack


def test_prometheus_totals_equal_the_jsonl(lightning_logged):
    run, exporter, _ = lightning_logged
    metrics = _exported(exporter)
    for phase in ("train", "test"):
        iterations, seconds = _totals(run, phase)
        assert metrics[phase][0] == iterations
        assert metrics[phase][1] == pytest.approx(seconds, abs=1e-6)


def test_trainer_callback_agrees_with_trainer_state(tmp_path):
    import json

    import torch
    import torch.nn.functional as F
    from framework_runs import _tensors
    from transformers import Trainer, TrainingArguments

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = tiny_cnn()

        def forward(self, pixel_values=None, labels=None):
            out = self.net(pixel_values)
            return {"loss": F.cross_entropy(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __init__(self, n, seed):
            self.x, self.y = _tensors(n, seed)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"pixel_values": self.x[i], "labels": self.y[i]}

    writer = JsonlWriter(tmp_path / "hf.jsonl")
    exporter = PromExporter("hf-job", network="tinycnn", deployment="1x cpu")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16,
                             per_device_eval_batch_size=16, max_steps=12, eval_strategy="epoch",
                             save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             logging_steps=4)
    trainer = Trainer(model=Net(), args=args, train_dataset=Data(6 * 16, 0),
                      eval_dataset=Data(2 * 16, 1),
                      callbacks=[trainer_callback([writer, exporter], network="tinycnn",
                                                  deployment="1x cpu")])
    trainer.train()
    run = _read(tmp_path / "hf.jsonl")
    history = trainer.state.log_history
    runtime = next(e["train_runtime"] for e in history if "train_runtime" in e)
    evals = sum(e["eval_runtime"] for e in history if "eval_runtime" in e)
    train_steps, train_seconds = _totals(run, "train")
    assert train_steps == trainer.state.global_step == 12
    assert [s.iterations for s in run.segments if s.phase == "test"] == [2, 2]
    # the callback's train phases span the steps; train_runtime also holds set-up and the
    # evaluations' own set-up, a few ms each
    assert train_seconds == pytest.approx(runtime - evals, rel=0.05, abs=0.05)
    assert run.batch_size == 16 and "Transformers" in run.stack
    assert _exported(exporter)["train"][0] == 12
    json.dumps(run.meta)


def test_plain_loop_helper_with_a_clock(tmp_path):
    clock = Clock()
    clock.now = T0
    writer = JsonlWriter(tmp_path / "loop.jsonl", clock=clock)
    exporter = PromExporter("loop", clock=clock, batch_size=32)
    with TrainingLog([writer, exporter], network="resnet18", deployment="1x cpu",
                     batch_size=32, epochs=2, steps_per_epoch=3, every_n_steps=2) as log:
        for epoch in (1, 2):
            with log.epoch(epoch):
                for _ in range(3):
                    clock.now += 0.5
                    log.step()
            with log.evaluation():
                for _ in range(2):
                    clock.now += 0.25
                    log.step()
            clock.now += 1.0  # between epochs: not a phase
    run = _read(tmp_path / "loop.jsonl")
    assert [(s.phase, s.iterations, s.seconds) for s in run.segments] == [
        ("train", 3, 1.5), ("test", 2, 0.5), ("train", 3, 1.5), ("test", 2, 0.5)]
    assert run.segments[0].points == ((2.0, 1.0), (3.0, 1.5))
    assert _exported(exporter) == {"train": (6.0, 3.0), "test": (4.0, 1.0)}


def test_an_exception_ends_the_run_failed(tmp_path):
    writer = JsonlWriter(tmp_path / "crash.jsonl")
    with pytest.raises(RuntimeError), TrainingLog([writer], batch_size=8) as log, log.epoch(1):
        log.step()
        raise RuntimeError("out of memory")
    lines = (tmp_path / "crash.jsonl").read_text().splitlines()
    assert '"status":"failed"' in lines[-1]


def test_recorder_needs_a_sink():
    with pytest.raises(ValueError, match="sink"):
        PhaseRecorder([])
