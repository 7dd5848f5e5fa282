"""Ingest: fetch jobs from Prometheus, reconstruct them and write finished ones to the store.

Rules
-----
* Everything is fetched (:func:`fetch_jobs`) before anything is written (:func:`store_jobs`),
  so a failed fetch writes nothing; a caller can open (create) the store only after the
  fetch succeeded, so a failed ingest into a new store leaves no file behind.
* Limits are checked before the samples are asked for: the range in ``chunk`` pieces must
  be at most ``max_chunks`` requests (checked before any request), and the selected series
  may hold at most ``max_points`` samples in the range (one counting query, then checked
  again while fetching). Past a limit the error says how many and which flags change it.
* Running jobs are skipped (ingest them once they finish); finished and lost ones are
  checked like log runs (network, deployment, batch size, a complete train phase).
* Each job is one store entry (its attempts are its runs), written in one transaction,
  with source ``prometheus:URL#job=ID&start=T`` (:func:`job_source`) and, as content
  hash, the SHA-256 of a canonical JSON of its reconstruction (:func:`canonical_hash`,
  values rounded to 6 decimals): ingesting again adds nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from ingest.events import ParseError
from ingest.pipeline import check_run
from ingest.prometheus.client import PrometheusClient, PrometheusError
from ingest.prometheus.names import (
    FORMAT,
    SERIES,
    MetricNames,
    duration_at_least,
    iso_time,
    job_selector,
)
from ingest.prometheus.reconstruct import JobTrace, segments_from_samples

MAX_CHUNKS = 10_000  # requests of one ingest (--max-chunks)
MAX_POINTS = 5_000_000  # samples held in memory by one ingest (--max-points)


def job_source(url: str, job_id: str, job_start: float | None) -> str:
    """The store source of a job: ``prometheus:URL#job=ID&start=T`` (the id URL-quoted)."""
    start = f"&start={job_start:.3f}" if job_start is not None else ""
    return f"prometheus:{url}#job={quote(job_id, safe='')}{start}"


def canonical_hash(traces: Sequence[JobTrace]) -> tuple[str, int]:
    """SHA-256 (and size) of a canonical JSON of a job's attempts and segments."""
    doc = {
        "job_id": traces[0].job_id,
        "attempts": [
            {
                "job_start": _round(tr.job_start),
                "network": tr.run.network,
                "segments": [
                    [s.phase, _round(s.iterations), _round(s.seconds), _round(s.start_time),
                     s.batch_size, [[_round(a), _round(b)] for a, b in s.points]]
                    for s in tr.run.segments
                ],
            }
            for tr in traces
        ],
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest(), len(text)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


@dataclass
class PromIngestReport:
    """What one ``ingest_prometheus`` call did, job by job."""

    added: list[dict] = field(default_factory=list)  # source, job_id, runs, segments
    duplicates: list[dict] = field(default_factory=list)  # source, job_id, first_source
    skipped: list[dict] = field(default_factory=list)  # job_id, reason (e.g. still running)
    rejected: list[ParseError] = field(default_factory=list)
    series: int = 0
    samples: int = 0
    chunks: int = 0
    requests: int = 0

    @property
    def ok(self) -> bool:
        """Whether no job was rejected."""
        return not self.rejected


def _check_job(traces: list[JobTrace], names: MetricNames) -> None:
    for index, tr in enumerate(traces):
        run = tr.run
        if not any(s.phase == "train" for s in run.segments):
            raise ParseError(f"attempt {tr.attempt}: no complete train phase was scraped")
        if not run.network:
            raise ParseError(f"attempt {tr.attempt}: no {names.network_label!r} label; give "
                             "the exporter network=...")
        if not run.deployment:
            raise ParseError(f"attempt {tr.attempt}: no usable {names.deployment_label!r} "
                             "label; give the exporter deployment=... (e.g. '8x A100')")
        if not run.batch_size:
            raise ParseError(f"attempt {tr.attempt}: no train batch size; give the exporter "
                             "batch_size=...")
        check_run(run, index)


def chunk_count(since: float, until: float, chunk: float) -> int:
    """How many ``chunk``-long requests cover ``[since, until]``."""
    if not (math.isfinite(since) and math.isfinite(until)):
        raise PrometheusError(f"the time range must be finite, got {since!r} to {until!r}")
    if not until > since:
        raise PrometheusError(f"the time range is empty (--since {iso_time(since)} is not "
                              f"before --until {iso_time(until)})")
    if not (math.isfinite(chunk) and chunk > 0):
        raise PrometheusError(f"chunk must be a positive duration, got {chunk}")
    return max(1, math.ceil((until - since) / chunk - 1e-9))


def check_chunks(since: float, until: float, chunk: float, max_chunks: int | None) -> int:
    """The request count of the range; over ``max_chunks`` is an error naming the flags."""
    chunks = chunk_count(since, until, chunk)
    if max_chunks is not None and chunks > max_chunks:
        raise PrometheusError(
            f"{iso_time(since)} to {iso_time(until)} in --chunk {duration_at_least(chunk)} "
            f"pieces is {chunks:,} requests, over the limit of {max_chunks:,} (--max-chunks); "
            f"use --chunk {duration_at_least((until - since) / max_chunks)} or longer, a "
            "later --since, or raise --max-chunks; no request was made")
    return chunks


def count_points(client: PrometheusClient, names: MetricNames,
                 matchers: Sequence[tuple[str, str, str]], since: float, until: float) -> int:
    """Samples the selected exporter series hold in ``[since, until]`` (one query).

    One ``count_over_time`` per series name, summed: counting them under one name regex
    would drop the names and fail on series that differ only by name.
    """
    width = max(1, math.ceil(until - since))
    terms = [f"(sum(count_over_time({job_selector(names, matchers, key=key)}[{width}s])) "
             "or vector(0))" for key in SERIES]
    result = client.query(" + ".join(terms), at=until)
    try:
        return int(float(result[0]["value"][1])) if result else 0
    except (IndexError, KeyError, TypeError, ValueError):
        raise PrometheusError(f"Prometheus at {client.url}: unreadable sample count "
                              f"{str(result)[:120]}") from None


@dataclass
class FetchedJobs:
    """What :func:`fetch_jobs` read: each job's attempts, and how much was read."""

    url: str
    names: MetricNames
    until: float
    by_job: dict[str, list[JobTrace]]
    series: int
    samples: int
    chunks: int
    requests: int


def fetch_jobs(client: PrometheusClient, since: float, until: float, *,
               matchers: Sequence[tuple[str, str, str]] = (),
               names: MetricNames | None = None, chunk: float = 6 * 3600.0,
               stale_after: float = 300.0,
               progress: Callable[[int, int], None] | None = None,
               max_chunks: int | None = MAX_CHUNKS,
               max_points: int | None = MAX_POINTS) -> FetchedJobs:
    """Read and reconstruct the jobs in ``[since, until]``; writes nothing.

    Raises :class:`PrometheusError` past ``max_chunks`` (before any request) or
    ``max_points`` (after one counting query, or while fetching), and on any failed request.
    """
    names = (names or MetricNames()).validate()
    chunks = check_chunks(since, until, chunk, max_chunks)
    if max_points is not None:
        points = count_points(client, names, matchers, since, until)
        if points > max_points:
            raise PrometheusError(
                f"{iso_time(since)} to {iso_time(until)} holds {points:,} samples of the "
                f"selected series, over the limit of {max_points:,} (--max-points); narrow "
                "--since/--until, add --selector LABEL=VALUE, or raise --max-points")
    series = client.raw_samples(job_selector(names, matchers), since, until, chunk=chunk,
                                progress=progress, max_points=max_points)
    traces = segments_from_samples(series, names, until=until, stale_after=stale_after)
    by_job: dict[str, list[JobTrace]] = {}
    for tr in traces:
        by_job.setdefault(tr.job_id, []).append(tr)
    return FetchedJobs(url=client.url, names=names, until=until, by_job=by_job,
                       series=len(series), samples=sum(len(s["values"]) for s in series),
                       chunks=chunks, requests=client.requests_made)


def store_jobs(store, fetched: FetchedJobs) -> PromIngestReport:
    """Write each finished (or lost) fetched job into ``store``, one transaction per job.

    Keyed by the hash of its reconstruction and by its source
    (``prometheus:URL#job=ID&start=T``): ingesting again adds nothing. Running jobs are
    skipped (ingest them once they finish).
    """
    names = fetched.names
    report = PromIngestReport(series=fetched.series, samples=fetched.samples,
                              chunks=fetched.chunks, requests=fetched.requests)
    known = {r.source for r in store.runs() if r.format == FORMAT}
    for job_id, attempts in fetched.by_job.items():
        final = attempts[-1]
        source = job_source(fetched.url, job_id, attempts[0].job_start)
        if final.status == "running":
            report.skipped.append({"job_id": job_id, "source": source, "reason": (
                f"still running (last scrape {iso_time(final.last_seen)}); ingest it after it "
                "finishes")})
            continue
        if source in known:
            report.duplicates.append({"job_id": job_id, "source": source,
                                      "first_source": source})
            continue
        try:
            _check_job(attempts, names)
        except ParseError as exc:
            report.rejected.append(ParseError(f"job {job_id!r}: {exc.reason}", source=source))
            continue
        content_hash, size = canonical_hash(attempts)
        first = store.has_content(content_hash)
        if first is None:
            file_id = store.add_file(content_hash=content_hash, source=source, fmt=FORMAT,
                                     size=size, parsed=[tr.run for tr in attempts])
            if file_id is not None:
                report.added.append({
                    "job_id": job_id, "source": source, "runs": len(attempts),
                    "segments": sum(len(tr.run.segments) for tr in attempts),
                    "status": final.status, "notes": [n for tr in attempts for n in tr.notes],
                })
                known.add(source)
                continue
            first = store.has_content(content_hash)
        report.duplicates.append({"job_id": job_id, "source": source, "first_source": first})
    return report


def ingest_prometheus(store, client: PrometheusClient, since: float, until: float, *,
                      matchers: Sequence[tuple[str, str, str]] = (),
                      names: MetricNames | None = None, chunk: float = 6 * 3600.0,
                      stale_after: float = 300.0,
                      progress: Callable[[int, int], None] | None = None,
                      max_chunks: int | None = MAX_CHUNKS,
                      max_points: int | None = MAX_POINTS) -> PromIngestReport:
    """Read the jobs in ``[since, until]`` and store each finished (or lost) one:
    :func:`fetch_jobs`, then :func:`store_jobs` (see their rules)."""
    fetched = fetch_jobs(client, since, until, matchers=matchers, names=names, chunk=chunk,
                         stale_after=stale_after, progress=progress, max_chunks=max_chunks,
                         max_points=max_points)
    return store_jobs(store, fetched)
