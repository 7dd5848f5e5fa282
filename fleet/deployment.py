"""Deployments: which accelerators, how many per node, how many nodes, over which links.

Key format (the store's, the models', the calibration's): ``<accelerator slug>-x<per node>``
plus ``-n<nodes>`` when more than one node, e.g. ``nvidia-a100-sxm4-80gb-x8``,
``nvidia-a100-sxm-40gb-x4-n4``. :meth:`Deployment.parse` accepts a key or the forms people
write (``"8x A100-SXM4-80GB"``, ``"2x8 H100 SXM5 IB400"``, ``"4x RTX 3090 PCIe"``,
``"V100"``); :attr:`Deployment.key` formats it. Link words (:mod:`fleet.interconnect`) set
``link``/``network`` and are not part of the key; :meth:`Deployment.interconnect` fills what
the user left out from the GPU catalog and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleet.interconnect import Interconnect, resolve_interconnect, split_link_words
from fleet.names import accelerator_slug

_KEY = re.compile(r"([a-z0-9-]+)-x(\d+)(?:-n(\d+))?")
_COUNTED = re.compile(r"(\d+)\s*[x×]\s*(.+)", flags=re.I)
_NODES = re.compile(r"(\d+)\s*[x×](\d+)(?:\s*[x×])?\s+(.+)", flags=re.I)  # "2x8 H100"
_BARE_COUNT = re.compile(r"\d+\s*[x×]?", flags=re.I)


@dataclass(frozen=True)
class Deployment:
    """Hardware a run used or a job asks for. ``accelerator`` is any spelling of the part."""

    accelerator: str  # as the log / user names it, e.g. "NVIDIA A100-SXM4-80GB"
    per_node: int = 1
    nodes: int = 1
    link: str = ""  # nvswitch | nvlink | pcie | pcie-nop2p; "" = the catalog's default
    network: str = ""  # ib200, eth100, ...; "" = the default between nodes

    def __post_init__(self) -> None:
        if self.per_node < 1 or self.nodes < 1:
            raise ValueError(
                f"accelerators per node and nodes must be >= 1, got {self.per_node}, {self.nodes}"
            )

    @property
    def slug(self) -> str:
        return accelerator_slug(self.accelerator)

    @property
    def key(self) -> str:
        key = f"{self.slug}-x{self.per_node}"
        return key if self.nodes == 1 else f"{key}-n{self.nodes}"

    @property
    def count(self) -> int:
        """Accelerators in all: per node times nodes."""
        return self.per_node * self.nodes

    def interconnect(self) -> Interconnect:
        """The links, with catalog defaults for what the deployment does not say."""
        from fleet.catalog import UnknownGpuError, resolve_gpu

        try:
            spec = resolve_gpu(self.accelerator)
        except UnknownGpuError:
            spec = None
        return resolve_interconnect(spec, self.per_node, self.nodes, self.link, self.network)

    @classmethod
    def parse(cls, text: str) -> Deployment:
        """A key (``nvidia-v100-x8-n2``) or a free form: ``"8x V100"``, ``"2x8 H100 SXM5
        IB400"`` (nodes x per node), ``"4x RTX 3090 PCIe noP2P"``, ``"V100"``."""
        text = str(text).strip()
        if not text:
            raise ValueError("empty deployment")
        m = _KEY.fullmatch(text)
        if m:
            return cls(m.group(1), int(m.group(2)), int(m.group(3) or 1))
        if _BARE_COUNT.fullmatch(text):
            raise ValueError(f"deployment {text!r} names no accelerator")
        if m := _NODES.fullmatch(text):
            nodes, per_node, name = int(m.group(1)), int(m.group(2)), m.group(3)
        elif m := _COUNTED.fullmatch(text):
            nodes, per_node, name = 1, int(m.group(1)), m.group(2)
        else:
            nodes, per_node, name = 1, 1, text
        words, link, network = split_link_words(name.split())
        if not words:
            raise ValueError(f"deployment {text!r} names no accelerator")
        return cls(_without_link_only_pcie(words), per_node, nodes, link, network)


def _without_link_only_pcie(words: list[str]) -> str:
    """The accelerator name; a ``PCIe`` word the catalog does not need to tell the part
    (``RTX 3090 PCIe``) is a link word only and leaves the name."""
    from fleet.catalog import UnknownGpuError, resolve_gpu

    name = " ".join(words)
    bare = [w for w in words if w.lower() != "pcie"]
    if len(bare) == len(words) or not bare:
        return name
    try:
        resolve_gpu(name)
        return name
    except UnknownGpuError:
        try:
            resolve_gpu(" ".join(bare))
            return " ".join(bare)
        except UnknownGpuError:
            return name


def deployment_key(accelerator: str, per_node: int = 1, nodes: int = 1) -> str:
    """The key of ``per_node`` x ``nodes`` accelerators named ``accelerator``."""
    return Deployment(accelerator, per_node, nodes).key


def normalise_deployment(text: str) -> str:
    """Accept a key or a free form (``"8x A100-SXM4-80GB"``, ``"V100"``) and return a key.

    A well-formed key comes back as given.
    """
    text = str(text).strip()
    return text if _KEY.fullmatch(text) else Deployment.parse(text).key
