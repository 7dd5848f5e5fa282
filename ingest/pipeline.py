"""Ingest files and folders into the store: detect, parse, check, write.

Rules
-----
* Formats come from the parser registry (:mod:`ingest.parsers`): the first parser whose
  ``sniff`` recognises the first :data:`SNIFF_LINES` lines parses the file, with the
  context its ``context`` builds (side files, overrides).
* A file is stored whole or rejected with a reason (file, line where known, why); content
  already stored (same SHA-256) is a duplicate and is not parsed again. Any exception a
  parser raises on a file (``OverflowError``, ``RecursionError``, ...) is that file's
  rejection, ``parser failed: <type>: <message>``, at the line the parser was reading where
  its frame says (a local ``number``/``lineno``); the other files go on.
* Folders are walked in sorted order; files a parser calls side files of its layout
  (:func:`ingest.parsers.side_file`, e.g. Lambda's ``metadata``, a Hugging Face checkpoint's
  ``trainer_state.json``), docs, images, source files and binary checkpoints/weights are
  skipped, not rejected. A ``.json``, ``.csv``, ``.yaml`` or ``.yml`` file is a log only when a
  registered parser's ``sniff`` recognises its head (:func:`recognised`): configs, MLPerf
  system descriptions, metric tables without a clock are side files (skipped), while a
  format whose files end in ``.csv`` or ``.json`` reaches its parser. A file named on the
  command line is always parsed (or rejected).
* ``--network`` and ``--batch-size`` win over what the log says; so do ``--tag key=value``
  (into ``meta["variant"]``, keys and values lower-cased) and ``--system`` (``meta["system"]``).
* ``--deployment`` supplies what a log lacks (:func:`apply_deployment`): a run whose log names
  no accelerators is stored under it. A run whose log (or MLPerf system description) names
  them keeps its own deployment where the flag agrees (:func:`deployment_conflict`: the same
  GPU model by the fleet's one GPU-name definition, the same counts); where it disagrees the
  file is rejected with the line naming the GPU (the file searched once per GPU name,
  :class:`NamedLines`, never once per run) and both deployments, unless
  ``IngestOptions.override`` (``--override``) is set: then the flag wins and the run keeps a
  warning (``meta["warnings"]``, read back by :func:`collect_warnings`) and the log's own
  deployment (``meta["log_deployment"]``).
* Every run must then name its network, deployment and batch size and hold some progress
  (:func:`check_run`).
* A truncated run is never stored silently (``ingest.validate.note_truncation``: a warning
  on the ingest line and in ``--json``; a rejection for another reason names it too).
* Parsing (:func:`parse_file`) never touches the store; writing is
  :meth:`ingest.store.Store.add_files` (many files in one transaction, all or none,
  insert-or-ignore on the content hash), so parallel ingests (:mod:`ingest.parallel`: a
  process pool and one writer; :mod:`ingest.ray_ingest`) parse anywhere and write through a
  single writer with the same guarantees, and concurrent ingests into one store lose nothing
  and raise nothing.
"""

from __future__ import annotations

import bisect
import functools
import gc
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

from fleet.catalog import GpuSpec, UnknownGpuError, resolve_gpu
from fleet.deployment import Deployment, normalise_deployment
from fleet.deprecation import renamed_attributes
from fleet.names import lookup_key
from ingest.events import ParseContext, ParsedRun, ParseError
from ingest.parallel import BATCH_FILES, failure, run_ingest
from ingest.parsers import (
    SNIFF_LINES,
    ParseOverrides,
    Parser,
    binary_lines,
    context_for,
    detect,
    format_label,
    names,
    registered,
    side_file,
)

if TYPE_CHECKING:  # the store (SQLAlchemy) is not imported where files are only parsed
    from ingest.store import Store

# Files in a tree that are never logs: docs, images, source, network definitions, and the
# binary checkpoints and weights training frameworks leave beside their logs.
_IGNORED_SUFFIXES = {".md", ".png", ".jpg", ".svg", ".pdf", ".py", ".prototxt", ".bin", ".pt",
                     ".pth", ".ckpt", ".safetensors", ".tar", ".pkl", ".npy", ".npz", ".h5",
                     ".onnx"}
# Data files that are a log only when a parser recognises them (else a side file: configs,
# MLPerf system descriptions, metric tables without a clock, ...): read up to SNIFF_BYTES.
_SNIFFED_SUFFIXES = {".json", ".csv", ".yaml", ".yml"}
SNIFF_BYTES = 256 * 1024
_COMPRESSED_DATA = (".json.gz", ".csv.gz")


@dataclass(frozen=True)
class IngestOptions(ParseOverrides):
    """What the CLI supplies (the parsers' :class:`ingest.parsers.ParseOverrides`) plus the
    pipeline's policy: ``override`` (``--override``) lets ``deployment`` win over
    accelerators a log names."""

    override: bool = False


# ``Overrides``: the name before issue 26 (two classes had it), deprecated for one release
__getattr__ = renamed_attributes(__name__, {"Overrides": "IngestOptions"})


@dataclass
class IngestReport:
    added: list[tuple[str, int]] = field(default_factory=list)  # (source, runs)
    duplicates: list[tuple[str, str]] = field(default_factory=list)  # (source, first source)
    rejected: list[ParseError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # non-log files met while walking a folder
    warnings: list[tuple[str, int, str]] = field(default_factory=list)  # (source, run, text)

    @property
    def ok(self) -> bool:
        """Whether no file was rejected."""
        return not self.rejected

    @property
    def stored(self) -> int:
        """Files this ingest stored."""
        return len(self.added)


def _walk(root: str) -> tuple[list[str], list[str]]:
    """Regular files under ``root`` (symlinked files included, symlinked folders not
    entered, as :meth:`Path.rglob`), and the folders that could not be read."""
    files: list[str] = []
    unreadable: list[str] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file():
                        files.append(entry.path)
        except OSError:
            unreadable.append(folder)
    return files, unreadable


def recognised(path: Path, parsers: list[Parser]) -> bool:
    """Whether a file met in a folder walk is a log candidate: any file but a ``.json``,
    ``.csv``, ``.yaml`` or ``.yml`` one, which is a candidate only when some parser's ``sniff``
    recognises its first :data:`SNIFF_BYTES` (else it is a side file: skipped); compressed
    ``.json.gz``/``.csv.gz`` data (profiler traces, layer tables) is a side file. A data file
    that cannot be read stays a candidate, so its rejection says why."""
    if path.name.lower().endswith(_COMPRESSED_DATA):
        return False  # compressed tables and traces (profiler traces: layerwise.kineto)
    if path.suffix.lower() not in _SNIFFED_SUFFIXES:
        return True
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return True
    if b"\x00" in head:
        return False
    lines = head.decode("utf-8", errors="replace").splitlines()[:SNIFF_LINES]
    try:
        return detect(lines, parsers, path) is not None
    except Exception:  # noqa: BLE001 - a sniff that fails on a data file: not recognised
        return False


def discover(
    paths: Iterable[str], parsers: list[Parser] | None = None
) -> tuple[list[tuple[str, Path]], list[str], list[ParseError]]:
    """Expand files and folders into (source as given, path) pairs, sorted, folders recursed.

    Returns the log candidates, the side files skipped, and errors for paths that do not
    exist (or folders that cannot be read).
    """
    parsers = registered() if parsers is None else parsers
    found: list[tuple[str, Path]] = []
    skipped: list[str] = []
    missing: list[ParseError] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            children, unreadable = _walk(str(path))
            missing.extend(ParseError("cannot read this folder", source=f) for f in unreadable)
            for name in sorted(children, key=lambda c: c.split(os.sep)):
                child = Path(name)
                if child.suffix.lower() in _IGNORED_SUFFIXES or child.name.startswith(".") \
                        or side_file(child, parsers) or not recognised(child, parsers):
                    skipped.append(name)
                else:
                    found.append((name, child))
        elif path.is_file():
            found.append((given, path))
        else:
            missing.append(ParseError("no such file or folder", source=given))
    return found, skipped, missing


def apply_overrides(
    run: ParsedRun,
    overrides: ParseOverrides,
    index: int = 0,
    lines: list[str] | NamedLines | None = None,
    ctx: ParseContext | None = None,
) -> ParsedRun:
    """``--network``, ``--batch-size``, ``--tag`` and ``--system`` win; ``--deployment`` as
    :func:`apply_deployment` (``lines``: the file's, or one :class:`NamedLines` of them
    shared by all its runs)."""
    if overrides.network:
        run.network = overrides.network
    if overrides.batch_size:
        run.batch_size = overrides.batch_size
    if overrides.tags:
        variant = run.meta.get("variant")
        variant = dict(variant) if isinstance(variant, dict) else {}
        variant.update((k.strip().lower(), v.strip().lower()) for k, v in overrides.tags)
        run.meta["variant"] = dict(sorted(variant.items()))
    job_key = getattr(overrides, "job_key", None)
    if job_key and "whole_job" in run.meta:
        from ingest.whole_job import apply_job_key

        apply_job_key(run, job_key)
    length = getattr(overrides, "length", None)
    if length:
        from ingest.whole_job import apply_length

        apply_length(run, length)
    if overrides.system:
        run.meta["system"] = overrides.system
    if overrides.deployment:
        apply_deployment(run, overrides, index, lines or [], ctx)
    if run.network:
        run.network = run.network.strip().lower()
    return run


def _gpu(name: str) -> GpuSpec | None:
    try:
        return resolve_gpu(name)
    except UnknownGpuError:
        return None


def same_gpu(a: str, b: str) -> bool:
    """Whether two spellings name one GPU model: both resolve to the same catalog entry
    (:func:`fleet.catalog.resolve_gpu`), or, where either is not in the catalog, their
    :func:`fleet.names.lookup_key` agree (``"GeForce GTX 1080 Ti"`` = ``"GTX1080Ti"``)."""
    spec_a, spec_b = _gpu(a), _gpu(b)
    if spec_a is not None and spec_b is not None:
        return spec_a.name == spec_b.name
    return lookup_key(a) == lookup_key(b)


def describe(dep: Deployment) -> str:
    """``"4x GeForce GTX TITAN X"`` / ``"2x8 A100"`` (nodes x per node), as people write it."""
    count = f"{dep.per_node}x" if dep.nodes == 1 else f"{dep.nodes}x{dep.per_node}"
    return f"{count} {dep.accelerator}"


def deployment_conflict(logged: Deployment, flag: Deployment) -> str | None:
    """Why ``flag`` disagrees with what the log names (GPU model, per-node count, nodes),
    or None when it does not."""
    why = []
    if not same_gpu(logged.accelerator, flag.accelerator):
        why.append("another GPU model")
    if logged.per_node != flag.per_node:
        why.append(f"{flag.per_node} instead of {logged.per_node} accelerators per node")
    if logged.nodes != flag.nodes:
        why.append(f"{flag.nodes} instead of {logged.nodes} nodes")
    return ", ".join(why) or None


class NamedLines:
    """Where a file's lines name accelerators, for the line a conflict's message cites: per
    name, the numbers of the lines holding it (any case), found in one pass over the file
    the first time the name is asked (``scans`` counts the passes), so a file of many runs
    that all conflict with ``--deployment`` is read once per GPU name, not once per run."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.scans = 0
        self._found: dict[str, list[int]] = {}

    def holding(self, needle: str) -> list[int]:
        """The numbers (1-based, ascending) of the lines holding ``needle`` (lower case)."""
        found = self._found.get(needle)
        if found is None:
            self.scans += 1
            found = self._found[needle] = [number for number, line in
                                           enumerate(self.lines, 1) if needle in line.lower()]
        return found

    def named_at(self, run: ParsedRun) -> int | None:
        """The first line naming the run's accelerator (inside the run first), else its
        first line."""
        needle = run.deployment.accelerator.strip().lower() if run.deployment else ""
        found = self.holding(needle) if needle else []
        if found:
            lo, hi = max(1, run.first_line or 1), run.last_line or len(self.lines)
            inside = bisect.bisect_left(found, lo)
            return found[inside] if inside < len(found) and found[inside] <= hi else found[0]
        return run.first_line


def apply_deployment(
    run: ParsedRun,
    overrides: ParseOverrides,
    index: int = 0,
    lines: list[str] | NamedLines | None = None,
    ctx: ParseContext | None = None,
) -> None:
    """Apply ``--deployment`` to one run (rules in the module doc); ParseError on a conflict
    without ``override`` or on a flag that names no deployment."""
    flag_text = str(overrides.deployment)
    try:
        key = normalise_deployment(flag_text)
        flag = Deployment.parse(flag_text)
    except ValueError as exc:
        raise ParseError(f"--deployment {flag_text!r}: {exc}", line=1) from None
    logged = run.deployment
    if logged is None:
        run.meta["deployment_key"] = key
        return
    why = deployment_conflict(logged, flag)
    if why is None:
        return  # the log's own spelling is kept
    line = (lines if isinstance(lines, NamedLines) else NamedLines(lines or [])).named_at(run)
    system_file = ctx.described_in if ctx else None
    named = "its system description " + str(system_file) if system_file else "the log"
    said = f"{named} names {describe(logged)} ({logged.key})"
    wanted = f"--deployment {flag_text!r} says {describe(flag)} ({key})"
    if not getattr(overrides, "override", False):
        raise ParseError(
            f"run {index + 1}: {said} but {wanted}: {why}; correct --deployment, or pass "
            "--override to store the run under --deployment anyway",
            line=line,
        )
    run.meta["deployment_key"] = key
    run.meta["log_deployment"] = {"key": logged.key, "accelerator": logged.accelerator,
                                  "per_node": logged.per_node, "nodes": logged.nodes}
    warnings = run.meta.setdefault("warnings", [])
    if isinstance(warnings, list):
        where = f" (line {line})" if line and not system_file else ""
        warnings.append(f"stored under --deployment {key} by --override: {said}{where} ({why})")
    run.deployment = flag


def check_run(run: ParsedRun, index: int) -> None:
    """A run must name its network, deployment and batch size and hold some progress."""
    label = f"run {index + 1}"
    line = run.first_line
    if "whole_job" in run.meta:  # a scheduler's record of a whole job: its own checks
        from ingest.whole_job import check_whole_job

        return check_whole_job(run, index)
    if not run.segments:
        raise ParseError(f"{label}: no complete train or test phase in the log", line=line)
    if not run.network:
        raise ParseError(f"{label}: the log does not name the network; pass --network", line=line)
    if not run.stored_key():
        raise ParseError(
            f"{label}: the log does not say which accelerators ran it; pass --deployment "
            "(e.g. --deployment nvidia-v100-sxm2-16gb-x8 or '8x V100')",
            line=line,
        )
    if not run.batch_size or run.batch_size <= 0:
        raise ParseError(f"{label}: no batch size in the log; pass --batch-size", line=line)
    from ingest.validate import validate_run  # range checks at the edge (rules there)

    validate_run(run, index)


def _known(parsers: list[Parser]) -> str:
    """``"A, B or C"``: the formats' labels, for the unrecognised-format message."""
    labels = [format_label(p) for p in parsers]
    return " or ".join(filter(None, [", ".join(labels[:-1]), *labels[-1:]]))


def read_lines(data: bytes, source: str) -> list[str]:
    """A text log's lines (undecodable bytes replaced); a :class:`ParseError` for a binary file."""
    if b"\x00" in data[:65536]:
        raise ParseError("binary file (NUL bytes), not a text log", line=1, source=source)
    return data.decode("utf-8", errors="replace").splitlines()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def gc_paused(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """``func`` run with the cycle collector paused (as it was after): parsing a big file
    builds tens of millions of objects in no reference cycle (a sacct export's JSON), and
    the collector's passes over them grew faster than the file (issue 35: 300,000 jobs
    ingested in 142 s with them, 67 s without)."""

    @functools.wraps(func)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        was = gc.isenabled()
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return paused


@dataclass
class ParsedFile:
    """One log read, parsed and checked but not stored: everything a writer needs to store it."""

    source: str
    content_hash: str
    fmt: str
    size: int
    runs: list[ParsedRun]
    rows: tuple | None = None  # the store's rows (ingest.store.file_rows), where built

    @property
    def run_count(self) -> int:
        """Runs in the file (its store rows where built)."""
        return len(self.rows[1]) if self.rows is not None else len(self.runs)


def read_file(source: str, path: Path) -> bytes:
    """The file's bytes; an unreadable file is a :class:`ParseError` naming it."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ParseError(f"cannot read: {exc.strerror or exc}", source=source) from None


@gc_paused
def parse_data(
    source: str,
    path: Path,
    data: bytes,
    overrides: ParseOverrides,
    parsers: list[Parser],
    content_hash: str | None = None,
) -> ParsedFile:
    """Detect, parse, apply overrides and check one file's bytes; never touches the store
    (nor collects cycles: :func:`gc_paused`).

    Raises :class:`ParseError` with the source set when the file cannot be stored, also
    when a parser fails with any other exception (module doc).
    """
    content_hash = content_hash or hashlib.sha256(data).hexdigest()
    lines = binary_lines(path, data, source, parsers)  # binary formats decode themselves
    lines = read_lines(data, source) if lines is None else lines
    try:
        parser = detect(lines[:SNIFF_LINES], parsers, path)
        if parser is None:
            raise ParseError(f"unrecognised format (not {_known(parsers)})", line=1)
        ctx = context_for(path, source, parser, overrides)
        parsed = parser.parse(lines, ctx)
        named = NamedLines(lines)  # one pass over the file per GPU name, not per run
        parsed = [
            apply_overrides(run, overrides, index, named, ctx) for index, run in enumerate(parsed)
        ]
        if not parsed:
            raise ParseError("no training run found in the log", line=1)
        from ingest.validate import also_truncated, note_truncation

        for index, run in enumerate(parsed):
            cut = note_truncation(run)
            try:
                check_run(run, index)
            except ParseError as exc:
                raise exc if cut is None else also_truncated(exc, cut) from None
    except ParseError as exc:
        raise exc if exc.source else exc.with_source(source) from None
    except Exception as exc:  # noqa: BLE001 - a parser bug or hostile input rejects this file only
        raise ParseError(f"parser failed: {failure(exc)}", line=_failing_line(exc),
                         source=source) from None
    return ParsedFile(source, content_hash, parser.FORMAT, len(data), parsed)


_LINE_LOCALS = ("number", "lineno", "line_number")


def _failing_line(exc: BaseException) -> int | None:
    """The line a parser was reading when it raised: the innermost frame of a parser module's
    local ``number``/``lineno``/``line_number`` (the parsers' line-loop convention), else
    None."""
    line = None
    modules = ("ingest.parsers", *names())
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if str(frame.f_globals.get("__name__", "")).startswith(modules):
            for name in _LINE_LOCALS:
                value = frame.f_locals.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    line = value
                    break
        tb = tb.tb_next
    return line


def parse_file(
    source: str, path: Path, overrides: ParseOverrides, parsers: list[Parser]
) -> ParsedFile:
    """Read and parse one file without touching the store (what a parallel worker runs)."""
    return parse_data(source, path, read_file(source, path), overrides, parsers)


@gc_paused
def parse_chunk(items: list[tuple[str, str]], overrides: ParseOverrides) -> list[tuple]:
    """The work of one chunk of a folder ingest (in a pool worker or here): parse each file
    and build its store rows (:func:`ingest.store.file_rows`; the runs themselves are not
    sent back). Per file ``("parsed", ParsedFile)`` or ``("rejected", source, line,
    reason)``; never touches the store."""
    from ingest.store import file_rows

    parsers = registered()
    out: list[tuple] = []
    for source, path in items:
        try:
            parsed = parse_file(source, Path(path), overrides, parsers)
        except ParseError as exc:
            out.append(("rejected", exc.source or source, exc.line, exc.reason))
            continue
        try:
            parsed.rows, parsed.runs = file_rows(parsed), []
        except Exception as exc:  # noqa: BLE001 - e.g. meta that JSON cannot hold
            out.append(("rejected", source, None, f"store refused: {failure(exc)}"))
            continue
        out.append(("parsed", parsed))
    return out


def write_parsed(store: Store, parsed: ParsedFile) -> tuple[str, object]:
    """Store one parsed file in one transaction: ("added", runs) or ("duplicate", first source:
    of the same content, or of the jobs of a file whose jobs are all stored already)."""
    if parsed.rows is None:  # built here: the store trims jobs stored already from them
        from ingest.store import file_rows

        parsed.rows = file_rows(parsed)
    [file_id] = store.add_files([parsed])
    if file_id is None:  # another process (or an earlier path) stored the same content
        return "duplicate", store.has_content(parsed.content_hash) or parsed.rows[0].get(
            "duplicate_of", "(another ingest)")
    return "added", parsed.run_count


def ingest_file(
    store: Store, source: str, path: Path, overrides: ParseOverrides, parsers: list[Parser]
) -> tuple[str, object]:
    """Ingest one file. Returns ("added", runs) / ("duplicate", first source); raises ParseError."""
    data = read_file(source, path)
    content_hash = hashlib.sha256(data).hexdigest()
    first = store.has_content(content_hash)
    if first is not None:
        return "duplicate", first
    return write_parsed(store, parse_data(source, path, data, overrides, parsers, content_hash))


def collect_warnings(store: Store, report: IngestReport) -> IngestReport:
    """Set ``report.warnings`` to the run warnings of the files it added (read from the store,
    so it serves every ingest path); returns ``report``."""
    report.warnings = store.run_warnings(source for source, _ in report.added)
    return report


def record(report: IngestReport, source: str, status: str, value: object) -> None:
    """Add one file's outcome from :func:`ingest_file` / :func:`write_parsed` to ``report``."""
    if status == "added":
        report.added.append((source, int(cast("int", value))))  # runs added, an int
    else:
        report.duplicates.append((source, str(value)))


def ingest_paths(
    store: Store,
    paths: Iterable[str],
    overrides: ParseOverrides | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    workers: int = 1,
    batch_files: int | None = None,
) -> IngestReport:
    """Ingest every log under ``paths``; each file is stored whole or rejected with a reason.

    ``workers``: parsing processes (1: in this process); ``batch_files``: most files per
    transaction (1: one transaction a file). Rules: :mod:`ingest.parallel`.
    """
    parsers = registered()
    found, skipped, missing = discover(paths, parsers)
    report = IngestReport(skipped=skipped, rejected=list(missing))
    run_ingest(store, found, report, overrides or IngestOptions(), parse_chunk, progress,
               workers=workers, batch_files=batch_files or BATCH_FILES)
    store.add_rejections(report.rejected)  # what the report shows as rejected, and why
    return collect_warnings(store, report)
