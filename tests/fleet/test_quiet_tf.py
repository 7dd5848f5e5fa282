"""TensorFlow's native start-up lines are filtered at the file-descriptor level.

TensorFlow itself takes seconds to import, so these tests import a stand-in module that
writes the lines TensorFlow 2.21 really writes (copied from ``jobcast predict`` output) to
file descriptor 2, as native code does; and a source check makes sure every TensorFlow or
Keras import in the project goes through :func:`fleet.quiet_tf.quiet_import` first.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.quiet_tf import is_noise

REPO = Path(__file__).resolve().parents[2]
NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795426067.304297   15326 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors "
    "from different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "E0000 00:00:1795426070.111111   15326 cuda_dnn.cc:8579] Unable to register cuDNN "
    "factory: Attempting to register factory for plugin cuDNN when one has already been "
    "registered",
]
KEPT = [
    "E0000 00:00:1795426070.111111   15326 some_op.cc:12] a real error",
    "Traceback (most recent call last):",
    "UserWarning: something the user should see",
]
STAND_IN = (
    "import os\n"
    "os.write(2, ({lines!r} + '\\n').encode())\n"
    "LEVEL = os.environ.get('TF_CPP_MIN_LOG_LEVEL')\n"
)


def run_import(tmp_path: Path, env_level: str | None) -> subprocess.CompletedProcess:
    """Import a stand-in through quiet_import in a fresh process; its stderr and stdout."""
    (tmp_path / "fake_tf.py").write_text(STAND_IN.format(lines="\n".join(NOISE + KEPT)))
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from fleet.quiet_tf import quiet_import;"
            "m = quiet_import('fake_tf'); print('level', m.LEVEL)")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if env_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = env_level
    return subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def test_native_noise_is_dropped_and_the_rest_kept(tmp_path):
    done = run_import(tmp_path, None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "level 2"  # set before the import, as TF reads it
    assert done.stderr.splitlines() == KEPT


def test_level_zero_shows_everything(tmp_path):
    done = run_import(tmp_path, "0")
    assert done.stdout.strip() == "level 0"
    assert done.stderr.splitlines() == NOISE + KEPT


@pytest.mark.parametrize("level, hidden", [(1, 2), (2, 3), (3, 3)])
def test_levels_hide_what_they_should(level, hidden):
    assert sum(is_noise(line, level) for line in NOISE) == hidden
    assert not any(is_noise(line, level) for line in KEPT[1:])


TF_MODULES = {"tensorflow", "keras", "tf_keras"}


def _unguarded_imports(path: Path) -> list[str]:
    """``import tensorflow``/``keras`` statements with no ``quiet_import(...)`` call before
    them in the same function (or module)."""
    text = path.read_text(encoding="utf-8")
    if "keras" not in text and "tensorflow" not in text:
        return []
    tree = ast.parse(text)
    scopes = [tree] + [n for n in ast.walk(tree)
                       if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    found = []
    for scope in scopes:
        body = list(ast.walk(scope))
        calls = [n.lineno for n in body if isinstance(n, ast.Call)
                 and getattr(n.func, "id", getattr(n.func, "attr", None)) == "quiet_import"]
        for node in body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            tf = any(n.split(".")[0] in TF_MODULES for n in names)
            if tf and not any(line < node.lineno for line in calls):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return sorted(set(found))


def test_every_tensorflow_import_is_quieted_first():
    files = [p for folder in ("fleet", "ingest", "models", "layerwise", "jobcast", "benchmarks")
             for p in sorted((REPO / folder).rglob("*.py"))]
    assert files
    unguarded = [hit for p in files for hit in _unguarded_imports(p)]
    assert unguarded == []
