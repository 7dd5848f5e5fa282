"""Whole-network PyTorch training steps on this machine's GPU: the check for layer forecasts.

Times torchvision networks (built with ``weights=None``) for one SGD-momentum training step
(forward, cross-entropy, backward, ``optimizer.step``) at fp32, tf32 and AMP fp16/bf16, NCHW,
``warmup`` untimed steps then ``steps`` steps between CUDA events (median of ``reps``)::

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_networks.py --out $OUT/networks.csv
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import statistics
import time

NETWORKS = {  # zoo name -> (torchvision builder, input side)
    "resnet50": ("resnet50", 224), "resnet101": ("resnet101", 224),
    "vgg16": ("vgg16", 224), "mobilenet_v2": ("mobilenet_v2", 224),
    "densenet121": ("densenet121", 224), "inception3": ("inception_v3", 299),
    "alexnet": ("alexnet", 224),
}


def step_ms(torch, tv, name: str, batch: int, precision: str, warmup: int, steps: int,
            reps: int) -> float:
    builder, side = NETWORKS[name]
    kwargs = {"aux_logits": False, "init_weights": False} if builder == "inception_v3" else {}
    model = getattr(tv.models, builder)(weights=None, **kwargs).cuda().train()
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    ctx = (lambda: torch.autocast("cuda", dtype=amp)) if amp else contextlib.nullcontext
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, side, side, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def one() -> None:
        with ctx():
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        one()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            one()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / steps)

    torch.cuda.empty_cache()
    return statistics.median(times)


def main() -> None:
    import torch
    import torchvision as tv

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batches", default="32,128")
    parser.add_argument("--precisions", default="fp32,tf32,fp16,bf16")
    parser.add_argument("--networks", default=",".join(NETWORKS))
    args = parser.parse_args()
    gpu = torch.cuda.get_device_name()
    with open(args.out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["network", "gpu", "batch_size", "image_size", "precision", "step_ms",
                         "sw_torch"])
        for name in args.networks.split(","):
            for batch in map(int, args.batches.split(",")):
                for precision in args.precisions.split(","):
                    began = time.perf_counter()
                    try:
                        ms = step_ms(torch, tv, name, batch, precision, 8, 10, 3)
                    except Exception as exc:  # noqa: BLE001 - report and go on
                        print(name, batch, precision, "failed:", str(exc)[:120], flush=True)
                        torch.cuda.empty_cache()
                        continue
                    writer.writerow([name, gpu, batch, NETWORKS[name][1], precision,
                                     f"{ms:.4f}", torch.__version__])
                    handle.flush()
                    print(f"{name:13s} b{batch:<4d} {precision:5s} {ms:9.2f} ms "
                          f"({time.perf_counter() - began:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
