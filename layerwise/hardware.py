"""Deprecated: this module is now :mod:`layerwise.local_device` (issue 26: "hardware" also named
the scale calibration's deployment key and the ``hw_*`` device features); it re-exports that
module's names for one release and warns once on import. Patch the new module, not this one."""

from __future__ import annotations

from fleet.deprecation import warn_renamed
from layerwise.local_device import (
    CPUFREQ_MAX,
    CPUINFO,
    MEMINFO,
    NOMINAL_GBS_PER_CORE,
    cpu_features,
    cpu_slug,
    detect_device,
    gpu_features,
    parse_cpuinfo,
    parse_device,
    software_versions,
    tf_device_string,
    usable_cpus,
)

__all__ = ["CPUFREQ_MAX", "CPUINFO", "MEMINFO", "NOMINAL_GBS_PER_CORE", "cpu_features",
           "cpu_slug", "detect_device", "gpu_features", "parse_cpuinfo", "parse_device",
           "software_versions", "tf_device_string", "usable_cpus"]

warn_renamed("layerwise.hardware", "layerwise.local_device", stacklevel=2)
