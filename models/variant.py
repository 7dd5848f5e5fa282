"""What of a run besides network, deployment and stack changes its speed: variant and system.

Rules
-----
* A run's **variant** is ``meta["variant"]``: a dict of lower-case ``str -> str`` (precision,
  compiler, data and every ``jobcast ingest --tag``). Its key (:func:`variant_key`) is the
  canonical ``"k=v,k=v"`` string: keys sorted, keys and values stripped and lower-cased, runs
  of whitespace written ``-``, empty values dropped, precisions spelled as
  :func:`fleet.precision.parse_precision` names them where it knows the spelling
  (``amp`` -> ``fp16``); ``""`` when the run states none. A key or value holding ``,`` or
  ``=`` cannot be keyed: the meta is broken (:class:`BrokenMeta`).
* A run's **system** is ``meta["system"]`` stripped (``""`` when unknown); its clock
  resolution is ``meta["clock_resolution_s"]`` (or the older ``time_resolution_s``), ``0`` when
  the log does not say. Anything else than a string, a finite number >= 0 or a dict of strings
  where those belong is broken meta: the run is skipped by the fit and named in its report.
* A request's variant (:func:`request_variant`) is its ``precision`` plus its tags. A model is
  **compatible** with it when every key the request names is either absent from the model's
  variant (the logs did not say) or has the same value. Among compatible models, those that
  state more of the asked keys rank first, then those whose other keys sit at their
  :data:`DEFAULTS` (a request that names no compiler gets ``compiler=none`` before ``xla``, one
  that states no precision ``fp32`` before ``fp16`` where the history has both, else the
  history's own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import ClassVar

from fleet.precision import parse_precision
from models.errors import ModelError

DEFAULTS: dict[str, str] = {"precision": "fp32", "compiler": "none", "data": "real"}
UNSTATED = "unstated"  # how a key the history does not state is shown (e.g. its precision)
_SPACE = re.compile(r"\s+")


class BrokenMeta(ModelError, ValueError):
    """A run's system, variant or clock resolution cannot be read."""

    kind: ClassVar[str] = "meta"


def _canonical(key: str, value: str) -> str:
    value = _SPACE.sub("-", value.strip().lower())
    if key == "precision" and value:
        try:
            return parse_precision(value).value
        except ValueError:
            return value  # int8 and the like: kept as spelled
    return value


def variant_dict(variant: object) -> dict[str, str]:
    """The canonical dict of a variant given as a dict or as ``"k=v,k=v"`` text."""
    if variant is None or variant == "":
        return {}
    if isinstance(variant, str):
        return parse_tags(variant)
    if not isinstance(variant, Mapping):
        raise BrokenMeta(f"variant must be a mapping of names to values, got {variant!r}")
    out: dict[str, str] = {}
    for raw_key, raw_value in variant.items():
        if not isinstance(raw_key, str) or not isinstance(raw_value, str | int | float):
            raise BrokenMeta(f"variant entry {raw_key!r}: {raw_value!r} is not text")
        key = _SPACE.sub("-", raw_key.strip().lower())
        value = _canonical(key, str(raw_value))
        if not key or any(c in key + value for c in ",="):
            raise BrokenMeta(f"variant entry {raw_key!r}={raw_value!r} holds ',' or '=' or no name")
        if value:
            out[key] = value
    return dict(sorted(out.items()))


def variant_key(variant: object) -> str:
    """The canonical ``"k=v,k=v"`` key of a variant (see the module rules); ``""`` for none."""
    return ",".join(f"{k}={v}" for k, v in variant_dict(variant).items())


def parse_tags(text: str | None) -> dict[str, str]:
    """``"precision=fp16,compiler=xla"`` (``,`` or ``;`` between entries) as a canonical dict;
    ValueError names an entry without ``=``."""
    out: dict[str, str] = {}
    for entry in re.split(r"[;,]", text or ""):
        if not entry.strip():
            continue
        if "=" not in entry:
            raise ValueError(f"tag {entry.strip()!r} must be written key=value")
        key, value = entry.split("=", 1)
        out[key] = value
    return variant_dict(out)


def run_system(meta: Mapping) -> str:
    """The run's system (``""`` when unknown); BrokenMeta when it is not text."""
    system = meta.get("system")
    if system is None:
        return ""
    if not isinstance(system, str):
        raise BrokenMeta(f"system must be text, got {system!r}")
    return " ".join(system.split())


def run_resolution(meta: Mapping) -> float:
    """The run's clock resolution in seconds (0 when unknown); BrokenMeta when not a finite
    number >= 0."""
    value = meta.get("clock_resolution_s", meta.get("time_resolution_s"))
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BrokenMeta(f"clock_resolution_s must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise BrokenMeta(f"clock_resolution_s must be finite and >= 0, got {value!r}")
    return float(value)


def request_variant(precision: str | None = None, tags: object = None) -> dict[str, str]:
    """What a request asks: its tags, and its precision (which wins over a tagged one)."""
    asked = variant_dict(tags)
    if precision:
        asked["precision"] = _canonical("precision", str(precision))
    return dict(sorted(asked.items()))


def compatible(model_variant: str, asked: Mapping[str, str]) -> bool:
    """Whether a model's variant may answer a request asking ``asked`` (see module rules)."""
    have = variant_dict(model_variant)
    return all(have.get(k, v) == v for k, v in asked.items())


def variant_rank(model_variant: str, asked: Mapping[str, str]) -> tuple[int, int]:
    """Higher is better: (asked keys the model states, -other keys off their default)."""
    have = variant_dict(model_variant)
    stated = sum(1 for k in asked if k in have)
    off_default = sum(
        1 for k, v in have.items() if k not in asked and DEFAULTS.get(k) not in (None, v)
    )
    unknown_extra = sum(1 for k in have if k not in asked and k not in DEFAULTS)
    return stated, -(off_default + unknown_extra)


def describe_variant(variant: str) -> str:
    """A variant key for messages: ``precision=fp16, compiler=xla`` or ``no variant``."""
    return variant.replace(",", ", ") if variant else "no variant"
