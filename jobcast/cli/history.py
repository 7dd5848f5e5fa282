"""``jobcast ingest`` of experiment trackers: ``mlflow+<tracking URI>`` arguments and
``--experiment`` (docs/history-sources.md).

Rules
-----
* Arguments that start with ``mlflow+`` are tracking sources (:func:`split_sources`); the rest
  are files and folders, ingested as before. Both kinds may be mixed in one command.
* Each tracking source's runs are ingested with the same flags (:mod:`ingest.mlflow_source`)
  and merged into the command's report: stored runs are ``added`` (one run each),
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
    """(files and folders, tracking sources) of the ``ingest`` arguments."""
    from ingest.mlflow_source import is_tracking_source

    trackers = [p for p in paths if is_tracking_source(p)]
    if experiments and not trackers:
        fail("--experiment selects MLflow experiments: give an mlflow+URI source "
             "(e.g. mlflow+http://127.0.0.1:5000)")
    return [p for p in paths if not is_tracking_source(p)], trackers


def ingest_trackers(store, trackers: list[str], experiments: list[str] | None, overrides,
                    report, *, quiet: bool = False, progress=None) -> None:
    """Ingest each tracking source into ``store`` and merge the outcome into ``report`` (an
    :class:`ingest.pipeline.IngestReport`)."""
    if not trackers:
        return
    from ingest.mlflow_source import ingest_tracking
    from ingest.pipeline import collect_warnings

    for text in trackers:
        got = ingest_tracking(store, text, experiments, overrides, progress=progress)
        report.added.extend(got.added)
        report.duplicates.extend(got.duplicates)
        report.rejected.extend(got.rejected)
        store.add_rejections(got.rejected)
        for source, why in got.running:
            report.skipped.append(f"{source} (still running: {why})")
            if not quiet:
                note("running", f"{source}: {why}")
    collect_warnings(store, report)
