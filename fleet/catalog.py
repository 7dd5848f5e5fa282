"""Catalog of NVIDIA GPUs with the hardware features the layer predictor uses.

The data lives in ``fleet/data/gpu_catalog.csv`` (sources in ``fleet/data/README.md``).
Names are normalised by :func:`fleet.names.lookup_key`, so that ``"Tesla V100-SXM2-16GB"``,
``"V100"`` and ``"NVIDIA Tesla V100"`` resolve to the same entry; an unknown name raises
:class:`UnknownGpuError` listing close matches.
"""

from __future__ import annotations

import csv
import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fleet.names import lookup_key

CATALOG_PATH = Path(__file__).resolve().parent / "data" / "gpu_catalog.csv"

HW_KEYS = (
    "hw_kind",
    "hw_memory_gb",
    "hw_bandwidth_gbs",
    "hw_clock_mhz",
    "hw_cores",
    "hw_peak_tflops",
)


class UnknownGpuError(KeyError):
    """Raised for a GPU name the catalog does not know; ``suggestions`` holds close names."""

    def __init__(self, name: str, suggestions: list[str]):
        self.name = name
        self.suggestions = suggestions
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(
            f"unknown GPU {name!r}: not in the GPU catalog ({CATALOG_PATH.name}).{hint}"
        )

    def __str__(self) -> str:  # KeyError would quote the whole message
        return self.args[0]


@dataclass(frozen=True)
class GpuSpec:
    """One catalog entry (one GPU die; dual-GPU boards such as K80/M60 list one die)."""

    name: str
    aliases: tuple[str, ...]
    architecture: str
    compute_capability: str
    segment: str
    memory_gb: float
    memory_type: str
    bandwidth_gbs: float
    boost_clock_mhz: float
    sm_count: int
    cuda_cores: int
    fp32_tflops: float
    release_year: int

    def hardware_features(self) -> dict[str, float | str]:
        """The ``hw_*`` columns of a benchmark row for this GPU."""
        return {
            "hw_kind": "gpu",
            "hw_memory_gb": float(self.memory_gb),
            "hw_bandwidth_gbs": float(self.bandwidth_gbs),
            "hw_clock_mhz": float(self.boost_clock_mhz),
            "hw_cores": float(self.sm_count),
            "hw_peak_tflops": float(self.fp32_tflops),
        }


def _parse_row(row: dict[str, str], line: int) -> GpuSpec:
    try:
        return GpuSpec(
            name=row["name"].strip(),
            aliases=tuple(a.strip() for a in row["aliases"].split(";") if a.strip()),
            architecture=row["architecture"].strip(),
            compute_capability=row["compute_capability"].strip(),
            segment=row["segment"].strip(),
            memory_gb=float(row["memory_gb"]),
            memory_type=row["memory_type"].strip(),
            bandwidth_gbs=float(row["bandwidth_gbs"]),
            boost_clock_mhz=float(row["boost_clock_mhz"]),
            sm_count=int(row["sm_count"]),
            cuda_cores=int(row["cuda_cores"]),
            fp32_tflops=float(row["fp32_tflops"]),
            release_year=int(row["release_year"]),
        )
    except (KeyError, ValueError, AttributeError) as exc:
        raise ValueError(f"{CATALOG_PATH}:{line}: bad catalog row ({exc})") from exc


@lru_cache(maxsize=4)
def load_catalog(path: str | Path = CATALOG_PATH) -> tuple[GpuSpec, ...]:
    """All catalog entries, in file order."""
    with open(path, newline="", encoding="utf-8") as handle:
        return tuple(_parse_row(row, i + 2) for i, row in enumerate(csv.DictReader(handle)))


@lru_cache(maxsize=4)
def _index(path: str | Path = CATALOG_PATH) -> dict[str, GpuSpec]:
    index: dict[str, GpuSpec] = {}
    for spec in load_catalog(path):
        for label in (spec.name, *spec.aliases):
            key = lookup_key(label)
            other = index.get(key)
            if other is not None and other.name != spec.name:
                raise ValueError(
                    f"{path}: name {label!r} is ambiguous ({other.name} and {spec.name})"
                )
            index[key] = spec
    return index


def resolve_gpu(name: str, path: str | Path = CATALOG_PATH) -> GpuSpec:
    """The catalog entry for ``name`` (any spelling listed as name or alias, case-insensitive)."""
    index = _index(path)
    key = lookup_key(name)
    if key in index:
        return index[key]
    close = difflib.get_close_matches(key, list(index), n=5, cutoff=0.6)
    suggestions = list(dict.fromkeys(index[k].name for k in close))
    if not suggestions:  # fall back to entries that share the model number
        digits = re.findall(r"\d{2,}", key)
        suggestions = [s.name for s in load_catalog(path) if any(d in s.name for d in digits)][:5]
    raise UnknownGpuError(name, suggestions)


def hardware_features(name: str) -> dict[str, float | str]:
    """``hw_*`` features of the GPU ``name`` (see :data:`HW_KEYS`)."""
    return resolve_gpu(name).hardware_features()


def known_gpus() -> list[str]:
    """Canonical names of all catalog entries."""
    return [spec.name for spec in load_catalog()]
