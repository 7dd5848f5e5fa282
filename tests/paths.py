"""Paths the tests share: the repository, its bundled samples, the reference data beside it.

``SHARED_DATA`` is ``../shared/data`` next to the checkout (CI clones the repository beside
it); tests that need it skip when it is absent (the ``shared_data`` fixture in conftest.py).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SHARED_DATA = REPO.parent / "shared" / "data"
SHARED_LOGS = SHARED_DATA / "logs"


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as the module ``jobcast_<name>``, loaded once per
    process (its dataclasses look their module up by name, and a second load would make a
    second kind of the same objects)."""
    module_name = f"jobcast_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def assert_sane(outcome, sample) -> None:
    """A fuzz case's outcome (``benchmarks/fuzz_parsers.py``) is sane: stored, or rejected
    with the file's path and a reason."""
    assert outcome.kind in ("rejected", "accepted"), outcome.detail
    if outcome.kind == "rejected":
        assert outcome.detail.startswith(str(sample.path)), outcome.detail
        assert len(outcome.detail) > len(str(sample.path)) + 2  # a reason follows


def numbered_lines(data: bytes) -> list[int]:
    """Indexes of the lines of a fuzz sample that hold a number (where the values live)."""
    return [i for i, line in enumerate(data.split(b"\n")) if re.search(rb"\d", line)]


def stores_per_format(folder: Path, formats: list[str]) -> Iterator[dict]:
    """One real, file-backed SQLite store per log format under ``folder`` (as users have
    them), disposed of when the generator closes: the body of the fuzz modules' fixture."""
    from ingest.store import Store
    made = {fmt: Store(f"sqlite:///{folder / (fmt + '.db')}") for fmt in formats}
    yield made
    for store in made.values():
        store.engine.dispose()


def code_at(commit: str, folder: Path, packages: tuple[str, ...] = ("fleet", "ingest")) -> Path:
    """``packages`` as they were at ``commit`` (``git archive``), in a new folder under
    ``folder``; the test skips where git or the commit is missing (a shallow clone)."""
    import pytest

    if not shutil.which("git"):
        pytest.skip(f"git is needed to check out the code of commit {commit}")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, *packages],
                             capture_output=True, timeout=60)
    if archive.returncode != 0:
        pytest.skip(f"commit {commit} is not in this clone: {archive.stderr[-200:]!r}")
    tree = folder / f"code-{commit}"
    tree.mkdir()
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree
