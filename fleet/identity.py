"""One identity per GPU: the canonical slug a deployment key is built from.

Rules (the catalog's name rules are in :mod:`fleet.catalog`):

- A name the catalog resolves to **one row** has that row's slug: ``nvidia-`` and the words of
  the row's name (:func:`gpu_slug`; ``Tesla V100 SXM2 16GB`` -> ``nvidia-v100-sxm2-16gb``).
  Every spelling of the row gives it: ``"Tesla V100-SXM2-16GB"``, ``"NVIDIA V100-SXM2-16GB"``,
  the MLPerf ``"NVIDIA A100-SXM-80GB"`` (-> ``nvidia-a100-sxm4-80gb``), and the slug itself.
- A name that is **less specific** than the catalog (a family: ``"V100"``, ``"A100 80GB"``,
  ``"H100 SXM"``) has a family slug: ``nvidia-`` and its own words, ordered as in the family's
  first row (``nvidia-v100``, ``nvidia-a100-80gb``). It is never a row's slug: a name with a
  row's words is that row. The identity keeps the rows the name may mean (``members``), so a
  request can be matched to history of any of them (:func:`fleet.deployment.family_matches`).
- A name the catalog does not know (TPUs, Gaudi, IPUs, CPUs, a GPU newer than the catalog)
  keeps :func:`fleet.names.accelerator_slug`, as keys were built before this module. Names of
  another vendor (:func:`fleet.names.vendor_of`) never resolve in the NVIDIA catalog.
- Identities are cached per spelling (the deployment key is on the ingest and forecast paths).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fleet.catalog import GpuSpec, UnknownGpuError, gpu_members, on_catalog_change
from fleet.errors import DeploymentError
from fleet.names import accelerator_slug, gpu_words, vendor_of

__all__ = ["GpuIdentity", "canonical_slug", "gpu_identity", "gpu_slug"]

NVIDIA = "nvidia"


@dataclass(frozen=True)
class GpuIdentity:
    """What an accelerator name denotes: its key slug and the catalog rows it may be."""

    name: str  # as asked
    slug: str  # the deployment key's accelerator part
    members: tuple[GpuSpec, ...] = ()  # one row, a family's rows, or none (not in the catalog)

    @property
    def spec(self) -> GpuSpec | None:
        """The row for hardware figures: the GPU itself, or the family's first row."""
        return self.members[0] if self.members else None

    @property
    def known(self) -> bool:
        """Whether the catalog knows the name (one GPU or a family of them)."""
        return bool(self.members)

    @property
    def is_family(self) -> bool:
        """True when the name may mean several catalog rows (``"V100"``)."""
        return len(self.members) > 1

    @property
    def label(self) -> str:
        """A short display form: the slug without its vendor, upper-cased (``V100-SXM2-16GB``)."""
        body = self.slug.split("-", 1)[1] if self.slug.startswith(f"{NVIDIA}-") else self.slug
        return body.upper()


def gpu_slug(spec: GpuSpec) -> str:
    """The canonical slug of a catalog row: ``nvidia-`` and the words of its name."""
    return "-".join([NVIDIA, *gpu_words(spec.name)])


def _family_slug(words: list[str], members: tuple[GpuSpec, ...]) -> str:
    """``nvidia-`` and the asked words, in the order the first member's name has them (words
    it lacks follow in the asked order), so any spelling of one word set gives one slug."""
    order = {w: i for i, w in enumerate(gpu_words(members[0].name))}
    ranked = sorted(dict.fromkeys(words), key=lambda w: (order.get(w, len(order)), words.index(w)))
    return "-".join([NVIDIA, *ranked])


@lru_cache(maxsize=4096)
def gpu_identity(name: str) -> GpuIdentity:
    """The identity of an accelerator name (module rules); :class:`~fleet.errors.DeploymentError`
    (a ``ValueError``) for an empty name."""
    text = str(name).strip()
    if not text:
        raise DeploymentError("empty accelerator name")
    members: tuple[GpuSpec, ...] = ()
    if vendor_of(text) in ("", NVIDIA):
        try:
            members = gpu_members(text)
        except UnknownGpuError:
            members = ()
    if len(members) == 1:
        return GpuIdentity(text, gpu_slug(members[0]), members)
    if members:
        return GpuIdentity(text, _family_slug(gpu_words(text), members), members)
    return GpuIdentity(text, accelerator_slug(text))


on_catalog_change(gpu_identity.cache_clear)  # a registered GPU changes what a name denotes


def canonical_slug(name: str) -> str:
    """The deployment key's accelerator part for ``name`` (:func:`gpu_identity`)."""
    return gpu_identity(name).slug
