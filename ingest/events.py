"""What a parser returns: runs made of phase segments, plus the errors it raises.

Parsers are pure functions ``parse(lines, ctx) -> list[ParsedRun]``. They never touch
the store, the file system or the clock; everything they need beyond the lines comes
in a :class:`ParseContext` (side files such as MLPerf system descriptions are read by
the caller and handed in).

Conventions
-----------
* Times are unix seconds (float). ``seconds`` are wall-clock durations.
* ``iterations`` are optimizer steps for ``train`` and evaluation batches for ``test``.
* A segment is one contiguous stretch of one phase: an epoch or a block of epochs
  (MLPerf), the training between two test passes or one test pass (Caffe), an epoch
  (Keras). ``points`` are the progress marks inside it the log has (cumulative
  iterations since the segment start, seconds since the segment start), ending with
  the segment's own end; they let the models use every step the log reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from fleet.deployment import Deployment
from fleet.deprecation import renamed_property, warn_renamed
from ingest.errors import IngestError

Phase = Literal["train", "test"]
PHASES: tuple[str, ...] = ("train", "test")


class ParseError(IngestError, ValueError):
    """A log could not be parsed: says which file, which line and why."""

    kind: ClassVar[str] = "parse"

    def __init__(self, reason: str, *, line: int | None = None, source: str | None = None):
        self.reason = reason
        self.line = line
        self.source = source
        super().__init__(self.__str__())

    def with_source(self, source: str) -> ParseError:
        """The same error, naming ``source``."""
        return ParseError(self.reason, line=self.line, source=source)

    def __str__(self) -> str:
        where = self.source or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class Segment:
    phase: Phase
    iterations: float
    seconds: float
    batch_size: int | None = None
    start_time: float | None = None
    epoch_start: float | None = None  # first epoch covered (may be fractional)
    epoch_end: float | None = None  # last epoch covered, inclusive
    iteration_start: int | None = None  # first step index covered, where the log counts steps
    iteration_end: int | None = None
    line: int | None = None  # line of the log that closed the segment
    points: tuple[tuple[float, float], ...] = ()  # (iterations, seconds) since segment start

    def __post_init__(self) -> None:
        """A phase of :data:`PHASES`; ``iterations`` and ``seconds`` finite and >= 0, else a
        :class:`ParseError` at the segment's line (the full range checks, made before a run
        is stored, are :mod:`ingest.validate`'s)."""
        if self.phase not in PHASES:
            raise ParseError(f"unknown phase {self.phase!r}", line=self.line)
        for name in ("iterations", "seconds"):
            value = getattr(self, name)
            try:
                finite = math.isfinite(value)
            except (TypeError, OverflowError):
                finite = False
            if not finite:
                raise ParseError(f"{self.phase} segment with {name} = {short_repr(value)} "
                                 "(not a finite number)", line=self.line)
        if self.seconds < 0 or self.iterations < 0:
            raise ParseError(f"{self.phase} segment with negative time or iterations "
                             f"({self.seconds:g} s, {self.iterations:g} iterations)",
                             line=self.line)


def short_repr(value: object, width: int = 40) -> str:
    """``repr`` for a message, cut to ``width`` characters; a huge integer (whose ``repr``
    Python refuses past 4,300 digits) is described by its number of digits."""
    if isinstance(value, int) and value.bit_length() > 64:
        digits = value.bit_length() * math.log10(2)
        return f"{'minus ' if value < 0 else ''}an integer of about {digits:.0f} digits"
    text = repr(value)
    return text if len(text) <= width else f"{text[:width // 2]}...({len(text)} chars)"


@dataclass
class ParsedRun:
    """One training run found in a log (a log may hold several, e.g. Caffe restarts).

    ``stack`` is the software stack as the log names it ("MXNet NGC 20.06"); ``framework``
    is its deprecated alias (attribute and constructor keyword), kept for one release: the
    word now means TensorFlow or PyTorch (:mod:`fleet.framework`) only.
    """

    format: str  # "mlperf", "caffe", "tf_cnn_benchmarks", "keras", "jsonl"
    network: str | None = None
    deployment: Deployment | None = None
    stack: str | None = None  # software stack, e.g. "MXNet NGC 20.06"
    batch_size: int | None = None  # global batch size
    start_time: float | None = None
    segments: list[Segment] = field(default_factory=list)
    meta: dict[str, object] = field(default_factory=dict)  # anything else worth keeping
    first_line: int | None = None
    last_line: int | None = None

    framework = renamed_property("ParsedRun", "framework", "stack")

    def stored_key(self) -> str | None:
        """The deployment key the run is stored under: the one an ingest set in
        ``meta["deployment_key"]`` (``--deployment`` for a log naming none, ``--override``,
        a scheduler's ``gpu-x<n>``) wins over the key of the deployment the log names;
        None when there is neither. The one rule every reader follows (the store's
        ``runs.deployment`` column is this)."""
        key = self.meta.get("deployment_key")
        if isinstance(key, str) and key:
            return key
        return self.deployment.key if self.deployment is not None else None


_parsed_run_init = ParsedRun.__init__


def _init_with_alias(self: ParsedRun, *args: object, **kwargs: object) -> None:
    """ParsedRun(..., framework=...) is the deprecated spelling of ``stack=``; given both
    (as :func:`dataclasses.replace` with ``framework=`` does), ``framework`` wins."""
    if "framework" in kwargs:
        warn_renamed("ParsedRun(framework=...)", "ParsedRun(stack=...)")
        kwargs["stack"] = kwargs.pop("framework")
    _parsed_run_init(self, *args, **kwargs)  # type: ignore[arg-type]


_init_with_alias.__doc__ = _parsed_run_init.__doc__
ParsedRun.__init__ = _init_with_alias  # type: ignore[method-assign]


@dataclass(frozen=True)
class ParseContext:
    """What a parser may know besides the lines.

    ``source`` is the path as given (for messages only). ``system`` is the parsed
    system description that sits beside an MLPerf log, if any, and ``described_in`` the
    file that holds it (named in messages). Overrides supply or replace what a log lacks
    (CLI ``--network``, ``--deployment``, ``--batch-size``).

    A format whose ``context`` reads more (side files, layout facts) returns a subclass
    with typed fields (``MlperfContext``, ``LambdaContext``, ``WandbContext``,
    ``HistoryContext``, ``TensorBoardContext``), never extra keys in ``system``.
    """

    source: str = "<input>"
    system: dict | None = None
    described_in: str | None = None  # the file holding ``system``
    folder_network: str | None = None  # benchmark name from the folder layout
    folder_system: str | None = None  # system name from the folder layout
    network: str | None = None
    deployment: str | None = None
    batch_size: int | None = None


class StorableFile(Protocol):
    """One parsed file as the store reads it (:meth:`ingest.store.Store.add_files`): an
    :class:`ingest.store.FileRecord` or an :class:`ingest.pipeline.ParsedFile`. Read-only
    members, so a frozen dataclass fits."""

    @property
    def content_hash(self) -> str:
        """SHA-256 of the file's bytes."""

    @property
    def source(self) -> str:
        """The path as given."""

    @property
    def fmt(self) -> str:
        """The log format's name."""

    @property
    def size(self) -> int:
        """Bytes."""

    @property
    def runs(self) -> list[ParsedRun]:
        """The runs parsed from it."""
