"""Renamed estimator parameters and the old names they keep for one release (issue 26).

Rules (scikit-learn's own deprecation pattern):

* The old parameter stays in ``__init__`` with default ``None`` next to the new one, so
  ``get_params``/``clone`` keep working; ``fit`` reads the pair with :func:`renamed_param`: an
  old parameter that was set wins and raises a :class:`FutureWarning` naming the new one.
* A saved predictor's parameters go through :func:`renamed_keys` when loaded, so files written
  under the old names (the shipped ``default_predictor/efficiency.json``) load unchanged and
  without a warning: the file is not the user's code.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

# old parameter name -> new one ("calibration" now means the scale calibration of forecasts)
INTERVAL_REFIT_RENAMES: dict[str, str] = {
    "calibrate_unseen": "unseen_interval_refits",
    "calibration_rows": "interval_refit_rows",
}


def renamed_param(estimator: Any, old: str, new: str) -> Any:
    """The value ``fit`` uses: the old parameter when it was set (with a warning), else the new."""
    value = getattr(estimator, old, None)
    if value is None:
        return getattr(estimator, new)
    warnings.warn(f"{type(estimator).__name__}: parameter {old!r} is deprecated and will be "
                  f"removed in a later release; use {new!r}", FutureWarning, stacklevel=3)
    return value


def renamed_keys(params: Mapping[str, Any],
                 renames: Mapping[str, str] = INTERVAL_REFIT_RENAMES) -> dict[str, Any]:
    """Saved parameters under their new names: an old key that holds a value replaces the new
    one (it was the value the estimator used), an old key holding None is dropped."""
    out = dict(params)
    for old, new in renames.items():
        if old in out:
            value = out.pop(old)
            if value is not None:
                out[new] = value
    return out
