"""Fixtures shared by the rooms' tests: the bundled samples and the real reference data.

The test folders mirror the packages (``tests/ingest/`` tests ``ingest/``, ...); helpers
that tests import by name (``paths``, ``clock``, ``prom_server``) live here at the top,
which pytest puts on ``sys.path`` with this file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from paths import DATA, SHARED_DATA


@pytest.fixture(scope="session")
def samples() -> Path:
    """tests/data: small real logs and timings bundled with the repository."""
    return DATA


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (published timings, whole-network throughput, real logs), else skip."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data not present")
    return SHARED_DATA
