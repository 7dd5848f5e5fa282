"""A network's decomposition, kept per process and derived across batch sizes where exact.

Rules (:func:`network_rows`, what :func:`layerwise.pricing.price_network` prices):

* Only networks shipped in the zoo are kept (a name always means the same layers), up to
  :data:`NETWORK_CACHE` (network, optimizer, image size, framework) keys, least recently
  used first out.
* A network's rows scale with the batch: once two decompositions of the same network at two
  batch sizes show every batch-dependent value exactly proportional to the batch (and all
  else equal), later batch sizes are derived from them instead of decomposed again
  (:class:`BatchScaled`); anything else (a value not exactly proportional) keeps decomposing.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any

NETWORK_CACHE = 64  # (network, optimizer, framework) decompositions kept per process


class BatchScaled:
    """A decomposition whose batch-dependent values are proportional to the batch: ``at(b)``
    derives the network at batch ``b`` (per-image values times ``b``)."""

    def __init__(self, ref: Any, per_image: list[dict[str, Any]]):
        self.ref = ref
        self.per_image = per_image  # per row: key -> value at batch 1 (scaled keys only)

    @classmethod
    def check(cls, a: Any, b: Any) -> BatchScaled | None:
        """The scaling that turns ``a`` into ``b`` exactly, else None."""
        ba, bb = int(a.batch_size), int(b.batch_size)
        if ba == bb or len(a.rows) != len(b.rows):
            return None
        for f in dataclasses.fields(a):
            if f.name not in ("rows", "batch_size") and getattr(a, f.name) != getattr(b, f.name):
                return None
        per_image = []
        for ra, rb in zip(a.rows, b.rows, strict=True):
            if list(ra) != list(rb):
                return None
            scaled = {}
            for k, va in ra.items():
                vb = rb[k]
                if type(va) is not type(vb):
                    return None
                if va == vb:
                    continue
                one = _per_image(va, ba)
                if one is None or type(va)(one * bb) != vb:
                    return None
                scaled[k] = one
            per_image.append(scaled)
        return cls(b, per_image)

    def at(self, batch: int) -> Any:
        """The reference network rebuilt at ``batch`` (per-image quantities scaled)."""
        rows = []
        for row, scaled in zip(self.ref.rows, self.per_image, strict=True):
            new = dict(row)
            for k, one in scaled.items():
                new[k] = type(row[k])(one * batch)
            rows.append(new)
        return dataclasses.replace(self.ref, batch_size=int(batch), rows=rows,
                                   warnings=list(self.ref.warnings))


def _per_image(value: Any, batch: int) -> Any:
    """``value / batch`` when exact (ints and integer-valued floats), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return value // batch if value % batch == 0 else None
    one = value / batch
    return one if one * batch == value and float(one).is_integer() else None


NETWORKS: OrderedDict[tuple, Any] = OrderedDict()


def network_rows(network: Any, batch_size: int, optimizer: str, image_size: int | None,
                 framework: str) -> Any:
    """:func:`layerwise.network.decompose`, derived from earlier ones where exact (rules):
    only for networks shipped in the zoo (a name always means the same layers)."""
    from layerwise import zoo
    from layerwise.network import decompose

    if not isinstance(network, str) or zoo.lookup(network) is None:
        return decompose(network, batch_size=batch_size, optimizer=optimizer,
                         image_size=image_size, framework=framework)
    key = (network, optimizer, image_size, framework)
    state = NETWORKS.get(key)
    if isinstance(state, BatchScaled) and int(batch_size) >= 1:
        NETWORKS.move_to_end(key)
        return state.at(batch_size)
    net = decompose(network, batch_size=batch_size, optimizer=optimizer, image_size=image_size,
                    framework=framework)
    if state is None or state is False:
        NETWORKS[key] = net if state is None else False
    else:
        NETWORKS[key] = BatchScaled.check(state, net) or False
    while len(NETWORKS) > NETWORK_CACHE:
        NETWORKS.popitem(last=False)
    return net
