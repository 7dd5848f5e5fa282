"""Paths the tests share: the repository, its bundled samples, the reference data beside it.

``SHARED_DATA`` is ``../shared/data`` next to the checkout (CI clones the repository beside
it); tests that need it skip when it is absent (the ``shared_data`` fixture in conftest.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SHARED_DATA = REPO.parent / "shared" / "data"
SHARED_LOGS = SHARED_DATA / "logs"


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as the module ``jobcast_<name>``, loaded once per
    process (its dataclasses look their module up by name, and a second load would make a
    second kind of the same objects)."""
    module_name = f"jobcast_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def assert_sane(outcome, sample) -> None:
    """A fuzz case's outcome (``benchmarks/fuzz_parsers.py``) is sane: stored, or rejected
    with the file's path and a reason."""
    assert outcome.kind in ("rejected", "accepted"), outcome.detail
    if outcome.kind == "rejected":
        assert outcome.detail.startswith(str(sample.path)), outcome.detail
        assert len(outcome.detail) > len(str(sample.path)) + 2  # a reason follows
