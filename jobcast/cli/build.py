"""``jobcast build-shipped``: rebuild the data jobcast ships (rules:
:mod:`jobcast.service.features.shipped_build`).

Exit status: 0 every part built; 1 partial (a part skipped something, e.g. networks whose
library is not installed; the reason is printed); 2 an error (an unknown part, a missing
input, a store with nothing to backtest), before anything is written. ``--json`` prints
``{"parts": [...], "partial": bool}`` with each part's report.
"""

from __future__ import annotations

from pathlib import Path

import typer

from jobcast.cli.options import AS_JSON, STORE, open_store
from jobcast.cli.output import console, emit_json, fail, note, progress_bar


def register(app: typer.Typer) -> None:
    """Add the ``build-shipped`` command to ``app``."""
    app.command("build-shipped")(build_shipped)


def build_shipped(
    parts: list[str] = typer.Argument(
        None, metavar="[PART]...",
        help="predictor, specialist, compositions, scaling, selector-prior, networks (default: "
             "every part whose inputs are present; selector-prior only with --store)."),
    shared: Path = typer.Option(
        None, "--shared", help="Folder of the reference data (default: ../shared/data, or "
                               "$JOBCAST_SHARED_DATA)."),
    store: str | None = STORE,
    out: Path = typer.Option(
        None, "--out", help="Write under this folder (same relative paths) instead of over the "
                            "shipped files."),
    as_json: bool = AS_JSON,
) -> None:
    """Build the shipped data (layer predictor, scaling fits, selector prior, zoo specs)."""
    from jobcast.service.features.shipped_build import (
        ShippedInputError,
        build_part,
        check_parts,
        default_parts,
        shared_dir,
    )

    shared = shared_dir(shared)
    chosen = list(parts) if parts else default_parts(shared, store is not None)
    try:
        check_parts(chosen, shared, store is not None)
    except ShippedInputError as exc:
        fail(exc)
    opened = open_store(store, create=False) if "selector-prior" in chosen else None
    reports = []
    for part in chosen:
        with progress_bar(part, disable=as_json) as advance:
            try:
                report = build_part(part, shared=shared, out=out, store=opened,
                                    progress=advance)
            except ShippedInputError as exc:
                fail(exc)
        reports.append(report)
        if not as_json:
            _show(report)
    partial = any(r.skipped for r in reports)
    if as_json:
        emit_json({"parts": [r.as_dict() for r in reports], "partial": partial})
    raise typer.Exit(1 if partial else 0)


def _show(report) -> None:
    """One part's report as text."""
    note(f"{report.part}:", f"{len(report.written)} file(s) in {report.seconds} s", "green")
    for path in report.written:
        console.print(f"  wrote {path}", soft_wrap=True, markup=False)
    for path in report.inputs:
        console.print(f"  read  {path}", soft_wrap=True, markup=False)
    for row in report.table:
        console.print(f"  {row['kind']:<24} {row['forecasts']:>7} forecasts  MAPE "
                      f"{row['mape']:7.2f} %  median {row['median']:6.2f} %",
                      soft_wrap=True, markup=False)
    for line in report.skipped:
        note("  skipped", line, "yellow")
