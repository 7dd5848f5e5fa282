"""The forecast commands import only what they use (issue 37, fast answers): module sets in a
fresh interpreter, never timings (``benchmarks/cli_latency.py`` measures those).

* ``jobcast predict`` over a fitted store reads the fit's records (phase models, run
  summaries, selector) and answers from them without scikit-learn or SciPy: a stored phase
  model forecasts as ``models.phase_curve.PhaseCurve``, the selector judges as
  ``models.relation.SelectorCells``, a rate's t quantile is ``scipy.special``'s alone.
* ``jobcast compare`` without history opens no store (``history_store``): no pandas, no
  SQLAlchemy.
* ``jobcast --help`` starts without the HTTP client the team-stack commands use.
* None of them loads TensorFlow, Keras, PyTorch or MLflow.
"""

from __future__ import annotations

import json

import pytest
from paths import DATA
from typer.testing import CliRunner

from jobcast.cli.app import app
from tests.test_import_budget import ESTIMATOR_LIBS, cli_packages, loaded_packages

runner = CliRunner()
FRAMEWORKS = {"tensorflow", "keras", "torch", "mlflow"}
NO_HISTORY = {"JOBCAST_STORE": ""}


@pytest.fixture(scope="module")
def fitted_store(tmp_path_factory) -> str:
    """The bundled MLPerf logs, ingested and fitted with the backtest (a selector saved)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('imports') / 'jobcast.db'}"
    done = runner.invoke(app, ["ingest", str(DATA / "mlperf"), "--store", url,
                               "--workers", "1"])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["fit", "--store", url, "--no-track"])
    assert done.exit_code == 0, done.output
    return url


def test_store_backed_predict_loads_no_estimator_library(fitted_store, tmp_path):
    """The answer is from history, the stored phase models and the rates both proposing
    (so both were read), in a process without scikit-learn or SciPy."""
    args = ["predict", "--network", "resnet50", "--deployment", "nvidia-a100-sxm4-40gb-x8",
            "--batch-size", "3264", "--epochs", "40", "--dataset-size", "1281167",
            "--store", fitted_store, "--json"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    kinds = {c["kind"] for c in json.loads(done.stdout)["candidates"]}
    assert kinds & {"own-model", "pooled-model"} and kinds & {"own-rate", "fleet-rate"}
    env = {"JOBCAST_HOME": str(tmp_path / "home"), **NO_HISTORY}
    loaded = cli_packages(args, env)
    assert {"pandas", "sqlalchemy", "models"} <= loaded  # the probe saw the store read
    assert not loaded & (ESTIMATOR_LIBS | FRAMEWORKS)


def test_compare_without_history_opens_no_store(tmp_path):
    home = tmp_path / "home"
    env = {"JOBCAST_HOME": str(home), **NO_HISTORY}
    args = ["compare", "--network", "resnet50", "--batch-size", "256", "--epochs", "40",
            "--device", "8x A100", "--json"]
    loaded = cli_packages(args, env)
    assert {"jobcast", "numpy"} <= loaded
    assert not loaded & (ESTIMATOR_LIBS | FRAMEWORKS | {"pandas", "sqlalchemy"})
    assert not home.exists()  # nothing created either


def test_layerwise_predict_loads_no_framework(tmp_path):
    env = {"JOBCAST_HOME": str(tmp_path / "home"), **NO_HISTORY}
    args = ["predict", "--network", "resnet50", "--deployment", "1x A100", "--batch-size",
            "64", "--iterations", "100", "--json"]
    loaded = cli_packages(args, env)
    assert "numpy" in loaded
    assert not loaded & (ESTIMATOR_LIBS | FRAMEWORKS | {"pandas", "sqlalchemy"})


def test_help_starts_without_the_http_client(tmp_path):
    code = ("from jobcast.cli.app import app\n"
            "try:\n"
            "    app(['--help'])\n"
            "except SystemExit as exc:\n"
            "    assert exc.code in (None, 0), exc.code\n")
    loaded = loaded_packages(code, {"JOBCAST_HOME": str(tmp_path / "home"), **NO_HISTORY})
    assert "typer" in loaded
    assert not loaded & (ESTIMATOR_LIBS | FRAMEWORKS | {"numpy", "pandas", "sqlalchemy",
                                                       "ssl", "http"})
