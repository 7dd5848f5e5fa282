"""A real GPU check of `jobcast check`'s cause rule (issue 25): normal and starved loaders.

Runs on a machine with an NVIDIA GPU and PyTorch (no jobcast import): a small CNN trains on
synthetic 3x64x64 images through a DataLoader, normally or with the dataset sleeping
``--starve-ms`` per sample; ``nvidia-smi`` samples the GPU every 200 ms meanwhile (NVML's
utilization.gpu, power.draw, clocks.sm: the counters DCGM's DCGM_FI_DEV_GPU_UTIL,
DCGM_FI_DEV_POWER_USAGE and DCGM_FI_DEV_SM_CLOCK report). Each job writes jobcast JSON-lines
(``OUT/NAME.jsonl``) and a trace in DCGM field names (``OUT/NAME.trace.jsonl``) that
``jobcast check --log ... --trace ...`` reads. Results in docs/cluster-history.md.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

OUT = Path(os.environ.get("OUT", "out"))
OUT.mkdir(parents=True, exist_ok=True)
DEV = torch.device("cuda")
NAME = torch.cuda.get_device_name(0)


class Images(Dataset):
    def __init__(self, n, starve_ms):
        self.x = torch.randn(n, 3, 64, 64)
        self.y = torch.randint(0, 10, (n,))
        self.starve = starve_ms / 1000.0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.starve:
            time.sleep(self.starve)
        return self.x[i], self.y[i]


def event(f, **kw):
    f.write(json.dumps({"v": 1, "time": time.time(), **kw}) + "\n")
    f.flush()


def job(name, starve_ms, steps=60, batch=128, epochs=2):
    model = nn.Sequential(*[m for c in (64, 128, 256) for m in (
        nn.LazyConv2d(c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2))],
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LazyLinear(10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = nn.CrossEntropyLoss()
    loader = DataLoader(Images(steps * batch, starve_ms), batch_size=batch, shuffle=True)
    x0, y0 = next(iter(DataLoader(Images(batch, 0), batch_size=batch)))
    loss(model(x0.to(DEV)), y0.to(DEV)).backward()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,power.draw,"
                            "clocks.sm", "--format=csv,noheader,nounits", "-lms", "200"],
                           stdout=subprocess.PIPE, text=True)
    began = time.time()
    with open(OUT / f"{name}.jsonl", "w") as f:
        event(f, event="run_start", network="cnn3-gpu", deployment=f"1x {NAME}",
              batch_size=batch, framework=f"PyTorch {torch.__version__}", epochs=epochs,
              steps_per_epoch=steps, run_id=name)
        for epoch in range(1, epochs + 1):
            event(f, event="phase_start", phase="train", epoch=epoch)
            for step, (x, y) in enumerate(loader, start=1):
                opt.zero_grad()
                loss(model(x.to(DEV, non_blocking=True)), y.to(DEV)).backward()
                opt.step()
                if step % 10 == 0:
                    torch.cuda.synchronize()
                    event(f, event="progress", phase="train", epoch=epoch, step=step)
            torch.cuda.synchronize()
            event(f, event="phase_end", phase="train", epoch=epoch, iterations=steps,
                  batch_size=batch)
        event(f, event="run_end", status="completed")
    took = time.time() - began
    time.sleep(0.5)
    smi.terminate()
    rows = []
    for line in smi.communicate()[0].splitlines():
        stamp, util, power, clock = [c.strip() for c in line.split(",")]
        t = time.mktime(time.strptime(stamp.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float(
            "0." + stamp.split(".")[1]) if "." in stamp else 0.0
        rows.append({"time": t, "gpu": "0", "modelName": NAME,
                     "DCGM_FI_DEV_GPU_UTIL": float(util), "DCGM_FI_DEV_POWER_USAGE": float(power),
                     "DCGM_FI_DEV_SM_CLOCK": float(clock)})
    (OUT / f"{name}.trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    busy = sum(r["DCGM_FI_DEV_GPU_UTIL"] for r in rows) / max(1, len(rows))
    print(json.dumps({"job": name, "seconds": took, "starve_ms": starve_ms,
                      "samples": len(rows), "gpu_util_mean": busy}), flush=True)


if __name__ == "__main__":
    starve = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    for name, ms in (("gpu-hist0", 0), ("gpu-hist1", 0), ("gpu-normal", 0),
                     ("gpu-starved", starve), ("gpu-hist2", 0)):
        job(name, ms)
