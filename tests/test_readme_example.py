"""The README's top (issue 38): what jobcast is, the two commands, then one example and its
output, all within the first 40 lines; the example runs on a fresh data directory (the test's
own, empty) and prints the lines shown, each with the same words before its first number
(numbers are the model's, not the README's to pin)."""

from __future__ import annotations

import re
import shlex

from paths import REPO
from typer.testing import CliRunner

from jobcast.cli.app import app

TOP = 40


def readme_top() -> str:
    return "".join((REPO / "README.md").read_text().splitlines(keepends=True)[:TOP])


def shown_example() -> tuple[list[str], list[str]]:
    """The example command's arguments and its shown output lines, from the README's top."""
    found = re.search(r"`(jobcast [^`]*)` reads:\n\n```\n(.*?)```", readme_top(), re.S)
    assert found, f"the README's first {TOP} lines show no example and its output"
    return shlex.split(found.group(1).replace("\n", " "))[1:], found.group(2).splitlines()


def head(line: str) -> str:
    """A line's words before its first digit."""
    return re.split(r"\d", line)[0].rstrip()


def test_the_two_commands_come_before_the_example():
    top = readme_top()
    assert "make demo" in top and "make test" in top
    assert top.index("make test") < top.index("` reads:")


def test_the_example_prints_the_lines_shown():
    args, shown = shown_example()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    printed = result.stdout.splitlines()
    assert [head(x) for x in printed] == [head(x) for x in shown]
