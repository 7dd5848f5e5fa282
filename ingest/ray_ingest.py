"""Bulk ingest on Ray: parse files in Ray tasks, write them through one writer (the driver).

Rules
-----
* Files are found exactly as local ingest finds them (:func:`ingest.pipeline.discover`), and
  the report is the same :class:`~ingest.pipeline.IngestReport`, its lists in discovery order.
* Content already in the store (same SHA-256, hashed by the driver) is a duplicate and is never
  sent out. Of several paths with the same content only the first (in discovery order) is
  parsed; the others are duplicates of it once it is stored, or are parsed if it is rejected.
* Tasks are pure: a batch of (source, path) in, one outcome per file out, the parsed runs or a
  rejection with file, line and reason (:func:`ingest.pipeline.parse_file`). They never touch
  the store. Each takes the driver's parser registry (:func:`in_registry`), so a format
  registered at run time parses there too: a module a worker cannot import is looked for in
  the folder the driver imported it from (a local Ray's workers share it; a cluster's need
  the module installed).
* Rejections are recorded in the store and the warnings collected from it, as
  :func:`ingest.pipeline.ingest_paths` does.
* The driver is the only writer: it takes batches as they finish (``ray.wait``) and stores each
  file in its own transaction (:func:`ingest.pipeline.write_parsed`), in arrival order, so each
  file is stored whole or not at all, also when the ingest is killed.
* A task that fails (its worker died, or it raised) is retried ``max_retries`` times; a batch
  that still fails is split into one task per file, and a file whose own task still fails is
  rejected with the task's error. The other files proceed.
* Ray: the Ray this process already runs is used as it is (and left running); otherwise
  ``address`` joins that cluster (whose workers must have jobcast installed), else a local Ray
  is started with ``num_cpus``. Ray started or joined here is shut down at the end.
* ``ray`` is imported inside the functions: this module imports without it, and
  :class:`RayMissing` says how to install it when it is needed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fleet.ray_session import connect, import_ray, task_failure
from ingest.events import ParseError
from ingest.parsers import ParseOverrides, adopt, names, registered
from ingest.pipeline import (
    IngestReport,
    ParsedFile,
    collect_warnings,
    discover,
    parse_file,
    record,
    write_parsed,
)
from ingest.store import Store

FILES_PER_TASK = 8
MAX_RETRIES = 2

Item = tuple[str, Path]  # (source as given, path)
# ("parsed", source, ParsedFile) or ("rejected", source, error source, line, reason), source as
# given: ParseError does not pickle with its line and source, so rejections travel as values.
Outcome = tuple[Any, ...]
TaskFn = Callable[[list[Item], ParseOverrides], list[Outcome]]




def parse_batch(items: list[Item], overrides: ParseOverrides) -> list[Outcome]:
    """The task body: parse each file of the batch; never touches the store."""
    parsers = registered()
    out: list[Outcome] = []
    for source, path in items:
        try:
            out.append(("parsed", source, parse_file(source, Path(path), overrides, parsers)))
        except ParseError as exc:
            out.append(("rejected", source, exc.source or source, exc.line, exc.reason))
    return out


Registry = tuple[tuple[str, str | None], ...]  # (parser module, folder it imports from)


def driver_registry() -> Registry:
    """The driver's parser registry: each module (:func:`~ingest.parsers.names`) with the
    ``sys.path`` folder it was imported from (None while it is not imported)."""
    out = []
    for name in names():
        file = getattr(sys.modules.get(name), "__file__", None)
        root = None
        if file:
            folder = Path(file).resolve().parent
            depth = name.count(".") + (Path(file).name == "__init__.py")
            root = str(folder.parents[depth - 1]) if depth else str(folder)
        out.append((name, root))
    return tuple(out)


def in_registry(registry: Registry, task: TaskFn, items: list[Item],
                overrides: ParseOverrides) -> list[Outcome]:
    """What a Ray task runs: the driver's parser registry (:func:`driver_registry`: formats
    registered at run time parse here too; a module this worker cannot import is looked for
    in the driver's folder, which a local Ray shares), then ``task``."""
    for name, root in registry:
        if root and name not in sys.modules and importlib.util.find_spec(
                name.partition(".")[0]) is None and root not in sys.path:
            sys.path.append(root)
    adopt(name for name, _ in registry)
    return task(items, overrides)


def ingest_paths_ray(
    store: Store,
    paths: Iterable[str],
    overrides: ParseOverrides | None = None,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    files_per_task: int = FILES_PER_TASK,
    max_retries: int = MAX_RETRIES,
    progress: Callable[[int, int, str], None] | None = None,
    task: TaskFn = parse_batch,
) -> IngestReport:
    """Ingest every log under ``paths`` with Ray tasks parsing and this process writing.

    Same report and guarantees as :func:`ingest.pipeline.ingest_paths`: the rejections are
    recorded in the store and the report's warnings collected from it, as there;
    ``progress(done, total, source)`` is called once per file found. ``task`` is the task
    body (tests pass one that kills its worker).
    """
    if files_per_task < 1:
        raise ValueError("files_per_task must be at least 1")
    ray = import_ray("Ray ingest")
    overrides = overrides or ParseOverrides()
    found, skipped, missing = discover(paths)
    report = IngestReport(skipped=skipped, rejected=list(missing))
    writer = _Writer(store, report, progress, len(found))
    todo = writer.screen(found)
    if not todo:  # nothing new: no need to start or join Ray
        writer.sort([source for source, _ in found])
        return _finish(store, report)
    registry = driver_registry()
    started = connect(ray, address, num_cpus)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        remote = ray.remote(in_registry).options(
            num_cpus=1, max_retries=max_retries, retry_exceptions=True
        )
        queue: deque[list[Item]] = deque(
            todo[i : i + files_per_task] for i in range(0, len(todo), files_per_task)
        )
        pending: dict[Any, list[Item]] = {}
        window = 2 * cpus  # batches in flight: enough to keep every CPU busy, no more
        while queue or pending:
            while queue and len(pending) < window:
                batch = queue.popleft()
                pending[remote.remote(registry, task, batch, overrides)] = batch
            [ref], _ = ray.wait(list(pending), num_returns=1)
            batch = pending.pop(ref)
            try:
                outcomes = ray.get(ref)
            except ray.exceptions.RayError as exc:
                if len(batch) > 1:  # find the file that breaks it: one task per file
                    queue.extend([item] for item in batch)
                    continue
                reason = f"parse task failed after {max_retries} retries: {task_failure(exc)}"
                outcomes = [("rejected", batch[0][0], batch[0][0], None, reason)]
            for outcome in outcomes:
                retry = writer.take(outcome)
                if retry:
                    queue.append(retry)
    finally:
        if started:
            ray.shutdown()
    writer.sort([source for source, _ in found])
    return _finish(store, report)


def _finish(store: Store, report: IngestReport) -> IngestReport:
    """Record the report's rejections and collect its warnings, as ``ingest_paths`` does."""
    store.add_rejections(report.rejected)
    return collect_warnings(store, report)


class _Writer:
    """The single writer: screens files for known content, stores outcomes, reports progress."""

    def __init__(
        self,
        store: Store,
        report: IngestReport,
        progress: Callable[[int, int, str], None] | None,
        total: int,
    ) -> None:
        self.store, self.report, self.progress, self.total = store, report, progress, total
        self.done = 0
        self.digest: dict[str, str] = {}  # source -> driver-side content hash
        self.waiting: dict[str, list[Item]] = defaultdict(list)  # hash -> later same paths

    def screen(self, found: list[Item]) -> list[Item]:
        """The files to send out: known content is reported now, later copies wait."""
        out: list[Item] = []
        for source, path in found:
            try:
                with open(path, "rb") as fh:
                    digest = hashlib.file_digest(fh, "sha256").hexdigest()
            except OSError:
                out.append((source, path))  # the task reports why it cannot be read
                continue
            first = self.store.has_content(digest)
            if first is not None:
                self._finish(source, "duplicate", first)
            elif digest in self.waiting:
                self.waiting[digest].append((source, path))
            else:
                self.waiting[digest] = []
                self.digest[source] = digest
                out.append((source, path))
        return out

    def take(self, outcome: Outcome) -> list[Item]:
        """Store or reject one file; returns same-content paths to parse now it was rejected."""
        source = outcome[1]
        if outcome[0] == "parsed":
            parsed: ParsedFile = outcome[2]
            status, value = write_parsed(self.store, parsed)
            self._finish(source, status, value)
            first = source if status == "added" else str(value)
            for later, _ in self.waiting.pop(self.digest.get(source, ""), []):
                self._finish(later, "duplicate", first)
            return []
        _, _, where, line, reason = outcome
        self.report.rejected.append(ParseError(reason, line=line, source=where))
        self._count(source)
        return self.waiting.pop(self.digest.get(source, ""), [])

    def sort(self, sources: list[str]) -> None:
        """Report lists in discovery order (missing paths first), as local ingest has them."""
        rank = {source: i for i, source in enumerate(sources)}
        self.report.added.sort(key=lambda entry: rank[entry[0]])
        self.report.duplicates.sort(key=lambda entry: rank[entry[0]])
        self.report.rejected.sort(key=lambda err: rank.get(err.source or "", -1))

    def _finish(self, source: str, status: str, value: object) -> None:
        record(self.report, source, status, value)
        self._count(source)

    def _count(self, source: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total, source)








def stored_runs(store: Store) -> list[tuple]:
    """What ingest stored per run, ids and clock left out, sorted: equal for equal ingests."""
    by_run: dict[int, list[tuple]] = defaultdict(list)
    for seg in store.segments():
        by_run[seg["run_id"]].append(
            tuple((k, v) for k, v in sorted(seg.items()) if k not in ("id", "run_id"))
        )
    return sorted(
        (
            r.source,
            r.content_hash,
            r.format,
            r.run_index,
            r.network,
            r.deployment,
            r.stack,
            r.batch_size,
            r.start_time,
            repr(sorted(r.meta.items())),
            tuple(by_run[r.id]),
        )
        for r in store.runs()
    )
