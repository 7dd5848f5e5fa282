"""``jobcast ARGS`` through the console script's ``main`` in the test's own process (one
definition for the CLI contract tests)."""

from __future__ import annotations

import sys

import pytest

from jobcast.cli.app import main


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``jobcast ARGS`` through :func:`main` (the console script) in this process: exit code,
    stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["jobcast", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    out = capsys.readouterr()
    return stop.value.code, out.out, out.err
