"""Links between accelerators and the cost of a gradient all-reduce over them.

Link words people write in a deployment (case-insensitive): ``NVSwitch``, ``NVLink``,
``PCIe`` (peer-to-peer), ``noP2P`` / ``PCIe-noP2P`` (through host memory); between nodes
``IB100`` / ``IB200`` / ``IB400`` (also EDR, HDR, NDR), ``Eth10`` / ``Eth25`` / ``Eth100``.

Defaults when a deployment names no link (each default is reported in ``assumed``), from the
catalog row's columns only (``form_factor``, ``nvlink_gbs``, ``pcie_gen``, ``segment``), so a new
GPU or architecture needs its row and nothing here: SXM parts with NVLink: NVSwitch when more
than 8 share a node (DGX-2) or 8 share one with NVLink of at least
:data:`NVSWITCH_MIN_NVLINK_GBS` (HGX A100 and newer), else NVLink (DGX-1's hybrid cube mesh,
4-GPU boards); datacenter PCIe cards: PCIe with peer-to-peer; GeForce, TITAN, Quadro/RTX boards
and laptops: PCIe without P2P; more than one node: InfiniBand 200 Gb/s.

Bandwidths are per GPU and direction, as all-reduce uses them (bus bandwidth): NVLink = half
the catalog's bidirectional ``nvlink_gbs``; PCIe x16 = ``12 x 2**(gen - 3)`` GB/s with P2P
(:func:`pcie_gbs`: gen 3/4/5/6 = 12/24/48/96, each generation doubles it, so a new one needs no
code; a row without ``pcie_gen`` counts as gen 3) and half that without; network = line
rate / 8. A ring all-reduce of B bytes over N peers takes 2 (N-1)/N x B / bandwidth + 2 (N-1) x
latency; over several nodes it is hierarchical: a ring in each node, then a ring across nodes on
the 1/per-node shard.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleet.deprecation import renamed_attributes
from fleet.errors import DeploymentError

PCIE_GEN3_GBS = 12.0  # x16 gen 3, per direction, as all-reduce gets it (of 15.75 on paper)
NVSWITCH_MIN_NVLINK_GBS = 600.0  # NVLink 3 (A100) and newer: 8-GPU boards are switched
NETWORK_GBS = {"ib100": 12.5, "ib200": 25.0, "ib400": 50.0, "eth10": 1.25, "eth25": 3.125,
               "eth100": 12.5}
NETWORK_ALIASES = {"edr": "ib100", "hdr": "ib200", "ndr": "ib400"}
LATENCY_S = {"nvswitch": 5e-6, "nvlink": 5e-6, "pcie": 10e-6, "pcie-nop2p": 15e-6,
             "network": 20e-6}
LINK_WORDS = {"nvswitch": "nvswitch", "nvlink": "nvlink", "nop2p": "pcie-nop2p",
              "pcie-nop2p": "pcie-nop2p"}
_NETWORK = re.compile(r"^(ib\d+|eth\d+|edr|hdr|ndr)$")


@dataclass(frozen=True)
class Interconnect:
    """The links of a deployment with their bandwidths (GB/s per GPU and direction)."""

    link: str  # nvswitch | nvlink | pcie | pcie-nop2p
    link_gbs: float
    network: str = ""  # ib200, eth100, ... ("" for one node)
    network_gbs: float = 0.0
    assumed: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        """``pcie 24 GB/s`` (plus ``, ib200 25 GB/s`` across nodes): the links in words."""
        text = f"{self.link} {self.link_gbs:g} GB/s"
        return text + (f", {self.network} {self.network_gbs:g} GB/s" if self.network else "")


def pcie_gbs(gen: int | None) -> float:
    """GB/s per direction of an x16 PCIe link of generation ``gen`` with peer-to-peer:
    ``12 x 2**(gen - 3)`` (gen 3 = 12, doubling per generation); None counts as gen 3."""
    return PCIE_GEN3_GBS * 2.0 ** (int(gen or 3) - 3)


# ``PCIE_GBS`` (the table of gens 3-6 the formula replaced): deprecated, for one release.
__getattr__ = renamed_attributes(__name__, {
    "PCIE_GBS": ("fleet.interconnect.pcie_gbs(gen)",
                 lambda: {gen: pcie_gbs(gen) for gen in (3, 4, 5, 6)}),
})


def split_link_words(words: list[str]) -> tuple[list[str], str, str]:
    """(remaining words, link, network) of a deployment's words; PCIe stays a name word."""
    rest, link, network = [], "", ""
    for word in words:
        w = word.lower()
        if w in LINK_WORDS:
            link = LINK_WORDS[w]
        elif _NETWORK.match(w):
            network = NETWORK_ALIASES.get(w, w)
            if network not in NETWORK_GBS:
                raise DeploymentError(f"unknown network {word!r}; known: "
                                 f"{', '.join([*NETWORK_GBS, *NETWORK_ALIASES])}")
        else:
            if w == "pcie" and not link:
                link = "pcie"
            rest.append(word)
    return rest, link, network


def resolve_interconnect(spec: object | None, per_node: int, nodes: int, link: str = "",
                         network: str = "") -> Interconnect:
    """The links of ``per_node`` x ``nodes`` GPUs of catalog entry ``spec`` (module defaults)."""
    assumed = []
    form = getattr(spec, "form_factor", "") or ""
    nvlink_gbs = float(getattr(spec, "nvlink_gbs", 0.0) or 0.0)
    pcie_gen = getattr(spec, "pcie_gen", None)
    if not link:
        if form == "sxm" and nvlink_gbs > 0:
            switched = per_node > 8 or (per_node >= 8 and nvlink_gbs >= NVSWITCH_MIN_NVLINK_GBS)
            link = "nvswitch" if switched else "nvlink"
        elif form == "pcie":
            link = "pcie"
        else:
            link = "pcie-nop2p"
        if per_node > 1:
            assumed.append(f"link {link} (default for a {form or 'unknown'} part)")
    if link == "pcie" and getattr(spec, "segment", "") == "consumer":
        link = "pcie-nop2p"
        assumed.append("no PCIe peer-to-peer on GeForce boards")
    if link in ("nvswitch", "nvlink") and nvlink_gbs <= 0:
        nvlink_gbs = 2 * pcie_gbs(pcie_gen) * 4  # a bridge: a few PCIe x16's worth
        assumed.append(f"NVLink bandwidth {nvlink_gbs / 2:g} GB/s (not in the catalog)")
    if link in ("nvswitch", "nvlink"):
        link_gbs = nvlink_gbs / 2
    else:
        link_gbs = pcie_gbs(pcie_gen) / (1 if link == "pcie" else 2)
    network_gbs = 0.0
    if nodes > 1:
        if not network:
            network = "ib200"
            assumed.append("network ib200 (default between nodes)")
        network_gbs = NETWORK_GBS[network]
    return Interconnect(link, link_gbs, network, network_gbs, tuple(assumed))


def _ring(n: int, nbytes: float, gbs: float, latency: float) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (n - 1) / n * nbytes / (gbs * 1e9) + 2.0 * (n - 1) * latency


def allreduce_seconds(nbytes: float, per_node: int, nodes: int, ic: Interconnect) -> float:
    """Seconds of one all-reduce of ``nbytes`` per GPU (ring in a node, then across nodes)."""
    if nbytes < 0 or per_node < 1 or nodes < 1:
        raise ValueError("all-reduce needs bytes >= 0 and at least one GPU per node and node")
    inner = _ring(per_node, nbytes, ic.link_gbs, LATENCY_S[ic.link])
    outer = _ring(nodes, nbytes / per_node, ic.network_gbs or 1.0, LATENCY_S["network"]) \
        if nodes > 1 else 0.0
    return inner + outer
