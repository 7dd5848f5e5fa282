"""The job request: one schema, one parser for CLI flags, CSV rows and table rows.

Rules (:data:`FIELDS` is the only list of columns):

* The five **core** columns ``network, deployment, batch_size, iterations, phase`` make a job
  table (a served table always has them; a value may be empty). The others are optional.
* ``network`` and ``batch_size`` must have a value; ``phase`` defaults to ``train``,
  ``optimizer`` to ``sgd``, ``precision`` to ``fp32`` (also tf32, fp16, bf16: mixed precision
  on tensor cores), ``framework`` to ``tensorflow`` (or ``pytorch``: eager PyTorch's per-op
  costs), ``image_size`` to the network's own (224 for most, 299 for Inception).
* Text is stripped; an empty cell, ``None`` or NaN means "not given".
* Whole-number fields accept ``64`` and ``64.0``, not ``64.5``; every number must be finite.
* An error names the field and, where the caller says it (``where``), the file and line.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from fleet.framework import parse_framework
from fleet.precision import parse_precision
from ingest.events import PHASES

Kind = Literal["text", "whole", "number"]


@dataclass(frozen=True)
class Field:
    """One column of a job request."""

    name: str
    kind: Kind
    core: bool = False  # one of the five columns every job table has
    needed: bool = False  # must have a value
    default: Any = None


FIELDS: tuple[Field, ...] = (
    Field("network", "text", core=True, needed=True),
    Field("deployment", "text", core=True),
    Field("batch_size", "whole", core=True, needed=True),
    Field("iterations", "whole", core=True),
    Field("phase", "text", core=True, default="train"),
    Field("device", "text"),
    Field("optimizer", "text", default="sgd"),
    Field("epochs", "number"),
    Field("dataset_size", "whole"),
    Field("image_size", "whole"),
    Field("precision", "text", default="fp32"),
    Field("framework", "text", default="tensorflow"),
    Field("eval_every", "number"),
    Field("eval_size", "whole"),
    Field("stack", "text"),
)
FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
CORE_COLUMNS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.core)
OPTIONAL_COLUMNS: tuple[str, ...] = tuple(f.name for f in FIELDS if not f.core)


class JobRequestError(ValueError):
    """A job request that cannot be forecast as written."""


@dataclass(frozen=True)
class JobRequest:
    """What a user asks: a network, where (deployment or device), how big, how long."""

    network: str
    deployment: str | None = None
    batch_size: int | None = None
    iterations: int | None = None
    phase: str = "train"
    epochs: float | None = None
    dataset_size: int | None = None
    eval_every: float | None = None
    eval_size: int | None = None
    stack: str | None = None
    device: str | None = None
    optimizer: str = "sgd"
    image_size: int | None = None
    precision: str = "fp32"
    framework: str = "tensorflow"

    def describe(self) -> dict:
        """The fields that are set, for echoing a request back."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }

    def validate(self) -> None:
        """Raise :class:`JobRequestError` for a request no route can answer."""
        if not self.network or not str(self.network).strip():
            raise JobRequestError("network is missing")
        if self.batch_size is None or self.batch_size <= 0:
            raise JobRequestError(f"batch_size must be a positive integer, got {self.batch_size}")
        if self.phase not in PHASES:
            raise JobRequestError(f"phase must be train or test, got {self.phase!r}")
        if self.iterations is not None and self.iterations < 0:
            raise JobRequestError(f"iterations must be >= 0, got {self.iterations}")
        if self.epochs is not None and self.epochs < 0:
            raise JobRequestError(f"epochs must be >= 0, got {self.epochs}")
        if self.image_size is not None and self.image_size < 8:
            raise JobRequestError(f"image_size must be >= 8, got {self.image_size}")
        try:
            parse_precision(self.precision)
            parse_framework(self.framework)
        except ValueError as exc:
            raise JobRequestError(str(exc)) from None

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any], where: str | None = None) -> JobRequest:
        """A request from a CSV row, a table row or CLI flags (see the module rules)."""
        values = {f.name: _field_value(f, row.get(f.name), where) for f in FIELDS}
        values["network"] = values["network"] or ""  # validate() names it per job
        values["phase"] = str(values["phase"]).lower()
        return cls(**values)


def _at(where: str | None, message: str) -> str:
    return f"{where}: {message}" if where else message


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, float):
        return math.isnan(value)
    try:  # pandas/numpy missing markers (NA, NaT) without importing pandas
        return bool(value != value)
    except (TypeError, ValueError):
        return False


def _field_value(spec: Field, value: Any, where: str | None) -> Any:
    if _is_missing(value):
        return spec.default
    if spec.kind == "text":
        return str(value).strip()
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise JobRequestError(_at(where, f"{spec.name} must be a number, got {value!r}")) from None
    if not math.isfinite(number):
        raise JobRequestError(_at(where, f"{spec.name} must be finite, got {value!r}"))
    if spec.kind == "whole":
        if number != int(number):
            raise JobRequestError(_at(where, f"{spec.name} must be a whole number, got {value!r}"))
        return int(number)
    return number


def read_jobs_csv(path: str | Path) -> list[JobRequest]:
    """The jobs of a CSV (columns of :data:`FIELDS`); errors name the file and line."""
    rows = read_jobs_rows(path)
    for row in rows:
        if isinstance(row, JobRequestError):
            raise row
    return rows  # type: ignore[return-value]


def read_jobs_rows(path: str | Path) -> list[JobRequest | JobRequestError]:
    """Like :func:`read_jobs_csv`, but a row with a bad value becomes its error (the file's
    header problems still raise): one bad row never stops the others."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise JobRequestError(f"cannot read {path}: {reason}") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [f.name for f in FIELDS if f.needed and f.name not in header]
    if missing:
        raise JobRequestError(
            f"{path}:1: missing column(s) {', '.join(missing)}; need {CORE_COLUMNS}"
        )
    unknown = [h for h in header if h not in FIELD_BY_NAME]
    if unknown:
        raise JobRequestError(f"{path}:1: unknown column(s) {', '.join(unknown)}")
    requests: list[JobRequest | JobRequestError] = []
    for line, raw in enumerate(reader, start=2):
        row = {k.strip(): v for k, v in raw.items() if k}
        try:
            requests.append(JobRequest.from_mapping(row, where=f"{path}:{line}"))
        except JobRequestError as exc:
            requests.append(exc)
    if not requests:
        raise JobRequestError(f"{path}: no jobs (only a header)")
    return requests
