"""Ingest: fetch jobs from Prometheus, reconstruct them and write finished ones to the store.

Rules
-----
* Everything is fetched before anything is written, so a failed fetch writes nothing.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from ingest.events import ParseError
from ingest.pipeline import check_run
from ingest.prometheus.client import PrometheusClient
from ingest.prometheus.names import FORMAT, MetricNames, iso_time, job_selector
from ingest.prometheus.reconstruct import JobTrace, segments_from_samples


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
    requests: int = 0

    @property
    def ok(self) -> bool:
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


def ingest_prometheus(store, client: PrometheusClient, since: float, until: float, *,
                      matchers: Sequence[tuple[str, str, str]] = (),
                      names: MetricNames | None = None, chunk: float = 6 * 3600.0,
                      stale_after: float = 300.0,
                      progress: Callable[[int, int], None] | None = None) -> PromIngestReport:
    """Read the jobs in ``[since, until]`` and store each finished (or lost) one.

    Everything is fetched before anything is written, so a failed fetch writes nothing;
    each job is then written in one transaction (all its attempts as runs of one entry),
    keyed by the hash of its reconstruction and by its source
    (``prometheus:URL#job=ID&start=T``): ingesting again adds nothing. Running jobs are
    skipped (ingest them once they finish).
    """
    names = (names or MetricNames()).validate()
    series = client.raw_samples(job_selector(names, matchers), since, until, chunk=chunk,
                                progress=progress)
    report = PromIngestReport(series=len(series),
                              samples=sum(len(s["values"]) for s in series))
    traces = segments_from_samples(series, names, until=until, stale_after=stale_after)
    by_job: dict[str, list[JobTrace]] = {}
    for tr in traces:
        by_job.setdefault(tr.job_id, []).append(tr)
    known = {r.source for r in store.runs() if r.format == FORMAT}
    for job_id, attempts in by_job.items():
        final = attempts[-1]
        source = job_source(client.url, job_id, attempts[0].job_start)
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
    report.requests = client.requests_made
    return report
