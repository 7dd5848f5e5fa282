"""Pricing a decomposed network's rows: one entry per row from one table of predictions.

:func:`price_rows` takes the predictions of a table of distinct layer queries as a function
(:data:`Predict`; :func:`layerwise.pricing.network.price_entries` passes a fitted model's
``predict_records``); everything else is here. Rules (the backward ratios are
:data:`layerwise.pricing.step.BACKWARD_RATIO`; the passes and kernels are stated in
:mod:`layerwise.compose`):

* **Plan**: per row, a forward query (optimizer ``none``) and, for a GEMM kind in a training
  step, a training-step query; a ``view`` row costs nothing; a kind the predictor does not
  know is priced by :func:`rough_ms` and flagged. Each priced kind also asks its smallest
  configuration (its per-call floor, :func:`floor_queries`).
* **Frozen rows** (:func:`trains`): a row no gradient reaches in a training step (the trace's
  ``frozen``: neither its inputs nor its parameters need one, e.g. a detection model's box
  coder and loss targets, or the frozen stem of its backbone) runs its forward pass only:
  autograd records no backward for it. It is priced as in a forward pass (its forward
  query, one kernel, the forward floor). Rows without the key train as before. Written on
  2026-11-26 after seeing the H100 detection steps (``docs/lab/layerwise-pytorch.md`` section 6);
  no fitted constant.
* **One prediction per distinct query**: repeated blocks ask the same rows many times; a
  query's identity is its keys and values (queries of one kind share their key order).
* **Half layers' ceiling** (:meth:`layerwise.as_run.RunPrecision.ceiling_for`): such a row
  also asks its queries at the ceiling's precision (forward, training step); its ms, low and
  high are each at most that entry's; its floor stays the half kind's.
* **An uncovered op never dominates** (:func:`bound_uncovered`, issue 36): rows no kind
  covers are priced by :func:`rough_ms` and flagged; together they are priced at most
  :data:`UNCOVERED_SHARE` of the step's priced sum net of the covered rows' per-call floors
  (what the composition scales; their price scaled down to that cap when above it: a
  CondConv network was 47x too slow from 56 such rows), their ``high_ms`` keeps the
  uncapped rough price so the interval widens instead of the point, and the answer's
  warnings name them and say whether the cap applied. A step with nothing covered keeps the
  rough price. The share is a stated bound, not a fitted constant.
* **One step's result** (:func:`step_result`): the dict both paths return, its warnings
  (:func:`step_warnings`) from the priced entries as records.
* Imports numpy, the layer kinds and the roofline's families only: no pandas on the fast path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from layerwise.as_run import RunPrecision, as_run_dict, as_run_warning
from layerwise.layers import KINDS, get_layer
from layerwise.pricing.residual import describe
from layerwise.pricing.step import BACKWARD_RATIO, DEFAULT_BACKWARD_RATIO
from layerwise.roofline import family_of

ROUGH_INTERVAL = (0.3, 3.0)
UNCOVERED_SHARE = 0.25
OUT = ("predicted_ms", "low_ms", "high_ms")
FLAGS = ("extrapolated", "own_data")
# distinct queries -> {column: array over them} for OUT (floats) and FLAGS (booleans)
Predict = Callable[[list[dict]], Mapping[str, np.ndarray]]


def rough_ms(row: Mapping, hw: Mapping, training: bool) -> float:
    """A layer no kind expresses: max(FLOPs / 30 % of peak, bytes / 50 % of bandwidth), x3 when
    training (forward, input and weight gradients)."""
    peak = float(hw.get("hw_peak_tflops") or math.nan) * 1e12
    bandwidth = float(hw.get("hw_bandwidth_gbs") or math.nan) * 1e9
    compute = float(row.get("flops", 0.0)) / (0.3 * peak) if peak > 0 else 0.0
    memory = (float(row.get("bytes_in", 0.0)) + float(row.get("bytes_out", 0.0))) / \
        (0.5 * bandwidth) if bandwidth > 0 else 0.0
    seconds = max(compute, memory) * (3.0 if training else 1.0)
    return 1000.0 * seconds if math.isfinite(seconds) else 0.0


def layer_query(row: Mapping, optimizer: str, precision: str | RunPrecision, framework: str,
                hw: Mapping) -> dict:
    """The predictor's query of one row: the kind's columns, the pass, the row's precision
    as run, the framework and the device's features."""
    kind = KINDS[row["layer"]]
    q = {c: row[c] for c in kind.columns if c in row}
    if isinstance(precision, RunPrecision):
        precision = precision.for_row(row)
    q.update(layer=row["layer"], optimizer=optimizer, precision=precision, framework=framework)
    q.update({k: v for k, v in hw.items() if k == "gpu" or k.startswith("hw_")})
    return q


def trains(row: Mapping, training: bool) -> bool:
    """Whether a row runs a backward pass in this step: a training step, and the row is not
    frozen (module rules)."""
    return bool(training) and not row.get("frozen", False)


def layer_entry(row: Mapping, method: str, fwd: int | None, train: int | None,
                cols: Mapping[str, np.ndarray], training: bool, hw: Mapping) -> dict:
    """One row's entry (ms, interval, kernels, flags) from the predictions ``cols``."""
    training = trains(row, training)
    entry = {"name": row["name"], "layer": row["layer"], "keras_class": row["keras_class"],
             "method": method, "flops": float(row["flops"]),
             "params": int(row.get("params", 0) or 0), "ms": 0.0, "low_ms": 0.0,
             "high_ms": 0.0, "kernels": 0, "extrapolated": False, "own_data": True,
             "note": row.get("note", ""), "floor_ms": 0.0, "capped": False}
    if method == "predictor":
        f = np.array([cols[c][fwd] for c in OUT])
        if not training:
            total, kernels = f, 1
        elif train is not None:
            total = np.array([cols[c][train] for c in OUT])
            kernels = 2
            if row.get("grad_input", True):
                total, kernels = total + f, 3
        else:
            total = f * (1.0 + BACKWARD_RATIO.get(row["layer"], DEFAULT_BACKWARD_RATIO))
            kernels = 2
        entry.update(ms=float(total[0]), low_ms=float(total[1]), high_ms=float(total[2]),
                     kernels=kernels, extrapolated=bool(cols["extrapolated"][fwd]),
                     own_data=bool(cols["own_data"][fwd]))
    elif method == "unpriced":
        ms = rough_ms(row, hw, training)
        entry.update(method="roofline", ms=ms, low_ms=ms * ROUGH_INTERVAL[0],
                     high_ms=ms * ROUGH_INTERVAL[1], kernels=3 if training else 1,
                     own_data=False)
        entry["note"] = (entry["note"] + "; " if entry["note"] else "") + \
            "no layer kind: rough roofline (30 % of peak, 50 % of bandwidth)"
    return entry


def _ask(queries: list[dict], row: Mapping, precision: str | RunPrecision, framework: str,
         hw: Mapping, training: bool, optimizer: str) -> tuple[int, int | None]:
    """Append a row's forward query and, for a GEMM kind in a training step, its
    training-step query; their indices."""
    fwd = len(queries)
    queries.append(layer_query(row, "none", precision, framework, hw))
    if not (trains(row, training) and family_of(row["layer"]) == "gemm"):
        return fwd, None
    queries.append(layer_query(row, optimizer, precision, framework, hw))
    return fwd, fwd + 1


def price_rows(rows: list[dict], known: Any, predict: Predict, hw: Mapping,
               precision: str | RunPrecision, training: bool, optimizer: str,
               framework: str) -> list[dict]:
    """One entry per row (module rules); ``known``: the kinds the predictor prices."""
    queries: list[dict] = []
    plan: list[tuple[int, str, int | None, int | None]] = []
    bounds: dict[int, tuple[int, int | None]] = {}  # row -> its ceiling's queries (rules)
    for i, row in enumerate(rows):
        kind = row["layer"]
        if kind == "view" or kind not in known:
            plan.append((i, "none" if kind == "view" else "unpriced", None, None))
            continue
        asked = _ask(queries, row, precision, framework, hw, training, optimizer)
        plan.append((i, "predictor", *asked))
        top = precision.ceiling_for(row) if isinstance(precision, RunPrecision) else None
        if top is not None:
            bounds[i] = _ask(queries, row, top, framework, hw, training, optimizer)
    floors = floor_queries(rows, plan, queries, training, optimizer, precision, framework, hw,
                           layer_query)
    first: dict[tuple, int] = {}
    distinct: list[dict] = []
    slot = []
    for q in queries:
        key = (tuple(q), tuple(map(str, q.values())))
        if key not in first:
            first[key] = len(distinct)
            distinct.append(q)
        slot.append(first[key])
    take = np.asarray(slot, dtype=int)
    pred = predict(distinct) if distinct else {}
    cols = {c: np.asarray(pred[c])[take] if distinct else np.zeros(0) for c in (*OUT, *FLAGS)}
    entries = []
    for i, method, fwd, train in plan:
        entry = layer_entry(rows[i], method, fwd, train, cols, training, hw)
        if method == "predictor":
            entry["floor_ms"] = min(entry["low_ms"], entry_floor(
                rows[i], trains(rows[i], training), train is not None, optimizer,
                cols["predicted_ms"], floors))
        if i in bounds:  # the floor stays the half kind's
            ref = layer_entry(rows[i], method, *bounds[i], cols, training, hw)
            entry.update({c: min(entry[c], ref[c]) for c in ("ms", "low_ms", "high_ms")})
        entries.append(entry)
    return bound_uncovered(entries)


def bound_uncovered(entries: list[dict], share: float = UNCOVERED_SHARE) -> list[dict]:
    """Cap the rough roofline price of the rows no kind covers (module rules): together at
    most ``share`` of the step's priced sum net of per-call floors; their ``high_ms`` keeps
    the uncapped rough price (the interval widens instead of the point). Changes ``entries``
    in place; returns them."""
    rough = [e for e in entries if e["method"] == "roofline"]
    covered = math.fsum(max(e["ms"] - e["floor_ms"], 0.0) for e in entries
                        if e["method"] != "roofline")
    total = math.fsum(e["ms"] for e in rough)
    cap = share / (1.0 - share) * covered
    if not rough or covered <= 0.0 or total <= cap:
        return entries
    factor = cap / total
    for e in rough:
        e.update(ms=e["ms"] * factor, low_ms=e["low_ms"] * factor, capped=True)
        e["note"] = (e["note"] + "; " if e["note"] else "") + \
            f"rough price capped: no-kind rows at most {share:.0%} of the step"
    return entries


def step_warnings(net: Any, layers: list[dict], run: RunPrecision) -> list[str]:
    """The network's own warnings, then: layers outside the measured shapes, kinds without
    timings of their own, layers no kind prices, and a precision priced otherwise than asked."""
    warnings = list(net.warnings)
    extrap = [e["name"] for e in layers if e["extrapolated"]]
    if extrap:
        warnings.append(f"{len(extrap)} layer(s) lie outside the measured shapes (e.g. "
                        f"{extrap[0]}): efficiency held at the edge of the data, interval widened")
    no_data = sorted({e["layer"] for e in layers
                      if not e["own_data"] and e["method"] == "predictor"})
    if no_data:
        warnings.append(f"no timings of {', '.join(no_data)} layers in the training data: "
                        "priced by the memory-bound family's trees, interval widened")
    unpriced = [e["name"] for e in layers if e["method"] in ("unpriced", "roofline")]
    if unpriced:
        capped = any(e.get("capped") for e in layers)
        warnings.append(
            f"{len(unpriced)} layer(s) no kind covers (e.g. {', '.join(unpriced[:3])}): priced "
            "by a rough roofline" + (f", capped at {UNCOVERED_SHARE:.0%} of the step, interval "
                                     "widened to the uncapped price" if capped else ""))
    said = as_run_warning(run)  # priced otherwise than the request says
    if said:
        warnings.append(said)
    return warnings


def step_result(net: Any, hw: Mapping, run: RunPrecision, *, optimizer: str, framework: str,
                pclass: str, step: tuple[float, float, float], overhead: float,
                host_overhead_ms: float, layers: list[dict],
                residual: tuple[float, str, int, int] = (1.0, "none", 0, 0)) -> dict:
    """One priced step as both forecast paths return it: ``step`` is (ms, low, high) of the
    composed step, ``layers`` the priced entries as records, ``residual`` the whole-network
    residual's (factor, source, GPUs, networks) already in ``step``
    (:func:`layerwise.pricing.residual.for_step`)."""
    ms, low, high = step
    host = float(host_overhead_ms)
    factor, source, gpus, networks = residual
    return {
        "network": net.name, "gpu": hw["gpu"], "hw_kind": hw["hw_kind"],
        "batch_size": int(net.batch_size), "optimizer": optimizer, "precision": run.request,
        "framework": framework, "precision_class": pclass, "precision_as_run": as_run_dict(run),
        "input_shape": list(net.input_shape),
        "batch_seconds": (ms + host) / 1000.0, "low": (low + host) / 1000.0,
        "high": (high + host) / 1000.0, "unit": "s",
        "step_overhead_ms": overhead, "host_overhead_ms": host,
        "flops_per_batch": net.flops, "macs_per_batch": net.macs, "params": net.params,
        "layers_count": len(layers), "extrapolated": any(e["extrapolated"] for e in layers),
        "unknown_layers": [r["name"] for r in net.rows if r["layer"] == "unknown"],
        "warnings": step_warnings(net, layers, run), "layers": layers,
        "network_residual": {"factor": float(factor), "source": source, "gpus": int(gpus),
                             "networks": int(networks),
                             "reason": describe(factor, source, net.name, gpus,
                                                hw.get("hw_model") or hw["gpu"], networks)},
    }


def floor_queries(rows: list[dict], plan: list, queries: list[dict], training: bool,
                  optimizer: str, precision: Any, framework: str, hw: Mapping,
                  query: Any) -> dict[tuple[str, str], int]:
    """Append the smallest configuration of each priced kind (its per-call floor: forward,
    and the training step for GEMM kinds) to ``queries``; (kind, pass) -> query index."""
    out: dict[tuple[str, str], int] = {}
    for i, method, _, train in plan:
        kind = rows[i]["layer"]
        if method != "predictor":
            continue
        passes = ("none", optimizer) if training and train is not None else ("none",)
        for opt in passes:
            if (kind, opt) in out:  # a kind's frozen rows ask no training step (pricing)
                continue
            minimal = get_layer(kind).minimal_row(opt)
            out[(kind, opt)] = len(queries)
            at = precision.for_kind(kind) if isinstance(precision, RunPrecision) else precision
            queries.append(query(minimal, opt, at, framework, hw))  # the kind's precision
    return out


def entry_floor(row: dict, training: bool, gemm_train: bool, optimizer: str, ms: np.ndarray,
                floors: dict[tuple[str, str], int]) -> float:
    """The floor of one priced entry under the same pass rules as its time (module rules)."""
    kind = row["layer"]
    f = float(ms[floors[(kind, "none")]])
    if not training:
        return f
    if gemm_train:
        return float(ms[floors[(kind, optimizer)]]) + (f if row.get("grad_input", True) else 0.0)
    return f * (1.0 + BACKWARD_RATIO.get(kind, DEFAULT_BACKWARD_RATIO))
