"""Catalog of NVIDIA GPUs with the hardware features the predictors use.

The data lives in ``fleet/data/gpu_catalog.csv`` (columns and sources in
``fleet/data/README.md``). Rules:

- Names are normalised by :mod:`fleet.names`; a name resolves by its joined words
  (:func:`~fleet.names.lookup_key`), then by its words in any order
  (:func:`~fleet.names.unordered_key`), then with the memory size set aside: ``"Tesla V100-SXM3"``
  finds the one V100 SXM3 entry, ``"NVIDIA L4 24GB"`` the L4 (the size must agree). Two entries
  are never guessed between: that, or an unknown name, raises :class:`UnknownGpuError` with
  suggestions. Two entries whose spellings normalise alike make the catalog fail to load.
- Peak throughput per precision (:meth:`GpuSpec.peak_tflops`): fp32 runs on the CUDA cores;
  tf32, fp16 and bf16 run on tensor cores where the GPU has them for that type (dense
  peaks, FP32 accumulate) and at the FP32 rate otherwise, because mixed precision
  accumulates in FP32 and frameworks do not use the non-tensor half-precision units for it.
- A bad row fails the load with ``file:line: reason``; peaks, clocks, bandwidth, memory and
  core counts must be positive.
"""

from __future__ import annotations

import csv
import difflib
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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
    "l2_mb", "tdp_w", "form_factor", "nvlink_gbs", "pcie_gen",
)
FORM_FACTORS = frozenset({"sxm", "pcie", "desktop", "mobile", "oam", "embedded"})

__all__ = [
    "CATALOG_PATH", "FORM_FACTORS", "HW_KEYS", "GpuSpec", "UnknownGpuError", "hardware_features",
    "known_gpus", "load_catalog", "lookup_key", "resolve_gpu", "roofline_features",
]


class UnknownGpuError(KeyError):
    """Raised for a GPU name the catalog cannot resolve; ``suggestions`` holds close names."""

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


class _RowError(ValueError):
    pass


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
    for spec in load_catalog(path):
        for label in (spec.name, *spec.aliases):
            _add(exact, lookup_key(label), spec, label, path)
            _add(unordered, unordered_key(label), spec, label, path)
            rest, _ = split_memory(gpu_words(label))
            sized[(frozenset(rest), spec.name)] = spec
    return _Index(exact, unordered, tuple((words, spec) for (words, _), spec in sized.items()))


def resolve_gpu(name: str, path: str | Path = CATALOG_PATH) -> GpuSpec:
    """The catalog entry for ``name`` (any listed spelling, case and word order free)."""
    index = _indexes(path)
    key = lookup_key(name)
    found = index.exact.get(key) or index.unordered.get(unordered_key(name))
    if found is not None:
        return found
    rest, memory = split_memory(gpu_words(name))
    if rest:
        wanted = frozenset(rest)
        matches = {
            spec.name: spec for words, spec in index.sized
            if words == wanted and (memory is None or spec.memory_gb == memory)
        }
        if len(matches) == 1:
            return next(iter(matches.values()))
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
