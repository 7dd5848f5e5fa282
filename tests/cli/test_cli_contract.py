"""The command line's contract, read from ``docs/cli-errors.md`` so the doc and the code
cannot drift: every command is in the doc's table (and nothing else is), its ``--json`` flag
is as the table says, a bad option under ``--json`` prints the one JSON error shape on stdout
and exits 2, a code the table lists for it; ``--help`` ranges are what is accepted."""

from __future__ import annotations

import json
import re

import pytest
import typer.main
from cli_main import run_main
from paths import REPO

from jobcast.cli.app import app
from jobcast.cli.output import set_json_mode

KEYS = {"kind", "message", "file", "line", "field", "row"}
DOC = REPO / "docs" / "cli-errors.md"


@pytest.fixture(autouse=True)
def _plain_mode():
    yield
    set_json_mode(False)  # main() runs in this process: leave no JSON mode behind


def doc_table() -> dict[str, tuple[bool, set[int]]]:
    """``docs/cli-errors.md``'s per-command table: command -> (has --json, exit codes)."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`[a-z -]+`", cells[0]):
            rows[cells[0].strip("`")] = (cells[1] == "yes",
                                         {int(c) for c in cells[2].split(",")})
    return rows


def commands() -> dict[str, object]:
    """Every leaf command of the app, by its full name (``layerwise train``)."""
    found = {}

    def walk(cmd, path):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = cmd

    walk(typer.main.get_command(app), [])
    return found


def bad_option(cmd) -> list[str]:
    """An option value ``--help`` shows as out of range, else an option that does not exist."""
    for param in cmd.params:
        low = getattr(param, "min", None)
        if low is not None and param.opts[0].startswith("--"):
            return [param.opts[0], str(low - 1)]
    return ["--no-such-option"]




def test_the_doc_lists_every_command_and_its_json_flag():
    table, found = doc_table(), commands()
    assert set(table) == set(found)
    for name, cmd in found.items():
        has_json = any("--json" in getattr(p, "opts", []) for p in cmd.params)
        assert table[name][0] == has_json, name
        assert {0, 2, 70} <= table[name][1], name


@pytest.mark.parametrize("json_first", [False, True])
def test_every_command_answers_a_bad_option_in_json(monkeypatch, capsys, json_first):
    table = doc_table()
    usage_code = 2  # the doc's "your input was refused" (Click's usage errors)
    for name, cmd in commands().items():
        bad = bad_option(cmd)
        args = [*name.split(), *(["--json", *bad] if json_first else [*bad, "--json"])]
        code, out, err = run_main(monkeypatch, capsys, *args)
        assert code == usage_code and code in table[name][1], (args, code)
        error = json.loads(out)["error"]
        assert set(error) == KEYS and error["kind"] == "usage", args
        assert error["message"] and error["message"] in err
        # (a command without --json refuses the unknown --json or the other unknown option)
        if table[name][0] and bad[0] != "--no-such-option":
            assert error["field"] == bad[0], args


def test_a_bad_option_without_json_prints_nothing_on_stdout(monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "ingest", "x", "--batch-size", "-1")
    assert code == 2 and out == "" and "--batch-size" in err


@pytest.mark.parametrize("flag,value", [("--iterations", "0"), ("--epochs", "0"),
                                        ("--eval-every", "0")])
def test_help_ranges_are_what_is_accepted(monkeypatch, capsys, flag, value):
    code, out, _ = run_main(monkeypatch, capsys, "predict", "--help")
    shown = re.search(rf"{flag} <[a-z ]+>\s+.*?\[(x[^\]]*)\]", out)
    assert shown and shown.group(1) in ("x>=1", "x>0"), out
    code, out, _ = run_main(monkeypatch, capsys, "predict", "--network", "resnet50",
                            "--device", "T4", "--batch-size", "8", flag, value, "--json")
    assert code == 2 and json.loads(out)["error"]["field"] == flag


def test_a_path_that_does_not_exist_is_an_input_error(monkeypatch, capsys, tmp_path):
    missing = tmp_path / "typo.log"
    store = tmp_path / "s.db"
    code, out, err = run_main(monkeypatch, capsys, "ingest", str(missing),
                              "--store", f"sqlite:///{store}", "--json")
    assert code == 2 and code in doc_table()["ingest"][1]
    error = json.loads(out)["error"]
    assert error["file"] == str(missing) and "no such file or folder" in error["message"]
    assert not store.exists()  # refused before the store was opened
