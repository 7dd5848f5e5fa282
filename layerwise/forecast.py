"""Whole-network time forecasts: decompose a network, predict every layer, sum per batch.

With the roofline-efficiency predictor (the shipped one, :mod:`layerwise.efficiency`) the step
is composed by :mod:`layerwise.compose` (passes, precision class, fitted per-step overhead;
``precision`` and ``framework`` are honoured). The rules below are those of the older
per-layer-type predictors (``predictor.json`` folders, e.g. trained on a CPU bench), fp32 only.

``forecast_network`` returns a JSON-ready dict (seconds unless a key names another unit):

* ``batch_seconds``, ``low``, ``high``: one step (forward only for optimizer ``none``, else a
  training step) and its interval;
* ``layers``: per-layer breakdown (``ms``, ``low_ms``, ``high_ms``, ``method``);
* ``steps_per_epoch`` = ceil(dataset_size / batch_size), ``epoch_seconds`` (+ low/high) when
  ``dataset_size`` is given, ``job_seconds`` (+ low/high) when ``epochs`` is given too;
* ``warnings``: layers the predictor does not know (estimated roughly, never dropped).

How layer times are combined (see ``docs/layerwise-cpu.md`` for the calibration):

* **Per-call overhead.** A microbenchmark time includes the fixed cost of launching one step
  (TF1 ``session.run`` in the published data: ~1.5 ms on a V100; a ``tf.function`` call on a
  CPU: tens of µs). Inside a network that cost is paid once per step, not once per layer. With
  ``call_overhead="once"`` (default) each layer's prediction loses the predicted time of the
  smallest configuration of its type and optimizer (its floor), and the largest floor is added
  once to the step. ``"per-layer"`` keeps the raw sum.
* **Input gradients.** A layer inside a network also computes the gradient of its input. The
  published GPU data did not time it; with ``input_grad="auto"`` a GPU forecast adds the
  layer's predicted forward time for layers of kinds with weights (``input_gradient``: conv,
  dense, depthwise) past the first (the data gradient costs about as much as the forward
  pass). CPU rows from ``jobcast bench`` time it.
* **Intervals.** Errors of the layers of one network are strongly correlated (same device,
  same model bias), so intervals add linearly: ``low`` = sum of lows, ``high`` = sum of highs.
* **Unknown layers.** Element-wise layers (ZeroPadding2D, Concatenate, Multiply, training
  Dropout, …) are priced as a ReLU over their output when the predictor knows ``act``; anything
  else by a roofline: max(FLOPs / (30 % of peak), bytes / (50 % of bandwidth)), x3 for a
  training step, interval x0.3 … x3.
* ``host_overhead_ms`` is added to each step (data loading, Python); default 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from layerwise.as_run import (
    STRICT,
    cast_launches,
    request_precision,
    resolve,
    run_class,
    year_offset,
)
from layerwise.errors import DeviceError, ForecastInputError
from layerwise.kinds.mapping import plane_params
from layerwise.layers import all_columns, get_layer
from layerwise.network import Network, NetworkSpecError, decompose
from layerwise.pricing import ROUGH_INTERVAL, rough_ms, step_result
from layerwise.residual import for_step as residual_for_step

if TYPE_CHECKING:
    import pandas as pd

PROXY_KIND = "act"  # element-wise unknown layers are priced as a ReLU of this kind
# memory-bound kinds a per-type predictor may lack: priced as that ReLU too
PROXY_KINDS = ("pad", "concat", "dropout", "ln", "softmax")


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


def _proxy_act_row(row: dict) -> dict | None:
    """An element-wise unknown layer priced as a ReLU over its output, if the shape allows."""
    plane = plane_params(tuple(int(d) for d in str(row["output_shape"]).split("x") if d))
    if plane is None:
        return None
    return {"layer": PROXY_KIND, "batchsize": row["batchsize"], **plane,
            "activation": "relu", "optimizer": row["optimizer"], "precision": 32}


def _predict_frame(predictor: Any, rows: list[dict], hw: dict) -> pd.DataFrame:
    import pandas as pd
    frame = pd.DataFrame(rows)
    for col in ("gpu", *[k for k in hw if k.startswith("hw_")]):
        frame[col] = hw[col]
    for col in all_columns():
        if col not in frame.columns:
            frame[col] = math.nan
    out = predictor.predict(frame)
    return out[["predicted_ms", "low_ms", "high_ms"]].astype(float)


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
    ``predictor``: a fitted ``LayerPredictor`` (default: the shipped one).
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
    from layerwise.quick import forecast_fast  # the v2 path below on arrays: same answer

    fast = forecast_fast(model_or_name, device=device, batch_size=batch_size,
                         optimizer=optimizer, image_size=image_size, precision=precision,
                         framework=framework, predictor=predictor,
                         host_overhead_ms=host_overhead_ms)
    if fast is not None:
        return _with_epochs(fast, dataset_size, epochs)
    hw = device_features(device)
    net = decompose(model_or_name, batch_size=batch_size, optimizer=optimizer,
                    image_size=image_size, framework=framework)
    if predictor is None:
        from layerwise.shipped import default_predictor

        predictor = default_predictor()
    if hasattr(predictor, "families_"):  # the roofline-efficiency predictor (v2)
        composed = compose_step(net, predictor, hw, precision, optimizer, framework,
                                host_overhead_ms)
        composed.update(device=str(device))
        return _with_epochs(composed, dataset_size, epochs)
    if precision not in ("fp32", STRICT):
        raise ForecastInputError(f"precision {precision!r} needs the roofline-efficiency "
                                 "predictor; this predictor was trained on fp32 rows only")
    known = set(predictor.known_layers)
    training = optimizer != "none"
    add_forward = training and (
        input_grad == "add-forward" or (input_grad == "auto" and hw["hw_kind"] == "gpu")
    )
    layers, warnings = _price_layers(net, predictor, known, hw, training, add_forward,
                                     call_overhead)
    floor_ms = layers.pop()["floor_ms"]
    step_floor_ms = floor_ms if call_overhead == "once" else 0.0
    total = {k: sum(row[k] for row in layers) + step_floor_ms + host_overhead_ms
             for k in ("ms", "low_ms", "high_ms")}
    result: dict[str, Any] = {
        "network": net.name,
        "device": str(device),
        "gpu": hw["gpu"],
        "hw_kind": hw["hw_kind"],
        "batch_size": int(batch_size),
        "optimizer": optimizer,
        "input_shape": list(net.input_shape),
        "batch_seconds": total["ms"] / 1000.0,
        "low": total["low_ms"] / 1000.0,
        "high": total["high_ms"] / 1000.0,
        "step_overhead_ms": step_floor_ms,
        "host_overhead_ms": float(host_overhead_ms),
        "flops_per_batch": net.flops,
        "macs_per_batch": net.macs,
        "params": net.params,
        "layers_count": len(layers),
        "unknown_layers": [row["name"] for row in layers if row["method"] != "predictor"
                           and row["layer"] != "view"],
        "warnings": net.warnings + warnings,
        "layers": layers,
    }
    result["precision"] = "fp32"
    return _with_epochs(result, dataset_size, epochs)


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


def compose_step(net: Network, predictor: Any, hw: dict, precision: str, optimizer: str,
                 framework: str, host_overhead_ms: float) -> dict:
    """Forecast dict of one step with the roofline-efficiency predictor and its composition;
    ``precision`` is the request, priced as the framework runs it (:mod:`layerwise.as_run`)."""
    from layerwise.compose import composition_for, price_layers
    training = optimizer != "none"
    run = resolve(precision, framework, hw)
    layers = price_layers(net.rows, predictor, hw, run, training, optimizer, framework)
    comp = composition_for(predictor, framework)
    pclass = run_class(run, hw, net.rows)
    floor = float(layers["floor_ms"].sum())
    kernels = int(layers["kernels"].sum()) + cast_launches(run, net.rows, training)
    ms, low, high = comp.step(float(layers["ms"].sum()), float(layers["low_ms"].sum()),
                              float(layers["high_ms"].sum()), kernels, pclass, floor,
                              year_offset(hw))
    residual = residual_for_step(
        getattr(comp, "residual_", None), layers[["layer", "ms"]].to_dict("records"),
        kernels=kernels, request=run.request,
        pclass=pclass, batch=int(net.batch_size), network=net.name,
        on_gpu=hw.get("hw_kind") != "cpu", gpu=hw.get("hw_model"))
    factor = residual[0]
    ms, low, high = ms * factor, low * factor, high * factor
    cut = layers["floor_ms"] if comp.subtract_floor else 0.0
    for col in ("ms", "low_ms", "high_ms"):
        layers[col] = (layers[col] - cut).clip(lower=0.0) * comp.scale_for(pclass) * factor
    overhead = ms - float(layers["ms"].sum())
    return step_result(net, hw, run, optimizer=optimizer, framework=framework, pclass=pclass,
                       step=(ms, low, high), overhead=overhead,
                       host_overhead_ms=host_overhead_ms, layers=layers.to_dict("records"),
                       residual=residual)


def _price_layers(net: Network, predictor: Any, known: set[str], hw: dict, training: bool,
                  add_forward: bool, call_overhead: str) -> tuple[list[dict], list[str]]:
    """Per-layer ms/low/high; the last list item carries the step floor (``floor_ms``)."""
    import pandas as pd
    untrained: dict[str, list[str]] = {}  # known-to-bench types the predictor lacks
    queries: list[dict] = []  # rows sent to the predictor
    plan: list[tuple[int, str, int | None, int | None]] = []  # (row idx, method, q, q_fwd)
    floors: dict[tuple[str, str], int] = {}

    def ask(row: dict) -> int:
        queries.append(row)
        return len(queries) - 1

    def floor_of(layer: str, optimizer: str) -> int:
        if (layer, optimizer) not in floors:
            floors[(layer, optimizer)] = ask(get_layer(layer).minimal_row(optimizer))
        return floors[(layer, optimizer)]

    for i, row in enumerate(net.rows):
        kind = row["layer"]
        if kind == "view":
            plan.append((i, "none", None, None))
        elif kind in known:
            spec = get_layer(kind)
            at = ask({c: row[c] for c in ("layer", *spec.columns, "optimizer", "precision")})
            fwd = None
            if add_forward and spec.input_gradient and row.get("grad_input", True):
                fwd = ask({**queries[at], "optimizer": "none"})
                floor_of(kind, "none")
            floor_of(kind, row["optimizer"])
            plan.append((i, "predictor", at, fwd))
        elif (kind == "unknown" or kind in PROXY_KINDS) and PROXY_KIND in known \
                and (proxy := _proxy_act_row(row)) is not None:
            plan.append((i, "proxy-act", ask(proxy), None))
            floor_of(PROXY_KIND, row["optimizer"])
        else:
            plan.append((i, "roofline", None, None))
            if kind != "unknown":
                untrained.setdefault(kind, []).append(row["name"])
    warnings = [
        f"the predictor was not trained on {kind!r} layers: {len(names)} layer(s) "
        f"({', '.join(names[:3])}{', …' if len(names) > 3 else ''}) get a rough roofline estimate"
        for kind, names in untrained.items()
    ]
    pred = _predict_frame(predictor, queries, hw) if queries else pd.DataFrame()
    floor_ms = {key: float(pred.iloc[q]["predicted_ms"]) for key, q in floors.items()}

    def net_ms(q: int, key: tuple[str, str]) -> tuple[float, float, float]:
        p = pred.iloc[q]
        base = min(floor_ms[key], float(p["predicted_ms"])) if call_overhead == "once" else 0.0
        return (max(float(p["predicted_ms"]) - base, 0.0), max(float(p["low_ms"]) - base, 0.0),
                max(float(p["high_ms"]) - base, 0.0))

    layers: list[dict] = []
    for i, method, q, fwd in plan:
        row = net.rows[i]
        entry = {"name": row["name"], "layer": row["layer"], "keras_class": row["keras_class"],
                 "method": method, "flops": row["flops"], "note": row.get("note", "")}
        if method == "none":
            ms = lo = hi = 0.0
        elif method == "roofline":
            ms = rough_ms(row, hw, training)
            lo, hi = ms * ROUGH_INTERVAL[0], ms * ROUGH_INTERVAL[1]
        else:
            kind = PROXY_KIND if method == "proxy-act" else row["layer"]
            assert q is not None  # a predictor or proxy-act plan entry always has its query
            ms, lo, hi = net_ms(q, (kind, row["optimizer"]))
            if fwd is not None:
                extra = net_ms(fwd, (kind, "none"))
                ms, lo, hi = ms + extra[0], lo + extra[1], hi + extra[2]
                entry["note"] = (entry["note"] + "; " if entry["note"] else "") + \
                    "input gradient added as one forward pass"
        entry.update(ms=ms, low_ms=min(lo, ms), high_ms=max(hi, ms))
        layers.append(entry)
    layers.append({"floor_ms": max(floor_ms.values(), default=0.0)})
    return layers, warnings


__all__ = ["forecast_network", "device_features", "NetworkSpecError"]
