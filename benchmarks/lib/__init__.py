"""What the benchmark scripts share: where things are, the import set-up, a markdown table.

Rules:

* A script imports ``from lib import ...`` (a script's folder is ``sys.path[0]``); importing
  this package puts the repository root and ``tests/`` on ``sys.path`` (once each), so a
  script then imports the product (``ingest``, ``layerwise``, ...) and the tests' real-data
  support modules (``fuzz_cases``, ``kineto_steps``, ``slurm_shapes``, ``prom_server``, ...).
* Nothing in the product or the tests imports ``benchmarks``: the dependency runs one way,
  laboratory -> product and test support.
* :data:`SHARED` is the reference data beside the checkout (``../shared/data``); a script that
  reads it says so in its docstring.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas only where a table is written: GPU scripts run without it
    import pandas as pd

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
DOCS = REPO / "docs"
SHARED = REPO.parent / "shared" / "data"

for _path in (TESTS, REPO):  # the repository first: its packages win over tests/ modules
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


def md(frame: pd.DataFrame) -> str:
    """A markdown table: MAPE-like columns to 0.1, coverage to 0.01, constants to 4 digits."""
    out = frame.copy()
    for col in out.columns:
        name = str(col)
        if out[col].dtype.kind != "f":
            continue
        if name.startswith("scale") or name in ("kernel_ms", "year_coef"):
            out[col] = out[col].map(lambda v: float(f"{v:.4g}"))
        else:
            out[col] = out[col].round(2 if "cov" in name or name.startswith("log_") else 1)
    return out.to_markdown(index=False, floatfmt="g")
