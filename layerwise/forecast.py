"""Whole-network time forecasts: decompose a network, predict every layer, sum per batch.

``forecast_network`` returns a JSON-ready dict (seconds unless a key names another unit):

* ``batch_seconds``, ``low``, ``high``: one step (forward only for optimizer ``none``, else a
  training step) and its interval;
* ``layers``: per-layer breakdown (``ms``, ``low_ms``, ``high_ms``, ``method``);
* ``steps_per_epoch`` = ceil(dataset_size / batch_size), ``epoch_seconds`` (+ low/high) when
  ``dataset_size`` is given, ``job_seconds`` (+ low/high) when ``epochs`` is given too;
* ``warnings``: layers the predictor does not know (estimated roughly, never dropped).

How a network is priced depends on the predictor's class (its ``pricing``,
:mod:`layerwise.pricing.model`): the shipped predictor (None) and every roofline-efficiency
one are priced by :func:`layerwise.pricing.price_network` (passes, precision as run, the
framework's composition, the whole-network residual: rules in :mod:`layerwise.pricing`;
``precision`` and ``framework`` are honoured); an older per-layer-type predictor
(``predictor.json`` folders, fp32 only) by :mod:`layerwise.per_type` (``call_overhead``,
``input_grad`` are its options). ``host_overhead_ms`` is added to each step (data loading,
Python); default 0.
"""

from __future__ import annotations

import math
from typing import Any

from layerwise.as_run import request_precision
from layerwise.errors import DeviceError, ForecastInputError
from layerwise.network import NetworkSpecError
from layerwise.pricing import price_network
from layerwise.pricing.model import PER_TYPE, shipped_model


def device_features(device: str) -> dict[str, Any]:
    """``gpu`` and ``hw_*`` of ``cpu`` (this machine), its ``cpu-…`` name, or a GPU name."""
    from layerwise.local_device import cpu_features

    text = str(device).strip()
    if text.lower() == "cpu" or text.lower().startswith("cpu-"):
        local = cpu_features()
        if text.lower() == "cpu" or text.lower() == local["gpu"]:
            return local
        raise DeviceError(f"device {device!r}: only this machine's CPU ({local['gpu']}) is "
                          "described; use 'cpu'")
    from fleet.catalog import UnknownGpuError, resolve_gpu

    try:
        spec = resolve_gpu(text)
    except UnknownGpuError as exc:
        raise DeviceError(str(exc)) from None
    return {"gpu": text, **spec.hardware_features(), "hw_model": spec.name}


def forecast_network(
    model_or_name: Any,
    *,
    device: str,
    batch_size: int,
    optimizer: str | None = "sgd",
    image_size: int | None = None,
    dataset_size: int | None = None,
    epochs: int | None = None,
    predictor: Any = None,
    call_overhead: str = "once",
    input_grad: str = "auto",
    host_overhead_ms: float = 0.0,
    precision: str = "fp32",
    framework: str = "tensorflow",
) -> dict:
    """Forecast the time of one batch (and of an epoch/job) of a network on a device.

    ``model_or_name``: Keras model, ``.keras`` file, ``keras.applications`` name or JSON spec.
    ``optimizer``: ``sgd``, ``adam``, … for a training step; ``none`` (or None) = forward only.
    ``predictor``: a fitted predictor (default: the shipped one); how it is priced is
    declared by its class (module rules).
    Raises ``ValueError`` with a clear message for bad input: a
    :class:`~layerwise.errors.LayerwiseError` (``NetworkSpecError``, ``DeviceError``,
    ``ForecastInputError``, ...).
    """
    optimizer = "none" if optimizer in (None, "") else str(optimizer).lower()
    if call_overhead not in ("once", "per-layer"):
        raise ForecastInputError(
            f"call_overhead must be 'once' or 'per-layer', got {call_overhead!r}")
    if input_grad not in ("auto", "add-forward", "measured"):
        raise ForecastInputError(
            f"input_grad must be auto, add-forward or measured, got {input_grad!r}")
    if epochs is not None and dataset_size is None:
        raise ForecastInputError("epochs needs dataset_size (images per epoch)")
    if dataset_size is not None and int(dataset_size) < 1:
        raise ForecastInputError(f"dataset_size must be >= 1, got {dataset_size}")
    if epochs is not None and int(epochs) < 1:
        raise ForecastInputError(f"epochs must be >= 1, got {epochs}")
    precision = request_precision(precision)
    hw = device_features(device)
    model = shipped_model() if predictor is None else None
    if model is None:
        if predictor is None:
            from layerwise.shipped import default_predictor

            predictor = default_predictor()
        if predictor.pricing == PER_TYPE:
            return _with_epochs(_per_type(model_or_name, predictor, hw, device, batch_size,
                                          optimizer, image_size, framework, precision,
                                          call_overhead, input_grad, host_overhead_ms),
                                dataset_size, epochs)
        model = predictor.pricing_model()
    step = price_network(model_or_name, model=model, hw=hw, device=device,
                         batch_size=batch_size, optimizer=optimizer, precision=precision,
                         framework=framework, image_size=image_size,
                         host_overhead_ms=host_overhead_ms)
    return _with_epochs(step, dataset_size, epochs)


def _per_type(model_or_name: Any, predictor: Any, hw: dict, device: str, batch_size: int,
              optimizer: str, image_size: int | None, framework: str, precision: str,
              call_overhead: str, input_grad: str, host_overhead_ms: float) -> dict:
    """A per-layer-type predictor's step (:mod:`layerwise.per_type`)."""
    from layerwise.network import decompose
    from layerwise.per_type import forecast_per_type

    net = decompose(model_or_name, batch_size=batch_size, optimizer=optimizer,
                    image_size=image_size, framework=framework)
    return forecast_per_type(net, predictor, hw, device=device, optimizer=optimizer,
                             precision=precision, call_overhead=call_overhead,
                             input_grad=input_grad, host_overhead_ms=host_overhead_ms)


def _with_epochs(result: dict, dataset_size: int | None, epochs: int | None) -> dict:
    """Add steps per epoch and epoch/job seconds (with low/high) from ``batch_seconds``."""
    if dataset_size is not None:
        steps = math.ceil(int(dataset_size) / int(result["batch_size"]))
        result["steps_per_epoch"] = steps
        for key, value in (("", result["batch_seconds"]), ("_low", result["low"]),
                           ("_high", result["high"])):
            result[f"epoch{key}_seconds"] = steps * value
            if epochs is not None:
                result[f"job{key}_seconds"] = int(epochs) * steps * value
        if epochs is not None:
            result["epochs"] = int(epochs)
    return result


__all__ = ["forecast_network", "device_features", "NetworkSpecError"]
