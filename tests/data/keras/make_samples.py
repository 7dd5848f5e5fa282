"""Regenerate the Keras samples in this folder from a real (tiny, CPU) training run.

    .venv/bin/python tests/data/keras/make_samples.py

For verbose=1 and verbose=2 it runs a child process that trains a small CNN on random
16x16x3 images (1280 train / 256 validation samples, batch 32, 3 epochs, then
``model.evaluate``) with :class:`jobcast.instrument.jsonl.JobcastLogger` attached, and keeps
what the child printed (stdout and stderr, as a shell ``> file 2>&1`` would) in
``fit_verbose<N>.txt`` and the logger's output in ``fit_verbose<N>.jsonl``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
TRAIN, VALID, BATCH, EPOCHS = 1280, 256, 32, 3


def child(verbose: int) -> None:
    import keras
    import numpy as np

    from jobcast.instrument.jsonl import JobcastLogger

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.random((TRAIN + VALID, 16, 16, 3), dtype=np.float32)
    y = rng.integers(0, 4, TRAIN + VALID)
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(4, activation="softmax"),
    ])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    path = HERE / f"fit_verbose{verbose}.jsonl"
    path.unlink(missing_ok=True)
    logger = JobcastLogger(path, every_n_steps=10, network="tinycnn", deployment="1x cpu",
                           batch_size=BATCH, meta={"sample": "tests/data/keras"})
    model.fit(x[:TRAIN], y[:TRAIN], batch_size=BATCH, epochs=EPOCHS,
              validation_data=(x[TRAIN:], y[TRAIN:]), verbose=verbose, callbacks=[logger])
    model.evaluate(x[TRAIN:], y[TRAIN:], batch_size=BATCH, verbose=verbose,
                   callbacks=[logger])


def main() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    for verbose in (1, 2):
        with open(HERE / f"fit_verbose{verbose}.txt", "w") as out:
            subprocess.run([sys.executable, __file__, "--child", str(verbose)], check=True,
                           stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(int(sys.argv[2]))
    else:
        main()
