"""PyTorch data parallelism: DDP's bucketed all-reduce behind the backward pass; DataParallel.

**DDP** (``DistributedDataParallel``, one process per GPU, NCCL), :func:`ddp_step`. Rules:

* Gradients are all-reduced in buckets. Parameters go into buckets in reverse layer order (the
  order the backward pass produces their gradients); a bucket is closed before it would pass
  its cap: 1 MiB for the first bucket, ``bucket_cap_mb`` (25 MiB, PyTorch's default) after.
  Gradients have the parameters' dtype: fp32 for fp32, TF32 and AMP alike (autocast keeps fp32
  weights), so 4 bytes per parameter.
* The backward pass runs the layers from last to first; a layer's backward takes
  :data:`BACKWARD_SHARE` of its priced training time. A bucket's all-reduce starts when its
  last gradient is ready and the previous bucket's all-reduce is done (one NCCL stream); it
  takes a ring all-reduce over the deployment's links (:func:`fleet.interconnect.
  allreduce_seconds`).
* Step on N GPUs = the 1-GPU step + what the all-reduces leave exposed after the backward
  pass ends (at least the last bucket's). Nothing is fitted: no PyTorch DDP timings are
  available here to fit on. Interval: low = the 1-GPU step (all communication hidden), high =
  the 1-GPU step plus every all-reduce end to end (none hidden).

**DataParallel** (``torch.nn.DataParallel``: one process drives every GPU; each step
replicates the module, scatters the batch, gathers the outputs and reduces the gradients on
GPU 0), :class:`DataParallelFit`: ``step_N = step_1 + (N - 1) x layer_ms x layers +
allreduce_factor x allreduce_N`` (a per-replica, per-layer launch cost and one gradient
reduction), fitted on ``../shared/data/torchvision_bench`` (``jobcast build-shipped
scaling``; scored by ``benchmarks/scaling.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.deployment import Deployment
from fleet.interconnect import allreduce_seconds

BUCKET_CAP_MB = 25.0  # DistributedDataParallel(bucket_cap_mb=25)
FIRST_BUCKET_MB = 1.0  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
GRAD_BYTES = 4  # fp32 gradients, also under autocast (AMP)
BACKWARD_SHARE = 2.0 / 3.0  # backward = input + weight gradients: about 2x the forward
MIB = 1024.0 * 1024.0
DP_PATH = Path(__file__).resolve().parent / "data" / "scaling_pytorch.json"


@dataclass(frozen=True)
class Layer:
    """One layer of the network in forward order: its priced training time and parameters."""

    ms: float
    params: float


def layers_of(entries: Sequence[Mapping[str, Any]]) -> list[Layer]:
    """:class:`Layer` list of a layerwise forecast's ``layers`` (``ms``, ``params``)."""
    return [Layer(float(e.get("ms", 0.0) or 0.0), float(e.get("params", 0) or 0))
            for e in entries]


def buckets(layers: Sequence[Layer], cap_mb: float = BUCKET_CAP_MB,
            first_mb: float = FIRST_BUCKET_MB) -> list[tuple[int, float]]:
    """DDP's buckets as (index of the earliest layer in it, gradient bytes), in the order
    the backward pass fills them (see the module rules)."""
    out: list[tuple[int, float]] = []
    cap = first_mb * MIB
    size, earliest = 0.0, -1
    for i in range(len(layers) - 1, -1, -1):
        nbytes = layers[i].params * GRAD_BYTES
        if nbytes <= 0:
            continue
        if size > 0 and size + nbytes > cap:
            out.append((earliest, size))
            cap, size = cap_mb * MIB, 0.0
        size += nbytes
        earliest = i
    if size > 0:
        out.append((earliest, size))
    return out


def gradient_allreduce_ms(params: float, deployment: Deployment) -> float:
    """One ring all-reduce of ``params`` fp32 gradients over the deployment's links (ms)."""
    return 1000.0 * allreduce_seconds(params * GRAD_BYTES, deployment.per_node,
                                      deployment.nodes, deployment.interconnect())


@dataclass(frozen=True)
class DdpStep:
    """One DDP step on N GPUs (ms) and how it came about."""

    ms: float
    low_ms: float
    high_ms: float
    step1_ms: float
    backward_ms: float
    allreduce_ms: float  # every bucket's all-reduce, end to end
    exposed_ms: float
    buckets: int


def ddp_step(step1_ms: float, layers: Sequence[Layer], deployment: Deployment,
             cap_mb: float = BUCKET_CAP_MB) -> DdpStep:
    """The N-GPU DDP step from the 1-GPU step and the layers' times and parameters (rules).

    The layers' times set the shape of the backward pass; its length is
    :data:`BACKWARD_SHARE` of ``step1_ms`` (so a measured 1-GPU step carries over)."""
    if step1_ms <= 0 or not math.isfinite(step1_ms):
        raise ValueError(f"the 1-GPU step must be a positive number of ms, got {step1_ms}")
    n = deployment.count
    priced = sum(max(layer.ms, 0.0) for layer in layers)
    backward = BACKWARD_SHARE * step1_ms
    if n <= 1 or priced <= 0:
        return DdpStep(step1_ms, step1_ms, step1_ms, step1_ms, backward, 0.0, 0.0, 0)
    ic = deployment.interconnect()
    # time (from the start of the backward pass) at which layer i's gradient is ready
    ready, t = [0.0] * len(layers), 0.0
    for i in range(len(layers) - 1, -1, -1):
        t += backward * max(layers[i].ms, 0.0) / priced
        ready[i] = t
    end = total = 0.0
    parts = buckets(layers, cap_mb)
    for earliest, nbytes in parts:
        took = 1000.0 * allreduce_seconds(nbytes, deployment.per_node, deployment.nodes, ic)
        end = max(end, ready[earliest]) + took
        total += took
    exposed = max(end - backward, 0.0)
    ms = step1_ms + exposed
    return DdpStep(ms, step1_ms, max(step1_ms + total, ms), step1_ms, backward, total, exposed,
                   len(parts))


class DataParallelFit:
    """``torch.nn.DataParallel``: ``step_N = step_1 + (N-1) x layer_ms x layers +
    allreduce_factor x allreduce_N`` (module rules); fitted by least squares on relative
    error (both constants >= 0)."""

    def __init__(self, layer_ms: float = 0.0, allreduce_factor: float = 0.0,
                 log_low: float = 0.0, log_high: float = 0.0, n_fit: int = 0):
        self.layer_ms = layer_ms
        self.allreduce_factor = allreduce_factor
        self.log_low = log_low
        self.log_high = log_high
        self.n_fit = n_fit

    @staticmethod
    def _terms(gpus: float, layers: float, allreduce: float) -> tuple[float, float]:
        return (gpus - 1.0) * layers, allreduce if gpus > 1 else 0.0

    def fit(self, rows: Sequence[Mapping[str, float]], residuals: Sequence[float] | None = None,
            coverage: float = 0.9) -> DataParallelFit:
        """``rows``: dicts with ``step1_ms``, ``step_ms``, ``gpus``, ``layers``,
        ``allreduce_ms``; ``residuals`` (log, e.g. leave-one-GPU-out) set the interval."""
        import numpy as np

        A = np.array([self._terms(r["gpus"], r["layers"], r["allreduce_ms"]) for r in rows])
        s1 = np.array([r["step1_ms"] for r in rows], float)
        y = np.array([r["step_ms"] for r in rows], float)
        w = 1.0 / y  # relative error
        coef = _nnls(A * w[:, None], (y - s1) * w)
        self.layer_ms, self.allreduce_factor = float(coef[0]), float(coef[1])
        resid = (np.asarray(residuals, float) if residuals is not None
                 else np.log(y) - np.log(s1 + A @ coef))
        alpha = (1.0 - coverage) / 2.0
        self.log_low = min(float(np.quantile(resid, alpha)), 0.0)
        self.log_high = max(float(np.quantile(resid, 1.0 - alpha)), 0.0)
        self.n_fit = len(rows)
        return self

    def step(self, step1_ms: float, gpus: int, layers: int,
             allreduce: float) -> tuple[float, float, float]:
        """(ms, low, high) of one N-GPU step."""
        a, b = self._terms(float(gpus), float(layers), float(allreduce))
        ms = step1_ms + self.layer_ms * a + self.allreduce_factor * b
        if gpus <= 1:
            return ms, ms, ms
        return ms, ms * math.exp(self.log_low), ms * math.exp(self.log_high)

    def to_dict(self) -> dict[str, float]:
        """The fitted costs as JSON (what :meth:`save` writes)."""
        return {"layer_ms": self.layer_ms, "allreduce_factor": self.allreduce_factor,
                "log_low": self.log_low, "log_high": self.log_high, "n_fit": self.n_fit}

    def save(self, path: str | Path = DP_PATH) -> Path:
        """Write the fit to ``path`` (the shipped PyTorch scaling file by default)."""
        path = Path(path)
        path.write_text(json.dumps({"data_parallel": self.to_dict()}, indent=1,
                                   sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | Path = DP_PATH) -> DataParallelFit:
        """The fit saved at ``path``; ValueError naming the file when unreadable."""
        try:
            doc = json.loads(Path(path).read_text())["data_parallel"]
            return cls(float(doc["layer_ms"]), float(doc["allreduce_factor"]),
                       float(doc["log_low"]), float(doc["log_high"]), int(doc.get("n_fit", 0)))
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: bad PyTorch scaling file ({exc})") from None


def _nnls(A: Any, b: Any) -> Any:
    """Least squares with non-negative coefficients (two columns: try the active sets)."""
    import numpy as np

    best, best_err = np.zeros(A.shape[1]), float(np.sum(b**2))
    for keep in ([0, 1], [0], [1]):
        coef, *_ = np.linalg.lstsq(A[:, keep], b, rcond=None)
        if (coef < 0).any():
            continue
        full = np.zeros(A.shape[1])
        full[keep] = coef
        err = float(np.sum((A @ full - b) ** 2))
        if err < best_err:
            best, best_err = full, err
    return best
