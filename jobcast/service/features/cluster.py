"""The service door to cluster history: training jobs read from Prometheus (the jobcast
exporter's series, or Kubernetes Jobs from kube-state-metrics and DCGM) into the store, and
the parsers of the flags that ask for them.

Rules: a fetch writes nothing; it closes its client whatever happens, and a Prometheus error
is a :class:`ClusterFetchError` saying nothing was written. The store is opened only after
the fetch succeeded (``store`` may be a callable that opens it), so a failed fetch leaves no
new SQLite file behind. Jobs are written one transaction each: a store error is a
:class:`ClusterStoreError` saying the jobs written before it are kept. Ingesting the same
range again adds nothing. Heavy modules are imported by the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from jobcast.service.errors import ServiceError

if TYPE_CHECKING:
    from ingest.prometheus import FetchedJobs, MetricNames, PrometheusClient, PrometheusError
    from ingest.prometheus.kubernetes import FetchedK8s
    from ingest.store import Store
    from ingest.whole_job import KeyRule

__all__ = ["ClusterError", "ClusterFetchError", "ClusterIngestResult", "ClusterStoreError",
           "KeyRule", "PrometheusError", "fetch_jobcast_jobs", "fetch_kubernetes_jobs",
           "iso_time", "job_key_rule", "kubernetes_jobs", "metric_names", "parse_duration",
           "parse_matcher", "parse_time", "prometheus_client", "prometheus_jobs",
           "store_fetched"]

Progress = Callable[[int, int], None]


class ClusterError(ServiceError, ValueError):
    """A cluster flag (time, duration, selector, job key, credentials) that cannot be used."""

    kind: ClassVar[str] = "cluster"


class ClusterFetchError(ClusterError):
    """Prometheus could not answer the fetch; nothing was written."""

    kind: ClassVar[str] = "prometheus"


class ClusterStoreError(ClusterError):
    """The store refused a job; the jobs written before it are kept."""

    kind: ClassVar[str] = "store"


def __getattr__(name: str) -> Any:
    """``KeyRule`` and ``PrometheusError``, the ingest room's classes, through this door (their
    modules are imported on first use, not with this one)."""
    if name == "KeyRule":
        from ingest.whole_job import KeyRule

        return KeyRule
    if name == "PrometheusError":
        from ingest.prometheus import PrometheusError

        return PrometheusError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _checked(parse: Callable[[str], Any], text: str) -> Any:
    """``parse(text)``, its ValueError as a :class:`ClusterError` (same message)."""
    try:
        return parse(text)
    except ClusterError:
        raise
    except ValueError as exc:
        raise ClusterError(str(exc)) from exc


def parse_duration(text: str) -> float:
    """``90s``, ``5m``, ``2h``, ``7d`` (or plain seconds) -> seconds (:class:`ClusterError`)."""
    from ingest.prometheus import parse_duration as parse

    return _checked(parse, text)


def parse_time(text: str) -> float:
    """``now``, a duration ago (``2h``), unix seconds or ISO 8601 -> unix seconds."""
    from ingest.prometheus import parse_time as parse

    return _checked(parse, text)


def parse_matcher(text: str) -> tuple[str, str, str]:
    """``LABEL=VALUE`` (also ``!=``, ``=~``, ``!~``) -> (label, operator, value)."""
    from ingest.prometheus import parse_matcher as parse

    return _checked(parse, text)


def iso_time(t: float) -> str:
    """Unix seconds as ISO 8601 text (UTC), as messages about time ranges print them."""
    from ingest.prometheus.names import iso_time as iso

    return iso(t)


def job_key_rule(text: str | None) -> str | None:
    """A ``--job-key`` rule (``REGEX``, ``name:REGEX`` or ``submit:REGEX``) checked, or None
    for none; a bad expression is a :class:`ClusterError`."""
    if not text:
        return None
    from ingest.whole_job import KeyRule

    _checked(KeyRule.parse, text)
    return text


def metric_names(prefix: str = "jobcast", job_label: str = "job_id",
                 network_label: str = "network",
                 deployment_label: str = "deployment") -> MetricNames:
    """The exporter's metric and label names, validated (:class:`ClusterError`)."""
    from ingest.prometheus import MetricNames

    try:
        return MetricNames(prefix=prefix, job_label=job_label, network_label=network_label,
                           deployment_label=deployment_label).validate()
    except ValueError as exc:
        raise ClusterError(str(exc)) from exc


def prometheus_client(url: str, *, timeout: float = 30.0, retries: int = 3,
                      bearer_token: str | None = None, basic_auth: str | None = None,
                      ca_file: str | None = None, insecure: bool = False) -> PrometheusClient:
    """A client for ``url``. ``basic_auth`` is ``USER:PASSWORD``; a malformed one, a missing
    ``ca_file`` or a URL the client refuses is a :class:`ClusterError`."""
    from ingest.prometheus import PrometheusClient, PrometheusError

    auth = None
    if basic_auth:
        user, sep, password = basic_auth.partition(":")
        if not sep or not user:
            raise ClusterError("--basic-auth must be USER:PASSWORD")
        auth = (user, password)
    if ca_file is not None and not Path(ca_file).is_file():
        raise ClusterError(f"--ca-file {ca_file}: no such file")
    try:
        return PrometheusClient(url, timeout=timeout, retries=retries,
                                bearer_token=bearer_token, basic_auth=auth,
                                ca_file=ca_file, insecure=insecure)
    except PrometheusError as exc:
        raise ClusterError(str(exc)) from exc


def _fetch(client: PrometheusClient, fetch: Callable[[], Any]) -> Any:
    """``fetch()``, then close ``client`` whatever happened (module rules)."""
    from ingest.prometheus import PrometheusError

    try:
        return fetch()
    except PrometheusError as exc:
        raise ClusterFetchError(f"{exc} (nothing was written)") from exc
    finally:
        client.close()


def fetch_jobcast_jobs(client: PrometheusClient, since: float, until: float, *,
                       matchers: Sequence[tuple[str, str, str]] = (),
                       names: MetricNames | None = None, chunk: float = 6 * 3600.0,
                       stale_after: float = 300.0, max_chunks: int | None = 10_000,
                       max_points: int | None = 5_000_000,
                       progress: Progress | None = None) -> FetchedJobs:
    """The jobcast exporter's jobs seen in ``[since, until]`` (writes nothing; closes
    ``client``). Limits are checked before samples are asked for."""
    from ingest.prometheus import fetch_jobs

    return _fetch(client, lambda: fetch_jobs(
        client, since, until, matchers=matchers, names=names, chunk=chunk,
        stale_after=stale_after, max_chunks=max_chunks, max_points=max_points,
        progress=progress))


def fetch_kubernetes_jobs(client: PrometheusClient, since: float, until: float, *,
                          namespace: str | None = None, job_key: str | None = None,
                          traces: bool = True, max_series: int | None = 200_000,
                          max_points: int | None = 5_000_000,
                          progress: Progress | None = None,
                          length: tuple[str, int] | None = None) -> FetchedK8s:
    """Kubernetes Jobs seen in ``[since, until]`` joined with their pods' DCGM traces
    (writes nothing; closes ``client``); ``length`` (``--iterations``/``--epochs``): the
    training length each Job had (``ingest.whole_job.apply_length``)."""
    from ingest.prometheus.kubernetes import fetch_k8s_jobs
    from ingest.whole_job import apply_length

    fetched = _fetch(client, lambda: fetch_k8s_jobs(
        client, since, until, namespace=namespace, job_key_rule=job_key, traces=traces,
        max_series=max_series, max_points=max_points, progress=progress))
    if length is not None:
        for _, run in fetched.runs:
            apply_length(run, length)
    return fetched


@dataclass
class ClusterIngestResult:
    """What one cluster ingest wrote: jobs added, already there, skipped (still running, no
    usable phase) and rejected (``source`` and ``reason``), what was read, the store's
    counts after it."""

    source: str  # "prometheus" (the jobcast exporter) or "kubernetes"
    added: list[dict] = field(default_factory=list)
    duplicates: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)
    read: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``jobcast ingest-prometheus --json``."""
        return {"added": self.added, "duplicates": self.duplicates, "skipped": self.skipped,
                "rejected": self.rejected, "read": self.read, "store": self.counts}


def _rejected(errors: Sequence[Any]) -> list[dict]:
    return [{"source": e.source, "reason": e.reason} for e in errors]


def store_fetched(store: Store | Callable[[], Store],
                  fetched: FetchedJobs | FetchedK8s) -> tuple[Store, ClusterIngestResult]:
    """Write ``fetched`` into ``store`` (opened now when it is a callable); returns the store
    and what was written (module rules)."""
    from ingest.prometheus import FetchedJobs, store_jobs
    from ingest.prometheus.kubernetes import store_k8s_jobs
    from ingest.store import StoreError

    st = store() if callable(store) else store
    try:
        if isinstance(fetched, FetchedJobs):
            report = store_jobs(st, fetched)
            result = ClusterIngestResult(
                "prometheus", report.added, report.duplicates, report.skipped,
                _rejected(report.rejected),
                {"series": report.series, "samples": report.samples, "chunks": report.chunks,
                 "requests": report.requests})
        else:
            k8s = store_k8s_jobs(st, fetched)
            result = ClusterIngestResult(
                "kubernetes", k8s["added"], k8s["duplicates"], k8s["skipped"],
                _rejected(k8s["rejected"]),
                {"series": fetched.series, "requests": fetched.requests})
    except StoreError as exc:
        raise ClusterStoreError(f"{exc} (jobs written before it are kept; run the command "
                                "again to add the rest)") from exc
    result.counts = st.counts()
    return st, result


def prometheus_jobs(client: PrometheusClient, store: Store | Callable[[], Store],
                    since: float, until: float, **options: Any) -> ClusterIngestResult:
    """Fetch the jobcast exporter's jobs (:func:`fetch_jobcast_jobs` options), then store
    them: the one call for callers without a progress bar between the two steps."""
    return store_fetched(store, fetch_jobcast_jobs(client, since, until, **options))[1]


def kubernetes_jobs(client: PrometheusClient, store: Store | Callable[[], Store],
                    since: float, until: float, **options: Any) -> ClusterIngestResult:
    """Fetch Kubernetes Jobs (:func:`fetch_kubernetes_jobs` options), then store them."""
    return store_fetched(store, fetch_kubernetes_jobs(client, since, until, **options))[1]
