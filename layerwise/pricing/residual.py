"""The whole-network residual: what the composed step still misses, learned on whole networks.

The composition (:mod:`layerwise.compose`) turns the layer sums into a step with a handful of
constants per framework. What it leaves is network-shaped: the layer predictor prices some
kinds too high or too low *inside* networks (e.g. PyTorch batch norm: vgg16_bn minus vgg16 is
measured 2-5x its priced cost on every GPU of ``torchvision_bench`` and the H100, while
convolutions are priced high), and some networks carry their own error on every GPU. The
residual corrects the step by a factor ``exp(c)``, ``c`` in log time. Rules:

* **Features** (:func:`features`, in :data:`FEATURES` order; all known before the run): the
  share of the priced layer time (as priced, before the composition) by kind group
  (:data:`GROUPS`), log(kernels / priced ms), whether the request is half precision
  (:data:`layerwise.as_run.HALF_REQUESTS`) and whether the class is ``tensor``, the half
  request's share of convolutions, norms, elementwise and depthwise layers, log(batch).
  No GPU feature: a GPU left out is answered from the layer predictor and the composition.
* **Fixed part**: ridge regression of the composition's log residuals (measured / composed)
  on the standardised features (``alpha``; closed form, numpy only).
* **Network part**: per (network, half or not), the mean of the residuals the fixed part
  leaves, first averaged per GPU (each GPU one vote), shrunk by ``n / (n + shrink)`` with
  ``n`` the GPUs: a network the whole-network benchmarks measured on other GPUs carries its
  own error to a new one. A network never measured (a user's own model, or one left out)
  gets none; the answer says which applied (:func:`correction`).
* **GPU part** (added 2026-12-01, sixth session): per (GPU, half or not), the mean of what
  the network part still leaves, first averaged per network (each network one vote), shrunk
  by ``m / (m + shrink)`` with ``m`` the networks: a GPU the whole-network benchmarks
  measured runs every network a little faster or slower than its layers and catalog row say
  (the RTX 2080 Ti of ``torchvision_bench`` runs faster: left out, it is priced about 16 %
  too slow on every network, a host effect), and a new network on it inherits that. The
  GPU is the catalog's name (``hw_model``: one row, so an A100 PCIe does not inherit the
  SXM4's); a GPU never measured gets none, as the GPU left out of a leave-one-GPU-out split.
  Chosen after seeing the one-network-out and one-family-out splits
  (``docs/lab/layerwise-pytorch.md`` section 5); ``shrink`` is the network part's, not tuned
  again.
* **No extrapolation of the fixed part**: each feature is first clipped to the range the
  fit saw (``low``, ``high`` in the saved form), so a network unlike any benchmarked one
  (a detection model, mostly ops with no kind and no gradient) gets at most the correction of
  the nearest benchmarked mix. Chosen on 2026-11-26 after seeing the H100 detection steps
  (``docs/lab/layerwise-pytorch.md`` section 6), where the unclipped linear part drove the factor
  to its bound.
* ``c`` is clipped to +-:data:`MAX_LOG` (a factor of at most 2 either way).
* The saved form is a plain dict (in the composition's JSON, key ``residual``) read by
  :func:`correction` with ``math`` only: both forecast paths apply it without scikit-learn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from layerwise.as_run import HALF_REQUESTS, TENSOR_CLASSES

GROUPS: dict[str, tuple[str, ...]] = {
    "conv": ("conv",), "dwconv": ("dwconv",), "dense": ("dense",), "norm": ("bn", "ln"),
    "elementwise": ("act", "add", "concat", "dropout"), "pool": ("pool",),
    "other": ("unknown",),
}
HALF_SHARES = ("conv", "norm", "elementwise", "dwconv")
FEATURES: tuple[str, ...] = (*GROUPS, "log_kernels_per_ms", "half", "tensor",
                             *(f"half_{g}" for g in HALF_SHARES), "log_batch")
MAX_LOG = math.log(2.0)


def kind_ms(entries: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Priced ms per layer kind of a step's entries, as priced (floors included, before the
    composition's scale)."""
    out: dict[str, float] = {}
    for e in entries:
        out[str(e["layer"])] = out.get(str(e["layer"]), 0.0) + max(float(e["ms"]), 0.0)
    return out


def is_half(request: str) -> bool:
    """Whether a precision request is a half one (the network part's key)."""
    return str(request).lower() in HALF_REQUESTS


def features(ms_by_kind: Mapping[str, float], kernels: float, half: bool, tensor: bool,
             batch: int) -> list[float]:
    """The feature vector of one step (:data:`FEATURES` order; module rules)."""
    total = max(math.fsum(float(v) for v in ms_by_kind.values()), 1e-9)
    share = {g: math.fsum(float(ms_by_kind.get(k, 0.0)) for k in kinds) / total
             for g, kinds in GROUPS.items()}
    h = 1.0 if half else 0.0
    return [*(share[g] for g in GROUPS), math.log(max(float(kernels), 1.0) / total), h,
            1.0 if tensor else 0.0, *(h * share[g] for g in HALF_SHARES),
            math.log(max(int(batch), 1))]


def network_key(network: str, half: bool) -> str:
    """The network part's key, ``<network>|half`` or ``<network>|full``; the GPU part's is the
    same with the GPU's catalog name."""
    return f"{network}|{'half' if half else 'full'}"


def part(doc: Mapping[str, Any] | None, name: str, key: str | None,
         half: bool) -> tuple[float, int] | None:
    """(log effect, votes) of the ``networks`` or ``gpus`` part for ``key``; None when the
    saved residual has no such entry."""
    if not doc or not key:
        return None
    effect = (doc.get(name) or {}).get(network_key(str(key), half))
    return (float(effect[0]), int(effect[1])) if effect is not None else None


def correction(doc: Mapping[str, Any] | None, x: Sequence[float], network: str | None,
               half: bool, gpu: str | None = None) -> tuple[float, str]:
    """(factor, source) of a step with features ``x`` on ``gpu`` (its catalog name):
    ``source`` is ``none`` (no residual saved), ``shape`` (the fixed part only), or the parts
    that applied too, joined by ``+``: ``network`` (this network's own residual from the
    whole-network benchmarks), ``gpu`` (this GPU's), ``network+gpu``."""
    if not doc:
        return 1.0, "none"
    mean, scale, coef = doc["mean"], doc["scale"], doc["coef"]
    low, high = doc.get("low"), doc.get("high")
    if low is not None and high is not None:
        x = [min(max(float(v), float(lo)), float(hi))
             for v, lo, hi in zip(x, low, high, strict=True)]
    c = float(doc["intercept"]) + math.fsum(
        float(w) * (float(v) - float(m)) / float(s)
        for w, v, m, s in zip(coef, x, mean, scale, strict=True))
    applied = []
    for name, key, label in (("networks", network, "network"), ("gpus", gpu, "gpu")):
        effect = part(doc, name, key, half)
        if effect is not None:
            c += effect[0]
            applied.append(label)
    c = min(max(c, -MAX_LOG), MAX_LOG)
    return math.exp(c), "+".join(applied) or "shape"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def describe(factor: float, source: str, network: str | None, gpus: int = 0,
             gpu: str | None = None, networks: int = 0) -> str | None:
    """The answer's sentence about the residual (None when none applied); ``gpus``: how many
    GPUs' whole-network benchmarks of this network it learned from, ``networks``: how many
    networks' whole-network benchmarks on ``gpu``; what had none is named too."""
    if source == "none":
        return None
    parts, gpu = source.split("+"), gpu or "this GPU"
    learned, lacking = [], []
    if "network" in parts:
        learned.append(f"{network}'s own whole-network benchmarks ({_count(gpus, 'GPU')})")
    else:
        lacking.append(f"of {network}")
    if "gpu" in parts:
        learned.append(f"{gpu}'s ({_count(networks, 'network')})" if learned else
                       f"{gpu}'s whole-network benchmarks ({_count(networks, 'network')})")
    else:
        lacking.append(f"on {gpu}")
    text = f"{', '.join(learned)} and the layer mix" if learned else "the layer mix"
    if lacking:
        text += f"; no whole-network benchmark {' or '.join(lacking)}"
    return f"whole-network residual x{factor:.3f}, learned from {text}"


def for_step(doc: Mapping[str, Any] | None, entries: Iterable[Mapping[str, Any]], *,
             kernels: int, request: str, pclass: str, batch: int, network: str | None,
             on_gpu: bool = True, gpu: str | None = None) -> tuple[float, str, int, int]:
    """(factor, source, GPUs, networks) of one priced step (both forecast paths): the raw
    priced ``entries`` (before the composition's scale), the step's kernels, precision
    request and class, the GPU's catalog name; GPUs: how many measured the network,
    networks: how many were measured on the GPU (0 when that part did not apply). Learned
    on GPU steps only: a step on a CPU (``on_gpu`` False), or one with nothing priced, gets
    none."""
    by_kind = kind_ms(entries)
    if not doc or not on_gpu or math.fsum(by_kind.values()) <= 0.0:
        return 1.0, "none", 0, 0
    half = is_half(request)
    x = features(by_kind, kernels, half, pclass in TENSOR_CLASSES, batch)
    factor, source = correction(doc, x, network, half, gpu)
    votes = [(part(doc, name, key, half) or (0.0, 0))[1]
             for name, key in (("networks", network), ("gpus", gpu))]
    return factor, source, votes[0], votes[1]
