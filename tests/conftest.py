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


@pytest.fixture(scope="module")
def local_ray():
    """One real local Ray (2 CPUs) per test module; the code under test joins it and leaves
    it running, and it is shut down after the module."""
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_DISABLE_USAGE_STATS", "1")
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()
