"""Network forecasts with the roofline-efficiency predictor from its arrays: no pandas per call.

:func:`forecast_fast` answers exactly what :func:`layerwise.forecast.forecast_network`
answers (same keys, same numbers to float rounding; ``tests/layerwise/test_quick.py`` checks
it on every shipped network, GPUs seen and unseen, four precisions, both frameworks, training
and inference) for a network on a GPU of the catalog with a roofline-efficiency predictor
(the shipped one by default). It returns None for anything else (a CPU, a per-layer-type
predictor), and the caller takes the general path. Rules:

* The layer pricing is :func:`layerwise.pricing.price_rows`, the one
  :func:`layerwise.compose.price_layers` uses, on the shipped
  :class:`layerwise.efficiency_arrays.EfficiencyArrays` (numpy, read once per process); the
  step mirrors :func:`layerwise.forecast.compose_step` (the composition of the request's
  framework and precision class, warnings): a change there must be mirrored here (the test
  fails otherwise).
* A network's rows scale with the batch: once two decompositions of the same network at two
  batch sizes show every batch-dependent value exactly proportional to the batch (and all
  else equal), later batch sizes are derived from them instead of decomposed again
  (:class:`BatchScaled`); anything else (a value not exactly proportional) keeps decomposing.
* Imports numpy, the catalog, the layer kinds and the zoo: not pandas, scikit-learn, scipy or
  the per-type specialist (``layerwise.efficiency_arrays``): the layerwise part of a forecast
  costs about 0.2 s in a fresh process (``docs/layerwise-latency.md``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import OrderedDict
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fleet.catalog import UnknownGpuError, resolve_gpu
from layerwise.as_run import (  # noqa: F401  (the pass constants: one definition, here too)
    BACKWARD_RATIO,
    DEFAULT_BACKWARD_RATIO,
    RunPrecision,
    cast_launches,
    request_precision,
    resolve,
    run_class,
    step_from_dict,
    year_offset,
)
from layerwise.efficiency_arrays import EfficiencyArrays, as_records
from layerwise.pricing import (  # noqa: F401  (ROUGH_INTERVAL: re-exported)
    ROUGH_INTERVAL,
    price_rows,
    step_result,
)
from layerwise.residual import for_step as residual_for_step

SHIPPED_DIR = Path(__file__).resolve().parent / "data" / "default_predictor"
NETWORK_CACHE = 64  # (network, optimizer, framework) decompositions kept per process


class ShippedModel:
    """The shipped trees and compositions (plain dicts of ``composition*.json``)."""

    def __init__(self, arrays: EfficiencyArrays, compositions: Mapping[str, dict]):
        self.arrays = arrays
        self.compositions = dict(compositions)

    def composition(self, framework: str) -> dict | None:
        """The framework's own composition, else the default one (``composition.json``)."""
        return self.compositions.get(str(framework)) or self.compositions.get("")


def model_of(predictor: Any) -> ShippedModel | None:
    """The arrays and compositions of a roofline-efficiency predictor (or of the shipped one
    for None); None for any other predictor (e.g. a per-layer-type one)."""
    if predictor is None:
        return shipped_model()
    eff = getattr(predictor, "network_model", predictor)
    if not getattr(eff, "families_", None) or not hasattr(eff, "arrays"):
        return None
    comps = {k: c.to_dict() for k, c in
             (getattr(predictor, "framework_compositions_", None) or {}).items()}
    default = getattr(predictor, "composition_", None)
    if default is not None:
        comps[""] = default.to_dict()
    return ShippedModel(eff.arrays(), comps)


@lru_cache(maxsize=1)
def shipped_model() -> ShippedModel | None:
    """The shipped predictor read once (None when its folder holds no efficiency model)."""
    if not (SHIPPED_DIR / "efficiency.json").is_file():
        return None
    arrays = EfficiencyArrays.load(SHIPPED_DIR)
    comps: dict[str, dict] = {}
    for file in sorted(SHIPPED_DIR.glob("composition*.json")):
        key = file.stem.split("-", 1)[1] if "-" in file.stem else ""
        comps[key] = json.loads(file.read_text())
    return ShippedModel(arrays, comps)


def _hw(device: str) -> dict | None:
    """``device_features`` of a catalog GPU (None for a CPU or an unknown name)."""
    text = str(device).strip()
    if text.lower() == "cpu" or text.lower().startswith("cpu-"):
        return None
    try:
        spec = resolve_gpu(text)
    except UnknownGpuError:
        return None
    return {"gpu": text, **spec.hardware_features(), "hw_model": spec.name}


def step_ms(comp: Mapping | None, sums: tuple[float, float, float], kernels: int,
            pclass: str, floor: float = 0.0,
            year: float = 0.0) -> tuple[float, float, float, float]:
    """(ms, low, high, scale) of one step: ``Composition.step``'s formula (shared)."""
    if comp is None:  # Composition.identity()
        comp = {"scale": {"fp32": 1.0, "tensor": 1.0}, "kernel_ms": 0.0, "step_ms": 0.0,
                "log_low": 0.0, "log_high": 0.0}
    return step_from_dict(comp, sums, kernels, pclass, floor, year)


def price_entries(rows: list[dict], model: EfficiencyArrays, hw: Mapping,
                  precision: str | RunPrecision,
                  training: bool, optimizer: str, framework: str) -> list[dict]:
    """One entry per network row: :func:`layerwise.pricing.price_rows` on the trees' arrays."""

    def predict(distinct: list[dict]) -> Mapping[str, np.ndarray]:
        records, columns = as_records(distinct)
        return model.predict_records(records, columns)

    return price_rows(rows, model.known_layers, predict, hw, precision, training, optimizer,
                      framework)


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


_NETWORKS: OrderedDict[tuple, Any] = OrderedDict()


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
    state = _NETWORKS.get(key)
    if isinstance(state, BatchScaled) and int(batch_size) >= 1:
        _NETWORKS.move_to_end(key)
        return state.at(batch_size)
    net = decompose(network, batch_size=batch_size, optimizer=optimizer, image_size=image_size,
                    framework=framework)
    if state is None or state is False:
        _NETWORKS[key] = net if state is None else False
    else:
        _NETWORKS[key] = BatchScaled.check(state, net) or False
    while len(_NETWORKS) > NETWORK_CACHE:
        _NETWORKS.popitem(last=False)
    return net


def forecast_fast(network: Any, *, device: str, batch_size: int, optimizer: str | None,
                  image_size: int | None = None, precision: str = "fp32",
                  framework: str = "tensorflow", predictor: Any = None,
                  host_overhead_ms: float = 0.0) -> dict | None:
    """``forecast_network``'s result (without epoch totals) for a network on a catalog GPU with
    a roofline-efficiency predictor (None: the shipped one); None for any other request."""
    hw = _hw(device)
    model = model_of(predictor)
    if hw is None or model is None:
        return None
    optimizer = "none" if optimizer in (None, "") else str(optimizer).lower()
    net = network_rows(network, batch_size, optimizer, image_size, framework)
    training = optimizer != "none"
    run = resolve(request_precision(precision), framework, hw)
    layers = price_entries(net.rows, model.arrays, hw, run, training, optimizer, framework)
    pclass = run_class(run, hw, net.rows)
    total_ms, total_low, total_high = (math.fsum(e[c] for e in layers)
                                       for c in ("ms", "low_ms", "high_ms"))
    sums = (total_ms, total_low, total_high)
    comp = model.composition(framework)
    floor = math.fsum(e["floor_ms"] for e in layers)
    kernels = int(sum(e["kernels"] for e in layers)) + cast_launches(run, net.rows, training)
    ms, low, high, scale = step_ms(comp, sums, kernels, pclass, floor, year_offset(hw))
    cut = bool(comp and comp.get("subtract_floor"))
    residual = residual_for_step(
        (comp or {}).get("residual"), layers, kernels=kernels,
        request=run.request, pclass=pclass, batch=int(net.batch_size), network=net.name,
        on_gpu=hw.get("hw_kind") != "cpu", gpu=hw.get("hw_model"))
    factor = residual[0]
    ms, low, high, scale = ms * factor, low * factor, high * factor, scale * factor
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
