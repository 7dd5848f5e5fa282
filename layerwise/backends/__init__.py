"""Timing backends of the layer benchmark: TensorFlow (Keras layers) and PyTorch (torch.nn).

Each backend module registers itself here; frameworks are imported only when a row is timed.
"""

from __future__ import annotations

from layerwise.backends import tf_timing, torch_timing
from layerwise.backends.base import (
    BACKENDS,
    Backend,
    TimingPlan,
    check_precision,
    get_backend,
    register_backend,
    require_module,
)

register_backend(tf_timing.BACKEND)
register_backend(torch_timing.BACKEND)

__all__ = ["BACKENDS", "Backend", "TimingPlan", "check_precision", "get_backend",
           "register_backend", "require_module"]
