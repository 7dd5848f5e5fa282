"""Deployments: which accelerators, how many per node, how many nodes, over which links.

Key format (the store's, the models', the calibration's): ``<accelerator slug>-x<per node>``
plus ``-n<nodes>`` when more than one node, e.g. ``nvidia-a100-sxm4-80gb-x8``,
``nvidia-a100-sxm4-40gb-x4-n4``. The slug is the GPU's canonical one
(:func:`fleet.identity.canonical_slug`): every spelling of one GPU (nvidia-smi's, MLPerf's,
a user's, an older key) gives one key, two GPUs never share one, and a family name
(``"8x V100"``) has a family key that :func:`family_matches` relates to the family's GPUs.
:meth:`Deployment.parse` accepts a key or the forms people write (``"8x A100-SXM4-80GB"``,
``"2x8 H100 SXM5 IB400"``, ``"4x RTX 3090 PCIe"``, ``"V100"``); :attr:`Deployment.key` formats
it and :func:`canonical_key` gives the key of any of them; what cannot be read (empty, no
accelerator, a count below one, an unknown network word) raises :class:`DeploymentError`
(a ``ValueError``, kind ``deployment``). Link words
(:mod:`fleet.interconnect`) set ``link``/``network`` and are not part of the key;
:meth:`Deployment.interconnect` fills what the user left out from the GPU catalog and says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from fleet.errors import DeploymentError
from fleet.identity import GpuIdentity, gpu_identity
from fleet.interconnect import Interconnect, resolve_interconnect, split_link_words
from fleet.names import without_note

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
            raise DeploymentError(
                f"accelerators per node and nodes must be >= 1, got {self.per_node}, {self.nodes}"
            )

    @property
    def identity(self) -> GpuIdentity:
        """What the accelerator name denotes in the GPU catalog (:mod:`fleet.identity`)."""
        return gpu_identity(self.accelerator)

    @property
    def slug(self) -> str:
        """The accelerator's canonical slug (the key's first part)."""
        return self.identity.slug

    @property
    def key(self) -> str:
        """The deployment key (module rules): ``<slug>-x<per node>``, ``-n<nodes>`` when more
        than one node."""
        key = f"{self.slug}-x{self.per_node}"
        return key if self.nodes == 1 else f"{key}-n{self.nodes}"

    @property
    def count(self) -> int:
        """Accelerators in all: per node times nodes."""
        return self.per_node * self.nodes

    def interconnect(self) -> Interconnect:
        """The links, with catalog defaults for what the deployment does not say."""
        spec = self.identity.spec
        return resolve_interconnect(spec, self.per_node, self.nodes, self.link, self.network)

    @classmethod
    def parse(cls, text: str) -> Deployment:
        """A key (``nvidia-v100-x8-n2``) or a free form: ``"8x V100"``, ``"2x8 H100 SXM5
        IB400"`` (nodes x per node), ``"4x RTX 3090 PCIe noP2P"``, ``"V100"``."""
        text = str(text).strip()
        if not text:
            raise DeploymentError("empty deployment")
        m = _KEY.fullmatch(text)
        if m:
            return cls(m.group(1), int(m.group(2)), int(m.group(3) or 1))
        if _BARE_COUNT.fullmatch(text):
            raise DeploymentError(f"deployment {text!r} names no accelerator")
        if m := _NODES.fullmatch(text):
            nodes, per_node, name = int(m.group(1)), int(m.group(2)), m.group(3)
        elif m := _COUNTED.fullmatch(text):
            nodes, per_node, name = 1, int(m.group(1)), m.group(2)
        else:
            nodes, per_node, name = 1, 1, text
        words, link, network = split_link_words(without_note(name).split())
        if not words:
            raise DeploymentError(f"deployment {text!r} names no accelerator")
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


def states_count(text: str) -> bool:
    """Whether ``text`` names its accelerator count (``"8x A100"``, ``"1x T4"``, ``"2x8 H100"``,
    a key ``nvidia-a100-x8``), not only a GPU (``"A100"``)."""
    text = str(text).strip()
    return bool(_KEY.fullmatch(text) or _NODES.fullmatch(text) or _COUNTED.fullmatch(text))


def canonical_key(deployment: str | Deployment) -> str:
    """The canonical key of a deployment: a :class:`Deployment`, a key (also one written by
    older code, ``nvidia-a100-sxm-80gb-x8`` -> ``nvidia-a100-sxm4-80gb-x8``) or a free form
    (``"8x Tesla V100-SXM2-16GB"``). Keys of accelerators the catalog does not know keep
    their slug (``habana-gaudi2-x8``)."""
    if isinstance(deployment, Deployment):
        return deployment.key
    return Deployment.parse(str(deployment)).key


def normalise_deployment(text: str) -> str:
    """Accept a key or a free form (``"8x A100-SXM4-80GB"``, ``"V100"``) and return its
    canonical key (:func:`canonical_key`)."""
    return canonical_key(text)


class FamilyMatch(NamedTuple):
    """A stored key that answers a request, and how: ``exact`` or ``family: ...``."""

    key: str
    how: str


def family_matches(asked: str | Deployment, stored: Iterable[str]) -> list[FamilyMatch]:
    """The stored deployment keys whose history answers a request for ``asked``, best first.

    Rule:

    1. **exact**: stored keys whose canonical key (:func:`canonical_key`) is the asked one;
       when there are any, only they are returned, ``how == "exact"``;
    2. else, when ``asked`` names a GPU family or part of one (``"8x V100"``, ``"8x A100
       80GB"``): the stored keys with the same accelerators per node and nodes whose GPU is a
       member of that family (a stored family key: whose members all are), ordered by the
       catalog's order of their GPU, with ``how == "family: asked 'V100', history has
       'V100-SXM2-16GB'"``;
    3. else, when ``asked`` names one GPU (``"8x Tesla V100-SXM2-16GB"``): the stored keys
       with the same accelerators per node and nodes whose GPU is a family that GPU belongs to
       (history a description filed as ``"Tesla V100"``), ``how == "family: asked
       'V100-SXM2-16GB', history has its family 'V100'"``: one identity both ways, so a
       named system's history is never lost over how its GPU is spelled;
    4. nothing else: never another count or node count, never another GPU (a GPU without
       exact or family history matches nothing), never an accelerator the catalog does not
       know.

    ``asked`` is a key, a free form or a :class:`Deployment`; stored keys that do not parse
    are skipped.
    """
    want = asked if isinstance(asked, Deployment) else Deployment.parse(str(asked))
    key = want.key
    parsed: dict[str, Deployment] = {}
    for text in dict.fromkeys(str(s) for s in stored):
        try:
            parsed[text] = Deployment.parse(text)
        except DeploymentError:
            continue
    exact = [FamilyMatch(text, "exact") for text, dep in parsed.items() if dep.key == key]
    wanted = want.identity
    if exact or not wanted.known:
        return exact
    if not wanted.is_family:
        return _families_of(want, parsed)
    family = set(wanted.members)
    rank = {spec.name: i for i, spec in enumerate(wanted.members)}
    found = []
    for text, dep in parsed.items():
        have = dep.identity
        if (dep.per_node, dep.nodes) != (want.per_node, want.nodes) or not have.known:
            continue
        if set(have.members) <= family:
            how = f"family: asked {wanted.label!r}, history has {have.label!r}"
            found.append((min(rank[s.name] for s in have.members), text, FamilyMatch(text, how)))
    return [match for _, _, match in sorted(found)]


def member_of_family(asked: Deployment, stored: Deployment) -> bool:
    """Whether ``asked`` names one GPU that ``stored``'s family holds, at the same counts
    (rule 3 of :func:`family_matches`: history filed under the family of the GPU asked)."""
    want, have = asked.identity, stored.identity
    return (want.known and not want.is_family and have.is_family
            and (asked.per_node, asked.nodes) == (stored.per_node, stored.nodes)
            and want.members[0] in have.members)


def _families_of(want: Deployment, parsed: dict[str, Deployment]) -> list[FamilyMatch]:
    """Rule 3 of :func:`family_matches`: stored family keys that ``want``'s one GPU is a
    member of, with its counts, the most specific family first."""
    found = []
    for text, dep in parsed.items():
        if member_of_family(want, dep):
            have = dep.identity
            how = (f"family: asked {want.identity.label!r}, history has its family "
                   f"{have.label!r} (a member)")
            found.append((len(have.members), text, FamilyMatch(text, how)))
    return [match for _, _, match in sorted(found)]
