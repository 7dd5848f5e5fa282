"""Deprecated: this module is now :mod:`jobcast.service.engine.scale_calibration` (issue 26); it
re-exports that module's names for one release and warns once on import."""

from __future__ import annotations

from fleet.deprecation import warn_renamed
from jobcast.service.engine.scale_calibration import (
    COLUMNS,
    fit_calibration,
    layerwise_observations,
)

__all__ = ["COLUMNS", "fit_calibration", "layerwise_observations"]

warn_renamed("jobcast.service.calibration", "jobcast.service.engine.scale_calibration",
             stacklevel=2)
