"""What a forecast of a known network imports (issue 23, speed): module sets, never timings.

A known zoo network is priced from the shipped trees' numpy arrays (``layerwise.pricing``), so
neither the layerwise call nor a forecaster's forecast of such a network may load scikit-learn
or SciPy (together about a second of a fresh process's wall); the layerwise call loads no
pandas either. ``jobcast predict`` from a store without history (none yet, or an empty one)
loads neither pandas nor SQLAlchemy (``ingest.store_probe`` says so before the store is
opened; about 0.3 s). Each check runs in a fresh interpreter and reads its ``sys.modules``;
the wall times are measured by ``benchmarks/layerwise_latency.py``. A multi-GPU forecast
loads no scikit-learn, SciPy or pandas unless TensorFlow 1.x replicated variables are named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ingest.store import Store
from tests.paths import REPO

ESTIMATOR_LIBS = {"sklearn", "scipy"}
MARK = "LOADED-PACKAGES:"
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}


def loaded_packages(code: str, env: dict[str, str] | None = None) -> set[str]:
    """The top-level packages ``sys.modules`` holds after ``code`` ran in a fresh process
    (``env``: more environment)."""
    probe = (code + "\nimport json, sys\n"
             f"print({MARK!r} + json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**ENV, **(env or {})}, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith(MARK))
    return set(json.loads(line[len(MARK):]))


def test_layerwise_forecast_of_a_zoo_network_loads_no_estimator_library_nor_pandas():
    loaded = loaded_packages(
        "from layerwise.forecast import forecast_network\n"
        "assert forecast_network('resnet50', device='V100', batch_size=77,"
        " optimizer='sgd')['batch_seconds'] > 0\n"
        "assert forecast_network('vgg16', device='A100', batch_size=33,"
        " optimizer='sgd')['batch_seconds'] > 0\n")
    assert "numpy" in loaded  # the probe saw the forecast's imports
    assert not loaded & (ESTIMATOR_LIBS | {"pandas"})


def test_forecaster_over_a_store_loads_no_estimator_library(tmp_path):
    """The served path: a forecaster over a store opened the normal way (SQLAlchemy, and
    pandas for its run summaries), no scikit-learn or SciPy for a known network."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url)
    loaded = loaded_packages(
        "from ingest.store import Store\n"
        "from jobcast.service.engine.forecaster import Forecaster\n"
        "from jobcast.service.engine.request import JobRequest\n"
        f"fc = Forecaster(Store({url!r}))\n"
        "assert fc.forecast(JobRequest(network='resnet50', device='V100', batch_size=77,"
        " iterations=100)).ok\n")
    assert {"jobcast", "numpy", "sqlalchemy", "pandas"} <= loaded
    assert not loaded & ESTIMATOR_LIBS


def cli_packages(args: list[str], env: dict[str, str]) -> set[str]:
    """The packages one successful ``jobcast`` command (``args``) loads."""
    return loaded_packages(
        "from jobcast.cli.app import app\n"
        f"code = app({args!r}, standalone_mode=False)\n"
        "assert code in (None, 0), code\n", env)


PREDICT = ["predict", "--network", "resnet50", "--device", "V100", "--batch-size", "77",
           "--iterations", "100"]


def test_cli_forecast_without_history_loads_neither_pandas_nor_sqlalchemy(tmp_path):
    """``jobcast predict`` of a known network where the store holds no history: the default
    store not created yet (a fresh data directory, which stays empty), and an empty store
    named with ``--store`` (text output too)."""
    home = tmp_path / "home"
    env = {"JOBCAST_HOME": str(home), "JOBCAST_STORE": ""}
    loaded = cli_packages([*PREDICT, "--json"], env)
    assert {"jobcast", "numpy"} <= loaded
    assert not loaded & (ESTIMATOR_LIBS | {"pandas", "sqlalchemy"})
    assert not home.exists()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    Store(store)
    loaded = cli_packages([*PREDICT, "--store", store], env)
    assert not loaded & (ESTIMATOR_LIBS | {"pandas", "sqlalchemy"})


def test_multi_gpu_forecast_without_history_loads_no_estimator_library(tmp_path):
    """8 GPUs, no history: DDP (PyTorch) and one all-reduce (TensorFlow's ``auto``) are
    physics only, so neither loads scikit-learn, SciPy or pandas (the TensorFlow 1.x
    replicated fit, :mod:`models.replicated`, does, and only when that mechanism is named)."""
    env = {"JOBCAST_HOME": str(tmp_path / "home"), "JOBCAST_STORE": ""}
    eight = ["predict", "--network", "resnet50", "--deployment", "8x A100", "--batch-size",
             "512", "--iterations", "100", "--json"]
    for framework in ("pytorch", "tensorflow"):
        loaded = cli_packages([*eight, "--framework", framework], env)
        assert "models" in loaded  # the data-parallel step was priced
        assert not loaded & (ESTIMATOR_LIBS | {"pandas", "sqlalchemy"})
    loaded = cli_packages([*eight, "--data-parallel", "replicated"], env)
    assert "sklearn" in loaded  # the probe sees the fit's imports where they are needed
