"""Bring a model (issue 36): the README's example, run as written from a fresh directory.

``jobcast predict --network ./mynet.py:build`` answers from a folder that holds only the
user's file (no ``PYTHONPATH``); the trace is cached under the data directory (nothing is
written beside the user's file), so the repeat answers without importing ``torch``;
``mynet:build(...)`` imports the module from the working directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from jobcast.cli.app import app
from layerwise import network_source

README = Path(__file__).resolve().parents[2] / "README.md"
# the CLI run with a report of whether torch was imported (stderr, after the command's exit)
WITH_TORCH_REPORT = ("import atexit, sys; atexit.register(lambda: sys.stderr.write("
                     "'\\nTORCH_IMPORTED=%s\\n' % ('torch' in sys.modules))); "
                     "from jobcast.cli.app import main; main()")


def _readme_example() -> tuple[str, list[str]]:
    """(the mynet.py the README shows, its ``jobcast predict`` command as argv)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Bring your own network", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shell = re.search(r"```sh\n(.*?)```", section, re.S)
    assert code and shell, "the README's section lost its example"
    command = next(line for line in shell.group(1).splitlines()
                   if line.startswith("jobcast predict"))
    return code.group(1), shlex.split(command)[1:]


def _run(args: list[str], cwd: Path) -> tuple[dict, bool]:
    out = subprocess.run([sys.executable, "-c", WITH_TORCH_REPORT, *args, "--json"], cwd=cwd,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stdout + out.stderr
    torch = re.search(r"TORCH_IMPORTED=(True|False)", out.stderr)
    assert torch is not None, out.stderr
    return json.loads(out.stdout), torch.group(1) == "True"


def test_the_readme_example_answers_from_a_fresh_directory_and_repeats_from_the_cache(
        tmp_path):
    source, args = _readme_example()
    (tmp_path / "mynet.py").write_text(source, encoding="utf-8")
    first, traced = _run(args, tmp_path)
    assert traced  # the first answer traced the model with torch
    assert first["seconds"] > 0 and first["low"] <= first["seconds"] <= first["high"]
    assert any("framework pytorch" in note for note in first["assumptions"])
    cached = list((Path(os.environ["JOBCAST_HOME"]) / "cache" / "specs").glob("build-*.json"))
    assert len(cached) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mynet.py"]  # nothing written here
    again, traced = _run(args, tmp_path)
    assert not traced  # the repeat read the cached spec
    assert again["seconds"] == first["seconds"]


def test_an_edited_file_is_traced_again(tmp_path):
    source, _ = _readme_example()
    path = tmp_path / "mynet.py"
    path.write_text(source, encoding="utf-8")
    ref = network_source.parse(str(path) + ":build")
    assert ref is not None
    before = network_source.cache_key(ref, 224)
    path.write_text(source.replace("num_classes=10", "num_classes=100"), encoding="utf-8")
    assert network_source.cache_key(ref, 224) != before
    assert network_source.cache_key(ref, 160) != network_source.cache_key(ref, 224)


def test_a_module_in_the_working_directory_needs_no_pythonpath(tmp_path, monkeypatch):
    source, _ = _readme_example()
    (tmp_path / "mynet.py").write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    result = CliRunner().invoke(app, ["predict", "--network", "mynet:build(num_classes=5)",
                                      "--device", "T4", "--batch-size", "16",
                                      "--iterations", "10", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["seconds"] > 0


def test_a_missing_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["predict", "--network", "./nothere.py:build",
                                      "--device", "T4", "--batch-size", "16", "--json"])
    assert result.exit_code == 2, result.output
    assert "no Python file 'nothere.py'" in result.stdout
