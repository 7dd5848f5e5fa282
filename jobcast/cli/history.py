"""``jobcast ingest`` of experiment trackers: ``mlflow+<tracking URI>`` arguments and
``--experiment`` (docs/history-sources.md).

Rules
-----
* Arguments that start with ``mlflow+`` are tracking sources (:func:`split_sources`); the rest
  are files and folders, ingested as before. Both kinds may be mixed in one command.
* Each tracking source's runs are ingested with the same flags
  (:func:`jobcast.service.ingesting.ingest`, which takes both kinds) and merged into the
  command's report: stored runs are ``added`` (one run each),
  known runs ``duplicates``, failures ``rejected`` (also recorded in the store, as a file's
  are); runs still running are listed in ``skipped`` as ``<source> (still running: ...)``
  and, in text mode, noted one per line.
* ``--experiment`` without a tracking source is an error (it selects MLflow experiments).
"""

from __future__ import annotations

import typer

from jobcast.cli.output import fail, note

EXPERIMENT = typer.Option(
    None, "--experiment", help="MLflow experiment to read from an mlflow+URI source (repeat); "
    "default: all.")


def split_sources(paths: list[str], experiments: list[str] | None) -> tuple[list[str], list[str]]:
    """(files and folders, tracking sources) of the ``ingest`` arguments; fails (exit 2) on
    ``--experiment`` without a tracking source (:func:`jobcast.service.ingesting.split_sources`)."""
    from jobcast.service.ingesting import IngestOptionError
    from jobcast.service.ingesting import split_sources as split

    try:
        return split(paths, experiments)
    except IngestOptionError as exc:
        fail(exc)


def ingest_trackers(store, trackers: list[str], experiments: list[str] | None, overrides,
                    report, *, quiet: bool = False, progress=None) -> None:
    """Ingest each tracking source into ``store`` and merge the outcome into ``report`` (an
    :class:`ingest.pipeline.IngestReport`). Deprecated: :func:`jobcast.service.ingesting.ingest`
    takes tracking sources itself."""
    if not trackers:
        return
    from jobcast.service.ingesting import IngestResult
    from jobcast.service.ingesting import ingest_trackers as ingest_into

    got = IngestResult(added=report.added, duplicates=report.duplicates,
                       rejected=report.rejected, skipped=report.skipped)
    ingest_into(store, trackers, experiments, overrides, got, progress)
    report.warnings = got.warnings
    if not quiet:
        for source, why in got.running:
            note("running", f"{source}: {why}")
