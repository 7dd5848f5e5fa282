"""Shipped PyTorch (torchvision) specs: layer occurrences traced once, loaded without torch.

``data/torchvision/<name>.json.gz`` holds the occurrences :mod:`layerwise.torch_graph` makes of
a torchvision model (traced on the meta device in training mode at ``image_size``), in the zoo's
format 1 plus ``framework: pytorch``. ``python -m layerwise.zoo.build_torch`` writes them (it needs
torch and torchvision; see ``README.md``). Rules:

* names are torchvision's builder names (``resnet50``, ``retinanet_resnet50_fpn``), matched
  case- and punctuation-insensitively like the Keras zoo's;
* :func:`shipped_reference` answers a ``torchvision…:name`` reference with no arguments (or only
  ``weights=None``) from the shipped spec; any other argument needs a trace;
* ``CATALOG`` says how each is built: module, default (training) image side and task.
  Classification: 224 (inception_v3 299, efficientnet_b4 380, as torchvision's weights'
  transforms crop); detection: the side the model's transform trains at (800 for R-CNN and
  RetinaNet — a square input is resized to ``min_size`` 800 — 300 for SSD300) with
  ``TARGET_BOXES`` boxes per image; segmentation: 480, the training crop of torchvision's
  reference scripts.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from layerwise.zoo import DATA_DIR, ZooSpec, read_spec

TORCH_DIR = DATA_DIR / "torchvision"
CLASSIFICATION, DETECTION, SEGMENTATION = "classification", "detection", "segmentation"
MODULES = {CLASSIFICATION: "torchvision.models", DETECTION: "torchvision.models.detection",
           SEGMENTATION: "torchvision.models.segmentation"}


@dataclass(frozen=True)
class TorchEntry:
    """A torchvision builder: ``name`` (the function), ``task`` and default ``image_size``."""

    name: str
    task: str
    image_size: int

    @property
    def module(self) -> str:
        """The Python module that builds this task's torchvision models."""
        return MODULES[self.task]


def normalize(name: str) -> str:
    """``Wide_ResNet50_2`` -> ``wideresnet502`` (the zoo's matching rule)."""
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


# the 32 networks of ../shared/data/torchvision_bench, then the other common ones
BENCH_NETWORKS = (
    "densenet121", "densenet161", "densenet169", "densenet201", "mnasnet0_5", "mnasnet0_75",
    "mnasnet1_0", "mnasnet1_3", "mobilenet_v2", "resnet18", "resnet34", "resnet50",
    "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d", "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "squeezenet1_0",
    "squeezenet1_1", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
    "vgg19_bn", "wide_resnet50_2", "wide_resnet101_2",
)
_ENTRIES = (
    *(TorchEntry(n, CLASSIFICATION, 224) for n in BENCH_NETWORKS),
    TorchEntry("alexnet", CLASSIFICATION, 224), TorchEntry("googlenet", CLASSIFICATION, 224),
    TorchEntry("inception_v3", CLASSIFICATION, 299),
    TorchEntry("efficientnet_b0", CLASSIFICATION, 224),
    TorchEntry("efficientnet_b4", CLASSIFICATION, 380),
    TorchEntry("mobilenet_v3_large", CLASSIFICATION, 224),
    TorchEntry("convnext_tiny", CLASSIFICATION, 224),
    TorchEntry("regnet_x_400mf", CLASSIFICATION, 224),
    TorchEntry("regnet_y_400mf", CLASSIFICATION, 224),
    TorchEntry("vit_b_16", CLASSIFICATION, 224),
    TorchEntry("retinanet_resnet50_fpn", DETECTION, 800),
    TorchEntry("ssd300_vgg16", DETECTION, 300),
    TorchEntry("fasterrcnn_resnet50_fpn", DETECTION, 800),
    TorchEntry("maskrcnn_resnet50_fpn", DETECTION, 800),
    TorchEntry("fcn_resnet50", SEGMENTATION, 480),
    TorchEntry("deeplabv3_resnet50", SEGMENTATION, 480),
)
CATALOG: dict[str, TorchEntry] = {normalize(e.name): e for e in _ENTRIES}


def _files(data_dir: Path = TORCH_DIR) -> dict[str, Path]:
    return {normalize(p.name.split(".", 1)[0]): p for p in sorted(data_dir.glob("*.json*"))
            if p.name.endswith((".json", ".json.gz"))}


def known_networks() -> list[str]:
    """torchvision names of the shipped PyTorch specs, sorted."""
    return sorted(p.name.split(".", 1)[0] for p in _files().values())


def lookup(name: str) -> str | None:
    """The torchvision name of a shipped spec matching ``name`` (any spelling), else None."""
    path = _files().get(normalize(name))
    return path.name.split(".", 1)[0] if path is not None else None


def suggestions(name: str, n: int = 3) -> list[str]:
    """Shipped torchvision names close to ``name``, as torchvision spells them."""
    spelled = {normalize(t): t for t in known_networks()}
    close = difflib.get_close_matches(normalize(name), list(spelled), n=n, cutoff=0.6)
    return [spelled[c] for c in close]


def entry(name: str) -> TorchEntry | None:
    """The catalogue entry of a torchvision name (any spelling), else None."""
    return CATALOG.get(normalize(name))


def shipped_reference(module: str, attr: str, args: tuple, kwargs: tuple) -> str | None:
    """The shipped spec answering ``module:attr(args, kwargs)``, else None (module rules)."""
    if module.split(".")[0] != "torchvision" or args or \
            any(k != "weights" or v is not None for k, v in kwargs):
        return None
    found = lookup(attr)
    known = entry(attr)
    if found is None or known is None or module not in ("torchvision", "torchvision.models",
                                                        known.module):
        return None
    return found


def load(name: str) -> ZooSpec:
    """The shipped PyTorch spec of a torchvision network (any spelling)."""
    path = _files().get(normalize(name))
    if path is None:
        from layerwise.kinds.mapping import UnknownNetworkError

        raise UnknownNetworkError(f"no shipped PyTorch spec for {name!r}; shipped: "
                                  f"{', '.join(known_networks())}")
    return read_spec(path)


__all__ = ["BENCH_NETWORKS", "CATALOG", "TORCH_DIR", "TorchEntry", "entry", "known_networks",
           "load", "lookup", "normalize", "shipped_reference", "suggestions"]
