"""Deprecated: this module is now :mod:`jobcast.service.scale_calibration` (issue 26); it
re-exports that module's names for one release and warns once on import."""

from __future__ import annotations

import warnings

from jobcast.service.scale_calibration import (
    COLUMNS,
    fit_calibration,
    layerwise_observations,
)

__all__ = ["COLUMNS", "fit_calibration", "layerwise_observations"]

warnings.warn("jobcast.service.calibration is deprecated; import "
              "jobcast.service.scale_calibration", DeprecationWarning, stacklevel=2)
