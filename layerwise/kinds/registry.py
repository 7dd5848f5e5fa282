"""The registry of layer kinds: name -> kind, in registration order.

Rules: names are unique; a Keras class and a JSON spec type belong to at most one kind;
registration order is the order of ``all_columns()`` and therefore of the benchmark CSV
layout, so new kinds are registered after the existing ones.
"""

from __future__ import annotations

from layerwise.errors import UnknownLayerKindError
from layerwise.kinds.base import LayerKind

KINDS: dict[str, LayerKind] = {}


def register(kind: LayerKind) -> LayerKind:
    """Add ``kind`` to the registry (after the others) and return it."""
    name = getattr(kind, "name", "")
    if not name or name in ("view", "unknown"):
        raise ValueError(f"bad layer kind name {name!r}")
    if name in KINDS:
        raise ValueError(f"layer kind {name!r} is already registered")
    for other in KINDS.values():
        for attr in ("keras_classes", "spec_types"):
            shared = set(getattr(kind, attr)) & set(getattr(other, attr))
            if shared:
                raise ValueError(f"{name}: {attr} {sorted(shared)} already belong to {other.name}")
    KINDS[name] = kind
    return kind


def unregister(name: str) -> LayerKind:
    """Remove a kind by name and return it."""
    get_kind(name)
    return KINDS.pop(name)


def get_kind(name: str) -> LayerKind:
    """The kind called ``name``, with a clear error for an unknown name."""
    try:
        return KINDS[name]
    except KeyError:
        raise UnknownLayerKindError(f"unknown layer type {name!r}; known: {', '.join(KINDS)}"
                                    ) from None


def kind_for_keras(cls: str) -> LayerKind | None:
    """The kind that maps Keras class ``cls``, else None."""
    return next((kind for kind in KINDS.values() if cls in kind.keras_classes), None)


def kind_for_spec(spec_type: str) -> LayerKind | None:
    """The kind that parses JSON spec type ``spec_type``, else None."""
    return next((kind for kind in KINDS.values() if spec_type in kind.spec_types), None)


def spec_types() -> tuple[str, ...]:
    """JSON spec types of all kinds, in registration order."""
    return tuple(t for kind in KINDS.values() for t in kind.spec_types)
