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
  finished job into the store in one transaction, idempotently (see docs/prometheus.md).

Everything public is re-exported here: import from ``ingest.prometheus``.
"""

from __future__ import annotations

from ingest.events import PHASES
from ingest.prometheus.client import RETRY_STATUS, PrometheusClient, PrometheusError
from ingest.prometheus.load import (
    PromIngestReport,
    canonical_hash,
    ingest_prometheus,
    job_source,
)
from ingest.prometheus.names import (
    COUNTERS,
    FORMAT,
    PER_PHASE,
    SERIES,
    MetricNames,
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
    "PER_PHASE",
    "PHASES",
    "RETRY_STATUS",
    "SERIES",
    "JobTrace",
    "MetricNames",
    "PhaseProgress",
    "PromIngestReport",
    "PrometheusClient",
    "PrometheusError",
    "canonical_hash",
    "ingest_prometheus",
    "job_selector",
    "job_source",
    "parse_duration",
    "parse_matcher",
    "parse_time",
    "promql_string",
    "segments_from_samples",
    "selector",
]
