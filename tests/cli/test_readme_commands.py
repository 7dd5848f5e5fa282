"""The README is executable (issue 37): every ``jobcast ...`` command its code blocks show
names a real command and real flags, and the ones without placeholders run against a store
of the bundled samples with exit 0 and the shape shown (the worked example's first line)."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import typer.main
from paths import DATA, REPO
from typer.testing import CliRunner

from jobcast.cli.app import app

README = (REPO / "README.md").read_text()
runner = CliRunner()


def shown_commands() -> list[str]:
    """Every ``jobcast ...`` line of the README's code blocks, continuations joined, comments
    dropped."""
    out = []
    for block in re.findall(r"```(?:sh|bash)?\n(.*?)```", README, re.S):
        text = re.sub(r"\\\n\s*", " ", block)
        for line in text.splitlines():
            line = re.split(r"\s#\s", line.strip())[0].strip()
            if line.startswith("jobcast "):
                out.append(line)
    return out


def command_options(words: list[str]) -> tuple[list[str], set[str]]:
    """The command path a shown line starts with (alternatives ``a|b`` each) and every flag
    those commands take."""
    group = typer.main.get_command(app)
    path, flags, cmds = [], set(), [group]
    for word in words:
        names = word.split("|")
        subs = [getattr(c, "commands", {}).get(n) for c in cmds for n in names]
        if not all(subs) or not subs:
            break
        path.append(word)
        cmds = subs
    for c in cmds:
        for p in c.params:
            flags |= {o for o in [*p.opts, *getattr(p, "secondary_opts", [])] if o[:2] == "--"}
    return path, flags


@pytest.mark.parametrize("line", shown_commands())
def test_each_shown_command_and_flag_exists(line):
    for part in line.split(" / "):  # "jobcast register / jobcast serve ..."
        words = part.replace("[", " ").replace("]", " ").split()[1:]
        path, flags = command_options(words)
        assert path, f"README shows an unknown command: {part}"
        shown = {w.split("=")[0] for w in words if w.startswith("--")}
        assert shown <= flags, f"{part}: README flags {sorted(shown - flags)} do not exist"


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('readme') / 'jobcast.db'}"
    assert runner.invoke(app, ["ingest", str(DATA / "mlperf"), "--store", url,
                               "--workers", "1"]).exit_code == 0
    assert runner.invoke(app, ["fit", "--store", url, "--no-track",
                               "--no-backtest"]).exit_code == 0
    return url


def runnable() -> list[str]:
    """The shown commands, their optional ``[...]`` parts left out, with no placeholder left
    (``...``, ``|`` or a capitalised stand-in) that read, not write or serve."""
    out = []
    for line in shown_commands():
        while re.search(r"\[[^\[\]]*\]", line):
            line = re.sub(r"\s*\[[^\[\]]*\]", "", line)
        words = line.split()
        if (any(c in line for c in "|/") or "..." in line or len(words) < 2
                or words[1] in ("bench", "ingest", "serve", "stack", "demo", "report", "token",
                                "layerwise", "register", "fit")
                or any(re.fullmatch(r"[A-Z]{1,5}\.*", w) for w in words)
                or "jobs.csv" in line):
            continue
        out.append(line)
    return out


def test_the_shown_runnable_commands_run_on_the_sample_store(sample_store):
    ran = []
    for line in runnable():
        args = shlex.split(line)[1:]
        result = runner.invoke(app, [*args, "--store", sample_store]
                               if args[0] in ("predict", "runs", "compare", "info") else args)
        assert result.exit_code == 0, (line, result.output[-1500:])
        if "--json" in args:
            json.loads(result.stdout)
        ran.append(args[0])
    assert {"predict", "gpus", "networks", "info"} <= set(ran), ran


def test_the_worked_example_prints_what_the_readme_shows(sample_store):
    shown = re.search(r"`(jobcast predict --network resnet50 --device T4[^`]*)` reads:\n\n```\n"
                      r"(.*?)\n", README, re.S)
    assert shown, "README's worked example moved"
    args = shlex.split(shown.group(1).replace("\n", " "))[1:]
    result = runner.invoke(app, [*args, "--store", sample_store])
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.split(";")[0] == shown.group(2).split(";")[0]  # what, where, how long
    labels = [line.split()[0] for line in result.stdout.splitlines()[1:4]]
    assert labels == ["per", "per", "whole"]


def test_the_set_up_promises_are_stated():
    setup = README.split("## Commands")[0]
    for package in ("prometheus", "chromium", "postgresql"):  # what make test installs
        assert package in setup and package in (REPO / "Makefile").read_text()
    assert ".venv/bin/jobcast" in setup  # jobcast is not on the PATH after make demo
