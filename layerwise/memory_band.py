"""The memory estimate's own error, and the batches public data shows running.

Rules:

* **Known to run** (:func:`known_batches`): every (network, per-GPU batch, GPU, precision,
  image side, framework) a public whole-network measurement in ``../shared/data`` trained at
  ran on that GPU: PROFET's training steps (Keras, TensorFlow 2.5, SGD, fp32; input sides
  128-256 px; ``profet/``), Lambda's tf_cnn_benchmarks training logs (TensorFlow, per-GPU batch
  in the folder name; ``lambda/``) and ``torchvision_bench``'s PyTorch steps (batch 12 per
  GPU; ``fp16-pure`` as fp16, ``fp64`` left out). Networks the zoo does not ship, GPUs the
  catalog does not hold, and inputs under 64 px are left out. The Quadro P2000 VGG16 runs of
  issue 36 (batches 40 and 50 on 5 GB) are listed as :data:`ISSUE_RUNS`.
* **The band** (:data:`WARN_BAND`): a job whose estimate exceeds the GPU's memory by at most
  this factor is answered with a "may not fit" warning; beyond it, refused. It is the largest
  ratio estimate / GPU memory over every known-to-run batch (:func:`band_rows`, measured by
  ``benchmarks/memory_band.py``, docs/memory.md "The warning band"), rounded up: a batch public
  data shows running is never refused. The CPU-measured peaks
  (``benchmarks/memory_check.py``) put the estimate 4-20 % above a real PyTorch step's peak;
  the published runs show the larger excess against real GPUs (TensorFlow's graph frees and
  reuses activation buffers the per-kind rules count as kept).
"""

from __future__ import annotations

import csv
import gzip
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fleet.lambda_layout import parse_config, parse_network, parse_system

# largest estimate / GPU memory of a batch known to run (benchmarks/memory_band.py: 1.52 on
# PROFET's Keras VGG11 at batch 256, 224 px, on one 12 GiB K80 GPU; 33 of 1,245 known runs
# are above 1.0), rounded up to the next tenth
WARN_BAND = 1.6
MIN_SIDE = 64  # inputs below this are CIFAR/MNIST-sized networks the zoo does not ship
PROFET_GPUS = {"p3.2xlarge": "Tesla V100 SXM2 16GB", "g4dn.xlarge": "Tesla T4",
               "g3s.xlarge": "Tesla M60", "p2.xlarge": "Tesla K80"}
PROFET_NETWORKS = {"VGG11": "vgg11", "VGG13": "vgg13", "VGG16": "vgg16", "VGG19": "vgg19",
                   "ResNet18": "resnet18", "ResNet34": "resnet34", "ResNet50": "resnet50",
                   "InceptionV3": "inception_v3", "InceptionResNetV2": "inception_resnet_v2",
                   "MobileNetV2": "mobilenet_v2"}  # not AlexNet: corpora.profet.NOT_THE_ZOOS
LAMBDA_NETWORKS = {"resnet50": "resnet50", "resnet152": "resnet152", "vgg16": "vgg16",
                   "inception3": "inception3", "inception4": "inception4", "alexnet": "alexnet"}


@dataclass(frozen=True)
class KnownRun:
    """A per-GPU batch a public measurement shows running."""

    source: str
    network: str
    gpu: str
    batch: int
    precision: str
    image_size: int
    framework: str


# issue 36: VGG16 (PyTorch, fp32) trained at batches 40 and 50 on a 5 GB Quadro P2000
ISSUE_RUNS = tuple(KnownRun("issue 36", "vgg16", "Quadro P2000", b, "fp32", 224, "pytorch")
                   for b in (40, 50))


def shared_data() -> Path:
    """``$JOBCAST_SHARED_DATA``, else ``../shared/data`` beside the repository."""
    env = os.environ.get("JOBCAST_SHARED_DATA", "").strip()
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


def _profet(root: Path) -> Iterator[KnownRun]:
    from layerwise.corpora.profet import TARGET_FILE

    path = root / "profet" / TARGET_FILE
    if not path.is_file():
        return
    seen = set()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            side = int(row["dataset"].removesuffix("dataset"))
            network, gpu = PROFET_NETWORKS.get(row["model"]), PROFET_GPUS.get(row["instance_name"])
            if network is None or gpu is None or side < MIN_SIDE:
                continue
            key = (network, gpu, int(row["batchsize"]), side)
            if key not in seen:
                seen.add(key)
                yield KnownRun("profet", network, gpu, key[2], "fp32", side, "tensorflow")


def _lambda(root: Path) -> Iterator[KnownRun]:
    base = root / "lambda"
    if not base.is_dir():
        return
    seen = set()
    for system in sorted(base.glob("*.logs")):
        gpu = _lambda_gpu(system)
        for config_dir in sorted(p for p in system.iterdir() if p.is_dir()):
            config = parse_config(config_dir.name)
            if config is None or config.inference or gpu is None:
                continue
            for net_dir in sorted(p for p in config_dir.iterdir() if p.is_dir()):
                net = parse_network(net_dir.name)
                name = LAMBDA_NETWORKS.get(net.network) if net is not None else None
                if net is None or name is None:
                    continue
                side = 299 if name.startswith("inception") else 224
                key = (name, gpu, net.batch, config.precision)
                if key not in seen:
                    seen.add(key)
                    yield KnownRun("lambda", name, gpu, net.batch, config.precision, side,
                                   "tensorflow")


def _lambda_gpu(system: Path) -> str | None:
    from fleet.lambda_layout import parse_metadata

    meta = system / "metadata"
    if meta.is_file():
        gpu = parse_metadata(meta.read_text(encoding="utf-8", errors="replace")).get("GPU 0")
        if gpu:
            return gpu
    words = parse_system(system.name[: -len(".logs")]).words
    return " ".join(words[1:3]) if len(words) > 2 else None


def _torchvision(root: Path) -> Iterator[KnownRun]:
    path = root / "torchvision_bench" / "steps.csv.gz"
    if not path.is_file():
        return
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            precision = {"fp32": "fp32", "fp16-pure": "fp16"}.get(row["precision"])
            if precision is None:
                continue
            yield KnownRun("torchvision_bench", row["network"], row["gpu"],
                           int(row["batch_per_gpu"]), precision, int(row["image_size"]),
                           "pytorch")


def known_batches(root: Path | None = None) -> list[KnownRun]:
    """Every batch known to run (module rules), issue 36's first."""
    root = root or shared_data()
    return [*ISSUE_RUNS, *_profet(root), *_lambda(root), *_torchvision(root)]


@dataclass(frozen=True)
class BandRow:
    """A known run and its estimate: ``ratio`` = estimate / GPU memory."""

    run: KnownRun
    estimate_gib: float
    memory_gib: float
    ratio: float


def band_rows(runs: list[KnownRun]) -> list[BandRow]:
    """Each run the zoo and the catalog can estimate, with its ratio (others left out)."""
    from fleet.catalog import UnknownGpuError
    from layerwise.memory import GIB, MemoryEstimateError, estimate_memory

    out = []
    for run in runs:
        try:
            est = estimate_memory(run.network, batch_size=run.batch, precision=run.precision,
                                  optimizer="sgd", gpu=run.gpu, framework=run.framework,
                                  image_size=run.image_size)
        except (MemoryEstimateError, UnknownGpuError):
            continue
        memory = est.gpu_memory_bytes or 0
        if memory > 0 and math.isfinite(est.total_bytes):
            out.append(BandRow(run, est.total_bytes / GIB, memory / GIB,
                               est.total_bytes / memory))
    return out


__all__ = ["ISSUE_RUNS", "WARN_BAND", "BandRow", "KnownRun", "band_rows", "known_batches",
           "shared_data"]
