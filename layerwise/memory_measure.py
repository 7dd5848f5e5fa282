"""Measure what one real PyTorch training step holds, on any device (CPU included).

The measurement that :mod:`layerwise.memory` is checked against. Rules:

* **saved activations**: a real forward pass under
  ``torch.autograd.graph.saved_tensors_hooks``; every tensor autograd saves for backward is
  reduced to its storage (``untyped_storage().data_ptr()``), and the bytes of the distinct
  storages are summed (a storage saved by two ops, or a view of one, counts once).
  Parameters are left out (they are weights); under autocast the half-precision casts of the
  parameters (a parameter's shape or its transpose, as ``linear`` saves it, another dtype) are
  reported as ``weight_copy_bytes``.
  The loss's own saved tensors (``B x classes``) are included: they are tiny.
* **weights, gradients, optimizer state**: bytes of the parameters and buffers, of every
  ``.grad`` after ``backward()``, and of every tensor in ``optimizer.state`` after one
  ``step()`` (the optimizer's state exists only after its first step).
* **peak** (``peak=True``): a second step, after ``zero_grad(set_to_none=True)``, run under a
  ``TorchDispatchMode`` that adds the bytes of every new storage an op returns and subtracts them
  when the storage is freed (``weakref.finalize``), starting from the parameters, buffers,
  optimizer state and input batch already alive: the most bytes alive at once during forward,
  backward and ``step()`` (what ``torch.cuda.max_memory_allocated`` reports on a GPU, without
  the allocator's rounding). Slower (Python sees every op): seconds to a minute on a CPU.
* torch is imported inside the functions: importing this module does not need it.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MeasuredStep:
    """Bytes one training step held, measured on a real module (module rules)."""

    saved_bytes: int
    weight_copy_bytes: int
    weights_bytes: int
    buffers_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    params: int
    peak_bytes: int | None = None  # most bytes alive at once in a second step (peak=True)


def _optimizer(torch: Any, name: str, params: list) -> Any:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    raise ValueError(f"measure_step: optimizer {name!r} not measured (sgd, momentum, adam)")


def measure_step(model: Any, batch_size: int, image_size: int, *, optimizer: str = "sgd",
                 amp_dtype: Any = None, classes: int | None = None,
                 peak: bool = False) -> MeasuredStep:
    """One real training step of ``model`` on random images (``batch_size`` x 3 x side x side)
    and random labels; ``amp_dtype`` (``torch.bfloat16``/``torch.float16``) runs the forward
    pass under CPU autocast. Returns what it held (module rules)."""
    import torch
    import torch.nn.functional as F  # torch's own spelling

    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    param_shapes = {tuple(p.shape) for p in params} | {tuple(p.shape)[::-1] for p in params}
    saved: dict[int, int] = {}
    copies: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in param_ptrs:
            return t
        if t.dtype != torch.float32 and tuple(t.shape) in param_shapes and t.requires_grad:
            copies[ptr] = storage.nbytes()
        else:
            saved.setdefault(ptr, storage.nbytes())
        return t

    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
    opt = _optimizer(torch, optimizer, params)
    autocast = (torch.autocast("cpu", dtype=amp_dtype) if amp_dtype is not None
                else nullcontext())
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        logits = model(images)
        n = classes or int(logits.shape[-1])
        labels = torch.randint(0, n, (batch_size,), generator=generator)
        loss = F.cross_entropy(logits.float(), labels)
    loss.backward()
    opt.step()
    peak_bytes = _peak(torch, model, opt, images, labels, amp_dtype) if peak else None
    grads = sum(p.grad.nbytes for p in params if p.grad is not None)
    state = sum(v.nbytes for s in opt.state.values() for v in s.values()
                if torch.is_tensor(v) and v.dim() > 0)
    return MeasuredStep(
        saved_bytes=int(sum(saved.values())), weight_copy_bytes=int(sum(copies.values())),
        weights_bytes=int(sum(p.nbytes for p in model.parameters())),
        buffers_bytes=int(sum(b.nbytes for b in model.buffers())),
        gradients_bytes=int(grads), optimizer_bytes=int(state),
        params=int(sum(p.numel() for p in params)), peak_bytes=peak_bytes)


def _peak(torch: Any, model: Any, opt: Any, images: Any, labels: Any, amp_dtype: Any) -> int:
    """Most bytes alive at once in one more training step (module rules)."""
    import weakref

    import torch.nn.functional as F  # torch's own spelling
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Live(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, int] = {}
            self.now = 0
            self.most = 0

        def track(self, t: Any) -> None:
            storage = t.untyped_storage()
            ptr, size = storage.data_ptr(), storage.nbytes()
            if ptr in self.live or size == 0:
                return
            self.live[ptr] = size
            self.now += size
            self.most = max(self.most, self.now)
            weakref.finalize(storage, self.free, ptr)

        def free(self, ptr: int) -> None:
            self.now -= self.live.pop(ptr, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.track(t)
            return out

    opt.zero_grad(set_to_none=True)
    mode = Live()
    alive = [*model.parameters(), *model.buffers(), images, labels,
             *(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v))]
    for t in alive:
        mode.track(t)
    autocast = (torch.autocast("cpu", dtype=amp_dtype) if amp_dtype is not None
                else nullcontext())
    with mode:
        with autocast:
            loss = F.cross_entropy(model(images).float(), labels)
        loss.backward()
        opt.step()
    return int(mode.most)


__all__ = ["MeasuredStep", "measure_step"]
