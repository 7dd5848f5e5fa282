"""ResNet-18 training steps profiled by PyTorch's profiler (Kineto): real traces for tests.

Test support, one copy for tests/layerwise/test_kineto.py and ``benchmarks/kineto_capture.py``
(which captures the traces of docs/history-sources.md with it). :func:`capture` runs
``warmup`` untimed steps, then (after one profiler warm-up step; a schedule without one records
no ops) profiles ``steps`` steps with ``record_shapes=True`` and exports one Chrome trace
(``resnet18_b<B>_i<S>.json``, gzipped with ``compress``). ResNet-18 is torchvision's when
torchvision imports (on a GPU machine), else the same network built here in plain torch
(:class:`ResNet18`: torchvision cannot be imported beside the CPU build of torch this project
uses): stem 7x7/2 conv, BN, ReLU, 3x3/2 max pool, four stages of two BasicBlocks (64, 128,
256, 512 channels, 1x1/2 projection shortcuts), global average pool, 1000-way linear. SGD
with momentum, cross-entropy on random data.
"""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 convs with BN, a projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """ResNet-18 in plain torch (module doc)."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        return self.fc(torch.flatten(x, 1))


def resnet18() -> tuple[nn.Module, str]:
    """torchvision's ResNet-18 where it imports, else :class:`ResNet18`."""
    try:
        import torchvision

        return torchvision.models.resnet18(), f"torchvision {torchvision.__version__}"
    except Exception:  # noqa: BLE001 - not importable here: the plain-torch build
        return ResNet18(), "plain torch"


def capture(out: Path, device: str, batch: int, image: int, steps: int, warmup: int,
            compress: bool) -> dict:
    """Profile ``steps`` training steps of one configuration; returns what was written."""
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model, origin = resnet18()
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, image, image, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    name = out / f"resnet18_b{batch}_i{image}.json"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device != "cpu" else [])

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    if device != "cpu":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with profile(activities=activities, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(name))) as prof:
        for _ in range(steps + 1):  # the profiler's own warm-up step, then the active ones
            step()
            if device != "cpu":
                torch.cuda.synchronize()
            prof.step()
    seconds = time.perf_counter() - start
    path = name
    if compress:
        path = name.with_suffix(".json.gz")
        with name.open("rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        name.unlink()
    return {"trace": str(path), "batch": batch, "image": image, "steps": steps,
            "profiled_seconds": seconds, "model": origin, "device": device}
