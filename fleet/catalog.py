"""Catalog of NVIDIA GPUs with the hardware features the predictors use.

The data lives in ``fleet/data/gpu_catalog.csv`` (columns and sources in
``fleet/data/README.md``). Rules:

- Names are normalised by :mod:`fleet.names`. A name is the GPUs it may denote
  (:func:`gpu_members`), found in this order:

  1. its words, joined (:func:`~fleet.names.lookup_key`) or in any order
     (:func:`~fleet.names.unordered_key`), equal a row's name or alias: that row;
  2. it holds a **family** name (column ``family``: ``V100``, ``A100``, ``H100``, ...) and
     its words all appear in one spelling of some of that family's rows (``sxm`` also matches
     ``sxm2``..``sxm5``): those rows, in file order (``"V100"``: every V100; ``"A100 80GB"``:
     the SXM4 and PCIe 80 GB parts; ``"H100 PCIe"``: the one PCIe part);
  3. with its memory size set aside (``"Tesla V100-SXM3"``, ``"NVIDIA L4 24GB"``; the size must
     agree): the one row, or several rows of one family;
  4. else :class:`UnknownGpuError` with suggestions (also for rows of different families: two
     GPUs are never guessed between).

  :func:`resolve_gpu` gives one row: a family's first row in file order stands for its
  hardware figures (``"V100"`` -> Tesla V100 SXM2 16GB). Two rows whose spellings normalise
  alike, or a family name that is also a row's spelling, make the catalog fail to load.
- Peak throughput per precision (:meth:`GpuSpec.peak_tflops`): fp32 runs on the CUDA cores;
  tf32, fp16 and bf16 run on tensor cores where the GPU has them for that type (dense
  peaks, FP32 accumulate) and at the FP32 rate otherwise, because mixed precision
  accumulates in FP32 and frameworks do not use the non-tensor half-precision units for it.
- A bad row fails the load with ``file:line: reason``; peaks, clocks, bandwidth, memory and
  core counts must be positive. The catalog is read once per process (cached).
"""

from __future__ import annotations

import csv
import difflib
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from fleet.errors import FleetError
from fleet.names import gpu_words, lookup_key, split_memory, unordered_key
from fleet.precision import Precision, parse_precision

CATALOG_PATH = Path(__file__).resolve().parent / "data" / "gpu_catalog.csv"

HW_KEYS = (
    "hw_kind",
    "hw_memory_gb",
    "hw_bandwidth_gbs",
    "hw_clock_mhz",
    "hw_cores",
    "hw_peak_tflops",
)

REQUIRED_COLUMNS = (
    "name", "aliases", "architecture", "compute_capability", "segment", "memory_gb",
    "memory_type", "bandwidth_gbs", "boost_clock_mhz", "sm_count", "cuda_cores",
    "fp32_tflops", "release_year",
)
OPTIONAL_COLUMNS = (
    "fp16_tflops", "tensor_fp16_tflops", "tensor_bf16_tflops", "tensor_tf32_tflops",
    "l2_mb", "tdp_w", "form_factor", "nvlink_gbs", "pcie_gen", "family",
)
FORM_FACTORS = frozenset({"sxm", "pcie", "desktop", "mobile", "oam", "embedded"})

__all__ = [
    "CATALOG_PATH", "FORM_FACTORS", "HW_KEYS", "GpuSpec", "UnknownGpuError", "family_names",
    "gpu_members", "hardware_features", "known_gpus", "load_catalog", "lookup_key", "resolve_gpu",
    "roofline_features",
]


class UnknownGpuError(FleetError, KeyError):
    """Raised for a GPU name the catalog cannot resolve; ``suggestions`` holds close names."""

    kind: ClassVar[str] = "unknown_gpu"

    def __init__(self, name: str, suggestions: list[str], reason: str = ""):
        self.name = name
        self.suggestions = suggestions
        reason = reason or f"not in the GPU catalog ({CATALOG_PATH.name})"
        hint = f" Did you mean: {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown GPU {name!r}: {reason}.{hint}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return self.args[0]


@dataclass(frozen=True)
class GpuSpec:
    """One catalog entry (one GPU die; dual-GPU boards such as K80/M60 list one die).

    Peaks are dense TFLOPS at the boost clock; the tensor columns are None where the GPU has
    no tensor cores for that type. ``nvlink_gbs`` is 0 without NVLink.
    """

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
    fp16_tflops: float | None = None  # non-tensor FP16 peak (None: no native FP16 math)
    tensor_fp16_tflops: float | None = None  # FP16 tensor cores, FP32 accumulate
    tensor_bf16_tflops: float | None = None
    tensor_tf32_tflops: float | None = None
    l2_mb: float | None = None
    tdp_w: float | None = None
    form_factor: str = ""  # sxm, pcie, desktop, mobile, ...
    nvlink_gbs: float = 0.0  # total NVLink bandwidth per GPU, both directions
    pcie_gen: int | None = None
    family: str = ""  # rows one bare name may mean ("V100": SXM2/SXM3/PCIe, 16/32 GB); "" alone

    def tensor_tflops(self, precision: Precision | str | None) -> float | None:
        """The tensor-core peak for ``precision`` (None for fp32 or without tensor cores)."""
        p = parse_precision(precision)
        return {
            Precision.FP32: None,
            Precision.TF32: self.tensor_tf32_tflops,
            Precision.FP16: self.tensor_fp16_tflops,
            Precision.BF16: self.tensor_bf16_tflops,
        }[p]

    def has_tensor_cores(self, precision: Precision | str | None = Precision.FP16) -> bool:
        """Whether ``precision`` runs on tensor cores here (never for fp32)."""
        return self.tensor_tflops(precision) is not None

    def peak_tflops(self, precision: Precision | str | None = Precision.FP32) -> float:
        """Peak TFLOPS a job in ``precision`` can reach.

        fp32 -> ``fp32_tflops``; tf32/fp16/bf16 -> the tensor-core peak for that type, or
        ``fp32_tflops`` without one (mixed precision accumulates in FP32, so a GPU without
        tensor cores computes it at FP32 speed; the non-tensor ``fp16_tflops`` is not used).
        """
        tensor = self.tensor_tflops(precision)
        return float(tensor if tensor is not None else self.fp32_tflops)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Peak memory bandwidth in bytes per second."""
        return float(self.bandwidth_gbs) * 1e9

    def roofline_features(
        self, precision: Precision | str | None = Precision.FP32
    ) -> dict[str, float | bool]:
        """Roofline inputs: peak_flops (FLOP/s), bandwidth (B/s), sm_count, clock_mhz, l2_mb
        (0 when unknown) and tensor (whether ``precision`` runs on tensor cores)."""
        return {
            "peak_flops": self.peak_tflops(precision) * 1e12,
            "bandwidth": self.bandwidth_bytes_per_s,
            "sm_count": float(self.sm_count),
            "clock_mhz": float(self.boost_clock_mhz),
            "l2_mb": float(self.l2_mb or 0.0),
            "tensor": self.has_tensor_cores(precision),
        }

    def hardware_features(self) -> dict[str, float | str]:
        """The ``hw_*`` columns of a benchmark row for this GPU (keys: :data:`HW_KEYS`)."""
        return {
            "hw_kind": "gpu",
            "hw_memory_gb": float(self.memory_gb),
            "hw_bandwidth_gbs": float(self.bandwidth_gbs),
            "hw_clock_mhz": float(self.boost_clock_mhz),
            "hw_cores": float(self.sm_count),
            "hw_peak_tflops": float(self.fp32_tflops),
        }


class _RowError(FleetError, ValueError):
    kind: ClassVar[str] = "catalog"


def _text(row: dict[str, str | None], column: str, required: bool = True) -> str:
    if column not in row and not required:  # an optional column the file does not have
        return ""
    value = row.get(column)
    if value is None:  # DictReader fills a short row with None
        raise _RowError(f"missing value for column {column!r} (fewer fields than the header)")
    value = value.strip()
    if required and not value:
        raise _RowError(f"empty column {column!r}")
    return value


def _number(
    row: dict[str, str | None], column: str, *, required: bool = True, positive: bool = True
) -> float | None:
    text = _text(row, column, required)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise _RowError(f"column {column!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise _RowError(f"column {column!r}: {text!r} is not finite")
    if positive and value <= 0:
        raise _RowError(f"column {column!r} must be positive, got {text}")
    if value < 0:
        raise _RowError(f"column {column!r} must not be negative, got {text}")
    return value


def _integer(row: dict[str, str | None], column: str, *, required: bool = True) -> int | None:
    value = _number(row, column, required=required)
    if value is not None and not value.is_integer():
        raise _RowError(f"column {column!r} must be a whole number, got {value:g}")
    return None if value is None else int(value)


def _parse_row(row: dict[str, str | None]) -> GpuSpec:
    if None in row:  # DictReader files surplus fields under the key None
        raise _RowError("more fields than the header has")
    form = _text(row, "form_factor", required=False).lower()
    if form and form not in FORM_FACTORS:
        raise _RowError(f"form_factor {form!r} is not one of {sorted(FORM_FACTORS)}")
    pcie = _integer(row, "pcie_gen", required=False)
    if pcie is not None and not 1 <= pcie <= 7:
        raise _RowError(f"pcie_gen must be 1..7, got {pcie}")
    return GpuSpec(
        name=_text(row, "name"),
        aliases=tuple(a.strip() for a in _text(row, "aliases", False).split(";") if a.strip()),
        architecture=_text(row, "architecture"),
        compute_capability=_text(row, "compute_capability"),
        segment=_text(row, "segment"),
        memory_gb=float(_number(row, "memory_gb")),  # type: ignore[arg-type]
        memory_type=_text(row, "memory_type"),
        bandwidth_gbs=float(_number(row, "bandwidth_gbs")),  # type: ignore[arg-type]
        boost_clock_mhz=float(_number(row, "boost_clock_mhz")),  # type: ignore[arg-type]
        sm_count=int(_integer(row, "sm_count")),  # type: ignore[arg-type]
        cuda_cores=int(_integer(row, "cuda_cores")),  # type: ignore[arg-type]
        fp32_tflops=float(_number(row, "fp32_tflops")),  # type: ignore[arg-type]
        release_year=int(_integer(row, "release_year")),  # type: ignore[arg-type]
        fp16_tflops=_number(row, "fp16_tflops", required=False),
        tensor_fp16_tflops=_number(row, "tensor_fp16_tflops", required=False),
        tensor_bf16_tflops=_number(row, "tensor_bf16_tflops", required=False),
        tensor_tf32_tflops=_number(row, "tensor_tf32_tflops", required=False),
        l2_mb=_number(row, "l2_mb", required=False),
        tdp_w=_number(row, "tdp_w", required=False),
        form_factor=form,
        nvlink_gbs=_number(row, "nvlink_gbs", required=False, positive=False) or 0.0,
        pcie_gen=pcie,
        family=_text(row, "family", required=False),
    )


@lru_cache(maxsize=4)
def load_catalog(path: str | Path = CATALOG_PATH) -> tuple[GpuSpec, ...]:
    """All catalog entries, in file order; a bad row raises ``ValueError("file:line: why")``."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = [c.strip() for c in reader.fieldnames or []]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        unknown = [c for c in header if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
        if missing or unknown:
            why = "; ".join(
                part for part in (
                    f"missing column(s) {missing}" if missing else "",
                    f"unknown column(s) {unknown}" if unknown else "",
                ) if part
            )
            raise ValueError(f"{path}:1: bad header ({why})")
        reader.fieldnames = header
        specs = []
        for row in reader:
            try:
                specs.append(_parse_row(row))
            except _RowError as exc:
                raise ValueError(f"{path}:{reader.line_num}: {exc}") from None
    return tuple(specs)


@dataclass(frozen=True)
class _Index:
    exact: dict[str, GpuSpec]  # lookup_key -> entry
    unordered: dict[str, GpuSpec]  # unordered_key -> entry
    sized: tuple[tuple[frozenset[str], GpuSpec], ...]  # label words less memory size
    labels: dict[str, tuple[frozenset[str], ...]]  # entry name -> words of each spelling
    families: tuple[tuple[str, frozenset[str], tuple[GpuSpec, ...]], ...]  # name, words, rows


def _add(index: dict[str, GpuSpec], key: str, spec: GpuSpec, label: str, path: object) -> None:
    if not key:
        raise ValueError(f"{path}: name {label!r} of {spec.name} has no distinguishing word")
    other = index.get(key)
    if other is not None and other.name != spec.name:
        raise ValueError(f"{path}: name {label!r} is ambiguous ({other.name} and {spec.name})")
    index[key] = spec


@lru_cache(maxsize=4)
def _indexes(path: str | Path = CATALOG_PATH) -> _Index:
    exact: dict[str, GpuSpec] = {}
    unordered: dict[str, GpuSpec] = {}
    sized: dict[tuple[frozenset[str], str], GpuSpec] = {}
    labels: dict[str, tuple[frozenset[str], ...]] = {}
    members: dict[str, list[GpuSpec]] = {}
    for spec in load_catalog(path):
        spellings = []
        for label in (spec.name, *spec.aliases):
            words = gpu_words(label)  # lookup_key and unordered_key of the label, from its words
            _add(exact, "".join(words), spec, label, path)
            _add(unordered, " ".join(sorted(set(words))), spec, label, path)
            rest, _ = split_memory(words)
            sized[(frozenset(rest), spec.name)] = spec
            spellings.append(frozenset(words))
        labels[spec.name] = tuple(spellings)
        if spec.family:
            members.setdefault(spec.family, []).append(spec)
    families = []
    for family, specs in members.items():
        owner = unordered.get(unordered_key(family))
        if owner is not None:
            raise ValueError(f"{path}: family {family!r} is also a spelling of {owner.name} "
                             "(a family name must name no single row)")
        if not gpu_words(family):
            raise ValueError(f"{path}: family {family!r} has no distinguishing word")
        families.append((family, frozenset(gpu_words(family)), tuple(specs)))
    return _Index(exact, unordered, tuple((words, spec) for (words, _), spec in sized.items()),
                  labels, tuple(families))


def _covers(label: frozenset[str], words: list[str]) -> bool:
    """Every asked word is in the spelling (``sxm`` matches ``sxm2``..``sxm5`` too)."""
    return all(w in label or (w == "sxm" and any(x.startswith("sxm") for x in label))
               for w in words)


def _family_rows(index: _Index, words: list[str]) -> tuple[GpuSpec, ...]:
    """Rows of the family ``words`` name whose spellings hold all of ``words`` (rule 2)."""
    asked = set(words)
    for _, family_words, specs in index.families:
        if family_words <= asked:
            found = tuple(s for s in specs
                          if any(_covers(label, words) for label in index.labels[s.name]))
            if found:
                return found
    return ()


def gpu_members(name: str, path: str | Path = CATALOG_PATH) -> tuple[GpuSpec, ...]:
    """The catalog rows ``name`` may denote (module rules): one for a GPU named exactly,
    several (file order) for a family or part of one; raises :class:`UnknownGpuError`."""
    index = _indexes(path)
    key = lookup_key(name)
    found = index.exact.get(key) or index.unordered.get(unordered_key(name))
    if found is not None:
        return (found,)
    words = gpu_words(name)
    family = _family_rows(index, words)
    if family:
        return family
    rest, memory = split_memory(words)
    if rest:
        wanted = frozenset(rest)
        matches = {
            spec.name: spec for words_, spec in index.sized
            if words_ == wanted and (memory is None or spec.memory_gb == memory)
        }
        if len(matches) == 1:
            return tuple(matches.values())
        families = {spec.family for spec in matches.values()}
        if len(matches) > 1 and len(families) == 1 and "" not in families:
            order = {spec.name: i for i, spec in enumerate(load_catalog(path))}
            return tuple(sorted(matches.values(), key=lambda s: order[s.name]))
        if len(matches) > 1:
            raise UnknownGpuError(
                name, list(matches), "matches more than one catalog entry; name the variant"
            )
    close = difflib.get_close_matches(key, list(index.exact), n=5, cutoff=0.6)
    suggestions = list(dict.fromkeys(index.exact[k].name for k in close))
    if not suggestions:  # fall back to entries that share the model number
        digits = re.findall(r"\d{2,}", key)
        suggestions = [s.name for s in load_catalog(path) if any(d in s.name for d in digits)][:5]
    raise UnknownGpuError(name, suggestions)


def resolve_gpu(name: str, path: str | Path = CATALOG_PATH) -> GpuSpec:
    """The catalog entry for ``name`` (any listed spelling, case and word order free); a
    family name gives the family's first row (``"V100"`` -> Tesla V100 SXM2 16GB)."""
    return gpu_members(name, path)[0]


def family_names(path: str | Path = CATALOG_PATH) -> list[str]:
    """The catalog's family names (``P100``, ``V100``, ``A100``, ``H100``, ...), file order."""
    return [family for family, _, _ in _indexes(path).families]


def hardware_features(name: str) -> dict[str, float | str]:
    """``hw_*`` features of the GPU ``name`` (see :data:`HW_KEYS`)."""
    return resolve_gpu(name).hardware_features()


def roofline_features(
    name: str, precision: Precision | str | None = Precision.FP32
) -> dict[str, float | bool]:
    """:meth:`GpuSpec.roofline_features` of the GPU ``name``."""
    return resolve_gpu(name).roofline_features(precision)


def known_gpus() -> list[str]:
    """Canonical names of all catalog entries."""
    return [spec.name for spec in load_catalog()]
