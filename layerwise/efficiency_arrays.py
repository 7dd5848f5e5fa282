"""The roofline-efficiency predictor evaluated from its saved arrays: row dicts in, numpy out.

:class:`EfficiencyArrays` is the prediction half of :class:`layerwise.efficiency.
EfficiencyPredictor` (which fits, saves and predicts on DataFrames through it): per op family
the exported trees (:class:`layerwise.forest.Forest`), the feature names they were fitted on,
the interval tables and the training ranges. Rules:

* Imports numpy, the GPU catalog and the layer kinds only (no pandas, scikit-learn or scipy),
  so a forecast of a shipped network can load and evaluate the shipped trees in a fresh
  process cheaply.
* Rows are dicts with the same keys (a DataFrame's ``to_dict("records")``, or row dicts
  normalised by :func:`as_records`: a key some rows lack is NaN in those rows, as in a
  DataFrame built from them). A column absent from every row takes its default (framework
  ``tensorflow``, activation ``none``, optimizer ``none``, precision ``fp32``).
* Features (:func:`feature_values`) are ratios of the row to its device, its GEMM shape, kind,
  pass, framework and activation one-hots and, with ``hardware_features``, the device's log
  peak, bandwidth, TDP and watts per TFLOP; a forecast is ``bound_ms x exp(trees)``, its
  interval the family's residual quantiles (seen chip: its own where it had enough held-out
  rows, else pooled; unseen chip, or a chip without timings of the row's kind: leave-one-chip-
  out), widened outside the training ranges and for kinds without rows of their own.
* FP32 GEMM rows of a dual-issue GPU (the catalog's ``fp32_dual_issue`` column) are priced
  against half the spec-sheet FP32 peak (:func:`gemm_physics`; ``dual_issue`` off keeps the
  spec-sheet peak).
* The per-GPU caches (:func:`chip_of`, :func:`fp32_issue_factor`) are cleared when a GPU is
  registered or removed (``fleet.catalog.on_catalog_change``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fleet.catalog import UnknownGpuError, catalog_name, on_catalog_change, resolve_gpu
from fleet.framework import FRAMEWORKS
from fleet.names import gpu_words
from layerwise.errors import ForecastInputError, SavedPredictorError
from layerwise.forest import Forest, ForestGroup
from layerwise.layers import KINDS
from layerwise.roofline import LAUNCH_MS, family_of, physics_columns

FORMAT_VERSION = 2
ACTIVATION_VALUES = ("none", "relu", "tanh", "sigmoid")
RANGE_FEATURES = ("log_m", "log_n", "log_k", "log_bytes", "log_bound")
# log of a 1 ms bound: past it launches and partial waves no longer change a kernel's efficiency
SATURATED_LOG_BOUND = 0.0
# what identifies the device itself (the device-agnostic trees go without them)
DEVICE_FEATURES = ("log_peak", "log_bandwidth", "log_tdp", "log_watts_per_tflop")
OUTPUT_COLUMNS = ("predicted_ms", "low_ms", "high_ms")
EPS = 1e-12
# A GPU whose spec-sheet FP32 peak counts a second FP32 datapath shared with INT32 (GA10x and
# Orin's GA10B: CC 8.6, 8.7; AD10x: 8.9; GB20x: 12.x) has ``fp32_dual_issue`` set in the
# catalog. A warp scheduler issues one instruction per cycle, so the doubled peak needs every
# issue slot to be an FMA; an SGEMM also issues loads and address arithmetic. Their FP32 GEMMs
# are priced against half that peak (the FP32-only lanes); tensor-core and memory-bound work is
# unchanged. DUAL_ISSUE_FP32 is the compute capabilities that had it when this was a tuple here:
# deprecated and no longer read (the catalog column decides, so a new architecture needs no code).
DUAL_ISSUE_FP32 = ("8.6", "8.7", "8.9", "12.0", "12.1")


@lru_cache(maxsize=1024)
def chip_of(gpu: str) -> str:
    """The GPU chip a device name belongs to (``Tesla V100-PCIE-32GB`` -> ``v100``)."""
    words = gpu_words(catalog_name(gpu))
    for word in words:
        if re.search(r"\d", word) and not re.fullmatch(r"\d+gb", word):
            return word
    return "".join(words) or str(gpu)


@lru_cache(maxsize=1024)
def fp32_issue_factor(gpu: str) -> float:
    """2 for a GPU whose catalog row has ``fp32_dual_issue`` (its FP32 GEMMs run against half
    the spec-sheet FP32 peak), else 1 (also for names outside the catalog: CPUs, ``hw_*``
    devices)."""
    try:
        spec = resolve_gpu(gpu)
    except UnknownGpuError:
        return 1.0
    return 2.0 if spec.fp32_dual_issue else 1.0


on_catalog_change(chip_of.cache_clear)
on_catalog_change(fp32_issue_factor.cache_clear)


def gemm_physics(phys: Mapping[str, np.ndarray], records: Sequence[Mapping],
                 columns: set[str]) -> dict[str, np.ndarray]:
    """:func:`physics_columns` with the effective FP32 peak of GEMM rows (a GEMM shape, not on
    tensor cores) on dual-issue GPUs (:func:`fp32_issue_factor`): peak, compute and roofline
    bound recomputed; every other row as it was."""
    out = dict(phys)
    if "gpu" not in columns or not len(records):
        return out
    simt = (np.asarray(phys["m"]) > 0) & (np.asarray(phys["tensor"]) < 0.5)
    if not simt.any():
        return out
    factor = np.array([fp32_issue_factor(str(r["gpu"])) if s else 1.0
                       for r, s in zip(records, simt, strict=True)])
    if (factor == 1.0).all():
        return out
    out["peak_flops"] = phys["peak_flops"] / factor
    out["compute_ms"] = phys["compute_ms"] * factor
    out["bound_ms"] = np.maximum(np.maximum(out["compute_ms"], phys["memory_ms"]) + LAUNCH_MS,
                                 1e-6)
    return out


def as_records(rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict], set[str]]:
    """Row dicts with one key set (the union, first-seen order; NaN where a row lacks a key,
    as ``pandas.DataFrame(rows)`` has it) and that key set."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    nan = math.nan
    return [{k: row.get(k, nan) for k in keys} for row in rows], set(keys)


def _text_column(records: Sequence[Mapping], columns: set[str], key: str,
                 default: str) -> np.ndarray:
    if key not in columns:
        return np.full(len(records), default, dtype=object)
    return np.array([str(r[key]).lower() for r in records], dtype=object)


def feature_values(names: Sequence[str], records: Sequence[Mapping], columns: set[str],
                   phys: Mapping[str, np.ndarray]) -> np.ndarray:
    """The feature matrix (rows x ``names``) of records and their :func:`physics_columns`."""
    layer = np.array([str(r["layer"]) for r in records], dtype=object)
    fw = act = None
    out = np.empty((len(records), len(names)))
    for j, name in enumerate(names):
        if name.startswith("kind_"):
            out[:, j] = layer == name[5:]
        elif name.startswith("fw_"):
            fw = _text_column(records, columns, "framework", "tensorflow") if fw is None else fw
            out[:, j] = fw == name[3:]
        elif name.startswith("act_"):
            act = _text_column(records, columns, "activation", "none") if act is None else act
            out[:, j] = act == name[4:]
        else:
            out[:, j] = _numeric_feature(name, phys)
    return out


def _numeric_feature(name: str, p: Mapping[str, np.ndarray]) -> np.ndarray:
    """One numeric feature of the physics columns (see the module rules)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "log_bound":
            return np.log(p["bound_ms"])
        if name == "ridge":
            return np.log(p["compute_ms"] + EPS) - np.log(p["memory_ms"] + EPS)
        if name == "log_tiles_per_sm":
            return np.log(p["tiles"] / p["sm_count"])
        if name in ("log_m", "log_n", "log_k"):
            return np.log1p(p[name[4:]])
        if name == "log_bytes":
            return np.log1p(p["bytes"])
        if name == "log_bytes_l2":
            return np.log(p["bytes"] + 1.0) - np.log(p["l2_mb"] * 1e6)
        if name == "weight_share":
            return p["weight_bytes"] / (p["bytes"] + 1.0)
        if name == "log_peak":
            return np.log(p["peak_flops"])
        if name == "log_bandwidth":
            return np.log(p["bandwidth"])
        if name == "log_tdp":
            return np.log(p["tdp_w"])
        if name == "log_watts_per_tflop":
            return np.log(p["tdp_w"] / (p["peak_flops"] * 1e-12))
        if name in ("wave_eff", "train", "slots", "tensor"):
            return np.asarray(p[name], float)
    raise SavedPredictorError(f"unknown efficiency feature {name!r}")


def feature_names(hardware: bool) -> list[str]:
    """The feature names a fit uses, in order (kinds and frameworks as registered now)."""
    names = ["log_bound", "ridge", "log_tiles_per_sm", "wave_eff", "log_m", "log_n", "log_k",
             "log_bytes", "log_bytes_l2", "weight_share", "train", "slots", "tensor"]
    names += [f"kind_{k}" for k in KINDS] + [f"fw_{f}" for f in FRAMEWORKS]
    names += [f"act_{a}" for a in ACTIVATION_VALUES]
    if hardware:
        names += ["log_peak", "log_bandwidth", "log_tdp", "log_watts_per_tflop"]
    return names


def apply_interval(iv: Mapping[str, Any], key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) log offsets of an interval table (bins of ``key`` = log bound)."""
    which = np.searchsorted(np.asarray(iv["edges"], float), key)
    return np.asarray(iv["low"], float)[which], np.asarray(iv["high"], float)[which]


class EfficiencyArrays:
    """The saved efficiency predictor's trees, intervals and ranges (see the module rules).

    ``families``: family -> dict with ``forest`` (:class:`Forest`), ``features``,
    ``seen_interval``, ``seen_interval_by_chip``, ``unseen_interval``, ``ranges``.
    """

    def __init__(self, families: Mapping[str, Mapping[str, Any]], kinds: Sequence[str],
                 chips: Sequence[str], extrapolation_widening: float = 1.5,
                 no_data_widening: float = 2.0,
                 chip_kinds: Mapping[str, Sequence[str]] | None = None,
                 transfer_scale: float | None = 0.5, dual_issue: bool = True):
        self.families = dict(families)
        self.kinds = list(kinds)
        self.chips = list(chips)
        self.chip_kinds = ({c: set(k) for c, k in chip_kinds.items()}
                           if chip_kinds is not None else None)
        self.extrapolation_widening = float(extrapolation_widening)
        self.no_data_widening = float(no_data_widening)
        self.transfer_scale = transfer_scale
        self.dual_issue = dual_issue
        self._forest_group: ForestGroup | None = None

    def _shared_features(self) -> list[str] | None:
        """The feature list every family uses, if they share one (then one walk serves all)."""
        lists = [list(e["features"]) for e in self.families.values()]
        return lists[0] if lists and all(f == lists[0] for f in lists) else None

    def _group(self, names: list[str]) -> ForestGroup:
        """Device trees of each family (codes 0..F-1), then their device-agnostic trees
        (codes F..2F-1, features renumbered into ``names``)."""
        if self._forest_group is None:
            order = sorted(self.families)
            forests = [self.families[f]["forest"] for f in order]
            for f in order:
                agn = self.families[f].get("agnostic")
                forests.append(_renumbered(agn["forest"], agn["features"], names)
                               if agn else self.families[f]["forest"])
            self._forest_group = ForestGroup(forests)
        return self._forest_group

    def device_weight(self, entry: Mapping[str, Any], X: np.ndarray, names: list[str],
                      chip: np.ndarray, layer: np.ndarray) -> np.ndarray:
        """Per row, how far the device trees are trusted: exp(-d / transfer_scale), d (log
        units) = how far the row's bound lies above what its chip's own rows of its kind and
        pass covered (seen chips; only up to
        :data:`SATURATED_LOG_BOUND`, where a kernel's efficiency no longer changes with its
        size, so holding the edge is safe) plus how far its device features lie outside the
        training chips' span on its compute path (tensor cores or not)."""
        if "agnostic" not in entry or self.transfer_scale is None:
            return np.ones(len(X))
        d = np.zeros(len(X))
        tensor = np.round(X[:, names.index("tensor")]).astype(int)
        for t in np.unique(tensor):
            rows = tensor == t
            span = entry["device_span"].get(str(t))
            if span is None:  # no training row takes this path: all outside
                d[rows] = np.inf
                continue
            for col, (lo, hi) in span.items():
                v = X[rows, names.index(col)]
                d[rows] = np.maximum(d[rows], np.maximum(lo - v, v - hi))
        own = entry["chip_ranges"]
        bound = X[:, names.index("log_bound")]
        keys = np.array([f"{k}/{int(round(t))}" for k, t in
                         zip(layer, X[:, names.index("train")], strict=True)], dtype=object)
        for c, key in set(zip(chip, keys, strict=True)):
            covered = own.get(c, {}).get(key)
            if covered is None:
                continue
            rows = (chip == c) & (keys == key)
            # a size above what the chip's own rows covered, counted up to saturation only
            # (below them the device trees hold the small-size, launch-bound efficiency)
            d[rows] += np.maximum(np.minimum(bound[rows], SATURATED_LOG_BOUND) - covered[1], 0.0)
        return np.exp(-np.maximum(d, 0.0) / max(float(self.transfer_scale), 1e-9))

    def _shared_pred(self, X: np.ndarray, names: list[str], code: np.ndarray,
                     chip: np.ndarray, layer: np.ndarray) -> np.ndarray:
        """Log ratio of every row in one walk: its family's device trees, agnostic trees or
        both (blended by :meth:`device_weight`)."""
        order = sorted(self.families)
        weight = np.ones(len(X))
        for j, family in enumerate(order):
            sel = np.flatnonzero(code == j)
            if len(sel):
                weight[sel] = self.device_weight(self.families[family], X[sel], names,
                                                 chip[sel], layer[sel])
        dev, agn = np.flatnonzero(weight > 0), np.flatnonzero(weight < 1)
        both = self._group(names).predict(X[np.r_[dev, agn]],
                                          np.r_[code[dev], code[agn] + len(order)])
        on_dev, on_agn = np.zeros(len(X)), np.zeros(len(X))
        on_dev[dev], on_agn[agn] = both[:len(dev)], both[len(dev):]
        return weight * on_dev + (1.0 - weight) * on_agn

    def _bounds(self, entry: Mapping[str, Any], X: np.ndarray, chip: np.ndarray,
                seen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(low, high) log offsets of one family's rows and their extrapolated flag."""
        names = list(entry["features"])
        key = X[:, names.index("log_bound")]
        lo, hi = apply_interval(entry["seen_interval"], key)
        for c, iv in entry.get("seen_interval_by_chip", {}).items():
            mine = chip == c
            if mine.any():
                lo[mine], hi[mine] = apply_interval(iv, key[mine])
        if entry.get("unseen_interval") is not None:
            u_lo, u_hi = apply_interval(entry["unseen_interval"], key)
            lo, hi = np.where(seen, lo, u_lo), np.where(seen, hi, u_hi)
        outside = np.zeros(len(X), dtype=bool)
        for col, (a, b) in entry["ranges"].items():
            v = X[:, names.index(col)]
            outside |= (v < a - 1e-9) | (v > b + 1e-9)
        widen = np.where(outside, self.extrapolation_widening, 1.0)
        return lo * widen, hi * widen, outside

    def _family_pred(self, entry: Mapping[str, Any], X: np.ndarray, chip: np.ndarray,
                     layer: np.ndarray) -> np.ndarray:
        """One family's log ratio when the families have feature lists of their own."""
        names = list(entry["features"])
        w = self.device_weight(entry, X, names, chip, layer)
        out = w * entry["forest"].predict(X)
        if (w < 1).any():
            agn = entry["agnostic"]
            cols = [names.index(c) for c in agn["features"]]
            out += (1.0 - w) * agn["forest"].predict(X[:, cols])
        return out

    @property
    def known_layers(self) -> set[str]:
        """Kinds it prices: every registered kind whose family has trees."""
        return {k for k in KINDS if family_of(k) in self.families}

    def check_kinds(self, layers: Sequence[str]) -> None:
        """Refuse (:class:`ForecastInputError`, a ``ValueError``) layer kinds this predictor
        has no trees for."""
        unknown = sorted(set(layers) - self.known_layers)
        if unknown:
            raise ForecastInputError(f"no model for layer kind(s) {', '.join(unknown)}; this "
                                     f"predictor prices {', '.join(sorted(self.known_layers))}")

    def predict_records(self, records: Sequence[Mapping], columns: set[str] | None = None,
                        labels: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
        """predicted/low/high ms, bound_ms, efficiency, extrapolated, seen_device, own_data
        per record (records with one key set, see :func:`as_records`)."""
        n = len(records)
        if n == 0:
            return {c: np.zeros(0) for c in (*OUTPUT_COLUMNS, "bound_ms")}
        columns = set(records[0]) if columns is None else columns
        layer = [str(r["layer"]) for r in records]
        self.check_kinds(layer)
        phys = physics_columns(records, labels, columns)
        if self.dual_issue:
            phys = gemm_physics(phys, records, columns)
        fam = np.array([family_of(k) for k in layer], dtype=object)
        gpus = [str(r["gpu"]) for r in records] if "gpu" in columns else [""] * n
        chip = np.array([chip_of(g) for g in gpus], dtype=object)
        if self.chip_kinds is None:
            seen = np.isin(chip, self.chips)
        else:  # seen = the chip has timings of this very kind
            seen = np.array([k in self.chip_kinds.get(c, ()) for c, k in zip(chip, layer,
                                                                            strict=True)])
        missing = sorted(set(fam) - set(self.families))
        if missing:
            raise ForecastInputError(f"no trees for the {missing[0]!r} family")
        order = sorted(self.families)
        code = np.array([order.index(f) for f in fam], dtype=np.intp)
        layer_arr = np.array(layer, dtype=object)
        shared = self._shared_features()
        X_all: np.ndarray | None = None
        if shared:
            X_all = feature_values(shared, records, columns, phys)
            pred = self._shared_pred(X_all, shared, code, chip, layer_arr)
        else:
            pred = np.zeros(n)
        low, high = np.zeros(n), np.zeros(n)
        extrap = np.zeros(n, dtype=bool)
        for j, family in enumerate(order):
            entry = self.families[family]
            sel = np.flatnonzero(code == j)
            if not len(sel):
                continue
            if X_all is not None:
                X = X_all[sel]
            else:
                X = feature_values(entry["features"], [records[int(i)] for i in sel], columns,
                                   {k: v[sel] for k, v in phys.items()})
                pred[sel] = self._family_pred(entry, X, chip[sel], layer_arr[sel])
            low[sel], high[sel], extrap[sel] = self._bounds(entry, X, chip[sel], seen[sel])
        own = np.isin(np.array(layer, dtype=object), self.kinds)
        low = np.where(own, low, low * self.no_data_widening)
        high = np.where(own, high, high * self.no_data_widening)
        bound = phys["bound_ms"]
        return {"predicted_ms": bound * np.exp(pred), "low_ms": bound * np.exp(pred + low),
                "high_ms": bound * np.exp(pred + high), "bound_ms": bound,
                "efficiency": np.exp(-pred), "extrapolated": extrap, "seen_device": seen,
                "own_data": own}

    @classmethod
    def load(cls, directory: str | Path) -> EfficiencyArrays:
        """The arrays of a folder written by ``EfficiencyPredictor.save``."""
        doc, families = read_saved(Path(directory))
        params = doc.get("params", {})
        chip_kinds = doc.get("chip_kinds") if params.get("seen_by_kind", True) else None
        return cls(families, doc["kinds"], doc["chips"],
                   params.get("extrapolation_widening", 1.5), params.get("no_data_widening", 2.0),
                   chip_kinds, params.get("transfer_scale", 0.5),
                   params.get("dual_issue", True))


def read_saved_doc(doc_path: Path, version: int, what: str) -> dict[str, Any]:
    """The JSON document of a saved model; clear errors for a missing file, bad JSON or a
    format version this jobcast does not read."""
    if not doc_path.is_file():
        raise FileNotFoundError(f"{doc_path}: not a saved {what} (no {doc_path.name})")
    try:
        doc = json.loads(doc_path.read_text())
    except json.JSONDecodeError as exc:
        raise SavedPredictorError(
            f"{doc_path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if doc.get("format_version") != version:
        raise SavedPredictorError(f"{doc_path}: format version {doc.get('format_version')!r}, "
                                  f"this jobcast reads {version}")
    return doc


def read_saved(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(``efficiency.json`` document, families with their forests) of a saved folder."""
    doc = read_saved_doc(path / "efficiency.json", FORMAT_VERSION, "efficiency predictor")
    with np.load(path / "efficiency.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    families: dict[str, dict[str, Any]] = {}
    for family, meta in doc["families"].items():
        families[family] = {**meta, "forest": _forest(arrays, f"{family}_", meta)}
        if "agnostic" in meta:
            families[family]["agnostic"] = {
                **meta["agnostic"],
                "forest": _forest(arrays, f"agnostic-{family}_", meta["agnostic"])}
    return doc, families


def _renumbered(forest: Forest, features: Sequence[str], names: Sequence[str]) -> Forest:
    """The same trees reading their features from a row of ``names``."""
    where = np.array([list(names).index(c) for c in features], dtype=np.int16)
    return Forest(where[forest.feature.astype(np.intp)], forest.threshold, forest.left,
                  forest.right, forest.value, forest.roots, forest.baseline, forest.depth)


def _forest(arrays: Mapping[str, np.ndarray], prefix: str, meta: Mapping[str, Any]) -> Forest:
    return Forest.from_arrays({k[len(prefix):]: v for k, v in arrays.items()
                               if k.startswith(prefix)}, meta["baseline"], meta["depth"])
