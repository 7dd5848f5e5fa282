"""Regenerate the Lightning and Hugging Face samples in this folder from real tiny runs.

    .venv/bin/python tests/data/frameworks/make_samples.py

Writes ``lightning_bars/tqdm/`` and ``lightning_bars/rich/`` (the captured console output
``train.log`` and the ``CSVLogger`` folder ``version_0/``) and ``hf_trainer/``
(``trainer_state.json`` and one checkpoint's state; weights, optimizer state and
``training_args.bin`` are not kept). The runs are those of tests/framework_runs.py (tiny CNN,
random data, this CPU).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from framework_runs import hf_run, lightning_run  # noqa: E402


def main() -> None:
    for bar in ("tqdm", "rich"):
        target = HERE / "lightning_bars" / bar
        shutil.rmtree(target, ignore_errors=True)
        lightning_run(target, epochs=2, steps=8, bar=bar)
    with tempfile.TemporaryDirectory() as tmp:
        hf_run(Path(tmp), max_steps=20)
        target = HERE / "hf_trainer"
        shutil.rmtree(target, ignore_errors=True)
        (target / "checkpoint-10").mkdir(parents=True)
        shutil.copy(Path(tmp) / "trainer_state.json", target / "trainer_state.json")
        shutil.copy(Path(tmp) / "checkpoint-10" / "trainer_state.json",
                    target / "checkpoint-10" / "trainer_state.json")


if __name__ == "__main__":
    main()
