"""Nothing leaves the machine and nothing is written outside the data directory because a
library would like usage telemetry.

Rules
-----
* :func:`no_telemetry` turns MLflow's usage telemetry off (``MLFLOW_DISABLE_TELEMETRY=true``)
  unless the user set that variable; off, MLflow neither sends events nor writes its
  installation id (``~/.config/mlflow/telemetry.json``).
* It must run before ``mlflow`` is first imported (MLflow starts its telemetry client at
  import): ``jobcast/mlops/__init__.py`` and ``ingest/mlflow_source.py``, the two rooms that
  import MLflow, call it when they are imported. Child processes inherit the setting.
"""

from __future__ import annotations

import os

TELEMETRY_VARIABLE = "MLFLOW_DISABLE_TELEMETRY"


def no_telemetry() -> None:
    """MLflow's telemetry off, unless the user chose otherwise (module rules)."""
    os.environ.setdefault(TELEMETRY_VARIABLE, "true")
