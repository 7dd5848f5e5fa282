"""Layer kinds: one module per benchmarkable kind, collected in a registry.

Each kind module defines a :class:`~layerwise.kinds.base.LayerKind` subclass that declares,
in one place, the kind's name and columns, how to sample and check configurations, its
shapes, FLOPs, MACs and weights, its TensorFlow benchmark builder, which Keras classes (and
JSON spec types) map to it, and its kind-specific model features.

A new kind = one new module here plus one ``register(...)`` line below (after the others:
registration order is the column order of the benchmark CSV layout). Tests and plugins may
``register``/``unregister`` kinds at run time.
"""

from __future__ import annotations

from layerwise.kinds import (
    act,
    add,
    bn,
    concat,
    conv,
    dense,
    dropout,
    dwconv,
    ln,
    pad,
    pool,
    softmax,
)
from layerwise.kinds.base import InvalidLayerConfig, LayerKind
from layerwise.kinds.registry import (
    KINDS,
    get_kind,
    kind_for_keras,
    kind_for_spec,
    register,
    spec_types,
    unregister,
)

register(conv.Conv())
register(dense.Dense())
register(dwconv.DepthwiseConv())
register(pool.Pool())
register(bn.BatchNorm())
register(act.Activation())
register(add.Add())
register(ln.LayerNorm())
register(softmax.Softmax())
register(concat.Concat())
register(pad.ZeroPad())
register(dropout.Dropout())

__all__ = ["KINDS", "InvalidLayerConfig", "LayerKind", "get_kind", "kind_for_keras",
           "kind_for_spec", "register", "spec_types", "unregister"]
