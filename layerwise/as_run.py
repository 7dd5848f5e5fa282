"""Precision as the framework runs it: what each kind of layer runs at, per framework and GPU.

A request's precision is what the user set in the framework; what runs depends on the framework
and the GPU. :func:`resolve` turns (precision, framework, GPU) into a :class:`RunPrecision`:
the precision of each kind of layer as the layer predictor prices it, and a sentence saying
what was assumed. Rules:

* ``fp32`` (the framework's default arithmetic) on a GPU with TF32 tensor cores (Ampere and
  newer):

  - PyTorch >= 1.12 (assumed when no version is given): cuDNN convolutions in **TF32**
    (``torch.backends.cudnn.allow_tf32`` is True by default), matrix products (dense layers)
    in FP32 (``torch.backends.cuda.matmul.allow_tf32`` is False). PyTorch 1.7-1.11: both TF32.
  - TensorFlow >= 2.4 (assumed when no version is given): TF32 for both. TensorFlow 1.x and
    < 2.4: FP32 for both.

  On a GPU without TF32 (Volta, Turing, Pascal) or a CPU: FP32 everywhere.
* ``fp32-strict``: FP32 everywhere, TF32 off (``allow_tf32 = False`` for both in PyTorch,
  ``tf.config.experimental.enable_tensor_float_32_execution(False)`` in TensorFlow).
* ``tf32``: TF32 for convolutions and matrix products (where the GPU has TF32).
* ``fp16`` / ``bf16``: mixed precision (PyTorch AMP: autocast + GradScaler; Keras
  ``mixed_float16``): convolutions and dense layers in half precision, memory-bound layers at
  half the bytes except LayerNorm and softmax (autocast runs them in FP32), FP32 master
  weights: each layer with weights runs two cast kernels in a training step (weight to half
  in the forward pass, its gradient back to FP32) and one in a forward pass
  (:func:`cast_kernels`), added to the step's launches (:func:`cast_launches`). The per-op
  rows at fp16/bf16 were timed under ``torch.autocast`` with FP32 parameters
  (``layerwise/backends/torch_timing.py``), so each priced weight layer already holds its
  casts: :data:`CASTS_IN_LAYER_PRICES` (True, shipped) launches none again. It brings the
  H100's AMP steps from +30 % to +19 % one GPU out and every PyTorch figure of section 8 of
  ``docs/lab/layerwise-pytorch.md`` down (fp32 and half, one GPU and one network out); one suite
  gets worse (the H100 users' fp32 steps one network out, 17.7 -> 18.9 %). Shipped by the
  lead after seeing those figures: the rule removes a double count the timing backend
  shows, and the framework-level figures all improve.
* **Channel alignment** (frameworks built on cuDNN 7 or the first cuDNN 8: TensorFlow < 2.4,
  PyTorch < 1.8, :data:`ALIGN_BEFORE`): cuDNN runs a half convolution on tensor cores only
  when its input channels are a multiple of 8; the image's first convolution (3 channels)
  then runs with FP32 math and is priced as ``fp32`` (:meth:`RunPrecision.for_row`). Later
  releases (cuDNN >= 8 kernels for any channel count) and a request without a version (a
  current framework) price it in half like the rest. The cut between the old releases and
  PyTorch 2.11 was chosen after seeing the figures (section 8).
* **Half layers no slower than the framework's fp32** (:data:`HALF_CEILING`, issue 23,
  section 9 of ``docs/lab/layerwise-pytorch.md``): on a GPU with TF32 tensor cores (Ampere and
  newer) the FP16/BF16 tensor-core peak is at least twice the TF32 and FP32 ones and a half
  tensor moves half the bytes, so a convolution or dense layer priced at fp16/bf16 costs at
  most its price at the precision the framework's ``fp32`` runs it there
  (:attr:`RunPrecision.ceiling`: TF32 convolutions; PyTorch's matmuls in FP32, TensorFlow
  >= 2.4's in TF32), applied per layer by :func:`layerwise.pricing.price_rows`. The per-op
  trees, fitted on few large half convolutions, price some above that (vgg16's at batch 64
  on the H100: half/TF32 0.74 against 0.62 measured in the network). No fitted constant;
  chosen after seeing the figures among: the bound on convolutions only, on dense layers at
  TF32 too, and 0.5x the TF32 price (section 9).
* ``fp16-pure``: the whole model in half precision (``model.half()``), no casts: used for
  benchmarks that ran so (``torchvision_bench``), not a training recipe.
* **Half rule**: a half request (``fp16``, ``bf16``, ``fp16-pure``) on a GPU with no FP16
  tensor cores whose native FP16 rate is below its FP32 rate in the catalog
  (:func:`slow_fp16`: Pascal GP102/GP104/GP106/GP107, FP16 at 1/64) is priced as strict FP32,
  without casts (cuDNN runs the half tensors with FP32 math; these GPUs have no TF32), and
  the answer says so (measured: ``torchvision_bench`` Titan Xp pure-fp16 steps are 1.2x its
  fp32 steps; Lambda's GTX 1080 Ti fp16 is slower than its fp32; issue 23,
  ``docs/lab/layerwise-pytorch.md`` section 7). **TensorFlow stores the half tensors**
  (``--use_fp16`` / ``mixed_float16`` keep activations in FP16; cuDNN computes the
  convolutions with FP32 math): its memory-bound layers are priced at half the bytes
  (:data:`PSEUDO_HALF_FRAMEWORKS`; measured per image, Lambda's 1080 Ti fp16 step is
  0.76-0.89x its fp32 step). PyTorch's pure fp16 on the Titan Xp is slower than its fp32
  (1.2x), so PyTorch stays priced as FP32 throughout (chosen after seeing both figures,
  section 8).

The launch term's year (:func:`year_offset`: the GPU's release year in the catalog minus
:data:`YEAR0`) and the precision class (:func:`run_class`) are inputs of the one step formula,
:mod:`layerwise.pricing.step`, which holds the backward ratios too. Imports only the catalog
and the precision vocabulary (no numpy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fleet.precision import Precision, parse_precision

STRICT = "fp32-strict"
PURE = "fp16-pure"
_STRICT_SPELLINGS = {"fp32-strict", "strict-fp32", "fp32-no-tf32"}  # fleet.precision's too
_PURE_SPELLINGS = {"fp16-pure", "pure-fp16", "half-pure"}
REQUESTS = ("fp32", STRICT, "tf32", "fp16", "bf16", PURE)
HALF_REQUESTS = ("fp16", "bf16", PURE)
YEAR0 = 2019  # the launch term's reference year (year_offset = release year - YEAR0)
GEMM_CONV = ("conv", "dwconv")
FP32_UNDER_AUTOCAST = ("ln", "softmax")
WEIGHT_KINDS = ("conv", "dwconv", "dense")
# frameworks whose half precision on a slow-FP16 GPU keeps FP16 storage (module rules)
PSEUDO_HALF_FRAMEWORKS = ("tensorflow",)
# the per-op fp16/bf16 rows were timed under autocast with FP32 weights; True = launch the
# casts no second time (module rules)
CASTS_IN_LAYER_PRICES = True
# framework releases before which half convolutions need aligned channels (module rules)
ALIGN_BEFORE = {"pytorch": (1, 8), "tensorflow": (2, 4)}
# half layers on GPUs with TF32 tensor cores priced at most at the framework's fp32 (rules)
HALF_CEILING = True
# the composition's precision classes on tensor cores, and the class whose scale prices a class
# a composition has none for (module rules)
TENSOR_CLASSES = ("tensor", "half")
CLASS_FALLBACK = {"half": "tensor", "tensor": "fp32"}


def request_precision(value: object) -> str:
    """The request's precision: one of :data:`REQUESTS` (``fp32`` = the framework's default;
    see the module rules). Raises ``ValueError`` for an unknown spelling."""
    text = str(value).strip().lower().replace("_", "-").replace(" ", "-") \
        if isinstance(value, str) else None
    if text in _STRICT_SPELLINGS:
        return STRICT
    if text in _PURE_SPELLINGS:
        return PURE
    return parse_precision(value).value


@dataclass(frozen=True)
class RunPrecision:
    """What runs: the predictor precision per kind of layer and what was assumed."""

    request: str
    conv: str
    matmul: str
    memory: str
    norm: str
    casts: bool
    assumed: str
    align8: bool = False  # half convs need input channels % 8 == 0 for tensor cores
    # (conv, matmul) precisions of the framework's fp32 here: a half layer's price ceiling
    ceiling: tuple[str, str] | None = None

    def ceiling_for(self, row: Mapping) -> str | None:
        """The precision whose price bounds ``row``'s (module rules): a convolution or dense
        layer priced in half under a :attr:`ceiling`; else None."""
        if self.ceiling is None or row["layer"] not in WEIGHT_KINDS or \
                self.for_row(row) not in ("fp16", "bf16"):
            return None
        return self.ceiling[1] if row["layer"] == "dense" else self.ceiling[0]

    def for_kind(self, kind: str) -> str:
        """The predictor precision of a layer kind."""
        if kind in GEMM_CONV:
            return self.conv
        if kind == "dense":
            return self.matmul
        return self.norm if kind in FP32_UNDER_AUTOCAST else self.memory

    def for_row(self, row: Mapping) -> str:
        """The predictor precision of one network row: its kind's, except a half convolution
        whose input channels are not a multiple of 8 under :attr:`align8` (``fp32``)."""
        p = self.for_kind(str(row["layer"]))
        if self.align8 and row["layer"] == "conv" and p in ("fp16", "bf16") and \
                int(row.get("channels_in", 8) or 8) % 8:
            return "fp32"
        return p

    @property
    def uniform(self) -> bool:
        """Whether every kind runs at one precision."""
        return len({self.conv, self.matmul, self.memory, self.norm}) == 1


def as_run_dict(run: RunPrecision) -> dict[str, str]:
    """What a forecast says it assumed: the request, each kind's precision and the sentence."""
    return {"request": run.request, "convolutions": run.conv, "matmuls": run.matmul,
            "memory_bound": run.memory, "layernorm_softmax": run.norm, "assumed": run.assumed}


def _version(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    parts = [p for p in str(text).split("+")[0].split(".") if p.isdigit()]
    return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) if parts else None


def _spec(hw: Mapping) -> Any:
    """The catalog entry of ``hw`` (``device_features``), None for a CPU or an unknown GPU."""
    if hw.get("hw_kind") == "cpu":
        return None
    try:
        from fleet.catalog import resolve_gpu

        return resolve_gpu(str(hw.get("hw_model") or hw["gpu"]))
    except (KeyError, ValueError):
        return None


def _has_tf32(hw: Mapping) -> bool:
    spec = _spec(hw)
    return spec is not None and spec.has_tensor_cores(Precision.TF32)


def slow_fp16(gpu: str | Mapping) -> bool:
    """True when the catalog's GPU (a name or ``device_features``) has no FP16 tensor cores
    and its native FP16 rate is below its FP32 rate (the half rule, module rules); False for
    a CPU or an unknown name."""
    spec = _spec({"gpu": gpu} if isinstance(gpu, str) else gpu)
    return spec is not None and spec.tensor_fp16_tflops is None and \
        (spec.fp16_tflops or 0.0) < spec.fp32_tflops


def year_offset(hw: str | Mapping) -> float:
    """The GPU's release year in the catalog minus :data:`YEAR0` (the launch term's feature,
    module rules); 0.0 for a CPU or an unknown name."""
    spec = _spec({"gpu": hw} if isinstance(hw, str) else hw)
    return float(spec.release_year - YEAR0) if spec is not None else 0.0


def default_tf32(framework: str, version: str | None = None) -> tuple[bool, bool]:
    """(convolutions, matmuls) in TF32 by default in ``framework`` (module rules)."""
    v = _version(version)
    if str(framework).lower() == "pytorch":
        if v is not None and v < (1, 7):
            return False, False
        return True, v is not None and v < (1, 12)
    if v is not None and v < (2, 4):
        return False, False
    return True, True


def resolve(precision: object, framework: str, hw: Mapping,
            version: str | None = None, half_rule: bool | str = True,
            align8: bool | None = None, ceiling: bool | None = None) -> RunPrecision:
    """The :class:`RunPrecision` of a request (module rules); ``version`` of the framework,
    None = a current one; ``half_rule`` False prices half requests as half everywhere (the
    rule before 2026-11-26), ``"fp32"`` as FP32 in every framework (the rule of 2026-11-26,
    before TensorFlow's half storage), for benchmarks that compare; ``align8`` None: the
    channel alignment rule by the framework's version (module rules), True/False forces it;
    ``ceiling`` None: :data:`HALF_CEILING`, True/False forces it (comparisons)."""
    req = request_precision(precision)
    fw = "PyTorch" if str(framework).lower() == "pytorch" else "TensorFlow"
    tf32 = _has_tf32(hw)
    if req in HALF_REQUESTS and half_rule and slow_fp16(hw):
        if half_rule != "fp32" and str(framework).lower() in PSEUDO_HALF_FRAMEWORKS:
            store = req if req in ("fp16", "bf16") else "fp16"
            norm = "fp32" if req in ("fp16", "bf16") else store
            return RunPrecision(req, "fp32", "fp32", store, norm, False,
                                f"{req} asked, but this GPU has no FP16 tensor cores and its "
                                f"native FP16 is slower than FP32: {fw} keeps the tensors in "
                                "half precision (memory-bound layers at half the bytes) and "
                                "cuDNN computes convolutions and matmuls with FP32 math "
                                "(priced as fp32, no TF32 on this GPU), no casts")
        return RunPrecision(req, "fp32", "fp32", "fp32", "fp32", False,
                            f"{req} asked, but this GPU has no FP16 tensor cores and its native "
                            "FP16 is slower than FP32: cuDNN runs the half tensors with FP32 "
                            "math, priced as fp32 (no TF32 on this GPU), no casts")
    align = _aligned_channels_only(framework, version) if align8 is None else bool(align8)
    bound = None
    if tf32 and (HALF_CEILING if ceiling is None else bool(ceiling)):
        conv, matmul = default_tf32(framework, version)
        bound = ("tf32" if conv else "fp32", "tf32" if matmul else "fp32")
    said = (f"; {fw} {version}: a convolution whose input channels are not a multiple of 8 "
            "(the image's) runs without tensor cores, priced as fp32") if align else ""
    if bound:
        said += (f"; a half convolution or dense layer priced at most at {fw}'s fp32 "
                 f"({bound[0]} convolutions, {bound[1]} matmuls)")
    if req in ("fp16", "bf16"):
        how = "autocast + GradScaler" if fw == "PyTorch" else \
            "mixed_" + ("float16" if req == "fp16" else "bfloat16")
        return RunPrecision(req, req, req, req, "fp32", True,
                            f"{req} mixed precision ({how}): convolutions and matmuls in {req}, "
                            "memory-bound layers at half the bytes (LayerNorm, softmax in fp32), "
                            "weight casts " + ("inside the layer prices" if CASTS_IN_LAYER_PRICES
                                               else "priced as kernels") + said, align,
                            bound)
    if req == PURE:
        return RunPrecision(req, "fp16", "fp16", "fp16", "fp16", False,
                            "the whole model in fp16 (model.half()), no casts" + said, align,
                            bound)
    if req == STRICT or not tf32:
        why = "TF32 off as asked" if req == STRICT else "no TF32 on this GPU"
        if req == "tf32":
            return RunPrecision(req, "fp32", "fp32", "fp32", "fp32", False,
                                "tf32 asked, but this GPU has no TF32 tensor cores: fp32")
        return RunPrecision(req, "fp32", "fp32", "fp32", "fp32", False, f"fp32 everywhere ({why})")
    if req == "tf32":
        return RunPrecision(req, "tf32", "tf32", "fp32", "fp32", False,
                            "TF32 for convolutions and matmuls (as asked)")
    conv, matmul = default_tf32(framework, version)
    memory = "fp32"
    text = {(True, False): f"{fw}'s default fp32: cuDNN convolutions in TF32, matmuls in fp32 "
                           "(ask fp32-strict for no TF32, tf32 for TF32 matmuls too)",
            (True, True): f"{fw}'s default fp32: TF32 for convolutions and matmuls (ask "
                          "fp32-strict for no TF32)",
            (False, False): f"{fw} {version}: fp32 everywhere (no TF32 before that version)"}
    return RunPrecision(req, "tf32" if conv else "fp32", "tf32" if matmul else "fp32", memory,
                        memory, False, text[(conv, matmul)])


def _aligned_channels_only(framework: str, version: str | None) -> bool:
    """True for a framework release before :data:`ALIGN_BEFORE` (module rules); False
    without a version (a current release)."""
    v = _version(version)
    cut = ALIGN_BEFORE.get(str(framework).lower())
    return v is not None and cut is not None and v < cut


def as_run_warning(run: RunPrecision) -> str | None:
    """The warning of a forecast whose precision as run is not what the request says (fp32
    priced as TF32, tf32 as fp32, a half request as fp32 by the half rule), else None."""
    if (run.request, run.conv) in (("fp32", "tf32"), ("tf32", "fp32")) or \
            (run.request in HALF_REQUESTS and run.conv == "fp32"):
        return f"precision {run.request} priced as run: {run.assumed}"
    return None


def run_class(run: RunPrecision, hw: Mapping, rows: Iterable[Mapping]) -> str:
    """``tensor`` when the layers holding most of the network's GEMM FLOPs run on tensor
    cores here, else ``fp32`` (the composition's precision class)."""
    conv = dense = 0.0
    for row in rows:
        if row["layer"] in GEMM_CONV:
            conv += float(row.get("flops", 0.0) or 0.0)
        elif row["layer"] == "dense":
            dense += float(row.get("flops", 0.0) or 0.0)
    return precision_class(run.matmul if dense > conv else run.conv, hw)


def precision_class(precision: str, hw: Mapping) -> str:
    """``tensor`` when ``precision`` runs on the GPU's tensor cores (catalog), else ``fp32``."""
    p = parse_precision(precision)
    if p is Precision.FP32 or hw.get("hw_kind") == "cpu":
        return "fp32"
    try:
        from fleet.catalog import resolve_gpu

        return "tensor" if resolve_gpu(str(hw.get("hw_model") or hw["gpu"])) \
            .has_tensor_cores(p) else "fp32"
    except (KeyError, ValueError):
        return "fp32"


def cast_kernels(run: RunPrecision, rows: Iterable[Mapping], training: bool) -> int:
    """Weight-cast kernels of a mixed-precision step (module rules): 2 per layer with weights
    when training, 1 for a forward pass; 0 without casts."""
    if not run.casts:
        return 0
    n = sum(1 for r in rows if r["layer"] in WEIGHT_KINDS and int(r.get("params", 0) or 0) > 0)
    return n * (2 if training else 1)


def cast_launches(run: RunPrecision, rows: Iterable[Mapping], training: bool,
                  in_layer_prices: bool = CASTS_IN_LAYER_PRICES) -> int:
    """Launches a step adds for mixed precision's weight casts beyond the priced layers'
    kernels: :func:`cast_kernels`, or 0 with ``in_layer_prices`` (the casts counted inside
    the layer prices; module rules, :data:`CASTS_IN_LAYER_PRICES`)."""
    return 0 if in_layer_prices else cast_kernels(run, rows, training)
