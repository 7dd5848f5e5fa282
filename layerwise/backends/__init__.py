"""Timing backends of the layer benchmark: TensorFlow (Keras layers) and PyTorch (torch.nn).

Each backend module registers itself here; frameworks are imported only when a row is timed.
A backend defined elsewhere (a plugin, a test) is one :func:`register_backend` call; the
registry's rules are :mod:`layerwise.backends.base`'s.
"""

from __future__ import annotations

from layerwise.backends import tf_timing, torch_timing
from layerwise.backends.base import (
    AUTO_ORDER,
    BACKENDS,
    Backend,
    BackendError,
    TimingPlan,
    backend_names,
    check_precision,
    ensure_backend,
    get_backend,
    register_backend,
    require_module,
    resolve_backend,
    unregister_backend,
)

register_backend(tf_timing.BACKEND)
register_backend(torch_timing.BACKEND)

__all__ = ["AUTO_ORDER", "BACKENDS", "Backend", "BackendError", "TimingPlan", "backend_names",
           "check_precision", "ensure_backend", "get_backend", "register_backend",
           "require_module", "resolve_backend", "unregister_backend"]
