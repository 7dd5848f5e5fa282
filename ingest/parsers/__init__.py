"""Log formats: the :class:`Parser` protocol every format module follows, and the registry.

Rules
-----
* A parser is a module with ``FORMAT`` (the name stored with each file), ``sniff(head)``
  (True if the first :data:`SNIFF_LINES` lines are this format) and ``parse(lines, ctx)``,
  a pure function from lines to :class:`~ingest.events.ParsedRun` objects (no file system,
  no store, no clock). ``LABEL`` (the name used in messages) is optional, as is
  ``context(path, source, overrides)`` for formats that read side files next to the log
  (MLPerf system descriptions); without it the context holds the source and the overrides.
  So is ``side_file(path) -> bool``: True for a file of the format's layout that is not a
  log (Lambda's ``metadata`` and ``thermal/<rep>`` files); a folder ingest skips those
  (:func:`side_file`) instead of rejecting them.
  And ``claims(path) -> bool``: True for a path in the format's own layout; such a parser's
  ``sniff`` is asked first (:func:`detect` with ``path``), which spares the other sniffs.
  And ``decode(data: bytes) -> list[str]``: a binary format's parser (TensorBoard event
  files, W&B transaction logs) turns the bytes of a file it claims into text lines, one per
  record (so a message's line is the record number), which ``sniff`` and ``parse`` then
  read; :func:`binary_lines` asks it, the pipeline calls that before splitting text.
* Detection asks the registered parsers in registration order; the first whose ``sniff``
  says yes parses the file. More specific formats are therefore registered first.
* Adding a format is one new module here plus one :func:`register` line below. Modules are
  imported when the registry is first asked, so importing one parser stays light. A module
  outside this package (a test's own format: ``tests/ingest/test_toy_log_format.py``) is
  registered at run time, ``register(name, first=True)``, and removed with
  :func:`unregister`; a parallel ingest's parsing processes take the same registry
  (:mod:`ingest.parallel`), so the module must be importable by name there.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

from fleet.deprecation import renamed_attributes
from ingest.events import ParseContext, ParsedRun, ParseError

SNIFF_LINES = 200


@dataclass(frozen=True)
class ParseOverrides:
    """What the CLI supplies or replaces: ``--network``, ``--deployment``, ``--batch-size``,
    ``--tag key=value`` (``tags``: lower-case pairs that win over the variant a log states,
    ``meta["variant"]``) and ``--system`` (wins over the system a log or layout names,
    ``meta["system"]``), ``--job-key`` (``job_key``: the identity rule of whole-job runs),
    ``--iterations`` or ``--epochs`` (``length``: the training length of each run of a
    scheduler's records, which do not know it; ``ingest.whole_job.apply_length``)."""

    network: str | None = None
    deployment: str | None = None
    batch_size: int | None = None
    tags: tuple[tuple[str, str], ...] = ()
    system: str | None = None
    job_key: str | None = None  # --job-key: identity rule of whole-job runs (ingest.whole_job)
    length: tuple[str, int] | None = None  # ("iterations" | "epochs", N) of whole-job runs


# ``Overrides``: the name before issue 26 (two classes had it), deprecated for one release
__getattr__ = renamed_attributes(__name__, {"Overrides": "ParseOverrides"})


@runtime_checkable
class Parser(Protocol):
    """A log format. Implemented by modules: ``FORMAT``, ``sniff`` and ``parse``.

    Optional members (looked up with ``getattr``): ``LABEL: str``,
    ``context(path: Path, source: str, overrides: ParseOverrides) -> ParseContext``,
    ``side_file(path: Path) -> bool`` and ``claims(path: Path) -> bool``.
    """

    FORMAT: str

    def sniff(self, head: list[str]) -> bool:
        """Whether ``head`` (the first :data:`SNIFF_LINES` lines) is this format."""
        ...

    def parse(self, lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
        """The runs in ``lines``; a :class:`ParseError` (line, reason) when there are none."""
        ...


_REGISTRY: list[str] = []


def register(module: str, *, first: bool = False) -> None:
    """Add the parser module ``module`` (dotted name) to the detection order: last, or
    ``first`` (asked before every other parser: a more specific format, or a test's own).

    The module is imported when the registry is next asked, in this process and in the
    parsing processes of a parallel ingest (:mod:`ingest.parallel` hands them this order),
    so it must be importable by name there too.
    """
    if module in _REGISTRY:
        raise ValueError(f"parser {module!r} is already registered")
    if first:
        _REGISTRY.insert(0, module)
    else:
        _REGISTRY.append(module)


def unregister(module: str) -> None:
    """Remove the parser module ``module`` from the detection order (what :func:`register`
    added; a test's own format, once it is done)."""
    if module not in _REGISTRY:
        raise ValueError(f"parser {module!r} is not registered")
    _REGISTRY.remove(module)


def adopt(order: Iterable[str]) -> None:
    """Make the detection order exactly ``order`` (the dotted names :func:`names` gave in
    another process): how a parsing process learns the formats its parent registered."""
    _REGISTRY[:] = list(dict.fromkeys(order))


# Detection order: the first parser whose sniff() matches wins.
register("ingest.parsers.mlperf")
register("ingest.parsers.caffe")
register("ingest.parsers.tf_cnn")
register("ingest.parsers.keras_stdout")
register("ingest.parsers.slurm")
register("ingest.parsers.jsonl")
# PyTorch-era history (issue 24): stdout and files of the frameworks' own scripts.
register("ingest.parsers.torchvision_ref")
register("ingest.parsers.timm_train")
register("ingest.parsers.lightning")
register("ingest.parsers.hf_trainer")
register("ingest.parsers.mmengine_log")
register("ingest.parsers.detectron2_metrics")
register("ingest.parsers.tensorboard")
register("ingest.parsers.wandb")
register("ingest.parsers.wandb_export")


def names() -> tuple[str, ...]:
    """The registered parser modules' dotted names, in detection order."""
    return tuple(_REGISTRY)


def registered() -> list[Parser]:
    """The registered parsers, imported, in detection order."""
    found: list[Parser] = []
    for name in _REGISTRY:
        module = importlib.import_module(name)
        if not isinstance(module, Parser):
            raise TypeError(f"{name} is not a parser (needs FORMAT, sniff and parse)")
        found.append(module)
    return found


def format_label(parser: Parser) -> str:
    """The format's name for messages: ``LABEL``, else ``FORMAT``."""
    return getattr(parser, "LABEL", parser.FORMAT)


def detect(
    head: list[str], parsers: Iterable[Parser] | None = None, path: Path | None = None
) -> Parser | None:
    """The first parser (of ``parsers``, default: the registry) that recognises ``head``;
    parsers that claim ``path`` by its layout are asked first."""
    order = list(registered() if parsers is None else parsers)
    if path is not None:
        claimed = [p for p in order if (claims := getattr(p, "claims", None)) and claims(path)]
        order = claimed + [p for p in order if p not in claimed]
    for parser in order:
        if parser.sniff(head):
            return parser
    return None


def side_file(path: Path, parsers: Iterable[Parser] | None = None) -> bool:
    """Whether some parser (of ``parsers``, default: the registry) calls ``path`` a side
    file of its layout (not a log: skipped by a folder ingest)."""
    for parser in registered() if parsers is None else parsers:
        check = getattr(parser, "side_file", None)
        if check is not None and check(path):
            return True
    return False


def binary_lines(path: Path, data: bytes, source: str,
                 parsers: Iterable[Parser] | None = None) -> list[str] | None:
    """The lines of a binary log: the ``decode`` of the first parser (of ``parsers``, default:
    the registry) that claims ``path`` and has one, else None (a text file). Whatever stops
    the decoding is a :class:`ParseError` naming ``source`` (and the record, where known)."""
    for parser in registered() if parsers is None else parsers:
        decode = getattr(parser, "decode", None)
        claims = getattr(parser, "claims", None)
        if decode is None or claims is None or not claims(path):
            continue
        try:
            return decode(data)
        except ParseError as exc:
            raise exc.with_source(source) from None
        except Exception as exc:  # a decoder bug: this file is rejected, as a parser's would be
            raise ParseError(f"parser failed: {type(exc).__name__}: {str(exc)[:200]} (decoding "
                             f"a {format_label(parser)})", source=source) from exc
    return None


def with_overrides(ctx: ParseContext, source: str, overrides: ParseOverrides) -> ParseContext:
    """``ctx`` for ``source`` with the CLI's network, deployment and batch size."""
    return replace(
        ctx,
        source=source,
        network=overrides.network,
        deployment=overrides.deployment,
        batch_size=overrides.batch_size,
    )


def context_for(path: Path, source: str, parser: Parser,
                overrides: ParseOverrides) -> ParseContext:
    """The parse context for one file: the parser's own ``context`` where it has one."""
    make = getattr(parser, "context", None)
    if make is not None:
        return make(path, source, overrides)
    return with_overrides(ParseContext(), source, overrides)
