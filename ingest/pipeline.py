"""Ingest files and folders into the store: detect, parse, check, write (one transaction a file).

Rules
-----
* Formats come from the parser registry (:mod:`ingest.parsers`): the first parser whose
  ``sniff`` recognises the first :data:`SNIFF_LINES` lines parses the file, with the
  context its ``context`` builds (side files, overrides).
* A file is stored whole or rejected with a reason; content already stored (same SHA-256)
  is a duplicate and is not parsed again.
* CLI overrides win over what the log says; every run must then name its network,
  deployment and batch size and hold some progress (:func:`check_run`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fleet.deployment import normalise_deployment
from ingest.events import ParsedRun, ParseError
from ingest.parsers import (
    SNIFF_LINES,
    Overrides,
    Parser,
    context_for,
    detect,
    format_label,
    registered,
)
from ingest.store import Store

# Files in a tree that are never logs: side files the parsers read themselves, docs, images.
_IGNORED_SUFFIXES = {".json", ".md", ".png", ".jpg", ".svg", ".pdf", ".py", ".prototxt", ".csv"}


@dataclass
class IngestReport:
    added: list[tuple[str, int]] = field(default_factory=list)  # (source, runs)
    duplicates: list[tuple[str, str]] = field(default_factory=list)  # (source, first source)
    rejected: list[ParseError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # non-log files met while walking a folder

    @property
    def ok(self) -> bool:
        return not self.rejected


def discover(paths: Iterable[str]) -> tuple[list[tuple[str, Path]], list[str], list[ParseError]]:
    """Expand files and folders into (source as given, path) pairs, sorted, folders recursed.

    Returns the log candidates, the side files skipped, and errors for paths that do not exist.
    """
    found: list[tuple[str, Path]] = []
    skipped: list[str] = []
    missing: list[ParseError] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                if child.suffix.lower() in _IGNORED_SUFFIXES or child.name.startswith("."):
                    skipped.append(str(child))
                else:
                    found.append((str(child), child))
        elif path.is_file():
            found.append((given, path))
        else:
            missing.append(ParseError("no such file or folder", source=given))
    return found, skipped, missing


def apply_overrides(run: ParsedRun, overrides: Overrides) -> ParsedRun:
    """CLI values win over what the log says; a deployment key is kept as given (normalised)."""
    if overrides.network:
        run.network = overrides.network
    if overrides.batch_size:
        run.batch_size = overrides.batch_size
    if overrides.deployment:
        run.meta["deployment_key"] = normalise_deployment(overrides.deployment)
    if run.network:
        run.network = run.network.strip().lower()
    return run


def check_run(run: ParsedRun, index: int) -> None:
    """A run must name its network, deployment and batch size and hold some progress."""
    label = f"run {index + 1}"
    line = run.first_line
    if not run.segments:
        raise ParseError(f"{label}: no complete train or test phase in the log", line=line)
    if not run.network:
        raise ParseError(f"{label}: the log does not name the network; pass --network", line=line)
    if not (run.deployment or run.meta.get("deployment_key")):
        raise ParseError(
            f"{label}: the log does not say which accelerators ran it; pass --deployment "
            "(e.g. --deployment nvidia-v100-sxm2-16gb-x8 or '8x V100')",
            line=line,
        )
    if not run.batch_size or run.batch_size <= 0:
        raise ParseError(f"{label}: no batch size in the log; pass --batch-size", line=line)


def _known(parsers: list[Parser]) -> str:
    """``"A, B or C"``: the formats' labels, for the unrecognised-format message."""
    labels = [format_label(p) for p in parsers]
    return " or ".join(filter(None, [", ".join(labels[:-1]), *labels[-1:]]))


def read_lines(data: bytes, source: str) -> list[str]:
    if b"\x00" in data[:65536]:
        raise ParseError("binary file (NUL bytes), not a text log", line=1, source=source)
    return data.decode("utf-8", errors="replace").splitlines()


def ingest_file(
    store: Store, source: str, path: Path, overrides: Overrides, parsers: list[Parser]
) -> tuple[str, object]:
    """Ingest one file. Returns ("added", runs) / ("duplicate", first source); raises ParseError."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ParseError(f"cannot read: {exc.strerror or exc}", source=source) from None
    content_hash = hashlib.sha256(data).hexdigest()
    first = store.has_content(content_hash)
    if first is not None:
        return "duplicate", first
    lines = read_lines(data, source)
    parser = detect(lines[:SNIFF_LINES], parsers)
    if parser is None:
        raise ParseError(f"unrecognised format (not {_known(parsers)})", line=1, source=source)
    try:
        ctx = context_for(path, source, parser, overrides)
        parsed = parser.parse(lines, ctx)
        parsed = [apply_overrides(run, overrides) for run in parsed]
        if not parsed:
            raise ParseError("no training run found in the log", line=1)
        for index, run in enumerate(parsed):
            check_run(run, index)
    except ParseError as exc:
        raise exc if exc.source else exc.with_source(source) from None
    file_id = store.add_file(
        content_hash=content_hash, source=source, fmt=parser.FORMAT, size=len(data), parsed=parsed
    )
    if file_id is None:  # another process stored the same content meanwhile
        return "duplicate", store.has_content(content_hash)
    return "added", len(parsed)


def ingest_paths(
    store: Store,
    paths: Iterable[str],
    overrides: Overrides | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> IngestReport:
    """Ingest every log under ``paths``; each file is stored whole or rejected with a reason."""
    overrides = overrides or Overrides()
    parsers = registered()
    found, skipped, missing = discover(paths)
    report = IngestReport(skipped=skipped, rejected=list(missing))
    for done, (source, path) in enumerate(found, start=1):
        try:
            status, value = ingest_file(store, source, path, overrides, parsers)
        except ParseError as exc:
            report.rejected.append(exc)
        else:
            if status == "added":
                report.added.append((source, int(value)))
            else:
                report.duplicates.append((source, str(value)))
        if progress:
            progress(done, len(found), source)
    return report
