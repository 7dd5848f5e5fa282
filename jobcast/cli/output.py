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
* A command run with ``--json`` (:func:`set_json_mode`, called by ``options.json_option``'s
  callback) that fails also prints ``{"error": {...}}`` on stdout: the one shape of
  :class:`fleet.errors.ErrorInfo` (``kind``, ``message``, ``file``, ``line``, ``field``,
  ``row``), so a script reads why from the same stream as the answer.
* Exit codes: 0 ok; 1 partial (some files or rows failed, the output is complete); 2 a user
  error (a :class:`fleet.errors.JobcastError`, a usage error, a refused write); 3 ``check``'s
  "nothing to compare with"; 70 a bug in jobcast (``cli/app.py`` ``main``). Every command's
  codes: ``docs/cli-errors.md`` (a test reads its table).
* Progress bars draw on stderr and only on a terminal; ``--json`` runs disable them. Their
  label and item (a file, a layer, a host) are text, never markup.
* Click/Typer's own usage errors (a bad option value) are plain, unboxed text when stderr is
  not a terminal (:data:`RICH_MARKUP_MODE` for the app), Rich panels on a terminal; they exit
  2 and, when ``--json`` is on the command line (before, after or instead of a valid
  ``--json``), also print ``{"error": {"kind": "usage", ..., "field": "--flag"}}`` on stdout
  (:class:`JsonUsageErrors`, the app's group class), as every other failure does.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import typer
from rich.console import Console
from rich.text import Text
from typer._click import Context as ClickContext  # typer's own Click (typer >= 0.2x)
from typer._click.exceptions import ClickException
from typer.core import TyperGroup

if TYPE_CHECKING:
    from fleet.errors import ErrorInfo

    # What fail() reports: a message, an error (any exception reads as its message), or an
    # error object already in its JSON shape.
    Problem = str | BaseException | ErrorInfo | Mapping[str, Any]

# Piped output (CI logs, files) gets a wide table instead of Rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140
console = Console(stderr=False, highlight=False, width=_WIDTH, soft_wrap=True, emoji=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
# Typer's usage errors: Rich panels (wrapped to the screen) on a terminal, plain lines otherwise.
RICH_MARKUP_MODE: Literal["rich"] | None = "rich" if sys.stderr.isatty() else None

# Whether the running command was given --json (module rules); reset by the app's callback.
_JSON_MODE = False


def set_json_mode(on: bool) -> None:
    """Say whether the running command prints JSON, so :func:`fail` answers in JSON too."""
    global _JSON_MODE
    _JSON_MODE = bool(on)


def json_mode() -> bool:
    """Whether the running command was given ``--json``."""
    return _JSON_MODE


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
    """``payload`` as indented JSON on stdout (non-finite numbers as null; module rules)."""
    sys.stdout.write(json.dumps(_clean(payload), indent=2, default=str) + "\n")


def error_payload(problem: Problem, kind: str = "error") -> dict[str, Any]:
    """``{"error": {...}}`` for a message (of ``kind``), a :class:`JobcastError` (its own
    kind and place), another exception (its text, of ``kind``), an :class:`ErrorInfo`, or an
    error object already in that shape (a mapping with at least ``message``, e.g. an item's
    ``"problem"`` from a service payload)."""
    from fleet.errors import ErrorInfo, JobcastError

    if isinstance(problem, JobcastError):
        info = problem.info()
    elif isinstance(problem, ErrorInfo):
        info = problem
    elif isinstance(problem, Mapping) and "message" in problem:
        known = {k: problem.get(k) for k in ("file", "line", "field", "row")}
        info = ErrorInfo(kind=str(problem.get("kind") or kind),
                         message=str(problem["message"]), **known)
    else:
        info = ErrorInfo(kind=kind, message=str(problem))
    return {"error": info.as_dict()}


def report_error(problem: Problem, kind: str = "error") -> None:
    """Print ``error: message`` on stderr (never wrapped: scripts grep it) and, in ``--json``
    mode, ``{"error": {...}}`` on stdout (module rules); exits nothing."""
    payload = error_payload(problem, kind)
    note("error:", payload["error"]["message"], "red", err=True)
    if _JSON_MODE:
        emit_json(payload)


def fail(problem: Problem, code: int = 2, *,
         kind: str = "error") -> NoReturn:
    """Report ``problem`` (:func:`report_error`: stderr, plus the JSON error in ``--json``
    mode) and exit with ``code`` (2: a user error, module rules). ``problem`` is a message
    or an exception (its JSON ``kind`` is ``kind`` unless it is a :class:`JobcastError`,
    which has its own), an :class:`ErrorInfo` or an error object in that shape."""
    report_error(problem, kind)
    raise typer.Exit(code)


USAGE_KIND = "usage"


def usage_error_payload(exc: ClickException) -> dict[str, Any]:
    """``{"error": {...}}`` for a Click/Typer usage error: kind ``usage``, Click's message
    and, for a bad value, the flag (or argument) as ``field``."""
    param = getattr(exc, "param", None)
    field = None
    if param is not None:
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        field = opts[0] if opts else param.name
    return error_payload({"kind": USAGE_KIND, "message": exc.format_message(), "field": field})


def _asks_json(args: list[str]) -> bool:
    """Whether ``--json`` is among the options (before a ``--``)."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


class JsonUsageErrors(TyperGroup):
    """The app's group: a Click usage error (bad option value, unknown option, missing
    argument) in a command run with ``--json`` also prints the JSON error on stdout, and
    every usage error exits 2 (module rules). Click prints its own message on stderr."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: ClickContext | None = None, **extra: Any) -> ClickContext:
        """Click's context, remembering whether ``--json`` was given (for :meth:`invoke`);
        a usage error in the group's own options answers in JSON where asked."""
        asks = _asks_json(list(args))
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except ClickException as exc:
            _json_usage(exc, asks)
            raise
        ctx.meta["jobcast.asks_json"] = asks
        return ctx

    def invoke(self, ctx: ClickContext) -> Any:
        """Run the command; a usage error of a command or subgroup answers in JSON where
        ``--json`` was given."""
        try:
            return super().invoke(ctx)
        except ClickException as exc:
            _json_usage(exc, bool(ctx.meta.get("jobcast.asks_json")))
            raise


def _json_usage(exc: ClickException, asks_json: bool) -> None:
    """A usage error's JSON on stdout where asked for (once), and exit code 2."""
    if type(exc).__name__ == "NoArgsIsHelpError":  # the help, shown for a bare group
        return
    exc.exit_code = 2
    if (asks_json or _JSON_MODE) and not getattr(exc, "_jobcast_shown", False):
        emit_json(usage_error_payload(exc))
        exc._jobcast_shown = True  # type: ignore[attr-defined]


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
