"""Paths the tests share: the repository, its bundled samples, the reference data beside it.

``SHARED_DATA`` is ``../shared/data`` next to the checkout (CI clones the repository beside
it); tests that need it skip when it is absent (the ``shared_data`` fixture in conftest.py).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SHARED_DATA = REPO.parent / "shared" / "data"
SHARED_LOGS = SHARED_DATA / "logs"
