"""The job request: one schema, one parser for CLI flags, CSV rows and table rows.

Rules (:data:`FIELDS` is the only list of columns):

* The five **core** columns ``network, deployment, batch_size, iterations, phase`` make a job
  table (a served table always has them; a value may be empty). The others are optional.
* ``network`` and ``batch_size`` must have a value; ``phase`` defaults to ``job`` (the whole
  run: start-up, training, evaluation and the gaps between them, with the phases beside it;
  ``train`` or ``test`` ask for one phase),
  ``optimizer`` to ``sgd``, ``precision`` to ``fp32`` (also tf32, fp16, bf16: mixed precision
  on tensor cores), ``framework`` to ``auto`` (``pytorch`` unless the stack, the job's history
  or the network's source says ``tensorflow``: ``jobcast.service.engine.framework_choice``, which
  the answer's assumptions quote), ``image_size`` to the network's own (224 for most, 299
  for Inception),
  ``data_parallel`` (how N GPUs share a layerwise step: ``ddp``, ``allreduce``, ``replicated``,
  ``dp``, ``fleet.data_parallel``) to ``auto`` (``models.scaling.auto_strategy``), kept as None.
* End-to-end variant: a *stated* ``precision`` and ``tags`` (``"compiler=xla,data=real"``) pick
  only history of that variant; an unstated precision (the fp32 default,
  :data:`DEFAULT_PRECISION`) lets it take the history's own. ``system`` asks for that system's
  own history (``jobcast.service.engine.e2e_route``).
* Text is stripped; an empty cell, ``None`` or NaN means "not given".
* Whole-number fields accept ``64`` and ``64.0``, not ``64.5``; every number must be finite.
* An error names the field and, where the caller says it (``where``), the file and line.
  :class:`JobRequestError` carries them as ``field`` and ``row`` (a table's row from 0).
* Ranges (:data:`LIMITS`, shared with what ingest stores where the two meet): ``batch_size``
  1 .. 1e7, ``iterations`` 1 .. 1e9, ``epochs`` and ``eval_every`` in (0, 1e6],
  ``dataset_size`` and ``eval_size`` 1 .. 1e10, ``image_size`` 8 .. 8192; the iterations a job
  implies (``epochs x dataset_size / batch_size``) at most 1e9. A batch size past the bound is
  an error, not an extrapolation: no fitted model says anything about it. ``validate`` checks
  the same ranges on requests built in code, where 0 iterations is allowed (a job with nothing
  left to run: ``eta`` asks it).
* Text is at most :data:`MAX_TEXT_CHARS` characters without control characters; a boolean is
  not a number. A table row with a column not in :data:`FIELDS` is refused, naming it, where
  the caller asks for it (``strict``: served tables); a CSV header is always checked.
* A CSV must be UTF-8 (a byte-order mark is allowed): an undecodable byte is an error naming
  the file and line.
"""

from __future__ import annotations

import csv
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from fleet.data_parallel import parse_data_parallel
from fleet.deprecation import renamed_property, warn_renamed
from fleet.framework import AUTO, parse_framework_choice
from fleet.precision import parse_precision
from ingest.events import PHASES
from ingest.validate import MAX_BATCH_SIZE, MAX_ITERATIONS
from jobcast.service.errors import ServiceError
from models.variant import parse_tags

Kind = Literal["text", "whole", "number"]


@dataclass(frozen=True)
class Field:
    """One column of a job request."""

    name: str
    kind: Kind
    core: bool = False  # one of the five columns every job table has
    needed: bool = False  # must have a value
    default: Any = None


class UnstatedDefault(str):
    """A default the request did not state: equal to its text (``"fp32"``), but
    :meth:`JobRequest.states_precision` tells it from a stated one (the end-to-end route
    then takes the history's precision instead of insisting on fp32)."""


DEFAULT_PRECISION = UnstatedDefault("fp32")

FIELDS: tuple[Field, ...] = (
    Field("network", "text", core=True, needed=True),
    Field("deployment", "text", core=True),
    Field("batch_size", "whole", core=True, needed=True),
    Field("iterations", "whole", core=True),
    Field("phase", "text", core=True, default="job"),
    Field("device", "text"),
    Field("optimizer", "text", default="sgd"),
    Field("epochs", "number"),
    Field("dataset_size", "whole"),
    Field("image_size", "whole"),
    Field("precision", "text", default=DEFAULT_PRECISION),
    Field("framework", "text", default=AUTO),
    Field("data_parallel", "text"),  # layerwise on N GPUs: auto (unset), ddp, allreduce, ...
    Field("eval_every", "number"),
    Field("eval_size", "whole"),
    Field("stack", "text"),
    Field("system", "text"),  # a recurring job's (system's) own history (meta["system"])
    Field("gpus", "whole"),  # with a system: its GPU model at this many GPUs per node
    Field("tags", "text"),  # end-to-end variant beyond precision: "compiler=xla,data=real"
)

# What a request may ask: the whole job (the default) or one phase of it.
REQUEST_PHASES: tuple[str, ...] = ("job", *PHASES)

FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
CORE_COLUMNS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.core)
OPTIONAL_COLUMNS: tuple[str, ...] = tuple(f.name for f in FIELDS if not f.core)


@dataclass(frozen=True)
class Limit:
    """The allowed range of a number field: ``low`` (exclusive when ``open_low``) .. ``high``."""

    low: float
    high: float
    open_low: bool = False

    def allows(self, number: float) -> bool:
        """Whether ``number`` lies within the limit."""
        above = number > self.low if self.open_low else number >= self.low
        return above and number <= self.high

    def describe(self) -> str:
        """The limit as people read it: ``1 .. 4096``, ``more than 0 .. 1e+06``."""
        low = f"more than {self.low:g}" if self.open_low else f"{self.low:g}"
        return f"{low} .. {self.high:g}"


MAX_DATASET_SIZE = 1e10  # samples per epoch or per evaluation pass
MAX_EPOCHS = 1e6
MAX_TEXT_CHARS = 4096  # a network may be a file path on the command line
LIMITS: dict[str, Limit] = {
    "batch_size": Limit(1, MAX_BATCH_SIZE),
    "iterations": Limit(1, MAX_ITERATIONS),
    "epochs": Limit(0, MAX_EPOCHS, open_low=True),
    "dataset_size": Limit(1, MAX_DATASET_SIZE),
    "eval_every": Limit(0, MAX_EPOCHS, open_low=True),
    "eval_size": Limit(1, MAX_DATASET_SIZE),
    "image_size": Limit(8, 8192),
    "gpus": Limit(1, 1024),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# a path, JSON text or a module:callable reference (code a server never runs), not a name
_NOT_A_NAME = re.compile(r"[/\\{}:]")
_FILE_SUFFIXES = (".json", ".keras", ".h5")


UNKNOWN_COLUMN = "unknown_column"  # JobRequestError.refusal: a column no Field names
INVALID_VALUE = "invalid_value"  # JobRequestError.refusal: anything else wrong with a request


class JobRequestError(ServiceError, ValueError):
    """A job request that cannot be forecast as written; ``field`` names the column at fault
    and ``row`` the table row (from 0) where known; ``refusal`` says what is wrong in a word
    (:data:`UNKNOWN_COLUMN` or :data:`INVALID_VALUE`), so a caller (the REST server's
    refusal reason) never reads it out of the message. ``kind`` stays the error family's
    (``request``).

    ``problem`` is the old name of ``refusal`` (attribute and keyword), deprecated for one
    release: everywhere else the key ``problem`` holds the error object
    (:class:`fleet.errors.ErrorInfo`), never a word."""

    kind: ClassVar[str] = "request"
    field: str | None
    row: int | None
    refusal: str

    def __init__(self, message: str, *, field: str | None = None, row: int | None = None,
                 refusal: str = INVALID_VALUE, problem: str | None = None):
        super().__init__(message)
        if problem is not None:
            warn_renamed("JobRequestError(problem=...)", "JobRequestError(refusal=...)")
            refusal = problem
        self.field = field
        self.row = row
        self.refusal = refusal

    problem = renamed_property("JobRequestError", "problem", "refusal", writable=False)

    def as_dict(self) -> dict:
        """``{"error", "row", "field"}``: the body of a refused served request."""
        return {"error": str(self), "row": self.row, "field": self.field}


# Training-set sizes assumed when a job in epochs gives none (samples per epoch).
USUAL_DATASETS = {"resnet20": ("CIFAR-10", 50_000), "resnet3-cifar10": ("CIFAR-10", 50_000)}
DEFAULT_DATASET = ("ImageNet-1k", 1_281_167)


def usual_dataset(network: str) -> tuple[str, int]:
    """(name, samples per epoch) of the dataset a network usually trains on: CIFAR-10 for
    the CIFAR ResNets, else ImageNet-1k's training set."""
    return USUAL_DATASETS.get(str(network).lower(), DEFAULT_DATASET)


@dataclass(frozen=True)
class JobRequest:
    """What a user asks: a network, where (deployment or device), how big, how long."""

    network: str
    deployment: str | None = None
    batch_size: int | None = None
    iterations: int | None = None
    phase: str = "job"
    epochs: float | None = None
    dataset_size: int | None = None
    eval_every: float | None = None
    eval_size: int | None = None
    stack: str | None = None
    device: str | None = None
    optimizer: str = "sgd"
    image_size: int | None = None
    precision: str = DEFAULT_PRECISION
    framework: str = AUTO  # resolved by jobcast.service.engine.framework_choice
    data_parallel: str | None = None  # None: auto (models.scaling.auto_strategy)
    system: str | None = None
    tags: str | None = None
    gpus: int | None = None  # with ``system``: the job's own GPU at this many per node

    def with_defaults(self, length_needed: bool = True) -> tuple[JobRequest, list[str]]:
        """The request with what it left open filled in, and each assumption said: a job in
        epochs without a dataset size gets the network's usual dataset
        (:func:`usual_dataset`); a job of no stated length is one step (a per-step answer),
        unless ``length_needed`` is False (a recurring job answered from its wall times)."""
        if self.epochs is not None and self.dataset_size is None and self.network:
            name, size = usual_dataset(self.network)
            return (replace(self, dataset_size=size),
                    [f"epochs of {name} assumed ({size:,} samples each); give --dataset-size "
                     "for yours"])
        if self.epochs is None and self.iterations is None and length_needed:
            return (replace(self, iterations=1),
                    ["no --iterations or --epochs given: one step (a per-step answer)"])
        return self, []

    def states_precision(self) -> bool:
        """Whether the precision was given (not the unstated fp32 default)."""
        return not isinstance(self.precision, UnstatedDefault)

    def describe(self) -> dict:
        """The fields that are set, for echoing a request back (an unstated default precision
        is not: a table made from it reads back unstated)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self)
            if getattr(self, f.name) is not None
            and not isinstance(getattr(self, f.name), UnstatedDefault)
        }

    def validate(self, batch_needed: bool = True) -> None:
        """Raise :class:`JobRequestError` for a request no route can answer
        (``batch_needed=False``: a recurring job whose history has no batch size, answered
        from its wall times alone)."""
        if not self.network or not str(self.network).strip():
            raise JobRequestError("network is missing", field="network")
        if self.batch_size is None and batch_needed:
            raise JobRequestError("batch_size is missing", field="batch_size")
        if self.phase not in REQUEST_PHASES:
            raise JobRequestError(f"phase must be job, train or test, got {self.phase!r}",
                                  field="phase")
        for name in LIMITS:
            value = getattr(self, name, None)
            if value is None or (name == "iterations" and value == 0):
                continue  # zero steps: a job with nothing left to run (ETA asks it)
            _check_limit(name, value, None)
        _check_implied_iterations(self, None)
        for name, parse in (("precision", parse_precision), ("framework", parse_framework_choice),
                            ("data_parallel", parse_data_parallel)):
            try:
                parse(getattr(self, name))
            except ValueError as exc:
                raise JobRequestError(str(exc), field=name) from None
        try:
            parse_tags(self.tags)
        except ValueError as exc:
            raise JobRequestError(f"tags: {exc}", field="tags") from None

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any], where: str | None = None,
                     strict: bool = False) -> JobRequest:
        """A request from a CSV row, a table row or CLI flags (see the module rules);
        ``strict``: a key that is not a column of :data:`FIELDS` is an error."""
        if strict:
            unknown = [str(k) for k in row if k not in FIELD_BY_NAME]
            if unknown:
                shown = ", ".join(repr(k[:64]) for k in unknown[:10])
                more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
                raise JobRequestError(
                    _at(where, f"unknown column(s) {shown}{more}; known: "
                               f"{', '.join(FIELD_BY_NAME)}"), field=unknown[0][:64],
                    refusal=UNKNOWN_COLUMN)
        values = {f.name: _field_value(f, row.get(f.name), where) for f in FIELDS}
        values["network"] = values["network"] or ""  # validate() names it per job
        values["phase"] = str(values["phase"]).lower()
        if values["data_parallel"] is not None:
            try:
                values["data_parallel"] = parse_data_parallel(values["data_parallel"])
            except ValueError as exc:
                raise JobRequestError(_at(where, str(exc)), field="data_parallel") from None
        return cls(**values)


def requests_from_rows(rows: list[Mapping[str, Any]]) -> list[JobRequest | JobRequestError]:
    """Each row of a served table as a checked request, or its error with ``row`` (from 0)
    and ``field`` set; unknown columns are errors (``strict``), and ``network`` must be a
    name: a served row never makes the server read a file or a JSON spec, nor import and
    run a ``module:callable`` model."""
    out: list[JobRequest | JobRequestError] = []
    for i, row in enumerate(rows):
        try:
            if not isinstance(row, Mapping):
                raise JobRequestError(
                    f"a row must be an object of columns, got {type(row).__name__}")
            req = JobRequest.from_mapping(row, strict=True)
            if _NOT_A_NAME.search(req.network) or req.network.lower().endswith(_FILE_SUFFIXES):
                raise JobRequestError(
                    f"network must be a network's name here, got {_short(req.network)} (files, "
                    "JSON specs and module:callable models are read by `jobcast predict` only)",
                    field="network")
            req.validate()
            out.append(req)
        except JobRequestError as exc:
            exc.row = i
            out.append(exc)
    return out


def _at(where: str | None, message: str) -> str:
    return f"{where}: {message}" if where else message


def _limit_message(name: str, limit: Limit, value: Any) -> str:
    if limit.low == 1 and not limit.open_low:
        want = f"a positive integer at most {limit.high:g}"
    elif limit.open_low and limit.low == 0:
        want = f"positive and at most {limit.high:g}"
    else:
        want = f"in {limit.describe()}"
    whole = float(value).is_integer() and abs(value) < 1e15
    shown = str(int(value)) if whole else f"{float(value):g}"
    return f"{name} must be {want}, got {shown}"


def _check_limit(name: str, number: float, where: str | None) -> None:
    limit = LIMITS.get(name)
    if limit is not None and not limit.allows(number):
        raise JobRequestError(_at(where, _limit_message(name, limit, number)), field=name)


def _check_implied_iterations(req: JobRequest, where: str | None) -> None:
    """The steps an epochs-based job implies stay in range, as ``models.job.JobPlan`` counts
    them: training epochs x ceil(dataset_size / batch_size), evaluation passes (one every
    ``eval_every`` epochs) x ceil(eval_size / batch_size)."""
    if not req.batch_size or req.epochs is None:
        return
    if req.dataset_size is not None:
        steps = req.epochs * math.ceil(req.dataset_size / req.batch_size)
        if steps > MAX_ITERATIONS:
            raise JobRequestError(_at(where, (
                f"epochs x dataset_size / batch_size = {steps:.3g} iterations, more than "
                f"{MAX_ITERATIONS:g}")), field="epochs")
    if req.eval_every and req.eval_size:
        passes = math.floor(min(req.epochs / req.eval_every + 1e-9, 2.0 * MAX_ITERATIONS))
        steps = passes * math.ceil(req.eval_size / req.batch_size)
        if steps > MAX_ITERATIONS:
            raise JobRequestError(_at(where, (
                f"epochs / eval_every x eval_size / batch_size = {steps:.3g} evaluation "
                f"iterations, more than {MAX_ITERATIONS:g}")), field="eval_every")


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
    name = spec.name
    if spec.kind == "text":
        if not isinstance(value, str | numbers.Real) or isinstance(value, bool):
            raise JobRequestError(_at(where, f"{name} must be text, got {_short(value)}"),
                                  field=name)
        text = str(value).strip()
        if len(text) > MAX_TEXT_CHARS:
            raise JobRequestError(_at(where, f"{name} is {len(text)} characters long (at most "
                                             f"{MAX_TEXT_CHARS})"), field=name)
        if _CONTROL.search(text):
            raise JobRequestError(_at(where, f"{name} {_short(text)} holds control characters"),
                                  field=name)
        return text
    if isinstance(value, bool):
        raise JobRequestError(_at(where, f"{name} must be a number, got {value!r}"), field=name)
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        raise JobRequestError(_at(where, f"{name} must be finite, got {_short(value)}"),
                              field=name) from None
    except (TypeError, ValueError):
        raise JobRequestError(_at(where, f"{name} must be a number, got {_short(value)}"),
                              field=name) from None
    if not math.isfinite(number):
        raise JobRequestError(_at(where, f"{name} must be finite, got {_short(value)}"),
                              field=name)
    if spec.kind == "whole" and not number.is_integer():
        raise JobRequestError(_at(where, f"{name} must be a whole number, got {_short(value)}"),
                              field=name)
    _check_limit(name, number, where)
    return int(number) if spec.kind == "whole" else number


def _short(value: Any, limit: int = 40) -> str:
    """``repr`` cut to ``limit`` characters (a 5,000-digit number is not echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        data = Path(path).read_bytes()
    except OSError as exc:
        raise JobRequestError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise JobRequestError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x} at column {column}); "
            "save the file as UTF-8"
        ) from None
    reader = csv.DictReader(text.splitlines())
    try:
        return _csv_requests(path, reader)
    except csv.Error as exc:
        raise JobRequestError(
            f"{path}:{reader.line_num + 1}: not a readable CSV row ({exc})") from None


def _csv_requests(path: str | Path, reader: csv.DictReader) -> list[JobRequest | JobRequestError]:
    """The rows of an open CSV (see :func:`read_jobs_rows`)."""
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [f.name for f in FIELDS if f.needed and f.name not in header]
    if missing:
        raise JobRequestError(
            f"{path}:1: missing column(s) {', '.join(missing)}; need {CORE_COLUMNS}"
        )
    unknown = [h for h in header if h not in FIELD_BY_NAME]
    if unknown:
        raise JobRequestError(f"{path}:1: unknown column(s) {', '.join(unknown)}",
                              refusal=UNKNOWN_COLUMN)
    requests: list[JobRequest | JobRequestError] = []
    for raw in reader:
        where = f"{path}:{reader.line_num}"
        try:
            if raw.get(None):
                raise JobRequestError(f"{where}: {len(raw[None])} value(s) more than the "
                                      f"{len(header)} columns of the header")
            row = {k.strip(): v for k, v in raw.items() if k}
            requests.append(JobRequest.from_mapping(row, where=where))
        except JobRequestError as exc:
            requests.append(exc)
    if not requests:
        raise JobRequestError(f"{path}: no jobs (only a header)")
    return requests
