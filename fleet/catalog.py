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
- A bad row fails the load with ``file:line: reason`` (:class:`CatalogError`, a ``ValueError``);
  peaks, clocks, bandwidth, memory and core counts must be positive. The catalog is read once
  per process (cached).
- A GPU added at run time is :func:`register_gpu` (a mapping of the file's columns, checked as
  a row is) and :func:`unregister_gpu`; both clear this module's caches and every cache hooked
  with :func:`on_catalog_change` (a module that caches values read from the catalog hooks its
  cache there). Only this process sees the row.
"""

from __future__ import annotations

import csv
import difflib
import math
import re
from collections.abc import Callable, Mapping
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
    "l2_mb", "tdp_w", "form_factor", "nvlink_gbs", "pcie_gen", "family", "fp32_dual_issue",
)
FORM_FACTORS = frozenset({"sxm", "pcie", "desktop", "mobile", "oam", "embedded"})

__all__ = [
    "CATALOG_PATH", "FORM_FACTORS", "HW_KEYS", "CatalogError", "CatalogRowError", "GpuSpec",
    "UnknownGpuError", "catalog_name", "family_names", "on_catalog_change", "register_gpu",
    "unregister_gpu",
    "gpu_members", "hardware_features", "known_gpus", "load_catalog", "lookup_key", "resolve_gpu",
    "roofline_features",
]


class UnknownGpuError(FleetError, KeyError):
    """Raised for a GPU name the catalog cannot resolve; ``suggestions`` holds close names."""

    kind: ClassVar[str] = "unknown_gpu"

    def __init__(self, name: str, suggestions: list[str], reason: str = ""):
        self.name = name
        self.suggestions = suggestions
        reason = self.reason = reason or f"not in the GPU catalog ({CATALOG_PATH.name})"
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
    # the spec-sheet FP32 peak counts a second FP32 datapath shared with INT32 (GA10x, AD10x,
    # GB20x): an FP32 GEMM reaches about half of it (layerwise.efficiency_arrays)
    fp32_dual_issue: bool = False

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


class CatalogError(FleetError, ValueError):
    """The GPU catalog file cannot be loaded: a bad header, a bad row, or two spellings that
    clash. The message starts ``file:line:`` (``file:`` for a clash); :attr:`file` and
    :attr:`line` hold them for the JSON error shape."""

    kind: ClassVar[str] = "catalog"

    def __init__(self, message: str, file: object = None, line: int | None = None):
        super().__init__(message)
        self.file = None if file is None else str(file)
        self.line = line


class CatalogRowError(CatalogError):
    """One catalog row is bad (the reason alone; :func:`load_catalog` adds ``file:line``)."""




def _text(row: dict[str, str | None], column: str, required: bool = True) -> str:
    if column not in row and not required:  # an optional column the file does not have
        return ""
    value = row.get(column)
    if value is None:  # DictReader fills a short row with None
        raise CatalogRowError(f"missing value for column {column!r} (fewer fields than the header)")
    value = value.strip()
    if required and not value:
        raise CatalogRowError(f"empty column {column!r}")
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
        raise CatalogRowError(f"column {column!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise CatalogRowError(f"column {column!r}: {text!r} is not finite")
    if positive and value <= 0:
        raise CatalogRowError(f"column {column!r} must be positive, got {text}")
    if value < 0:
        raise CatalogRowError(f"column {column!r} must not be negative, got {text}")
    return value


def _integer(row: dict[str, str | None], column: str, *, required: bool = True) -> int | None:
    value = _number(row, column, required=required)
    if value is not None and not value.is_integer():
        raise CatalogRowError(f"column {column!r} must be a whole number, got {value:g}")
    return None if value is None else int(value)


def _flag(row: dict[str, str | None], column: str) -> bool:
    """An optional 0/1 column (also ``true``/``false``, ``yes``/``no``); empty or absent: 0."""
    text = _text(row, column, required=False).lower()
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise CatalogRowError(f"column {column!r} must be 0 or 1, got {text!r}")


def _parse_row(row: dict[str, str | None]) -> GpuSpec:
    if None in row:  # DictReader files surplus fields under the key None
        raise CatalogRowError("more fields than the header has")
    form = _text(row, "form_factor", required=False).lower()
    if form and form not in FORM_FACTORS:
        raise CatalogRowError(f"form_factor {form!r} is not one of {sorted(FORM_FACTORS)}")
    pcie = _integer(row, "pcie_gen", required=False)
    if pcie is not None and not 1 <= pcie <= 7:
        raise CatalogRowError(f"pcie_gen must be 1..7, got {pcie}")
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
        fp32_dual_issue=_flag(row, "fp32_dual_issue"),
    )


@lru_cache(maxsize=4)
def load_catalog(path: str | Path = CATALOG_PATH) -> tuple[GpuSpec, ...]:
    """All catalog entries, in file order (for the shipped file, then the rows added by
    :func:`register_gpu`, in the order they were added); a bad row raises
    ``CatalogError("file:line: why")`` (a ``ValueError``)."""
    specs = _read_catalog(path)
    if Path(path).resolve() == CATALOG_PATH:
        specs += tuple(_REGISTERED.values())
    return specs


def _read_catalog(path: str | Path) -> tuple[GpuSpec, ...]:
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
            raise CatalogError(f"{path}:1: bad header ({why})", path, 1)
        reader.fieldnames = header
        specs = []
        for row in reader:
            try:
                specs.append(_parse_row(row))
            except CatalogRowError as exc:
                raise CatalogError(f"{path}:{reader.line_num}: {exc}", path,
                                   reader.line_num) from None
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
        raise CatalogError(f"{path}: name {label!r} of {spec.name} has no distinguishing word",
                           path)
    other = index.get(key)
    if other is not None and other.name != spec.name:
        raise CatalogError(f"{path}: name {label!r} is ambiguous ({other.name} and {spec.name})",
                           path)
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
            raise CatalogError(f"{path}: family {family!r} is also a spelling of {owner.name} "
                               "(a family name must name no single row)", path)
        if not gpu_words(family):
            raise CatalogError(f"{path}: family {family!r} has no distinguishing word", path)
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
    several (file order) for a family or part of one; raises :class:`UnknownGpuError`.
    Looked up once per spelling (blanks and case aside) until the catalog changes."""
    found = _members(" ".join(str(name).split()).lower(), path)
    if isinstance(found, UnknownGpuError):
        raise UnknownGpuError(name, list(found.suggestions), found.reason)
    return found


@lru_cache(maxsize=4096)
def _members(text: str, path: str | Path) -> tuple[GpuSpec, ...] | UnknownGpuError:
    """:func:`gpu_members` of a normalised spelling, or the error saying why there are none
    (its suggestions cost a difflib search of every name: once per spelling, not per run)."""
    try:
        return _find_members(text, path)
    except UnknownGpuError as exc:
        return exc.with_traceback(None)


def _find_members(name: str, path: str | Path) -> tuple[GpuSpec, ...]:
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


def catalog_name(name: str) -> str:
    """The catalog's name of the GPU ``name`` (``NVIDIA H100 80GB HBM3`` -> ``H100 SXM5``);
    ``name`` itself when the catalog does not know it."""
    try:
        return resolve_gpu(name).name
    except UnknownGpuError:
        return name


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


# Rows added at run time (register_gpu), by name; and the caches of other modules that read
# the catalog (on_catalog_change), cleared with this module's own whenever the rows change.
_REGISTERED: dict[str, GpuSpec] = {}
_ON_CHANGE: list[Callable[[], object]] = []


def on_catalog_change(clear: Callable[[], object]) -> Callable[[], object]:
    """Have ``clear`` (a cache's ``cache_clear``) run whenever :func:`register_gpu` or
    :func:`unregister_gpu` changes the catalog; every cache of a value read from the catalog
    must be hooked so (``fleet.identity``, ``layerwise.efficiency_arrays``,
    ``layerwise.roofline`` are). Returns ``clear``."""
    if clear not in _ON_CHANGE:
        _ON_CHANGE.append(clear)
    return clear


def _changed() -> None:
    load_catalog.cache_clear()
    _indexes.cache_clear()
    _members.cache_clear()
    for clear in tuple(_ON_CHANGE):
        clear()


def register_gpu(row: Mapping[str, object]) -> GpuSpec:
    """Add one GPU to this process's catalog, as one more row of ``gpu_catalog.csv`` would.

    ``row`` maps column names (:data:`REQUIRED_COLUMNS`, any of :data:`OPTIONAL_COLUMNS`) to
    values (numbers or their text; ``aliases`` separated by ``;``); it is checked as a file row
    is. Every name lookup, deployment key, interconnect default and layerwise forecast sees the
    row at once (the caches are cleared); processes started before, and worker processes, do
    not. A bad row, a name already in the catalog or a spelling that clashes with another
    row's raises :class:`CatalogError` and changes nothing. Pricing the GPU is the price
    table's business (``jobcast.service.features.prices``), the "Sources" of a new architecture is
    ``fleet/data/README.md``'s."""
    unknown = [c for c in row if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    missing = [c for c in REQUIRED_COLUMNS if c not in row]
    if unknown or missing:
        why = "; ".join([f"unknown column(s) {unknown}"] * bool(unknown)
                        + [f"missing column(s) {missing}"] * bool(missing))
        raise CatalogError(f"register_gpu: {why}")
    text: dict[str, str | None] = {c: "" if v is None else str(v) for c, v in row.items()}
    try:
        spec = _parse_row(text)
    except CatalogRowError as exc:
        raise CatalogError(f"register_gpu {text.get('name', '')!r}: {exc}") from None
    if spec.name in {s.name for s in load_catalog()}:
        raise CatalogError(f"register_gpu: {spec.name!r} is already in the GPU catalog")
    _REGISTERED[spec.name] = spec
    try:
        _changed()
        _indexes()  # a spelling that clashes with another row's fails here
    except CatalogError:
        del _REGISTERED[spec.name]
        _changed()
        raise
    return spec


def unregister_gpu(name: str) -> None:
    """Remove a GPU :func:`register_gpu` added (any of its spellings); the shipped file's rows
    cannot be removed (:class:`CatalogError`), nor an unknown name (:class:`UnknownGpuError`)."""
    spec = resolve_gpu(name)
    if _REGISTERED.get(spec.name) is not spec:
        raise CatalogError(f"unregister_gpu: {spec.name!r} is a row of {CATALOG_PATH.name}, "
                           "not one register_gpu added")
    del _REGISTERED[spec.name]
    _changed()


def known_gpus() -> list[str]:
    """Canonical names of all catalog entries."""
    return [spec.name for spec in load_catalog()]
