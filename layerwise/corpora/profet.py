"""Whole-network TensorFlow targets from PROFET (``../shared/data/profet``): four cloud GPUs.

PROFET (ddps-lab/profet, MIT) measured 15 Keras CNNs trained with SGD on synthetic data in
TensorFlow 2.5, fp32, at five input sides and five batch sizes, on one GPU of a p3.2xlarge
(Tesla V100-SXM2-16GB), g4dn.xlarge (Tesla T4), g3s.xlarge (Tesla M60) and p2.xlarge (Tesla
K80). Rules of :func:`profet_targets`:

* One target per (GPU, network, input side, batch): the median ``batch_latency`` over the
  repeats (``exp_name``), in ms; rows with a non-finite or non-positive latency are dropped.
* Networks: those the zoo builds at that side (:data:`ZOO_NAMES`: PROFET's Keras definitions
  are the canonical architectures; ResNet18/34 are the zoo's torchvision specs, built at 224
  only; VGG13, LeNet5, MNIST_CNN, CIFAR10_CNN and ResNetSmall have no zoo network and are
  left out). A (network, side) the zoo cannot build (InceptionV3 below 75 px) is left out
  and named by :func:`decomposable_sizes`.
* A PROFET network whose Keras definition is not the zoo's network of that name is left out
  (:data:`NOT_THE_ZOOS`, with the reason): pricing it as the zoo's network prices other work.
  PROFET's AlexNet (``model_info.py.txt``) is its own design: 11x11 convolution at stride 1
  with 96 channels on the full input, then 256-512-1024-1024 channels, batch norm after every
  layer, dense 3072-4096; the zoo's ``alexnet`` (tf_cnn_benchmarks') strides 4 and runs
  64-192-384-384-256 without batch norm. PROFET's AlexNet steps measure 10-15x the zoo
  network's priced work on all four GPUs (issue 36: they drove the TensorFlow composition's
  per-step constant to 31 ms, pricing small inputs on the V100 5x too slow).
* Classes as run (:data:`CLASSES_BY_SIDE`, PROFET's ``data_generation/workload/
  dataset_info.py``): its synthetic data sets train 10 classes at 16 and 32 px, 100 at 64
  and 128, 1000 at 224 and 256; the ``classes`` column carries them, so the last dense layer
  is priced at that width (:func:`layerwise.corpora.network_fit.as_measured`), not the zoo's
  1000 (issue 36, 2026-12-03: VGG's 4096x1000 classifier priced on 32 px steps that train 10).
* The columns are :data:`layerwise.corpora.torchvision_bench.TARGET_COLUMNS` plus
  ``image_size`` and ``classes``; ``suite`` is ``profet``, ``framework`` ``tensorflow``,
  ``fw_version`` ``2.5``, ``optimizer`` ``sgd``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from layerwise.corpora.torchvision_bench import TARGET_COLUMNS, _finish, _gpu

TARGET_FILE = "profet_target_latency_4gpus.csv.gz"
INSTANCES = {"p3.2xlarge": "Tesla V100-SXM2-16GB", "g4dn.xlarge": "Tesla T4",
             "g3s.xlarge": "Tesla M60", "p2.xlarge": "Tesla K80"}
ZOO_NAMES = {"VGG11": "vgg11", "VGG16": "vgg16", "VGG19": "vgg19",
             "ResNet18": "resnet18", "ResNet34": "resnet34", "ResNet50": "resnet50",
             "InceptionV3": "inceptionv3", "InceptionResNetV2": "inceptionresnetv2",
             "MobileNetV2": "mobilenetv2"}
AT_224_ONLY = ("resnet18", "resnet34")
CLASSES_BY_SIDE = {16: 10, 32: 10, 64: 100, 128: 100, 224: 1000, 256: 1000}
NOT_THE_ZOOS = {"AlexNet": "PROFET's Keras AlexNet (stride-1 11x11 conv, 96-256-512-1024-1024 "
                           "channels with batch norm) is not the zoo's alexnet"}


def profet_targets(root: Path, names: Mapping[str, str] = ZOO_NAMES) -> pd.DataFrame:
    """PROFET's whole training steps as targets (module rules), before the zoo check;
    ``names``: PROFET model -> zoo network kept (:data:`ZOO_NAMES`; benchmarks that show
    the figures before a network was left out pass a wider mapping)."""
    table = pd.read_csv(Path(root) / TARGET_FILE)
    table = table[table["model"].isin(list(names)) & table["instance_name"].isin(
        list(INSTANCES))]
    table = table[np.isfinite(table["batch_latency"]) & (table["batch_latency"] > 0)]
    table = table.assign(image_size=table["dataset"].str.extract(r"^(\d+)")[0].astype(int))
    med = (table.groupby(["instance_name", "model", "image_size", "batchsize"], as_index=False)
           ["batch_latency"].median())
    out = pd.DataFrame({
        "suite": "profet", "gpu": med["instance_name"].map(INSTANCES).map(_gpu),
        "network": med["model"].map(dict(names)), "precision": "fp32",
        "batch_per_gpu": med["batchsize"], "step_ms": 1000.0 * med["batch_latency"],
        "framework": "tensorflow", "fw_version": "2.5", "optimizer": "sgd"})
    sizes = med["image_size"].astype(int).to_numpy()
    out = out[~(out["network"].isin(AT_224_ONLY).to_numpy() & (sizes != 224))]
    keep = out.index
    out = _finish(out.reset_index(drop=True))
    out["image_size"] = sizes[keep]
    out["classes"] = out["image_size"].map(CLASSES_BY_SIDE)
    return out[out["classes"].notna()].astype({"classes": int}).reset_index(drop=True)


def decomposable_sizes(targets: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Targets whose (network, image_size) the zoo builds, and ``network@side`` left out."""
    from layerwise.network import NetworkSpecError, decompose

    bad = set()
    for name, side in targets[["network", "image_size"]].drop_duplicates().itertuples(
            index=False):
        try:
            decompose(name, batch_size=1, image_size=int(side), framework="tensorflow")
        except NetworkSpecError:
            bad.add((name, int(side)))
    keep = [(n, int(s)) not in bad for n, s in zip(targets["network"], targets["image_size"],
                                                     strict=True)]
    return (targets[keep].reset_index(drop=True),
            sorted(f"{n}@{s}" for n, s in bad))


__all__ = ["CLASSES_BY_SIDE", "NOT_THE_ZOOS", "TARGET_COLUMNS", "decomposable_sizes",
           "profet_targets"]
