"""Real experiment-tracker history for the tests of issue 24: a tiny CNN trained a few steps on
this CPU, logged by the real libraries, each step timed by this script itself.

    python history_artifacts.py OUT --runs torch:24,torch:36,torch:120,tbx:24,keras:20,
        wandb:24,wandb:36,wandb:120 [--mlflow URI --mlflow-runs exp-a:24,exp-b:36]
        [--mlflow-running exp-a]

Writes the artifacts under OUT (``tb/<name>/`` event folders, ``wandb/`` run folders; MLflow
runs on the server at URI) and appends one JSON line per run to ``OUT/measured.jsonl``:
``source``, ``name`` (folder or MLflow run id), ``steps``, ``origin_before`` and ``origin``
(when the library's run began, bracketed by this script's clock: before and after the
TensorBoard writer opened, around Keras's ``TensorBoard.set_model`` as ``fit`` starts; W&B's
and MLflow's own run start time, which they store, with the time before ``init``/``start_run``),
``before`` and ``ends`` (the time after each step, before and after the call that logs its
loss: the library's time stamp of the step lies between them) and
``total`` (last end - origin).

Every run is a real training run (PyTorch SGD on random images; Keras ``fit``); nothing is
timed by the library in place of this script. Environment: ``WANDB_MODE=offline``,
``WANDB_SILENT=true``, ``MLFLOW_DISABLE_TELEMETRY=true`` are set here; no network but
127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", MLFLOW_DISABLE_TELEMETRY="true",
                  TF_CPP_MIN_LOG_LEVEL="2", WANDB_DISABLE_GIT="true", WANDB_CONSOLE="off")

BATCH = 16
SIZE = 48  # a step takes ~10-20 ms on one CPU thread
NETWORK = "tinycnn"


def _torch_trainer(seed: int):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    images = torch.randn(BATCH, 3, SIZE, SIZE)
    labels = torch.randint(0, 10, (BATCH,))

    def step() -> float:
        loss = nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss)

    return step


def _record(out: Path, **fields) -> None:
    fields["total"] = fields["ends"][-1] - fields["origin"]
    with (out / "measured.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(fields) + "\n")


def tensorboard_run(out: Path, writer_kind: str, steps: int, index: int) -> None:
    """PyTorch training logged by ``torch.utils.tensorboard`` or tensorboardX; the job facts
    in the folder's ``config.yaml`` (torch) or in ``add_hparams`` (tensorboardX)."""
    if writer_kind == "torch":
        from torch.utils.tensorboard import SummaryWriter
    else:
        from tensorboardX import SummaryWriter
    step = _torch_trainer(index)
    folder = out / "tb" / f"{writer_kind}-{index}"
    folder.mkdir(parents=True)
    if writer_kind == "torch":
        (folder / "config.yaml").write_text(
            f"model:\n  arch: {NETWORK}\ndata:\n  batch_size: {BATCH}\nepochs: 1\n")
    opened = time.time()
    writer = SummaryWriter(log_dir=str(folder))
    origin = time.time()
    ends, before = [], []
    for i in range(steps):
        loss = step()
        before.append(time.time())
        writer.add_scalar("train/loss", loss, i)
        ends.append(time.time())
    if writer_kind != "torch":
        writer.add_hparams({"model": NETWORK, "batch_size": BATCH}, {"hparam/loss": 0.0})
    writer.close()
    _record(out, source=writer_kind, name=folder.name, steps=steps, origin=origin, ends=ends,
            origin_before=opened, before=before)


def keras_run(out: Path, steps_per_epoch: int, epochs: int, name: str = "keras",
              update_freq: int | str = 1) -> None:
    """Keras ``fit`` with the ``TensorBoard`` callback writing every batch (TF2 tensors), or
    only per epoch (``update_freq="epoch"``, Keras's default)."""
    import keras
    import numpy as np

    folder = out / "tb" / name
    (folder / "train").mkdir(parents=True)
    # hparams beside the run, where the callback's log_dir is (the event file is in train/)
    (folder / "hparams.yaml").write_text(f"network: {NETWORK}\nbatch_size: {BATCH}\n")
    rng = np.random.default_rng(0)
    x = rng.random((BATCH * steps_per_epoch, SIZE, SIZE, 3), dtype=np.float32)
    y = rng.integers(0, 10, BATCH * steps_per_epoch)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Conv2D(16, 3),
                              keras.layers.ReLU(), keras.layers.Conv2D(16, 3),
                              keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    times: dict[str, object] = {"ends": [], "before": []}

    class Clock(keras.callbacks.Callback):
        """Before TensorBoard's hooks (``before``) and after them: the callback writes the
        model's summary record in ``set_model`` as ``fit`` starts, the loss after each batch."""

        def __init__(self, before: bool):
            super().__init__()
            self.before = before

        def set_model(self, model):
            super().set_model(model)
            times["origin_before" if self.before else "origin"] = time.time()

        def on_train_batch_end(self, batch, logs=None):
            times["before" if self.before else "ends"].append(time.time())  # type: ignore[union-attr]

    board = keras.callbacks.TensorBoard(str(folder), update_freq=update_freq)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0,
              callbacks=[Clock(True), board, Clock(False)])
    _record(out, source="keras", name=name, steps=steps_per_epoch * epochs,
            origin=times["origin"], ends=times["ends"], origin_before=times["origin_before"],
            before=times["before"])


def wandb_run(out: Path, steps: int, index: int) -> None:
    """PyTorch training logged by ``wandb`` offline (config: model, batch size)."""
    import wandb

    step = _torch_trainer(100 + index)
    opened = time.time()
    run = wandb.init(project="jobcast-history", dir=str(out), config={
        "model": NETWORK, "batch_size": BATCH, "epochs": 1, "optimizer": "sgd"})
    origin = run.start_time
    ends, before = [], []
    for i in range(steps):
        loss = step()
        before.append(time.time())
        run.log({"train/loss": loss}, step=i)
        ends.append(time.time())
    run.finish()
    _record(out, source="wandb", name=run.id, steps=steps, origin=origin, ends=ends,
            origin_before=opened, before=before)


def mlflow_run(out: Path, uri: str, experiment: str, steps: int, index: int, *,
               finish: bool = True) -> None:
    """PyTorch training logged to an MLflow server (params, per-step loss, system metrics);
    ``finish=False`` leaves the run RUNNING (the process exits without ending it)."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)
    mlflow.set_system_metrics_sampling_interval(0.2)
    mlflow.set_system_metrics_samples_before_logging(1)
    step = _torch_trainer(200 + index)
    opened = time.time()
    run = mlflow.start_run(log_system_metrics=finish)
    mlflow.log_params({"model": NETWORK, "batch_size": BATCH, "epochs": 1})
    origin = run.info.start_time / 1000.0
    ends, before = [], []
    for i in range(steps):
        loss = step()
        before.append(time.time())
        mlflow.log_metric("loss", loss, step=i, synchronous=False)
        ends.append(time.time())
    mlflow.flush_async_logging()
    if finish:
        mlflow.end_run()
    _record(out, source="mlflow", name=run.info.run_id, steps=steps, origin=origin, ends=ends,
            experiment=experiment, finished=finish, origin_before=opened, before=before)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", default="",
                        help="source:steps,... (torch, tbx, keras, keras-epoch, wandb)")
    parser.add_argument("--mlflow", help="tracking URI of the server")
    parser.add_argument("--mlflow-runs", default="", help="experiment:steps,...")
    parser.add_argument("--mlflow-running", default="", help="experiment of a run left RUNNING")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for index, item in enumerate(filter(None, args.runs.split(","))):
        source, steps = item.split(":")
        if source in ("torch", "tbx"):
            tensorboard_run(args.out, source, int(steps), index)
        elif source == "keras":
            keras_run(args.out, steps_per_epoch=int(steps) // 2, epochs=2)
        elif source == "keras-epoch":
            keras_run(args.out, int(steps) // 2, 2, name="keras-epoch", update_freq="epoch")
        elif source == "wandb":
            wandb_run(args.out, int(steps), index)
    for index, item in enumerate(filter(None, args.mlflow_runs.split(","))):
        experiment, steps = item.split(":")
        mlflow_run(args.out, args.mlflow, experiment, int(steps), index)
    if args.mlflow_running:
        mlflow_run(args.out, args.mlflow, args.mlflow_running, 6, 99, finish=False)
        os._exit(0)  # leave the run RUNNING, as a killed or still-training job does


if __name__ == "__main__":
    main()
