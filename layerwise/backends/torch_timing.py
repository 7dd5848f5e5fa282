"""PyTorch timing backend: each kind's ``torch.nn`` module, timed eagerly as users run it.

Rules:

* Forward rows (optimizer ``none``) run under ``torch.no_grad()`` with the module in eval
  mode; training rows run forward, ``backward`` from a random upstream gradient of the
  output (``backward="upstream"``; with ``grad_input`` the input gradient too) or from an MSE
  loss (``"mse"``), then ``optimizer.step()`` and ``zero_grad()``.
* Precision: ``fp32`` (TF32 off for matmul and cuDNN), ``tf32`` (TF32 on), ``fp16``/``bf16``
  (automatic mixed precision: activations flow in the low dtype, parameters stay fp32 and
  ``torch.autocast`` casts them per op, as AMP training does).
* Timing: ``warmup`` untimed calls, then ``reps`` repetitions of ``runs`` calls; on a GPU each
  repetition is measured with CUDA events, on a CPU with ``perf_counter``.
* Rows record the device name, driver, CUDA, cuDNN, PyTorch and Python versions.
"""

from __future__ import annotations

import contextlib
import platform
import subprocess
import time
from typing import Any

from layerwise.backends.base import (
    Backend,
    BackendError,
    TimingPlan,
    adapt_runs,
    check_precision,
    summarise,
)
from layerwise.errors import DeviceError
from layerwise.kinds import get_kind
from layerwise.kinds.torch_ops import activation_dtype

OPTIMIZERS = {
    "sgd": lambda torch, params: torch.optim.SGD(params, lr=0.01),
    "momentum": lambda torch, params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adadelta": lambda torch, params: torch.optim.Adadelta(params),
    "adagrad": lambda torch, params: torch.optim.Adagrad(params),
    "adam": lambda torch, params: torch.optim.Adam(params),
    "rmsprop": lambda torch, params: torch.optim.RMSprop(params),
}


def torch_device(torch: Any, device: str) -> Any:
    """``cpu`` / ``gpu`` / ``gpu:N`` as a ``torch.device`` (clear error for a missing GPU)."""
    from layerwise.local_device import parse_device

    kind, index = parse_device(device)
    if kind == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index >= count:
        raise DeviceError(f"device {device!r}: PyTorch sees {count} CUDA GPU(s)")
    return torch.device("cuda", index)


def set_precision(torch: Any, precision: str) -> None:
    """TF32 on for ``tf32`` only (matmul and cuDNN)."""
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def _autocast(torch: Any, dev: Any, precision: str) -> Any:
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        return torch.autocast(dev.type, dtype=dtype)
    return contextlib.nullcontext()


def make_call(torch: Any, row: dict, dev: Any, plan: TimingPlan) -> Any:
    """A zero-argument function running one forward or training step of the row's layer."""
    kind = get_kind(str(row["layer"]))
    precision = check_precision(BACKEND, row.get("precision", 32))
    set_precision(torch, precision)
    torch.manual_seed(int(row.get("index", 0) or 0))
    module = kind.build_torch(torch, row).to(dev)
    shape = kind.torch_input_shape(row)
    dtype = activation_dtype(torch, row)
    inputs = [torch.randn(shape, device=dev, dtype=dtype) for _ in range(kind.n_inputs)]
    autocast = _autocast(torch, dev, precision)
    optimizer_name = str(row.get("optimizer", "none"))
    if optimizer_name == "none":
        module.eval()

        def forward() -> Any:
            with torch.no_grad(), autocast:
                return module(*inputs)

        return forward
    if optimizer_name not in OPTIMIZERS:
        raise BackendError(f"unknown optimizer {optimizer_name!r}")
    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    if plan.grad_input or not params:
        for x in inputs:
            x.requires_grad_(True)
    optimizer = OPTIMIZERS[optimizer_name](torch, params) if params else None
    with autocast:
        probe = module(*inputs)
    upstream = torch.randn_like(probe)
    mse = plan.backward == "mse"
    del probe

    def train_step() -> Any:
        with autocast:
            out = module(*inputs)
        if mse:
            ((out.float() - upstream.float()) ** 2).mean().backward()
        else:
            out.backward(upstream)
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        for x in inputs:
            x.grad = None
        return out

    return train_step


def time_config(row: dict, device: str = "cpu", plan: TimingPlan | None = None) -> dict:
    """Time one configuration on ``device``; returns time_ms_* plus ``runs``.

    Raises for invalid configurations and PyTorch errors (out of memory…); the campaign
    turns those into failed rows (and frees the GPU's cached blocks after a failure).
    """
    import torch

    plan = plan or TimingPlan()
    get_kind(str(row["layer"])).validate(row)
    dev = torch_device(torch, device)
    cuda = dev.type == "cuda"

    def sync(_: Any = None) -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    try:
        call = make_call(torch, row, dev, plan)
        for _ in range(max(1, plan.warmup)):
            call()
        sync()
        runs = adapt_runs(plan, call, sync)
        times = []
        for _ in range(plan.reps):
            if cuda:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                for _ in range(runs):
                    call()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / runs)
            else:
                begin = time.perf_counter()
                for _ in range(runs):
                    call()
                times.append((time.perf_counter() - begin) / runs * 1000.0)
    except Exception:
        if cuda:
            torch.cuda.empty_cache()
        raise
    return summarise(times, runs)


def driver_version() -> str:
    """The NVIDIA driver version (NVML, else ``nvidia-smi``), or "" without one."""
    with contextlib.suppress(Exception):
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    with contextlib.suppress(Exception):
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0]
    return ""


def detect(device: str) -> dict:
    """``device``, ``gpu``, ``hw_*`` and ``sw_*`` columns of a PyTorch device."""
    import torch

    from layerwise.local_device import cpu_features, gpu_features, parse_device

    dev = torch_device(torch, device)
    kind, index = parse_device(device)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    software = {"sw_torch": torch.__version__, "sw_python": platform.python_version(),
                "sw_cuda": torch.version.cuda or "", "sw_cudnn": str(cudnn or ""),
                "sw_driver": driver_version() if dev.type == "cuda" else ""}
    if dev.type == "cpu":
        return {"device": "cpu", **cpu_features(), **software}
    return {"device": f"gpu:{index}", **gpu_features(torch.cuda.get_device_name(dev)),
            **software}


BACKEND = Backend(name="torch", framework="pytorch", time_config=time_config, detect=detect,
                  precisions=("fp32", "tf32", "fp16", "bf16"), module="torch")
