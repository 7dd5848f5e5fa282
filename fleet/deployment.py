"""Deployments: which accelerators, how many per node, how many nodes; one key format.

Key format (the store's, the models', the calibration's): ``<accelerator slug>-x<per node>``
plus ``-n<nodes>`` when more than one node, e.g. ``nvidia-a100-sxm4-80gb-x8``,
``nvidia-a100-sxm-40gb-x4-n4``. :meth:`Deployment.parse` accepts a key or the forms people
write (``"8x A100-SXM4-80GB"``, ``"V100"``); :attr:`Deployment.key` formats it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleet.names import accelerator_slug

_KEY = re.compile(r"([a-z0-9-]+)-x(\d+)(?:-n(\d+))?")
_COUNTED = re.compile(r"(\d+)\s*[x×]\s*(.+)", flags=re.I)


@dataclass(frozen=True)
class Deployment:
    """Hardware a run used or a job asks for. ``accelerator`` is any spelling of the part."""

    accelerator: str  # as the log / user names it, e.g. "NVIDIA A100-SXM4-80GB"
    per_node: int = 1
    nodes: int = 1

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

    @classmethod
    def parse(cls, text: str) -> Deployment:
        """A key (``nvidia-v100-x8-n2``) or a free form (``"8x V100"``, ``"V100"``)."""
        text = str(text).strip()
        m = _KEY.fullmatch(text)
        if m:
            return cls(m.group(1), int(m.group(2)), int(m.group(3) or 1))
        m = _COUNTED.fullmatch(text)
        if m:
            return cls(m.group(2), int(m.group(1)))
        return cls(text)


def deployment_key(accelerator: str, per_node: int = 1, nodes: int = 1) -> str:
    """The key of ``per_node`` x ``nodes`` accelerators named ``accelerator``."""
    return Deployment(accelerator, per_node, nodes).key


def normalise_deployment(text: str) -> str:
    """Accept a key or a free form (``"8x A100-SXM4-80GB"``, ``"V100"``) and return a key.

    A well-formed key comes back as given.
    """
    text = str(text).strip()
    return text if _KEY.fullmatch(text) else Deployment.parse(text).key
