"""Pricing a network: one entry point, one step formula, one array interface.

* :func:`price_network` (:mod:`layerwise.pricing.network`): the one entry point every
  whole-network forecast with a composed predictor goes through
  (:func:`layerwise.forecast.forecast_network` calls it).
* :mod:`layerwise.pricing.step`: the one step formula (passes' backward ratios, class scale,
  launch cost, overlap, floors, interval), also what the composition fit evaluates.
* :mod:`layerwise.pricing.rows`: a network's rows priced from one table of layer predictions.
* :mod:`layerwise.pricing.residual`: the whole-network residual the step carries.
* :mod:`layerwise.pricing.model`: the fitted model it is fed by (one array interface,
  :class:`~layerwise.pricing.model.PricingModel`), the shipped folder :data:`SHIPPED_DIR`.
* :mod:`layerwise.pricing.batch`: decompositions kept per process, derived across batches.

No pandas, scikit-learn or SciPy on this path.
"""

from layerwise.pricing.model import SHIPPED_DIR, PricingModel, shipped_model
from layerwise.pricing.network import price_network

__all__ = ["SHIPPED_DIR", "PricingModel", "price_network", "shipped_model"]
