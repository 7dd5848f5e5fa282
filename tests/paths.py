"""Paths the tests share: the repository, its bundled samples, the reference data beside it.

``SHARED_DATA`` is ``../shared/data`` next to the checkout (CI clones the repository beside
it); tests that need it skip when it is absent (the ``shared_data`` fixture in conftest.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SHARED_DATA = REPO.parent / "shared" / "data"
SHARED_LOGS = SHARED_DATA / "logs"


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
