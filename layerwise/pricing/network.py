"""The one pricing entry point: a network on a device, priced by a fitted model's arrays.

:func:`price_network` decomposes the network (:func:`layerwise.pricing.batch.network_rows`),
prices every row through the model's one array interface (:func:`price_entries`, rules in
:mod:`layerwise.pricing.rows`), composes the step by the one formula
(:func:`layerwise.pricing.step.step_from_dict`, the request framework's composition and the
precision class as run), applies the whole-network residual
(:func:`layerwise.pricing.residual.for_step`) and scales each layer's entry the way the
step scaled the sum (net of its floor under ``subtract_floor``); the step overhead is the
step minus the scaled layers. Sums are exact float sums (``math.fsum``). Imports numpy, the
catalog, the layer kinds and the zoo: not pandas, scikit-learn or SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import layerwise.pricing.batch as batch
from layerwise.as_run import RunPrecision, cast_launches, resolve, run_class, year_offset
from layerwise.efficiency_arrays import as_records
from layerwise.pricing.model import LayerArrays, PricingModel
from layerwise.pricing.residual import for_step
from layerwise.pricing.rows import price_rows, step_result
from layerwise.pricing.step import IDENTITY, step_from_dict


def price_entries(rows: list[dict], arrays: LayerArrays, hw: Mapping,
                  precision: str | RunPrecision, training: bool, optimizer: str,
                  framework: str) -> list[dict]:
    """One entry per network row: :func:`layerwise.pricing.rows.price_rows` on the model's
    arrays (``predict_records``)."""

    def predict(distinct: list[dict]) -> Mapping[str, Any]:
        records, columns = as_records(distinct)
        return arrays.predict_records(records, columns)

    return price_rows(rows, arrays.known_layers, predict, hw, precision, training, optimizer,
                      framework)


def price_network(network: Any, *, model: PricingModel, hw: Mapping, device: str,
                  batch_size: int, optimizer: str, precision: str, framework: str,
                  image_size: int | None = None, host_overhead_ms: float = 0.0) -> dict:
    """One step of ``network`` on the device ``hw`` (``device_features`` of ``device``) as
    :func:`layerwise.forecast.forecast_network` returns it, without epoch totals;
    ``optimizer`` ``none`` = forward only, ``precision`` a request."""
    net = batch.network_rows(network, batch_size, optimizer, image_size, framework)
    training = optimizer != "none"
    run = resolve(precision, framework, hw)
    layers = price_entries(net.rows, model.arrays, hw, run, training, optimizer, framework)
    pclass = run_class(run, hw, net.rows)
    sums = tuple(math.fsum(e[c] for e in layers) for c in ("ms", "low_ms", "high_ms"))
    comp = model.composition(framework) or IDENTITY
    floor = math.fsum(e["floor_ms"] for e in layers)
    kernels = int(sum(e["kernels"] for e in layers)) + cast_launches(run, net.rows, training)
    ms, low, high, scale = step_from_dict(comp, (sums[0], sums[1], sums[2]), kernels, pclass,
                                          floor, year_offset(hw))
    residual = for_step(comp.get("residual"), layers, kernels=kernels, request=run.request,
                        pclass=pclass, batch=int(net.batch_size), network=net.name,
                        on_gpu=hw.get("hw_kind") != "cpu", gpu=hw.get("hw_model"))
    factor = residual[0]
    ms, low, high, scale = ms * factor, low * factor, high * factor, scale * factor
    cut = bool(comp.get("subtract_floor"))
    for e in layers:
        f = e["floor_ms"] if cut else 0.0
        e["ms"], e["low_ms"], e["high_ms"] = (max(e[c] - f, 0.0) * scale
                                              for c in ("ms", "low_ms", "high_ms"))
    overhead = ms - math.fsum(e["ms"] for e in layers)
    return {**step_result(net, hw, run, optimizer=optimizer, framework=framework,
                          pclass=pclass, step=(ms, low, high), overhead=overhead,
                          host_overhead_ms=host_overhead_ms, layers=layers,
                          residual=residual),
            "device": str(device)}
