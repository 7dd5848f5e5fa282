"""Network forecasts with an older per-layer-type predictor (``predictor.json`` folders), fp32 only.

Moved aside from the composed pricing (:mod:`layerwise.pricing`): a
:class:`layerwise.predictor.LayerPredictor` (e.g. trained on a CPU bench by ``jobcast bench``
/ ``jobcast train``) declares ``pricing = PER_TYPE`` and
:func:`layerwise.forecast.forecast_network` sends it here. Rules (see
``docs/lab/layerwise-cpu.md`` for the calibration):

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
  else by a roofline (:func:`layerwise.pricing.rows.rough_ms`), interval x0.3 … x3.
* ``host_overhead_ms`` is added to each step; only ``fp32`` (or ``fp32-strict``) is priced.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from layerwise.as_run import STRICT
from layerwise.errors import ForecastInputError
from layerwise.kinds.mapping import plane_params
from layerwise.layers import all_columns, get_layer
from layerwise.network import Network
from layerwise.pricing.rows import ROUGH_INTERVAL, rough_ms

if TYPE_CHECKING:
    import pandas as pd

PROXY_KIND = "act"  # element-wise unknown layers are priced as a ReLU of this kind
# memory-bound kinds a per-type predictor may lack: priced as that ReLU too
PROXY_KINDS = ("pad", "concat", "dropout", "ln", "softmax")


def forecast_per_type(net: Network, predictor: Any, hw: dict, *, device: str, optimizer: str,
                      precision: str, call_overhead: str, input_grad: str,
                      host_overhead_ms: float) -> dict:
    """One step of ``net`` priced by a per-layer-type predictor (module rules), without epoch
    totals; :class:`~layerwise.errors.ForecastInputError` for a precision other than fp32."""
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
    return {
        "network": net.name,
        "device": str(device),
        "gpu": hw["gpu"],
        "hw_kind": hw["hw_kind"],
        "batch_size": int(net.batch_size),
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
        "precision": "fp32",
    }


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
