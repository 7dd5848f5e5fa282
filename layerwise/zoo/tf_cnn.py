"""Keras builders for the tf_cnn_benchmarks networks that ``keras.applications`` lacks.

Layer sizes follow ``scripts/tf_cnn_benchmarks/models/`` of github.com/tensorflow/benchmarks
(Apache-2.0); the code is ours. Rules, as in tf_cnn_benchmarks' ``ConvNetBuilder``:

* a convolution is ``Conv2D`` with a fused ReLU and a bias; in networks with batch norm
  (inception4) it is ``Conv2D`` without bias, ``BatchNormalization(scale=False)``, ``ReLU``;
* padding ``same`` unless stated; max/avg pooling ``valid`` with stride 2 unless stated;
* hidden fully connected layers are ``Dense`` + ReLU, each followed by ``Dropout(0.5)``;
* the classifier is a linear ``Dense`` with ``CLASSES`` = 1001 outputs (tf_cnn_benchmarks'
  ImageNet label count: 1000 classes + background), no softmax (it lives in the loss);
* ``reshape`` to a vector is ``Flatten``; ``spatial_mean`` is ``GlobalAveragePooling2D``.

Importing this module imports Keras (and TensorFlow).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from fleet.quiet_tf import quiet_import

keras = quiet_import("keras")

CLASSES = 1001

# Image side of each network (tf_cnn_benchmarks' ``image_size``).
IMAGE_SIZES: dict[str, int] = {
    "alexnet": 224 + 3,  # VALID 11x11/4 convolution: images padded by 3
    "overfeat": 231,
    "googlenet": 224,
    "inception4": 299,
    "vgg11": 224,
}


class _Builder:
    """Adds layers to a Keras functional graph with tf_cnn_benchmarks-style names."""

    def __init__(self, batch_norm: bool = False) -> None:
        self.batch_norm = batch_norm
        self.counts: defaultdict[str, int] = defaultdict(int)

    def _name(self, kind: str) -> str:
        name = f"{kind}{self.counts[kind]}"
        self.counts[kind] += 1
        return name

    def conv(self, x: Any, filters: int, kh: int, kw: int | None = None, stride: int = 1,
             padding: str = "same") -> Any:
        """Convolution + (batch norm) + ReLU."""
        name = self._name("conv")
        kernel = (kh, kh if kw is None else kw)
        if not self.batch_norm:
            return keras.layers.Conv2D(filters, kernel, stride, padding, activation="relu",
                                       name=name)(x)
        x = keras.layers.Conv2D(filters, kernel, stride, padding, use_bias=False, name=name)(x)
        x = keras.layers.BatchNormalization(scale=False, name=f"{name}_bn")(x)
        return keras.layers.ReLU(name=f"{name}_relu")(x)

    def mpool(self, x: Any, size: int, stride: int = 2, padding: str = "valid") -> Any:
        """Max pooling."""
        return keras.layers.MaxPooling2D(size, stride, padding, name=self._name("mpool"))(x)

    def apool(self, x: Any, size: int, stride: int = 2, padding: str = "valid") -> Any:
        """Average pooling."""
        return keras.layers.AveragePooling2D(size, stride, padding, name=self._name("apool"))(x)

    def concat(self, branches: Sequence[Any]) -> Any:
        """Concatenate inception branches along channels."""
        return keras.layers.Concatenate(name=self._name("concat"))(list(branches))

    def flatten(self, x: Any) -> Any:
        """Reshape to a vector (no computation)."""
        return keras.layers.Flatten(name=self._name("reshape"))(x)

    def hidden(self, x: Any, units: int, dropout: float = 0.5) -> Any:
        """Fully connected + ReLU, then dropout."""
        x = keras.layers.Dense(units, activation="relu", name=self._name("affine"))(x)
        return keras.layers.Dropout(dropout, name=self._name("dropout"))(x)

    def logits(self, x: Any, classes: int) -> Any:
        """The linear classifier."""
        return keras.layers.Dense(classes, name=self._name("affine"))(x)


def _input(side: int) -> Any:
    return keras.Input(shape=(side, side, 3), name="images")


def alexnet(image_size: int | None = None, classes: int = CLASSES) -> Any:
    """AlexNet, 'one weird trick' variant: conv 64-192-384-384-256, fc 4096-4096."""
    b, inp = _Builder(), _input(image_size or IMAGE_SIZES["alexnet"])
    x = b.conv(inp, 64, 11, stride=4, padding="valid")
    x = b.mpool(x, 3)
    x = b.conv(x, 192, 5)
    x = b.mpool(x, 3)
    for filters in (384, 384, 256):
        x = b.conv(x, filters, 3)
    x = b.flatten(b.mpool(x, 3))
    x = b.hidden(b.hidden(x, 4096), 4096)
    return keras.Model(inp, b.logits(x, classes), name="alexnet")


def overfeat(image_size: int | None = None, classes: int = CLASSES) -> Any:
    """OverFeat (fast): conv 96-256-512-1024-1024, fc 3072-4096."""
    b, inp = _Builder(), _input(image_size or IMAGE_SIZES["overfeat"])
    x = b.conv(inp, 96, 11, stride=4, padding="valid")
    x = b.mpool(x, 2)
    x = b.conv(x, 256, 5, padding="valid")
    x = b.mpool(x, 2)
    for filters in (512, 1024, 1024):
        x = b.conv(x, filters, 3)
    x = b.flatten(b.mpool(x, 2))
    x = b.hidden(b.hidden(x, 3072), 4096)
    return keras.Model(inp, b.logits(x, classes), name="overfeat")


VGG_BLOCKS: dict[str, tuple[int, ...]] = {
    "vgg11": (1, 1, 2, 2, 2), "vgg16": (2, 2, 3, 3, 3), "vgg19": (2, 2, 4, 4, 4),
}


def vgg(depth: int = 11, image_size: int | None = None, classes: int = CLASSES) -> Any:
    """VGG without batch norm: five blocks of 3x3 convs (64..512) and 2x2 pools, fc 4096x2."""
    b, inp = _Builder(), _input(image_size or 224)
    x = inp
    for filters, repeat in zip((64, 128, 256, 512, 512), VGG_BLOCKS[f"vgg{depth}"], strict=True):
        for _ in range(repeat):
            x = b.conv(x, filters, 3)
        x = b.mpool(x, 2)
    x = b.hidden(b.hidden(b.flatten(x), 4096), 4096)
    return keras.Model(inp, b.logits(x, classes), name=f"vgg{depth}")


# GoogLeNet inception modules: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection).
GOOGLENET_MODULES: tuple[tuple[int, ...], ...] = (
    (64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64),  # 3a, 3b
    (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
    (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128),  # 4a-4e
    (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128),  # 5a, 5b
)


def googlenet(image_size: int | None = None, classes: int = CLASSES) -> Any:
    """GoogLeNet (Inception v1) without auxiliary heads, LRN or dropout, as tf_cnn_benchmarks."""
    b, inp = _Builder(), _input(image_size or IMAGE_SIZES["googlenet"])
    x = b.conv(inp, 64, 7, stride=2)
    x = b.mpool(x, 3, padding="same")
    x = b.conv(b.conv(x, 64, 1), 192, 3)
    x = b.mpool(x, 3, padding="same")
    for i, (k1, r3, k3, r5, k5, proj) in enumerate(GOOGLENET_MODULES):
        if i in (2, 7):  # before 4a and 5a
            x = b.mpool(x, 3, padding="same")
        x = b.concat([b.conv(x, k1, 1), b.conv(b.conv(x, r3, 1), k3, 3),
                      b.conv(b.conv(x, r5, 1), k5, 5),
                      b.conv(b.mpool(x, 3, 1, "same"), proj, 1)])
    x = b.flatten(b.apool(x, x.shape[1], 1))
    return keras.Model(inp, b.logits(x, classes), name="googlenet")


def _v4_stem(b: _Builder, x: Any) -> Any:
    x = b.conv(x, 32, 3, stride=2, padding="valid")
    x = b.conv(x, 32, 3, padding="valid")
    x = b.conv(x, 64, 3)
    x = b.concat([b.mpool(x, 3), b.conv(x, 96, 3, stride=2, padding="valid")])
    x = b.concat([b.conv(b.conv(x, 64, 1), 96, 3, padding="valid"),
                  b.conv(b.conv(b.conv(b.conv(x, 64, 1), 64, 7, 1), 64, 1, 7), 96, 3,
                         padding="valid")])
    return b.concat([b.conv(x, 192, 3, stride=2, padding="valid"), b.mpool(x, 3)])


def _v4_a(b: _Builder, x: Any) -> Any:
    return b.concat([b.conv(b.apool(x, 3, 1, "same"), 96, 1), b.conv(x, 96, 1),
                     b.conv(b.conv(x, 64, 1), 96, 3),
                     b.conv(b.conv(b.conv(x, 64, 1), 96, 3), 96, 3)])


def _v4_reduce_a(b: _Builder, x: Any) -> Any:
    deep = b.conv(b.conv(b.conv(x, 192, 1), 224, 3), 256, 3, stride=2, padding="valid")
    return b.concat([b.mpool(x, 3), b.conv(x, 384, 3, stride=2, padding="valid"), deep])


def _v4_b(b: _Builder, x: Any) -> Any:
    seven = b.conv(b.conv(b.conv(x, 192, 1), 224, 1, 7), 256, 7, 1)
    twice = b.conv(x, 192, 1)
    for filters, kh, kw in ((192, 1, 7), (224, 7, 1), (224, 1, 7), (256, 7, 1)):
        twice = b.conv(twice, filters, kh, kw)
    return b.concat([b.conv(b.apool(x, 3, 1, "same"), 128, 1), b.conv(x, 384, 1), seven, twice])


def _v4_reduce_b(b: _Builder, x: Any) -> Any:
    short = b.conv(b.conv(x, 192, 1), 192, 3, stride=2, padding="valid")
    long = b.conv(b.conv(b.conv(x, 256, 1), 256, 1, 7), 320, 7, 1)
    return b.concat([b.mpool(x, 3), short, b.conv(long, 320, 3, stride=2, padding="valid")])


def _v4_c(b: _Builder, x: Any) -> Any:
    mid = b.conv(x, 384, 1)
    deep = b.conv(b.conv(b.conv(x, 384, 1), 448, 1, 3), 512, 3, 1)
    return b.concat([b.conv(b.apool(x, 3, 1, "same"), 256, 1), b.conv(x, 256, 1),
                     b.conv(mid, 256, 1, 3), b.conv(mid, 256, 3, 1),
                     b.conv(deep, 256, 3, 1), b.conv(deep, 256, 1, 3)])


def inception4(image_size: int | None = None, classes: int = CLASSES) -> Any:
    """Inception v4 (batch norm, no auxiliary head): stem, 4xA, reduce, 7xB, reduce, 3xC."""
    b, inp = _Builder(batch_norm=True), _input(image_size or IMAGE_SIZES["inception4"])
    x = _v4_stem(b, inp)
    for _ in range(4):
        x = _v4_a(b, x)
    x = _v4_reduce_a(b, x)
    for _ in range(7):
        x = _v4_b(b, x)
    x = _v4_reduce_b(b, x)
    for _ in range(3):
        x = _v4_c(b, x)
    x = keras.layers.GlobalAveragePooling2D(name="spatial_mean0")(x)
    x = keras.layers.Dropout(0.2, name="dropout0")(x)  # keep_prob 0.8
    return keras.Model(inp, b.logits(x, classes), name="inception4")


BUILDERS: dict[str, Callable[..., Any]] = {
    "alexnet": alexnet,
    "overfeat": overfeat,
    "googlenet": googlenet,
    "inception4": inception4,
    "vgg11": lambda image_size=None, classes=CLASSES: vgg(11, image_size, classes),
}


def build(name: str, image_size: int | None = None, classes: int = CLASSES) -> Any:
    """The Keras model of tf_cnn_benchmarks network ``name`` (a key of ``BUILDERS``)."""
    if name not in BUILDERS:
        raise KeyError(f"no tf_cnn_benchmarks builder {name!r}; known: {', '.join(BUILDERS)}")
    return BUILDERS[name](image_size=image_size, classes=classes)


__all__ = ["BUILDERS", "CLASSES", "IMAGE_SIZES", "alexnet", "build", "googlenet", "inception4",
           "overfeat", "vgg"]
