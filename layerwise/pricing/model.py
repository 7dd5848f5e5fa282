"""The fitted model a network is priced with: layer predictions on arrays plus compositions.

Rules:

* **One array interface** (:class:`LayerArrays`): ``known_layers`` and
  ``predict_records(records, columns)`` -> ``predicted_ms``, ``low_ms``, ``high_ms`` and the
  flags ``extrapolated``, ``own_data`` as arrays over the records.
  :class:`layerwise.efficiency_arrays.EfficiencyArrays` is one natively; a fitted
  :class:`layerwise.efficiency.EfficiencyPredictor` and the shipped
  :class:`layerwise.shipped.EfficiencyPlusSpecialist` hand theirs over by
  ``pricing_model()`` (the specialist never prices networks: its efficiency model does).
* **How a predictor is priced** is declared by its class (``pricing``): :data:`COMPOSED`
  (a :class:`PricingModel` from ``pricing_model()``, priced by
  :func:`layerwise.pricing.price_network`) or :data:`PER_TYPE` (the older per-layer-type
  predictors, fp32 only: :mod:`layerwise.per_type`). No other switch.
* **The shipped model** lives in :data:`SHIPPED_DIR` (the one definition of that folder):
  ``efficiency.json`` + ``.npz`` and ``composition*.json`` (``composition-<framework>.json``
  a framework's own, ``composition.json`` the default), read once per process as plain
  arrays and dicts (:func:`shipped_model`): no pandas, scikit-learn or SciPy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from layerwise.efficiency_arrays import EfficiencyArrays

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "default_predictor"
COMPOSED = "composed"  # a predictor priced by price_network (pricing_model())
PER_TYPE = "per-type"  # an older per-layer-type predictor (layerwise.per_type)


class LayerArrays(Protocol):
    """The one array interface a network's layers are priced through (module rules)."""

    @property
    def known_layers(self) -> set[str]:
        """The layer kinds it prices."""
        ...

    def predict_records(self, records: list[dict], columns: set[str] | None = None
                        ) -> Mapping[str, np.ndarray]:
        """Predictions and flags per record (module rules)."""
        ...


class PricingModel:
    """Layer predictions on arrays and the compositions (plain dicts of ``composition*.json``,
    key ``""`` the default one)."""

    def __init__(self, arrays: LayerArrays, compositions: Mapping[str, Mapping]):
        self.arrays = arrays
        self.compositions = dict(compositions)

    def composition(self, framework: str) -> Mapping | None:
        """The framework's own composition, else the default one (``composition.json``)."""
        return self.compositions.get(str(framework)) or self.compositions.get("")


def fitted_model(arrays: EfficiencyArrays, default: Any, own: Mapping[str, Any]) -> PricingModel:
    """The :class:`PricingModel` of a fitted predictor: its arrays, its default composition
    (``default``, a :class:`layerwise.compose.Composition` or None) and the frameworks'
    own (``own``)."""
    comps = {k: c.to_dict() for k, c in (own or {}).items()}
    if default is not None:
        comps[""] = default.to_dict()
    return PricingModel(arrays, comps)


@lru_cache(maxsize=1)
def shipped_model() -> PricingModel | None:
    """The shipped predictor read once (None when its folder holds no efficiency model)."""
    if not (SHIPPED_DIR / "efficiency.json").is_file():
        return None
    arrays = EfficiencyArrays.load(SHIPPED_DIR)
    comps: dict[str, dict] = {}
    for file in sorted(SHIPPED_DIR.glob("composition*.json")):
        key = file.stem.split("-", 1)[1] if "-" in file.stem else ""
        comps[key] = json.loads(file.read_text())
    return PricingModel(arrays, comps)
