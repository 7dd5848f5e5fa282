"""Deprecated: this module is now :mod:`models.scale_calibration` (issue 26); it re-exports
that module's names for one release and warns once on import."""

from __future__ import annotations

from fleet.deprecation import warn_renamed
from models.scale_calibration import Scale, ScaleCalibrator, network_key, observed_runs

__all__ = ["Scale", "ScaleCalibrator", "network_key", "observed_runs"]

warn_renamed("models.calibration", "models.scale_calibration", stacklevel=2)
