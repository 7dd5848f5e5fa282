"""A tiny real PyTorch training job on this CPU, with jobcast's JSON-lines log and a trace.

``python tests/torch_job.py --out DIR --jobs '[{"name": "a"}, {"name": "b", "starve_ms":
2}]'`` trains a small CNN per job on random 3x32x32 images through a real
``torch.utils.data.DataLoader`` (one process, jobs one after the other, :func:`run_jobs`);
``starve_ms`` makes the dataset sleep that long per sample the loader fetches (a starved
input pipeline: slow storage or decoding). Each job writes ``DIR/NAME.jsonl``
(``JsonlWriter``: run, per-epoch train phases with progress) and ``DIR/NAME.trace.jsonl``, a
DCGM-like trace sampled every ``interval`` s by a thread in the same process:

* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``: the share of the interval the process spent inside
  the training step (forward, backward, optimizer) - on a GPU the engine is active while
  kernels run; here the step is the stand-in for that, measured in the real process;
* ``DCGM_FI_DEV_GPU_UTIL``: the process's CPU utilisation in per cent of the threads
  PyTorch uses (``os.times`` over the interval), the other stand-in;
* ``modelName`` ``cpu``. These are CPU measurements written under DCGM's field names so
  that ``jobcast check`` reads them the way it reads an exporter's; they are not GPU data.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class BusySampler:
    """Samples step time share and process CPU use every ``interval`` s into JSON lines."""

    def __init__(self, path: Path, interval: float, threads: int):
        self.path, self.interval, self.threads = path, interval, max(1, threads)
        self.in_step = 0.0
        self._step_began: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def step_begin(self) -> None:
        with self._lock:
            self._step_began = time.perf_counter()

    def step_end(self) -> None:
        with self._lock:
            if self._step_began is not None:
                self.in_step += time.perf_counter() - self._step_began
                self._step_began = None

    def _busy_so_far(self) -> float:
        with self._lock:
            open_part = (time.perf_counter() - self._step_began) if self._step_began else 0.0
            return self.in_step + open_part

    def _run(self) -> None:
        with open(self.path, "w", encoding="utf-8") as out:
            wall, busy, cpu = time.perf_counter(), self._busy_so_far(), _cpu()
            while not self._stop.wait(self.interval):
                wall2, busy2, cpu2 = time.perf_counter(), self._busy_so_far(), _cpu()
                span = max(wall2 - wall, 1e-6)
                row = {"time": time.time(), "gpu": "0", "modelName": "cpu",
                       "hostname": os.uname().nodename,
                       "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(min(1.0, (busy2 - busy) / span), 4),
                       "DCGM_FI_DEV_GPU_UTIL": round(min(100.0, 100 * (cpu2 - cpu) / span
                                                         / self.threads), 1)}
                out.write(json.dumps(row) + "\n")
                out.flush()
                wall, busy, cpu = wall2, busy2, cpu2

    def __enter__(self) -> BusySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def train(out: Path, name: str, *, epochs: int, steps: int, batch: int, starve_ms: float,
          interval: float, seed: int) -> dict:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    from jobcast.instrument.jsonl import JsonlWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)

    class Images(Dataset):
        def __init__(self, n: int):
            gen = torch.Generator().manual_seed(seed)
            self.x = torch.randn(n, 3, 32, 32, generator=gen)
            self.y = torch.randint(0, 10, (n,), generator=gen)

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i):
            if starve_ms:
                time.sleep(starve_ms / 1000.0)
            return self.x[i], self.y[i]

    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Images(steps * batch), batch_size=batch, shuffle=True, num_workers=0)
    x0, y0 = next(iter(DataLoader(Images(batch), batch_size=batch)))
    loss_fn(model(x0), y0).backward()  # warm-up (lazy initialisation), not timed
    opt.zero_grad()
    log = JsonlWriter(out / f"{name}.jsonl")
    framework = f"PyTorch {torch.__version__}"
    sampler = BusySampler(out / f"{name}.trace.jsonl", interval, torch.get_num_threads())
    with sampler:
        log.run_start(network="tinycnn-torch", deployment="1x cpu", batch_size=batch,
                      framework=framework, epochs=epochs, steps_per_epoch=steps, run_id=name)
        began = time.time()
        for epoch in range(1, epochs + 1):
            log.phase_start("train", epoch)
            for step, (x, y) in enumerate(loader, start=1):
                sampler.step_begin()
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
                sampler.step_end()
                log.progress(step)
            log.phase_end(steps, batch_size=batch)
        log.run_end()
        took = time.time() - began
        time.sleep(interval * 1.5)  # one more trace sample after the end
    return {"name": name, "seconds": took, "starve_ms": starve_ms, "framework": framework}


def run_jobs(out: Path, jobs: list[dict], *, timeout: float = 600.0) -> list[dict]:
    """Run each job of ``jobs`` (keyword arguments of :func:`train` plus ``name``) one after
    the other in ONE child process (PyTorch imported once, stays out of the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--jobs",
            json.dumps(jobs)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"torch jobs failed: {done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.strip().splitlines()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", required=True, help="JSON list of {name, epochs, steps, batch, "
                   "starve_ms, interval, seed}")
    a = p.parse_args()
    defaults = {"epochs": 2, "steps": 30, "batch": 32, "starve_ms": 0.0, "interval": 0.05,
                "seed": 0}
    for job in json.loads(a.jobs):
        spec = {**defaults, **job}
        name = spec.pop("name")
        print(json.dumps(train(Path(a.out), name, **spec)), flush=True)


if __name__ == "__main__":
    main()
