"""The door to ingest for the commands and notebooks: check what a user supplies about the
logs (:func:`ingest_options`), then store logs, folders and experiment trackers
(:func:`ingest`), with one typed result (:class:`IngestResult`).

Rules:

- :func:`ingest_options` checks every flag before anything is opened or written:
  ``--override`` needs ``--deployment``; the deployment must name a known form; tags are
  ``key=value``; the system is not blank; the job-key rule is a regular expression. A bad
  value is an :class:`IngestOptionError` (a :class:`ServiceError`) naming the flag.
- :func:`ingest` takes files and folders (searched recursively) and ``mlflow+<URI>`` tracking
  sources (:func:`split_sources`) in one call; ``experiments`` selects MLflow experiments and
  needs a tracking source. Files are parsed in worker processes (``workers``; default: CPUs,
  at most 4) or in Ray tasks (``use_ray`` or ``ray_address``), one writer either way.
- On every path (files, Ray, trackers) each rejection is recorded in the store and the run
  warnings of what was added are collected from it, so the result reads the same whichever
  path stored the runs. A tracker's runs still running are not stored: they are listed in
  ``running`` and in ``skipped`` as ``<source> (still running: why)``.
- One bad file never stops the others; Ray that is missing or unreachable is a
  :class:`fleet.errors.JobcastError` before anything is written.
- A path given that does not exist is the user's input error, not a rejected file: the
  whole call is refused before the store is opened (:func:`refuse_missing`, an
  :class:`IngestOptionError` naming the path; ``jobcast ingest`` exits 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ingest.pipeline import IngestOptions
from jobcast.service.errors import ServiceError

if TYPE_CHECKING:
    from ingest.events import ParseError
    from ingest.store import Store

__all__ = ["IngestOptionError", "IngestOptions", "IngestResult", "ingest", "ingest_options",
           "ingest_trackers", "length_option", "split_sources"]

Progress = Callable[[int, int, str], None]


class IngestOptionError(ServiceError, ValueError):
    """A value given for the logs (a flag of ``jobcast ingest``) is unusable; ``field`` names
    it."""

    kind: ClassVar[str] = "ingest_option"

    def __init__(self, message: str, field: str | None = None,
                 file: str | None = None) -> None:
        """``message`` as the error's text; ``field``: the option it is about; ``file``: the
        path it is about, where it is one."""
        super().__init__(message)
        self.field = field
        self.file = file


def ingest_options(network: str | None = None, deployment: str | None = None,
                   batch_size: int | None = None, override: bool = False,
                   tags: Sequence[str] = (), system: str | None = None,
                   job_key: str | None = None, iterations: int | None = None,
                   epochs: int | None = None) -> IngestOptions:
    """What the logs lack or misname, checked (module rules): ``tags`` as given to ``--tag``
    (``key=value`` each, or comma lists), ``system`` with its spaces normalised;
    ``iterations`` or ``epochs`` (one of them): the training length of each scheduler
    record (``ingest.whole_job.apply_length``)."""
    from fleet.deployment import normalise_deployment
    from ingest.whole_job import KeyRule
    from models.variant import parse_tags

    if override and not deployment:
        raise IngestOptionError("--override needs --deployment", "override")
    if deployment:
        try:
            normalise_deployment(deployment)
        except ValueError as exc:
            raise IngestOptionError(f"--deployment {deployment!r}: {exc}", "deployment") from exc
    try:
        parsed = parse_tags(",".join(tags))
    except ValueError as exc:
        raise IngestOptionError(f"--tag: {exc}", "tag") from exc
    if system is not None and not system.strip():
        raise IngestOptionError("--system must name a system", "system")
    if job_key:
        try:
            KeyRule.parse(job_key)
        except ValueError as exc:
            raise IngestOptionError(str(exc), "job_key") from exc
    return IngestOptions(network=network, deployment=deployment, batch_size=batch_size,
                         override=override, tags=tuple(parsed.items()),
                         system=" ".join(system.split()) if system else None,
                         job_key=job_key or None, length=length_option(iterations, epochs))


def length_option(iterations: int | None, epochs: int | None) -> tuple[str, int] | None:
    """``--iterations`` / ``--epochs`` of an ingest (``jobcast ingest``, ``ingest-prometheus
    --source kubernetes``) as (unit, count), checked; None when neither is given."""
    from ingest.whole_job import MAX_LENGTH

    if iterations is not None and epochs is not None:
        raise IngestOptionError("give --iterations or --epochs, not both", "iterations")
    for unit, count in (("iterations", iterations), ("epochs", epochs)):
        if count is not None:
            if not 0 < count <= MAX_LENGTH:
                raise IngestOptionError(f"--{unit} {count}: want 1 .. {MAX_LENGTH:,}", unit)
            return unit, int(count)
    return None


def split_sources(sources: Sequence[str],
                  experiments: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """(files and folders, ``mlflow+`` tracking sources) of ``sources``; experiments without
    a tracking source are an :class:`IngestOptionError`."""
    from ingest.mlflow_source import is_tracking_source

    trackers = [s for s in sources if is_tracking_source(s)]
    if experiments and not trackers:
        raise IngestOptionError("--experiment selects MLflow experiments: give an mlflow+URI "
                                "source (e.g. mlflow+http://127.0.0.1:5000)", "experiment")
    return [s for s in sources if not is_tracking_source(s)], trackers


def refuse_missing(paths: Sequence[str]) -> None:
    """An :class:`IngestOptionError` (field ``paths``, ``file`` the path) for the first of
    ``paths`` that is neither a file nor a folder (module rules)."""
    from pathlib import Path

    for given in paths:
        if not Path(given).exists():
            raise IngestOptionError(f"{given}: no such file or folder (nothing was ingested)",
                                    "paths", file=given)


@dataclass
class IngestResult:
    """What one ingest did: files (or tracker runs) ``added`` as (source, runs), known
    content as (source, first source), ``rejected`` (each with its source, line and reason),
    run ``warnings`` as (source, run, text), side files and running tracker runs
    ``skipped``, tracker runs ``running`` as (source, why), and the store's ``counts`` after."""

    added: list[tuple[str, int]] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[ParseError] = field(default_factory=list)
    warnings: list[tuple[str, int, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    running: list[tuple[str, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def stored(self) -> int:
        """Files (or tracker runs) this ingest stored."""
        return len(self.added)

    @property
    def ok(self) -> bool:
        """Nothing was rejected."""
        return not self.rejected

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``jobcast ingest --json``; each rejection also carries the one error
        shape (``"error"``: :class:`fleet.errors.ErrorInfo`) beside its ``reason``, which is
        kept for one release."""
        from fleet.errors import error_info

        return {
            "stored": self.stored,
            "added": [{"source": s, "runs": n} for s, n in self.added],
            "duplicates": [{"source": s, "first_source": f} for s, f in self.duplicates],
            "rejected": [{"source": e.source, "line": e.line, "reason": e.reason,
                          "problem": error_info(e).as_dict()} for e in self.rejected],
            "warnings": [{"source": s, "run": n, "warning": w} for s, n, w in self.warnings],
            "skipped": self.skipped,
            "store": self.counts,
        }


def ingest(store: Store | Callable[[], Store], sources: Sequence[str],
           options: IngestOptions | None = None, *, workers: int | None = None,
           use_ray: bool = False, ray_address: str | None = None,
           experiments: Sequence[str] | None = None,
           progress: Progress | None = None) -> IngestResult:
    """Ingest ``sources`` into ``store`` (module rules). ``store`` may be an opener (called
    once the sources are checked, so a refused call writes nothing); ``progress(done, total,
    item)`` is called once per file or tracker run."""
    files, trackers = split_sources(sources, experiments)
    refuse_missing(files)
    options = options or IngestOptions()
    st = store if not callable(store) else store()
    if use_ray or ray_address:
        report = _ingest_ray(st, files, options, ray_address, progress)
    else:
        from ingest.parallel import default_workers
        from ingest.pipeline import ingest_paths

        report = ingest_paths(st, files, options, progress=progress,
                              workers=workers or default_workers())
    result = IngestResult(added=list(report.added), duplicates=list(report.duplicates),
                          rejected=list(report.rejected), warnings=list(report.warnings),
                          skipped=list(report.skipped))
    if trackers:
        ingest_trackers(st, trackers, experiments, options, result, progress)
    result.counts = st.counts()
    return result


def _ingest_ray(st: Store, files: list[str], options: IngestOptions, address: str | None,
                progress: Progress | None) -> Any:
    """Files parsed in Ray tasks; their rejections recorded and warnings collected by
    :func:`ingest.ray_ingest.ingest_paths_ray` itself, as on the other paths."""
    from ingest.ray_ingest import ingest_paths_ray

    try:
        return ingest_paths_ray(st, files, options, address=address, progress=progress)
    except ConnectionError as exc:  # a cluster that cannot be joined
        raise ServiceError(str(exc)) from exc


def ingest_trackers(st: Store, trackers: Sequence[str], experiments: Sequence[str] | None,
                    options: IngestOptions, result: IngestResult,
                    progress: Progress | None = None) -> None:
    """Each tracking source's runs into ``st``, merged into ``result`` (ingest_tracking records
    the rejections); the warnings of everything ``result`` added collected (module rules)."""
    from ingest.mlflow_source import ingest_tracking

    for text in trackers:
        got = ingest_tracking(st, text, list(experiments or []) or None, options,
                              progress=progress)
        result.added.extend(got.added)
        result.duplicates.extend(got.duplicates)
        result.rejected.extend(got.rejected)  # recorded in the store by ingest_tracking
        for source, why in got.running:
            result.running.append((source, why))
            result.skipped.append(f"{source} (still running: {why})")
    result.warnings = st.run_warnings(source for source, _ in result.added)
