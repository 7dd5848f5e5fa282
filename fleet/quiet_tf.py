"""Import TensorFlow (or Keras) without its native start-up noise.

Rules
-----
* Every module that imports TensorFlow or Keras calls :func:`quiet_import` first (or instead):
  ``keras = quiet_import("keras")``. Later plain imports of the same module are free and
  print nothing, because the module is already loaded.
* ``TF_CPP_MIN_LOG_LEVEL`` is set to 2 unless the user set it (0 shows everything again).
* TensorFlow's native libraries log through absl *before* absl is initialised, and those lines
  ignore ``TF_CPP_MIN_LOG_LEVEL`` (``WARNING: All log messages before absl::InitializeLog()``,
  ``I0000 ... port.cc] oneDNN custom operations are on``, one pair per native library). So the
  import runs with file descriptor 2 sent to a temporary file; afterwards every line is written
  back to stderr except native log lines below the level and the known start-up notices
  (cuDNN/cuFFT/cuBLAS factory registration, no CUDA driver). Python errors and warnings of the
  import are kept.
* Only logging is changed: ``TF_ENABLE_ONEDNN_OPTS`` (which changes numerics) is left alone.
* After the import, TensorFlow's Python logger and absl's Python logging get the same level.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import ModuleType

MIN_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
DEFAULT_MIN_LEVEL = "2"  # errors only

# glog/absl native lines: severity letter, MMDD (0000 before absl is initialised), time, thread.
_NATIVE = re.compile(r"^(?P<sev>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w./-]+:\d+\]")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
# (lowest level that hides it, pattern): native notices that are not in glog form, or are
# logged as errors although nothing is wrong (no GPU on this machine, factories registered twice)
_NOTICES = (
    (1, re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called")),
    (1, re.compile(r"^To enable the following instructions: .*rebuild TensorFlow")),
    (2, re.compile(r"Unable to register cu(DNN|FFT|BLAS) factory")),
    (2, re.compile(r"computation placer already registered")),
    (2, re.compile(r"[Cc]ould not find cuda drivers")),
    (2, re.compile(r"failed call to cuInit")),
    (2, re.compile(r"TF-TRT Warning: Could not find TensorRT")),
)
_LOCK = threading.Lock()


def min_level() -> int:
    """The native log level in force: ``$TF_CPP_MIN_LOG_LEVEL`` (set to 2 when unset)."""
    os.environ.setdefault(MIN_LEVEL_ENV, DEFAULT_MIN_LEVEL)
    try:
        return max(0, min(3, int(os.environ[MIN_LEVEL_ENV])))
    except ValueError:
        return int(DEFAULT_MIN_LEVEL)


def is_noise(line: str, level: int) -> bool:
    """Whether a stderr line of the import is native start-up noise at ``level``."""
    if level <= 0:
        return False
    m = _NATIVE.match(line)
    if m and _SEVERITY[m.group("sev")] < level:
        return True
    return any(level >= lowest and p.search(line) for lowest, p in _NOTICES)


@contextmanager
def filtered_stderr(level: int) -> Iterator[None]:
    """Run the block with fd 2 captured; write back every line that is not noise."""
    try:
        fd = sys.stderr.fileno() if sys.stderr is not None else 2
    except (AttributeError, OSError, ValueError):  # a stderr without a file descriptor
        fd = 2
    try:
        saved = os.dup(fd)
    except OSError:  # no fd 2 at all: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as capture:
        _flush()
        os.dup2(capture.fileno(), fd)
        try:
            yield
        finally:
            _flush()
            os.dup2(saved, fd)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines(True)
                    if not is_noise(line, level)]
            if kept:
                os.write(fd, "".join(kept).encode("utf-8", "replace"))


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with suppress(AttributeError, OSError, ValueError):
            stream.flush()


def _python_levels(level: int) -> None:
    """TensorFlow's and absl's Python loggers at the native level (2 -> ERROR)."""
    import logging

    py_level = (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)[level]
    logging.getLogger("tensorflow").setLevel(py_level)
    absl = sys.modules.get("absl.logging")
    if absl is not None:
        absl.set_verbosity(py_level)  # absl accepts Python logging levels
    else:
        logging.getLogger("absl").setLevel(py_level)


def quiet_import(name: str = "tensorflow") -> ModuleType:
    """``importlib.import_module(name)`` for TensorFlow/Keras, without native log noise.

    Raises whatever the import raises (e.g. ``ImportError`` when TensorFlow is missing).
    """
    level = min_level()
    with _LOCK:
        module = sys.modules.get(name)
        if module is None:
            with filtered_stderr(level):
                module = importlib.import_module(name)
        if "tensorflow" in sys.modules:
            _python_levels(level)
    return module
