"""Console output shared by the commands: JSON, errors, progress bars."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer
from rich.console import Console

# Piped output (CI logs, files) gets a wide table instead of Rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140
console = Console(stderr=False, highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False)


def _clean(value):
    """JSON has no NaN or infinity: write null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def emit_json(payload) -> None:
    sys.stdout.write(json.dumps(_clean(payload), indent=2, default=str) + "\n")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` on stderr, never wrapped (scripts grep it), and exit."""
    err_console.print(f"[red]error:[/red] {message}", soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def progress_bar(label: str, disable: bool = False) -> Iterator[Callable[[int, int, str], None]]:
    """A rich progress bar (on stderr, with ETA) fed by ``advance(done, total, item)``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn(f"{label} "),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[item]}", style="dim"),
        console=err_console,
        disable=disable,
        transient=True,
    )
    task = progress.add_task(label, total=None, item="")

    def advance(done: int, total: int, item: str) -> None:
        short = item if len(item) <= 50 else "…" + item[-49:]
        progress.update(task, completed=done, total=total, item=short)

    with progress:
        yield advance
