"""What a forecast of a known network imports (issue 23, speed): module sets, never timings.

A known zoo network is priced from the shipped trees' numpy arrays (``layerwise.quick``), so
neither the layerwise call nor ``jobcast predict`` of such a network may load scikit-learn or
SciPy (together about a second of a fresh process's wall); the layerwise call loads no pandas
either. Each check runs in a fresh interpreter and reads its ``sys.modules``; the wall times
are measured by ``benchmarks/layerwise_latency.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.paths import REPO

ESTIMATOR_LIBS = {"sklearn", "scipy"}
MARK = "LOADED-PACKAGES:"
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}


def loaded_packages(code: str) -> set[str]:
    """The top-level packages ``sys.modules`` holds after ``code`` ran in a fresh process."""
    probe = (code + "\nimport json, sys\n"
             f"print({MARK!r} + json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=ENV, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith(MARK))
    return set(json.loads(line[len(MARK):]))


def test_layerwise_forecast_of_a_zoo_network_loads_no_estimator_library_nor_pandas():
    loaded = loaded_packages(
        "from layerwise.quick import forecast_fast\n"
        "from layerwise.forecast import forecast_network\n"
        "assert forecast_fast('resnet50', device='V100', batch_size=77,"
        " optimizer='sgd')['batch_seconds'] > 0\n"
        "assert forecast_network('vgg16', device='A100', batch_size=33,"
        " optimizer='sgd')['batch_seconds'] > 0\n")
    assert "numpy" in loaded  # the probe saw the forecast's imports
    assert not loaded & (ESTIMATOR_LIBS | {"pandas"})


def test_cli_forecast_of_a_known_network_loads_no_estimator_library(tmp_path):
    store = f"sqlite:///{tmp_path / 'store.db'}"
    loaded = loaded_packages(
        "from jobcast.cli.app import app\n"
        "app(['predict', '--network', 'resnet50', '--device', 'V100', '--batch-size', '77',"
        f" '--iterations', '100', '--store', {store!r}, '--json'], standalone_mode=False)\n")
    assert "jobcast" in loaded and "numpy" in loaded
    assert not loaded & ESTIMATOR_LIBS
