"""Fixtures shared by the rooms' tests: the bundled samples and the real reference data, and
the costly things made once and shared (a private PostgreSQL per session, a registered
forecaster per session, a local Ray per module; docs/test-suite.md lists who uses them).

The test folders mirror the packages (``tests/ingest/`` tests ``ingest/``, ...); helpers
that tests import by name (``paths``, ``clock``, ``prom_server``) live here at the top,
which pytest puts on ``sys.path`` with this file.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from paths import DATA, SHARED_DATA

# One OpenMP thread per process (scikit-learn's boosted trees, set before they load; child
# processes and notebook kernels inherit it): OpenMP threads spin-wait for each other, and on
# a loaded 2-core CI box a 360-row `layerwise train` took 110 s with them, 10 s without.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# No test writes to the real data directory (ingest/home.py): the default store and MLflow
# database live in one fresh folder per session (subprocesses and notebook kernels inherit
# it), and a store or tracking server named in the developer's shell is never used.
os.environ["JOBCAST_HOME"] = tempfile.mkdtemp(prefix="jobcast-test-home-")
atexit.register(shutil.rmtree, os.environ["JOBCAST_HOME"], ignore_errors=True)
for _name in ("JOBCAST_STORE", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
    os.environ.pop(_name, None)
_SESSION_HOME = os.environ["JOBCAST_HOME"]


# What a command may never leave in the checkout (MLflow's cwd defaults): a session that
# creates or changes one fails at its end (issue 37: nothing outside the data directory).
STRAY = ("mlflow.db", "mlruns", "mlartifacts", "jobcast.db")


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_in_the_checkout():
    """At the session's end, no ``STRAY`` file appeared or changed in the repository root."""
    root = Path(__file__).resolve().parents[1]

    def seen() -> dict[str, float]:
        return {n: (root / n).stat().st_mtime for n in STRAY if (root / n).exists()}

    before = seen()
    yield
    left = {n for n, t in seen().items() if before.get(n) != t}
    assert not left, f"the tests wrote {sorted(left)} into the checkout {root}"


@pytest.fixture(autouse=True)
def _own_data_home(request, monkeypatch):
    """Each test its own data directory (not created until a command writes there), so a
    command run without ``--store`` starts from an empty default store; session- and
    module-scoped fixtures see the session's."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.nodeid)[-100:]
    monkeypatch.setenv("JOBCAST_HOME", os.path.join(_SESSION_HOME, name))


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


@pytest.fixture(scope="session")
def registered_samples(tmp_path_factory) -> dict:
    """The MLPerf samples (tests/data/mlperf) ingested into a SQLite store, fitted, and
    registered without calibration in an MLflow SQLite database beside it: once per session
    (each costs seconds), shared by the serving and registry tests. ``{"folder", "store",
    "uri", "registration"}``; read only: a test that registers more versions or writes
    files uses a folder of its own."""
    from ingest.pipeline import ingest_paths
    from ingest.store import Store
    from jobcast.mlops.registry import register_forecaster
    from models.e2e import fit_store

    folder = tmp_path_factory.mktemp("registered")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        for key in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "MLFLOW_RUN_ID"):
            mp.delenv(key, raising=False)
        store = Store(f"sqlite:///{folder / 'jobcast.db'}")
        ingest_paths(store, [str(DATA / "mlperf")])
        fit_store(store)
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        reg = register_forecaster(store, tracking_uri=uri, calibrate=False)
    return {"folder": folder, "store": store, "uri": uri, "registration": reg}


@pytest.fixture(scope="session")
def pg_server():
    """One real private PostgreSQL (tests/pg_server.py) for the session, else skip."""
    from pg_server import PostgresUnavailable, start_private

    try:
        context = start_private()
        server = context.__enter__()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")
    try:
        yield server
    finally:
        context.__exit__(None, None, None)


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh empty database on the session's PostgreSQL: its SQLAlchemy URL."""
    from pg_server import new_database

    with new_database(pg_server) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request, tmp_path):
    """An empty store URL: a SQLite file, or a fresh database on the private PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    from pg_server import new_database

    with new_database(request.getfixturevalue("pg_server")) as url:
        yield url
