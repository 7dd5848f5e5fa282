"""Batched, parallel ingest: a process pool parses, this process is the one writer.

Rules
-----
* The caller (:func:`ingest.pipeline.ingest_paths`) finds the files and gives the task that
  parses a chunk (:func:`ingest.pipeline.parse_chunk`); this module knows nothing of formats.
  The report lists the files in the order they were found.
* Screening (this process): each file is read and hashed; content already stored is a
  duplicate and is never parsed (one :meth:`~ingest.store.Store.known_contents` query per
  chunk). Of several paths with one content in this ingest only the first is parsed; the
  others are duplicates of it once it is stored, or are parsed in turn if it is rejected.
* Chunks of new files (at most :data:`CHUNK_FILES` files and :data:`CHUNK_BYTES` bytes,
  smaller for small ingests: about four chunks per worker) are the unit of parsing and of
  writing. ``workers`` = 1, or less than :data:`POOL_MIN_BYTES` to read, parses in this
  process; otherwise a pool of ``workers`` processes parses whole chunks (``forkserver``
  where the platform has it, the parsers preloaded; a worker takes the parent's parser
  registry, :func:`ingest.parsers.names`, so formats registered at run time parse there too;
  it ignores Ctrl-C and exits when this process dies), at most two chunks per worker in
  flight, and sends back per file the store's rows or the rejection (file, line, reason).
  Any parser exception is a rejection (:func:`ingest.pipeline.parse_data`). A pool that
  breaks (a worker killed, a registered format that does not import there) leaves its
  unfinished chunks to this process.
* Writing (this process only): parsed files are stored in transactions of up to
  ``batch_files`` files (:meth:`~ingest.store.Store.add_files`: all or none,
  insert-or-ignore on the content hash, a busy database retried), at chunk boundaries, as
  soon as the files waiting number as many as are stored already (the first chunk at once,
  then batches that double up to ``batch_files``: few commits, early progress), and at the
  end. A killed ingest leaves whole files only. A batch the database
  refuses is written again one file per transaction; a file it still refuses is rejected
  (``store refused: ...``) and the others are stored. ``batch_files=1`` is one transaction
  per file (the path before batching, kept for benchmarks).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import multiprocessing
import os
import signal
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ingest.events import ParseError
from ingest.parsers import ParseOverrides, adopt, names, registered

if TYPE_CHECKING:
    from ingest.store import Store

# A parsed file as the caller gives it (ingest.pipeline.ParsedFile): this module names no
# format and imports nothing of the pipeline, which imports it (no cycle, even for types).
ParsedFile = Any

CHUNK_FILES = 64
CHUNK_BYTES = 8_000_000
BATCH_FILES = 512
POOL_MIN_BYTES = 4_000_000  # below this, starting processes costs more than it saves
IN_FLIGHT_PER_WORKER = 2

Progress = Callable[[int, int, str], None]
# ("parsed", parsed file: source, content_hash, run_count, rows) or
# ("rejected", source, line, reason)
Outcome = tuple
Task = Callable[[list[tuple[str, str]], ParseOverrides], list[Outcome]]


class Report(Protocol):
    """What the writer fills: ``added`` (source, runs), ``duplicates`` (source, first
    source), ``rejected`` (:class:`~ingest.events.ParseError`)."""

    added: list[tuple[str, int]]
    duplicates: list[tuple[str, str]]
    rejected: list[ParseError]


def failure(exc: BaseException, width: int = 200) -> str:
    """``"<type>: <message>"`` on one line, cut to ``width`` characters."""
    try:
        text = " ".join(str(exc).split())
    except Exception:  # noqa: BLE001 - a message that cannot even be printed
        text = ""
    if len(text) > width:
        text = text[: width - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def default_workers() -> int:
    """Parsing processes when none are asked for: the CPUs, at most 4."""
    return max(1, min(os.cpu_count() or 1, 4))


@dataclass(frozen=True)
class Item:
    """A file to parse: its source as found, path, size and content hash at screening."""

    source: str
    path: Path
    size: int
    digest: str


def _worker_init(order: tuple[str, ...] = ()) -> None:
    """In each pool worker: the parent's parser registry (``order``, its
    :func:`~ingest.parsers.names`: formats registered at run time, a test's own, parse here
    too; one that does not import here breaks the pool, whose chunks the parent then parses);
    Ctrl-C is the writer's to handle; exit when the writer dies."""
    if order:
        adopt(order)
        registered()  # import them now: a format missing here fails the start, not a file
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _pool(workers: int, task: Task) -> ProcessPoolExecutor:
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload([__name__, task.__module__, "ingest.store", *names()])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(names(),))


class _Writer:
    """Screens files for known content, stores parse outcomes in batches, keeps the report."""

    def __init__(self, store: Store, report: Report, progress: Progress | None,
                 total: int, batch_files: int) -> None:
        self.store, self.report, self.progress = store, report, progress
        self.total, self.batch_files = total, max(1, batch_files)
        self.done = 0
        self.written = 0  # files this writer has sent to the store
        self.pending: list[tuple[ParsedFile, str]] = []  # (parsed file, hash at screening)
        self.first: dict[str, str] = {}  # content hash -> the source parsed for it
        self.waiting: dict[str, list[Item]] = defaultdict(list)  # later paths, same content

    def screen(self, group: list[tuple[str, Path]]) -> list[Item]:
        """Read and hash ``group``; report what is known, hold back same-content paths;
        returns the files to parse."""
        read: list[Item] = []
        for source, path in group:
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                self.reject(source, None, f"cannot read: {exc.strerror or exc}")
                continue
            read.append(Item(source, path, len(data), hashlib.sha256(data).hexdigest()))
        known = self.store.known_contents(i.digest for i in read) if read else {}
        todo: list[Item] = []
        for item in read:
            if item.digest in known:
                self.finish(item.source, "duplicate", known[item.digest])
            elif item.digest in self.first:
                self.waiting[item.digest].append(item)
            else:
                self.first[item.digest] = item.source
                todo.append(item)
        return todo

    def take(self, chunk: list[Item], outcomes: list[Outcome]) -> list[Item]:
        """Store a chunk's parsed files, report its rejections; returns same-content files
        to parse now that the file parsed for them was rejected."""
        digest = {item.source: item.digest for item in chunk}
        retry: list[Item] = []
        for outcome in outcomes:
            if outcome[0] == "parsed":
                parsed = outcome[1]
                self.pending.append((parsed, digest.get(parsed.source, parsed.content_hash)))
                continue
            _, source, line, reason = outcome
            self.reject(source, line, reason)
            later = self.waiting.pop(digest.get(source, ""), [])
            if later:
                self.first[later[0].digest] = later[0].source
                retry.append(later[0])
                self.waiting[later[0].digest] = later[1:]
        if len(self.pending) >= min(self.batch_files, max(1, self.written)):
            self.flush()
        return retry

    def flush(self) -> None:
        """Store what is parsed, in transactions of up to ``batch_files`` files."""
        while self.pending:
            batch = self.pending[:self.batch_files]
            del self.pending[:self.batch_files]
            self._store(batch)
            self.written += len(batch)

    def _store(self, pending: list[tuple[ParsedFile, str]]) -> None:
        batch = [parsed for parsed, _ in pending]
        try:
            ids: list[object] = list(self.store.add_files(batch))
        except Exception as exc:  # noqa: BLE001 - find the file the database refuses
            if len(batch) == 1:
                ids = [exc]
            else:
                ids = []
                for parsed in batch:
                    try:
                        ids.extend(self.store.add_files([parsed]))
                    except Exception as one:  # noqa: BLE001
                        ids.append(one)
        firsts = {}
        if any(i is None for i in ids):
            firsts = self.store.known_contents(p.content_hash for p, i in zip(batch, ids,
                                                                               strict=True)
                                               if i is None)
        for (parsed, screened), file_id in zip(pending, ids, strict=True):
            if isinstance(file_id, Exception):
                reason = failure(getattr(file_id, "orig", None) or file_id)
                self.reject(parsed.source, None, f"store refused: {reason}")
                for later in self.waiting.pop(screened, []):
                    self.reject(later.source, None, f"same content as {parsed.source}, which "
                                f"the store refused: {reason}")
                continue
            if file_id is None:  # another writer stored the same content meanwhile
                first = firsts.get(parsed.content_hash) or parsed.rows[0].get(  # its jobs'
                    "duplicate_of", "(another ingest)")  # (ingest.job_identity)
                self.finish(parsed.source, "duplicate", first)
            else:
                first = parsed.source
                self.finish(parsed.source, "added", parsed.run_count)
            for later in self.waiting.pop(screened, []):
                self.finish(later.source, "duplicate", first)

    def reject(self, source: str, line: int | None, reason: str) -> None:
        self.report.rejected.append(ParseError(reason, line=line, source=source))
        self._count(source)

    def finish(self, source: str, status: str, value: int | str) -> None:
        if status == "added":
            self.report.added.append((source, int(value)))
        else:
            self.report.duplicates.append((source, str(value)))
        self._count(source)

    def _count(self, source: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total, source)


def _chunks(found: list[tuple[str, Path]], writer: _Writer, chunk_files: int
            ) -> Iterator[list[Item]]:
    """Screen ``found`` group by group and cut the new files into chunks."""
    chunk: list[Item] = []
    size = 0
    for start in range(0, len(found), chunk_files):
        for item in writer.screen(found[start:start + chunk_files]):
            if chunk and (len(chunk) >= chunk_files or size + item.size > CHUNK_BYTES):
                yield chunk
                chunk, size = [], 0
            chunk.append(item)
            size += item.size
    if chunk:
        yield chunk


def _worth_a_pool(found: list[tuple[str, Path]]) -> bool:
    """At least :data:`POOL_MIN_BYTES` to read, in at least two files."""
    total = 0
    for _, path in found:
        with contextlib.suppress(OSError):
            total += path.stat().st_size
        if total >= POOL_MIN_BYTES:
            return len(found) > 1
    return False


def run_ingest(
    store: Store,
    found: list[tuple[str, Path]],
    report: Report,
    overrides: ParseOverrides,
    task: Task,
    progress: Progress | None = None,
    *,
    workers: int = 1,
    batch_files: int = BATCH_FILES,
) -> None:
    """Parse (``task``, a module-level function) and store the ``found`` (source, path)
    files, filling ``report`` (module rules)."""
    writer = _Writer(store, report, progress, len(found), batch_files)
    workers = max(1, workers)
    chunk_files = max(1, min(CHUNK_FILES, math.ceil(len(found) / (4 * workers))))
    chunks = _chunks(found, writer, chunk_files)
    if workers == 1 or not _worth_a_pool(found):
        _run_here(chunks, writer, overrides, task)
    else:
        _run_pool(chunks, writer, overrides, task, workers)
    writer.flush()
    rank = {source: i for i, (source, _) in enumerate(found)}
    report.added.sort(key=lambda entry: rank[entry[0]])
    report.duplicates.sort(key=lambda entry: rank[entry[0]])
    report.rejected.sort(key=lambda err: rank.get(err.source or "", -1))


def _pairs(chunk: list[Item]) -> list[tuple[str, str]]:
    return [(item.source, str(item.path)) for item in chunk]


def _run_here(chunks: Iterable[list[Item]], writer: _Writer, overrides: ParseOverrides,
              task: Task) -> None:
    """Parse and write chunk after chunk in this process."""
    for chunk in chunks:
        todo = [chunk]
        while todo:
            current = todo.pop()
            retry = writer.take(current, task(_pairs(current), overrides))
            if retry:
                todo.append(retry)


def _run_pool(chunks: Iterator[list[Item]], writer: _Writer, overrides: ParseOverrides,
              task: Task, workers: int) -> None:
    """Parse in a process pool, write here as results arrive (module rules)."""
    in_flight: dict[Future, list[Item]] = {}
    retries: list[list[Item]] = []
    pool: ProcessPoolExecutor | None = None
    window = IN_FLIGHT_PER_WORKER * workers
    try:
        while True:
            while len(in_flight) < window:
                chunk = retries.pop() if retries else next(chunks, None)
                if chunk is None:
                    break
                pool = pool or _pool(workers, task)
                in_flight[pool.submit(task, _pairs(chunk), overrides)] = chunk
            if not in_flight:
                return
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            broken: list[list[Item]] = []
            for future in done:
                chunk = in_flight.pop(future)
                try:
                    outcomes = future.result()
                except BrokenProcessPool:
                    broken.append(chunk)
                    continue
                retry = writer.take(chunk, outcomes)
                if retry:
                    retries.append(retry)
            if broken:  # a worker died: what is left is parsed here
                leftovers = [*broken, *in_flight.values(), *retries]
                in_flight.clear()
                _run_here(chain(leftovers, chunks), writer, overrides, task)
                return
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
