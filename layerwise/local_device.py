"""Describe the local benchmark device: the ``gpu`` name, ``hw_*`` features and ``sw_*`` versions.

CPU features come from ``/proc/cpuinfo`` and ``os``; a GPU is described by TensorFlow's
device details and the GPU catalog (:mod:`fleet.catalog`). TensorFlow is imported only
by :func:`detect_device` for a GPU and by :func:`software_versions`. This module was
``layerwise.hardware``, which still re-exports it (deprecated).
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import re
import warnings
from pathlib import Path
from typing import TypedDict

from fleet.quiet_tf import quiet_import
from layerwise.errors import DeviceError

CPUINFO = Path("/proc/cpuinfo")
MEMINFO = Path("/proc/meminfo")


def usable_cpus() -> int | None:
    """CPUs this process may run on: its affinity mask where the OS has one, else the machine's
    count (None when even that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


class CpuInfo(TypedDict):
    """What :func:`parse_cpuinfo` reads (a plain dict at run time)."""

    model: str
    logical_cores: int
    physical_cores: int
    mhz: float
    flags: set[str]


def parse_cpuinfo(text: str) -> CpuInfo:
    """Model name, logical/physical core counts, MHz and SIMD flags from ``/proc/cpuinfo`` text."""
    model = ""
    mhz: list[float] = []
    logical = 0
    cores: set[tuple[str, str]] = set()
    flags: set[str] = set()
    physical_id = core_id = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            logical += 1
        elif key == "model name" and not model:
            model = value
        elif key == "cpu MHz":
            with contextlib.suppress(ValueError):
                mhz.append(float(value))
        elif key == "physical id":
            physical_id = value
        elif key == "core id":
            core_id = value
            cores.add((physical_id, core_id))
        elif key == "flags" and not flags:
            flags = set(value.split())
    return {
        "model": model or platform.processor() or "unknown",
        "logical_cores": logical,
        "physical_cores": len(cores) or logical,
        "mhz": max(mhz) if mhz else math.nan,
        "flags": flags,
    }


def cpu_slug(model: str, cores: int) -> str:
    """Device name for CPU rows: ``cpu-<model slug>-<cores>c`` (e.g. ``cpu-amd-epyc-2c``)."""
    slug = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*$", " ", model.lower())
    slug = re.sub(r"[^a-z0-9]+", "-", slug).strip("-") or "unknown"
    return f"cpu-{slug}-{cores}c"


def _fp32_per_cycle(flags: set[str]) -> int:
    """Rough fp32 FLOPs per cycle and core: two FMA units of the widest vector width."""
    if "avx512f" in flags:
        return 64
    if "avx2" in flags and "fma" in flags:
        return 32
    if "avx" in flags:
        return 16
    return 8


NOMINAL_GBS_PER_CORE = 10.0
CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


def _max_mhz(model: str, cpuinfo_mhz: float) -> float:
    """A stable clock: cpufreq maximum, else "@ 2.60GHz" in the model name, else rounded MHz."""
    try:
        return float(CPUFREQ_MAX.read_text().strip()) / 1000.0
    except (OSError, ValueError):
        pass
    match = re.search(r"@\s*([0-9.]+)\s*GHz", model, re.IGNORECASE)
    if match:
        return float(match.group(1)) * 1000.0
    return round(cpuinfo_mhz, -2) if math.isfinite(cpuinfo_mhz) else math.nan


def _memory_gb() -> float:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError, IndexError):
        pass
    return math.nan


def cpu_features(cpuinfo_text: str | None = None) -> dict[str, object]:
    """The ``gpu`` name and ``hw_*`` columns for this machine's CPU.

    ``hw_cores`` = cores usable by this process (affinity; physical when known),
    ``hw_clock_mhz`` = maximum frequency (cpufreq, else the model name, else ``cpu MHz``
    rounded to 100 MHz, so that it does not drift between runs),
    ``hw_peak_tflops`` = cores x clock x fp32 FLOPs/cycle (vector FMA width; an upper bound),
    ``hw_bandwidth_gbs`` = a nominal 10 GB/s per core (not measured; kept deterministic so
    rows and forecasts of one machine carry the same value).
    """
    if cpuinfo_text is None:
        try:
            cpuinfo_text = CPUINFO.read_text()
        except OSError:
            cpuinfo_text = ""
    info = parse_cpuinfo(cpuinfo_text)
    usable = usable_cpus()
    logical = int(info["logical_cores"]) or int(usable or 1)
    physical = int(info["physical_cores"]) or logical
    cores = max(1, min(int(usable or logical), physical))
    mhz = _max_mhz(str(info["model"]), float(info["mhz"]))
    peak = cores * mhz * 1e6 * _fp32_per_cycle(info["flags"]) / 1e12
    return {
        "gpu": cpu_slug(str(info["model"]), cores),
        "hw_kind": "cpu",
        "hw_memory_gb": _memory_gb(),
        "hw_bandwidth_gbs": NOMINAL_GBS_PER_CORE * cores,
        "hw_clock_mhz": mhz,
        "hw_cores": float(cores),
        "hw_peak_tflops": round(peak, 4) if math.isfinite(peak) else math.nan,
        "hw_model": str(info["model"]),
    }


def gpu_features(device_name: str) -> dict[str, object]:
    """The ``gpu`` name and ``hw_*`` columns for a GPU name reported by TensorFlow.

    Unknown to the catalog: a warning and NaN features (the rows stay usable for that GPU).
    """
    from fleet.catalog import hardware_features, resolve_gpu

    try:
        spec = resolve_gpu(device_name)
        return {"gpu": spec.name, **hardware_features(spec.name), "hw_model": device_name}
    except KeyError as exc:
        warnings.warn(f"{exc}; hardware columns left empty", stacklevel=2)
        return {
            "gpu": device_name,
            "hw_kind": "gpu",
            "hw_memory_gb": math.nan,
            "hw_bandwidth_gbs": math.nan,
            "hw_clock_mhz": math.nan,
            "hw_cores": math.nan,
            "hw_peak_tflops": math.nan,
            "hw_model": device_name,
        }


def software_versions() -> dict[str, str]:
    """``sw_tensorflow`` and ``sw_python`` (imports TensorFlow)."""
    tf = quiet_import("tensorflow")

    return {"sw_tensorflow": tf.__version__, "sw_python": platform.python_version()}


def parse_device(device: str) -> tuple[str, int]:
    """``cpu`` / ``gpu`` / ``gpu:1`` -> (kind, index), with a clear error otherwise."""
    match = re.fullmatch(r"(cpu|gpu)(?::(\d+))?", device.strip().lower())
    if not match:
        raise DeviceError(f"bad device {device!r}: expected cpu, gpu or gpu:N")
    return match.group(1), int(match.group(2) or 0)


def tf_device_string(device: str) -> str:
    """TensorFlow device string for ``cpu`` / ``gpu:N`` (``/CPU:0``, ``/GPU:N``)."""
    kind, index = parse_device(device)
    return f"/{kind.upper()}:{index if kind == 'gpu' else 0}"


def detect_device(device: str = "cpu") -> dict[str, object]:
    """Everything a benchmark row records about its device: ``device``, ``gpu``, hw_*, sw_*.

    Raises :class:`~layerwise.errors.DeviceError` (a ``ValueError``) for a GPU index
    TensorFlow does not see.
    """
    kind, index = parse_device(device)
    canonical = "cpu" if kind == "cpu" else f"gpu:{index}"
    if kind == "cpu":
        features = cpu_features()
    else:
        tf = quiet_import("tensorflow")

        gpus = tf.config.list_physical_devices("GPU")
        if index >= len(gpus):
            raise DeviceError(f"device {device!r}: TensorFlow sees {len(gpus)} GPU(s)")
        details = tf.config.experimental.get_device_details(gpus[index])
        features = gpu_features(str(details.get("device_name", f"GPU {index}")))
    return {"device": canonical, **features, **software_versions()}
