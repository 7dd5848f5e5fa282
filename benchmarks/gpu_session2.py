"""Second GPU session (issue 23): memory-bound layer rows and whole networks as users run them.

Run on a lent GPU (``device`` tool) from the repository root::

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_session2.py --dir $OUT --minutes 9 \
        --layer-seconds 200 [--resume-from .gpu2]

Writes to ``--dir`` (each file resumed from ``--resume-from`` when it holds one):

* ``env.json``: GPU name, driver, clocks (nvidia-smi), PyTorch, CUDA, cuDNN, torchvision.
* ``layers.csv``: bench rows (``layerwise.bench.run_campaign``, torch backend) of bn, pool,
  act, add, concat at fp32 (TF32 off), tf32, fp16 and bf16 (autocast), forward and training
  step, random shapes of the ``gpu`` space, seed 2027 (the first campaign used 2026).
* ``networks.csv``: one row per whole-network job, in priority order (a later call continues):

  - suite ``tvbench``: the ``torchvision_bench`` definition (``../shared/data/torchvision_bench``):
    ``zero_grad``, host-to-GPU copy of a batch of 12 random images, forward, cross-entropy,
    backward, no optimizer, per-step ``synchronize`` + wall clock, median of 30 steps after 5;
    modes ``fp32`` (PyTorch's defaults) and ``fp16-pure`` (``model.half()``).
  - suite ``train``: a user's training step (forward, cross-entropy, backward, SGD momentum
    step, ``zero_grad(set_to_none=True)``), synthetic data on the GPU, NCHW,
    ``cudnn.benchmark=True``; median over 3 repetitions of 10 steps (CUDA events) after 4
    warm-up steps; modes below.
  - suite ``detection``: torchvision detection models in train mode on random boxes, loss = sum
    of the model's losses, same optimizer and timing as ``train``.

Modes: ``fp32`` = PyTorch's default (cuDNN TF32 on, matmul TF32 off), ``fp32-strict`` (both
off), ``tf32`` (both on), ``amp-fp16`` (autocast fp16 + GradScaler, default TF32 flags),
``amp-bf16`` (autocast bf16), ``fp16-pure`` (``model.half()``, tvbench only).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TVBENCH = [
    "densenet121", "densenet161", "densenet169", "densenet201", "mnasnet0_5", "mnasnet0_75",
    "mnasnet1_0", "mnasnet1_3", "mobilenet_v2", "resnet18", "resnet34", "resnet50", "resnet101",
    "resnet152", "resnext50_32x4d", "resnext101_32x8d", "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "squeezenet1_0",
    "squeezenet1_1", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
    "vgg19_bn", "wide_resnet50_2", "wide_resnet101_2",
]
FIRST = ["resnet50", "inception_v3", "vgg16", "densenet121", "mobilenet_v2", "alexnet",
         "resnet101", "googlenet", "efficientnet_b0", "mobilenet_v3_large", "convnext_tiny",
         "regnet_y_8gf", "vit_b_16"]
TRAIN = FIRST + [n for n in TVBENCH if n not in FIRST]
OLD_FILE = ["resnet50", "resnet101", "vgg16", "mobilenet_v2", "densenet121", "inception_v3",
            "alexnet"]
DETECTION = ["retinanet_resnet50_fpn", "ssd300_vgg16", "fasterrcnn_resnet50_fpn"]
SIDE = {"inception_v3": 299, "ssd300_vgg16": 300}
DET_SIDE = 800
COLUMNS = ["suite", "network", "batch_size", "image_size", "mode", "optimizer", "step_ms",
           "step_ms_min", "step_ms_max", "reps", "steps", "status", "error", "gpu", "sw_torch",
           "sw_cudnn", "sw_torchvision", "cudnn_benchmark", "tf32_conv", "tf32_matmul",
           "peak_mem_gb", "params", "wall_s"]


def plan_jobs() -> list[tuple[str, str, int, str]]:
    """(suite, network, batch, mode) in priority order: what one call should reach first."""
    jobs = [("tvbench", n, 12, m) for m in ("fp32", "fp16-pure") for n in TVBENCH]
    jobs.append(("layers", "", 0, ""))
    jobs += [("train", n, 64, m) for m in ("fp32", "amp-fp16") for n in TRAIN]
    jobs += [("detection", n, 8, m) for m in ("fp32", "amp-fp16") for n in DETECTION]
    jobs += [("train", n, 64, m) for m in ("tf32", "amp-bf16") for n in TRAIN]
    jobs += [("train", n, 64, "fp32-strict") for n in OLD_FILE]
    for batch in (128, 32):
        jobs += [("train", n, batch, m) for m in ("fp32", "amp-fp16") for n in TRAIN]
    for batch in (128, 32):
        jobs += [("train", n, batch, m) for m in ("tf32", "amp-bf16") for n in TRAIN]
    jobs += [("train", n, 256, m) for m in ("fp32", "amp-fp16", "tf32", "amp-bf16")
             for n in TRAIN]
    jobs += [("detection", n, 16, m) for m in ("fp32", "amp-fp16") for n in DETECTION]
    return jobs


def set_mode(torch, mode: str) -> None:
    """TF32 flags of a mode (see module docstring); cuDNN benchmark always on."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = mode != "fp32-strict"
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"


def build(tv, name: str, suite: str):
    """A torchvision model without weights (and without downloading any)."""
    if suite == "detection":
        return getattr(tv.models.detection, name)(weights=None, weights_backbone=None)
    kwargs = {}
    if name in ("inception_v3", "googlenet"):
        kwargs = {"aux_logits": False, "init_weights": False}
    return getattr(tv.models, name)(weights=None, **kwargs)


def _targets(torch, batch: int, dev):
    gen = torch.Generator().manual_seed(batch)
    out = []
    for _ in range(batch):
        xy = torch.rand(5, 2, generator=gen) * (DET_SIDE * 0.7)
        wh = 32 + torch.rand(5, 2, generator=gen) * 200
        out.append({"boxes": torch.cat([xy, xy + wh], 1).to(dev),
                    "labels": torch.randint(1, 91, (5,), generator=gen).to(dev)})
    return out


def train_step_fn(torch, tv, suite: str, name: str, batch: int, mode: str, dev):
    """(model, one-step function) of a ``train`` or ``detection`` job."""
    model = build(tv, name, suite).to(dev).train()
    amp = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(mode)
    scaler = torch.amp.GradScaler(dev.type) if mode == "amp-fp16" else None
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if suite == "detection":
        side = SIDE.get(name, DET_SIDE)
        x = [torch.randn(3, side, side, device=dev) for _ in range(batch)]
        y = _targets(torch, batch, dev)
    else:
        side = SIDE.get(name, 224)
        x = torch.randn(batch, 3, side, side, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def one() -> None:
        with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
            loss = sum(model(x, y).values()) if suite == "detection" else loss_fn(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    return model, one


def time_train(torch, one, dev, warmup: int = 4, reps: int = 3, steps: int = 10) -> list[float]:
    """Per-step ms of each repetition (CUDA events on a GPU, wall clock on a CPU)."""
    for _ in range(warmup):
        one()
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if cuda:
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            for _ in range(steps):
                one()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / steps)
        else:
            began = time.perf_counter()
            for _ in range(steps):
                one()
            times.append((time.perf_counter() - began) * 1000.0 / steps)
    return times


def time_tvbench(torch, tv, name: str, batch: int, mode: str, dev, warmup: int = 5,
                 steps: int = 30) -> tuple[object, list[float]]:
    """The torchvision_bench step (see module docstring): per-step wall ms."""
    model = build(tv, name, "tvbench")
    dtype = torch.float16 if mode == "fp16-pure" else torch.float32
    model = model.to(dtype).to(dev).train()
    target = torch.randint(0, 1000, (batch,)).to(dev)
    criterion = torch.nn.CrossEntropyLoss()
    images = torch.randn(batch, 3, 224, 224).to(dtype)
    cuda = dev.type == "cuda"
    times = []
    for step in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        began = time.perf_counter()
        model.zero_grad()
        loss = criterion(model(images.to(dev)), target)
        loss.backward()
        if cuda:
            torch.cuda.synchronize()
        if step >= warmup:
            times.append((time.perf_counter() - began) * 1000.0)
    return model, times


def run_job(torch, tv, job, dev, env: dict) -> dict:
    """One CSV row of a job; failures (out of memory…) become ``status`` rows."""
    suite, name, batch, mode = job
    set_mode(torch, mode)
    began = time.perf_counter()
    row = {"suite": suite, "network": name, "batch_size": batch, "mode": mode,
           "image_size": DET_SIDE if suite == "detection" and name not in SIDE
           else SIDE.get(name, 224), "optimizer": "none" if suite == "tvbench" else "momentum",
           "gpu": env["gpu"], "sw_torch": env["torch"], "sw_cudnn": env["cudnn"],
           "sw_torchvision": env["torchvision"], "cudnn_benchmark": 1,
           "tf32_conv": int(torch.backends.cudnn.allow_tf32),
           "tf32_matmul": int(torch.backends.cuda.matmul.allow_tf32), "status": "ok", "error": ""}
    model = one = None
    try:
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        if suite == "tvbench":
            model, times = time_tvbench(torch, tv, name, batch, mode, dev)
            reps, steps = len(times), 1
        else:
            model, one = train_step_fn(torch, tv, suite, name, batch, mode, dev)
            times = time_train(torch, one, dev)
            reps, steps = len(times), 10
        row.update(step_ms=f"{statistics.median(times):.4f}", step_ms_min=f"{min(times):.4f}",
                   step_ms_max=f"{max(times):.4f}", reps=reps, steps=steps,
                   params=sum(p.numel() for p in model.parameters()))
        if dev.type == "cuda":
            row["peak_mem_gb"] = f"{torch.cuda.max_memory_allocated() / 2**30:.2f}"
    except Exception as exc:  # noqa: BLE001 - report and go on
        text = str(exc).replace("\n", " ")[:160]
        row.update(status="oom" if "out of memory" in text.lower() else "failed", error=text)
    del model, one
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    row["wall_s"] = f"{time.perf_counter() - began:.1f}"
    return row


def environment(torch, tv, dev) -> dict:
    """What ran: GPU, driver, clocks and library versions."""
    env = {"gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
           "torch": torch.__version__, "cuda": torch.version.cuda or "",
           "cudnn": str(torch.backends.cudnn.version() or ""), "torchvision": tv.__version__,
           "python": platform.python_version(), "host": platform.node()}
    query = ("name,driver_version,clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem,"
             "power.limit,memory.total,pci.bus_id,temperature.gpu")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        values = [v.strip() for v in out.splitlines()[0].split(",")]
        env["nvidia_smi"] = dict(zip(query.split(","), values, strict=False))
    except Exception as exc:  # noqa: BLE001 - no nvidia-smi on a CPU
        env["nvidia_smi"] = f"unavailable: {exc}"[:120]
    if dev.type == "cuda":
        prop = torch.cuda.get_device_properties(dev)
        env.update(sm_count=prop.multi_processor_count,
                   memory_gb=round(prop.total_memory / 2**30, 1))
    return env


def done_jobs(path: Path) -> set[tuple]:
    """Jobs already in a networks CSV (any status: an OOM is not retried)."""
    if not path.is_file():
        return set()
    with open(path, newline="") as handle:
        return {(r["suite"], r["network"], int(r["batch_size"]), r["mode"])
                for r in csv.DictReader(handle)}


def too_big(job, failed: set[tuple]) -> bool:
    """A train job at a larger batch than one that ran out of memory."""
    suite, name, batch, mode = job
    return any(f[0] == suite and f[1] == name and f[3] == mode and batch > f[2] for f in failed)


def run_layers(path: Path, seconds: float, device: str, samples: int) -> None:
    """The memory-bound layer campaign for ``seconds`` (resumed from ``path``)."""
    from layerwise.backends import TimingPlan
    from layerwise.bench import run_campaign

    plan = TimingPlan(warmup=3, reps=5, target_rep_ms=10.0, max_runs=50)
    result = run_campaign(path, ["bn", "pool", "act", "add", "concat"], samples, seed=2027,
                          space="gpu", device=device, plan=plan, max_seconds=seconds,
                          backend="torch", precisions=["fp32", "tf32", "fp16", "bf16"])
    print("layers:", {k: v for k, v in result.as_dict().items() if k != "device"}, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="output folder ($OUT)")
    parser.add_argument("--resume-from", default="", help="folder with earlier CSVs")
    parser.add_argument("--minutes", type=float, default=9.0, help="stop starting new jobs")
    parser.add_argument("--layer-seconds", type=float, default=200.0)
    parser.add_argument("--layer-samples", type=int, default=40000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", default="torchvision", help="module standing in for it")
    parser.add_argument("--only", default="", help="comma list of networks (a test's subset)")
    args = parser.parse_args()
    started = time.perf_counter()
    import importlib

    import torch

    tv = importlib.import_module(args.models)
    dev = torch.device(args.device)
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("layers.csv", "networks.csv", "env.json"):
        src = Path(args.resume_from) / name if args.resume_from else None
        if src is not None and src.is_file() and not (out / name).exists():
            shutil.copy(src, out / name)
    env = environment(torch, tv, dev)
    envs = json.loads((out / "env.json").read_text()) if (out / "env.json").is_file() else []
    (out / "env.json").write_text(json.dumps(envs + [env], indent=1))
    print(json.dumps(env), flush=True)
    net_path = out / "networks.csv"
    done = done_jobs(net_path)
    failed = set()
    new = not net_path.is_file()
    only = set(filter(None, args.only.split(",")))
    with open(net_path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        if new:
            writer.writeheader()
        for job in plan_jobs():
            if time.perf_counter() - started > 60.0 * args.minutes:
                print("time is up", flush=True)
                break
            if job[0] == "layers":
                if args.layer_seconds > 0:
                    run_layers(out / "layers.csv", args.layer_seconds,
                               "gpu" if dev.type == "cuda" else "cpu", args.layer_samples)
                continue
            if job in done or (only and job[1] not in only) or too_big(job, failed):
                continue
            row = run_job(torch, tv, job, dev, env)
            if row["status"] == "oom":
                failed.add(job)
            writer.writerow(row)
            handle.flush()
            print(f"{job[0]:9s} {job[1]:22s} b{job[2]:<4d} {job[3]:11s} {row.get('step_ms', '')}"
                  f" ms {row['status']} ({row['wall_s']} s, {time.perf_counter() - started:.0f})",
                  flush=True)
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
