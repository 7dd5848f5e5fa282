"""Capture PyTorch profiler (Kineto) traces of ResNet-18 training steps, for layerwise rows.

For each (batch, image side) it runs ``--warmup`` untimed steps, then (after one profiler
warm-up step; a schedule without one records no ops) profiles ``--steps`` steps with
``record_shapes=True`` and exports one Chrome trace (``tests/kineto_steps.py``, the tests'
copy) (``resnet18_b<B>_i<S>.json``, gzipped
with ``--gzip``). ResNet-18 is torchvision's when torchvision imports (on a GPU
machine), else the same network built here in plain torch (torchvision cannot be imported
beside the CPU build of torch this project uses): stem 7x7/2 conv, BN, ReLU, 3x3/2 max pool,
four stages of two BasicBlocks (64, 128, 256, 512 channels, 1x1/2 projection shortcuts),
global average pool, 1000-way linear. SGD with momentum, cross-entropy on random data.

    python benchmarks/kineto_capture.py --out DIR [--device cuda] [--batches 8,16]
        [--images 64,96] [--steps 2] [--warmup 2] [--gzip]

The traces are read by ``python -m layerwise.kineto`` (docs/history-sources.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import lib  # noqa: F401  (sys.path: the repository, tests/)
import torch
from kineto_steps import capture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="2,4")
    parser.add_argument("--images", default="32,64")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave)")
    parser.add_argument("--gzip", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    done = [capture(args.out, args.device, int(b), int(i), args.steps, args.warmup, args.gzip)
            for b in args.batches.split(",") for i in args.images.split(",")]
    if args.device != "cpu":
        done.append({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__})
    print(json.dumps(done, indent=1))


if __name__ == "__main__":
    main()
