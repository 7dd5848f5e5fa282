"""The one step formula: a priced network's layer sums, kernels and floors -> one step's time.

Every whole-network price goes through :func:`step_from_dict` (one step, what
:func:`layerwise.pricing.price_network` answers) or :func:`step_array` (many steps at once:
what :class:`layerwise.compose.Composition` fits). Both read a composition's saved dict
(:meth:`layerwise.compose.Composition.to_dict`; :data:`IDENTITY` when a predictor has
none). Rules:

* **Passes** (:data:`BACKWARD_RATIO`): a memory-bound op's backward pass moves about that
  multiple of its forward's bytes (e.g. an activation's gradient reads y and dy and writes
  dx: 3 tensors against the forward's 2); a kind not listed takes
  :data:`DEFAULT_BACKWARD_RATIO`. Applied per row by :mod:`layerwise.pricing.rows`.
* **Step**: gpu = scale[class] x layer sum, cpu = cost per kernel x kernels; with
  ``overlap_p`` > 0 the two overlap, core = (gpu^p + cpu^p)^(1/p) (eager PyTorch launches
  kernels while the GPU runs earlier ones), else core = gpu + cpu; step = core + ``step_ms``.
* **Class scale** (:func:`class_scale`): a class the dict has no scale for takes its
  :data:`layerwise.as_run.CLASS_FALLBACK`'s in turn (``half`` -> ``tensor`` -> ``fp32``),
  so a composition fitted with two classes prices a half step at its ``tensor`` scale; the
  shipped ones have two (:func:`layerwise.as_run.run_class`).
* **Floors**: with ``subtract_floor`` the layer sum loses the layers' per-call floors (each
  kind's smallest configuration, priced alike) before scaling: inside a network a layer's
  launch is the kernels' cost.
* **Launch cost by GPU generation** (:func:`kernel_cost`): with ``year_coef`` in the dict
  (0 when absent) the cost per kernel is ``kernel_ms x exp(year_coef x year)``, ``year`` the
  GPU's :func:`layerwise.as_run.year_offset` (0 for a CPU): eager PyTorch is launch-bound at
  small batches and the host and framework that drive a GPU are about as new as the GPU.
* **Interval**: low = min(ms x exp(log_low), the step of the layer lows), high = max(ms x
  exp(log_high), the step of the layer highs).
* Imports numpy and the precision classes only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from layerwise.as_run import CLASS_FALLBACK

# a memory-bound op's backward pass moves about this multiple of its forward's bytes
BACKWARD_RATIO = {"act": 1.5, "add": 0.5, "bn": 2.0, "pool": 1.5, "dwconv": 2.0, "ln": 2.0,
                  "softmax": 1.5, "concat": 1.0, "pad": 1.0, "dropout": 1.0}
DEFAULT_BACKWARD_RATIO = 1.5
# no fitted overheads: the plain sum, interval = the layer intervals' sum
IDENTITY: Mapping[str, Any] = {"scale": {"fp32": 1.0, "tensor": 1.0}, "kernel_ms": 0.0,
                               "step_ms": 0.0, "log_low": 0.0, "log_high": 0.0}


def _core(gpu: float, cpu: float, p: float) -> float:
    if p <= 0 or cpu <= 0 or gpu <= 0:
        return gpu + cpu
    m = max(gpu, cpu)
    return m * ((gpu / m) ** p + (cpu / m) ** p) ** (1.0 / p)


def kernel_cost(doc: Mapping, year: Any = 0.0) -> Any:
    """ms per priced kernel of a composition dict at ``year``
    (:func:`layerwise.as_run.year_offset`; a float or an array):
    ``kernel_ms x exp(year_coef x year)`` (module rules)."""
    coef = float(doc.get("year_coef", 0.0) or 0.0)
    return float(doc["kernel_ms"]) * np.exp(coef * np.asarray(year, float)) if coef else \
        float(doc["kernel_ms"])


def class_scale(scales: Mapping[str, float], pclass: str) -> float:
    """The layer-sum scale of precision class ``pclass`` (module rules): its own, else its
    :data:`CLASS_FALLBACK`'s (in turn), else fp32's, else 1."""
    c = str(pclass)
    while c not in scales and c in CLASS_FALLBACK:
        c = CLASS_FALLBACK[c]
    return float(scales.get(c, scales.get("fp32", 1.0)))


def step_array(doc: Mapping, sums: np.ndarray, kernels: np.ndarray, pclass: np.ndarray,
               floor: np.ndarray, year: Any = 0.0) -> np.ndarray:
    """:func:`step_from_dict`'s ms for arrays of steps (the composition fit's model)."""
    scales = doc["scale"]
    scale = np.array([class_scale(scales, c) for c in pclass])
    cut = floor if doc.get("subtract_floor") else 0.0
    gpu = scale * np.maximum(sums - cut, 0.0)
    cpu = kernel_cost(doc, year) * kernels
    p = float(doc.get("overlap_p", 0.0) or 0.0)
    core = gpu + cpu
    if p > 0:
        m = np.maximum(np.maximum(gpu, cpu), 1e-300)
        smooth = m * ((gpu / m) ** p + (cpu / m) ** p) ** (1.0 / p)
        core = np.where((gpu > 0) & (cpu > 0), smooth, core)
    return core + float(doc["step_ms"])


def step_from_dict(doc: Mapping, sums: tuple[float, float, float], kernels: int,
                   pclass: str, floor: float = 0.0,
                   year: float = 0.0) -> tuple[float, float, float, float]:
    """(ms, low, high, scale) of one step from the layer sums (module rules); with the
    composition's ``subtract_floor`` the layers' per-call floors (``floor``, their sum) leave
    the sums first: inside a network a layer's launch is the kernels' cost; ``year``: the
    GPU's :func:`layerwise.as_run.year_offset` (the launch cost's generation term)."""
    scale = class_scale(doc["scale"], pclass)
    cpu = float(kernel_cost(doc, float(year))) * kernels
    p = float(doc.get("overlap_p", 0.0) or 0.0)
    base = float(doc["step_ms"])
    cut = float(floor) if doc.get("subtract_floor") else 0.0
    ms = _core(scale * max(sums[0] - cut, 0.0), cpu, p) + base
    low = min(ms * math.exp(float(doc["log_low"])),
              _core(scale * max(sums[1] - cut, 0.0), cpu, p) + base)
    high = max(ms * math.exp(float(doc["log_high"])),
               _core(scale * max(sums[2] - cut, 0.0), cpu, p) + base)
    return ms, low, high, scale
