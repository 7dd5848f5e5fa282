"""Zoo specs of Caffe networks, decomposed by hand from their prototxt (no TensorFlow).

``python -m layerwise.zoo.caffe [--out DIR]`` writes ``caffenet128.json``: CaffeNet-128 of
ducha-aiki/caffenet-benchmark (``prototxt/batch_size/caffenet128_lsuv_bs*.prototxt``, as echoed
in its logs): CaffeNet on 128-pixel crops, fc6/fc7 of 2048, no LRN, ReLU. Rules of the mapping
from a Caffe layer to the zoo's Keras-class occurrences (``layerwise.zoo`` format 1):

* ``Convolution`` + its in-place ``ReLU`` is one ``Conv2D`` with ``activation="relu"`` (the
  tf_cnn_benchmarks convention of the other zoo networks);
* a convolution with ``group: g`` is g ``Conv2D`` occurrences of C_in/g -> C_out/g channels
  (``<name>_g<i>``): Caffe's cuDNN layer runs one convolution per group;
* Caffe pads explicitly: ``pad = (k - 1) / 2`` is ``same``, ``pad: 0`` ``valid``; Caffe pools
  round the output side up, so a pool whose ceil side exceeds Keras' ``valid`` side is ``same``;
* ``InnerProduct`` (+ ``ReLU``) is ``Dense``, ``Dropout`` is ``Dropout``, the flatten before
  fc6 is ``Flatten``; the ``Data`` layer is the input and ``SoftmaxWithLoss`` lives in the loss
  (no occurrence), as in the other zoo networks.

Shapes are checked against Caffe's arithmetic while the layers are built; ``main`` writes the
spec only after the grouped convolutions' parameters sum to Caffe's.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layerwise import network, zoo
from layerwise.kinds.base import NetLayer

SOURCE = ("Caffe prototxt caffenet128_lsuv_bs*.prototxt of ducha-aiki/caffenet-benchmark, "
          "decomposed by layerwise.zoo.caffe (grouped convolutions as one Conv2D per group)")


class _Net:
    """Appends zoo layer occurrences while tracking the current (H, W, C) shape."""

    def __init__(self, side: int, channels: int = 3):
        self.shape: tuple[int, ...] = (side, side, channels)
        self.layers: list[NetLayer] = [NetLayer(
            "data", "InputLayer", [], self.shape,
            {"batch_shape": [None, side, side, channels], "sparse": False, "ragged": False,
             "optional": False})]

    def conv(self, name: str, filters: int, kernel: int, stride: int = 1, pad: int = 0,
             group: int = 1) -> None:
        side, cin = self.shape[0], self.shape[2]
        out = (side + 2 * pad - kernel) // stride + 1  # Caffe's convolution output side
        padding = "valid" if pad == 0 else "same"
        keras_side = (side - kernel) // stride + 1 if pad == 0 else math.ceil(side / stride)
        if out != keras_side or cin % group or filters % group:
            raise ValueError(f"{name}: Caffe side {out} != Keras {padding} side {keras_side} "
                             f"(or channels not divisible by group {group})")
        first = len(self.layers) == 1
        for g in range(group):
            cfg = {"filters": filters // group, "kernel_size": [kernel, kernel],
                   "strides": [stride, stride], "padding": padding,
                   "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1,
                   "activation": "relu", "use_bias": True}
            k_in = cin // group
            self.layers.append(NetLayer(
                name if group == 1 else f"{name}_g{g}", "Conv2D", [(side, side, k_in)],
                (out, out, filters // group), cfg,
                kernel * kernel * k_in * (filters // group) + filters // group, first))
        self.shape = (out, out, filters)

    def max_pool(self, name: str, kernel: int, stride: int) -> None:
        side, c = self.shape[0], self.shape[2]
        out = math.ceil((side - kernel) / stride) + 1  # Caffe rounds pooled sides up
        valid = (side - kernel) // stride + 1
        padding = "valid" if out == valid else "same"
        if padding == "same" and math.ceil(side / stride) != out:
            raise ValueError(f"{name}: Caffe side {out} has no Keras padding")
        self.layers.append(NetLayer(name, "MaxPooling2D", [self.shape], (out, out, c),
                                    {"pool_size": [kernel, kernel], "padding": padding,
                                     "strides": [stride, stride],
                                     "data_format": "channels_last"}))
        self.shape = (out, out, c)

    def flatten(self, name: str) -> None:
        flat = (math.prod(self.shape),)
        self.layers.append(NetLayer(name, "Flatten", [self.shape], flat,
                                    {"data_format": "channels_last"}))
        self.shape = flat

    def dense(self, name: str, units: int, activation: str = "relu") -> None:
        n_in = self.shape[0]
        self.layers.append(NetLayer(name, "Dense", [self.shape], (units,),
                                    {"units": units, "activation": activation, "use_bias": True,
                                     "quantization_config": None}, n_in * units + units))
        self.shape = (units,)

    def dropout(self, name: str, rate: float = 0.5) -> None:
        self.layers.append(NetLayer(name, "Dropout", [self.shape], self.shape,
                                    {"rate": rate, "noise_shape": None}))


def caffenet128() -> list[NetLayer]:
    """CaffeNet-128's layer occurrences (see the module rules)."""
    net = _Net(128)
    net.conv("conv1", 96, 11, stride=4)
    net.max_pool("pool1", 3, 2)
    net.conv("conv2", 256, 5, pad=2, group=2)
    net.max_pool("pool2", 3, 2)
    net.conv("conv3", 384, 3, pad=1)
    net.conv("conv4", 384, 3, pad=1, group=2)
    net.conv("conv5", 256, 3, pad=1, group=2)
    net.max_pool("pool5", 3, 2)
    net.flatten("flatten")
    net.dense("fc6", 2048)
    net.dropout("drop6")
    net.dense("fc7", 2048)
    net.dropout("drop7")
    net.dense("fc8", 1000, activation="linear")
    return net.layers


# Caffe's parameter count of CaffeNet-128 (weights + biases of its eight learned layers).
CAFFENET128_PARAMS = (11 * 11 * 3 * 96 + 96 + 5 * 5 * 48 * 256 + 256 + 3 * 3 * 256 * 384 + 384
                      + 3 * 3 * 192 * 384 + 384 + 3 * 3 * 192 * 256 + 256
                      + 3 * 3 * 256 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 1000 + 1000)

NETWORKS = {"caffenet128": (caffenet128, 128, CAFFENET128_PARAMS)}


def spec_of(name: str) -> dict[str, Any]:
    """The zoo spec dict of one network of :data:`NETWORKS` (totals at batch 1, forward)."""
    build, side, params = NETWORKS[name]
    layers = build()
    total = sum(layer.params for layer in layers)
    if total != params:
        raise ValueError(f"{name}: {total} parameters, Caffe counts {params}")
    forward = [row for layer in layers for row in network._rows_for(layer, 1, "none", False)]
    totals = {"layers": dict(sorted(Counter(layer.cls for layer in layers).items())),
              "params": total, "trainable_params": total,
              "macs": float(sum(row["macs"] for row in forward)),
              "flops": float(sum(row["flops"] for row in forward)), "rows": len(forward)}
    return {"format": zoo.FORMAT, "name": name, "model_name": name, "source": SOURCE,
            "image_size": side, "input_shape": [side, side, 3], "totals": totals,
            "layers": [zoo.layer_to_json(layer) for layer in layers]}


def main(argv: Sequence[str] | None = None) -> int:
    """Write the specs of :data:`NETWORKS` into ``--out`` (default: the zoo's data folder)."""
    parser = argparse.ArgumentParser(prog="python -m layerwise.zoo.caffe", description=__doc__)
    parser.add_argument("--out", default=str(zoo.DATA_DIR), help="output folder")
    args = parser.parse_args(argv)
    from layerwise.zoo.build import write_spec  # compact JSON, gzip above its threshold

    for name in NETWORKS:
        path = write_spec(spec_of(name), Path(args.out))
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
