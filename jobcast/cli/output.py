"""Console output shared by the commands: JSON, errors, notes, progress bars.

Rules
-----
* Text lines are never wrapped, whatever the terminal width, ``$COLUMNS`` or path length:
  both consoles soft-wrap (a line longer than the screen stays one line), so scripts and
  logs can grep an error or a rejection on one line. Tables are laid out at the console
  width (140 columns when stdout is not a terminal and ``$COLUMNS`` is unset).
* Data in messages (paths, reasons, ids) is printed as is: :func:`fail` and :func:`note`
  never read it as Rich markup or emoji codes (``[abc]`` and ``:smile:`` stay text).
* Errors go to stderr as ``error: message`` (exit 2 unless told); JSON goes to stdout as
  plain text (:func:`emit_json`), never through Rich.
* Progress bars draw on stderr and only on a terminal; ``--json`` runs disable them. Their
  label and item (a file, a layer, a host) are text, never markup.
* Click/Typer's own usage errors (a bad option value) are plain, unboxed text when stderr is
  not a terminal (:data:`RICH_MARKUP_MODE` for the app), Rich panels on a terminal.
"""

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
from rich.text import Text

# Piped output (CI logs, files) gets a wide table instead of Rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140
console = Console(stderr=False, highlight=False, width=_WIDTH, soft_wrap=True, emoji=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
# Typer's usage errors: Rich panels (wrapped to the screen) on a terminal, plain lines otherwise.
RICH_MARKUP_MODE = "rich" if sys.stderr.isatty() else None


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
    note("error:", message, "red", err=True)
    raise typer.Exit(code)


def note(label: str, text: str, style: str = "yellow", *, err: bool = False) -> None:
    """One line ``label text`` on stdout (stderr with ``err``): the label in ``style``, the
    text as is (no markup, no emoji), never wrapped."""
    line = Text.assemble((label, style), " ", str(text)) if label else Text(str(text))
    (err_console if err else console).print(line, soft_wrap=True)


@contextmanager
def progress_bar(label: str, disable: bool = False) -> Iterator[Callable[[int, int, str], None]]:
    """A rich progress bar (on stderr, with ETA) fed by ``advance(done, total, item)``; drawn
    only when stderr is a terminal (a log gets no bar and no stray blank line)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn(f"{label} ", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[item]}", style="dim", markup=False),
        console=err_console,
        disable=disable or not err_console.is_terminal,
        transient=True,
    )
    task = progress.add_task(label, total=None, item="")

    def advance(done: int, total: int, item: str) -> None:
        short = item if len(item) <= 50 else "…" + item[-49:]
        progress.update(task, completed=done, total=total, item=short)

    with progress:
        yield advance
