"""``jobcast ingest`` of experiment trackers: ``mlflow+<tracking URI>`` arguments and
``--experiment`` (docs/history-sources.md).

Rules
-----
* Arguments that start with ``mlflow+`` are tracking sources
  (:func:`jobcast.service.features.ingesting.split_sources`); the rest
  are files and folders, ingested as before. Both kinds may be mixed in one command.
* Each tracking source's runs are ingested with the same flags
  (:func:`jobcast.service.features.ingesting.ingest`, which takes both kinds) and merged into the
  command's report: stored runs are ``added`` (one run each),
  known runs ``duplicates``, failures ``rejected`` (also recorded in the store, as a file's
  are); runs still running are listed in ``skipped`` as ``<source> (still running: ...)``
  and, in text mode, noted one per line.
* ``--experiment`` without a tracking source is an error (it selects MLflow experiments).
"""

from __future__ import annotations

import typer

EXPERIMENT = typer.Option(
    None, "--experiment", help="MLflow experiment to read from an mlflow+URI source (repeat); "
    "default: all.")
