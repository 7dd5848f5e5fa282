"""Prometheus traces of training jobs -> runs of train/test segments in the store.

Four parts, usable apart:

* **Names and queries** (:mod:`.names`): :class:`MetricNames` (the metric and label names
  the exporter ``jobcast.instrument.prometheus`` writes; all configurable),
  :func:`selector` / :func:`promql_string`, which build PromQL with every label value
  escaped, and the parsing of selectors, durations and times given on the command line.
* **Fetching** (:mod:`.client`): :class:`PrometheusClient`, with time-outs, retries where
  they help, auth and TLS options; every failure is a :class:`PrometheusError` that says
  what went wrong and what to try. Raw samples come from range-vector selectors in chunks.
* **Reconstruction** (:mod:`.reconstruct`): :func:`segments_from_samples`, a pure function
  from range-vector series to :class:`JobTrace` objects (one per job and attempt).
* **Ingest** (:mod:`.load`): :func:`ingest_prometheus` ties them together and writes each
  finished job into the store in one transaction, idempotently (see docs/prometheus.md);
  :func:`fetch_jobs` (limits: ``max_chunks`` requests, ``max_points`` samples) and
  :func:`store_jobs` are its two halves, for callers that open the store only after a
  successful fetch.

Everything public is re-exported here: import from ``ingest.prometheus``.
"""

from __future__ import annotations

from ingest.events import PHASES
from ingest.prometheus.client import RETRY_STATUS, PrometheusClient, PrometheusError
from ingest.prometheus.load import (
    MAX_CHUNKS,
    MAX_POINTS,
    FetchedJobs,
    PromIngestReport,
    canonical_hash,
    check_chunks,
    chunk_count,
    count_points,
    fetch_jobs,
    ingest_prometheus,
    job_source,
    store_jobs,
)
from ingest.prometheus.names import (
    COUNTERS,
    FORMAT,
    PER_PHASE,
    SERIES,
    MetricNames,
    duration_at_least,
    job_selector,
    parse_duration,
    parse_matcher,
    parse_time,
    promql_string,
    selector,
)
from ingest.prometheus.reconstruct import JobTrace, PhaseProgress, segments_from_samples

__all__ = [
    "COUNTERS",
    "FORMAT",
    "MAX_CHUNKS",
    "MAX_POINTS",
    "PER_PHASE",
    "PHASES",
    "RETRY_STATUS",
    "SERIES",
    "FetchedJobs",
    "JobTrace",
    "MetricNames",
    "PhaseProgress",
    "PromIngestReport",
    "PrometheusClient",
    "PrometheusError",
    "canonical_hash",
    "check_chunks",
    "chunk_count",
    "count_points",
    "duration_at_least",
    "fetch_jobs",
    "ingest_prometheus",
    "job_selector",
    "job_source",
    "parse_duration",
    "parse_matcher",
    "parse_time",
    "promql_string",
    "segments_from_samples",
    "selector",
    "store_jobs",
]
