"""Check the memory estimate (layerwise.memory) against real PyTorch training steps on this CPU.

For resnet50, vgg16 and mobilenet_v2 (torchvision's layouts, written here from the papers'
architecture tables, checked against the shipped torchvision specs' parameter counts) at three
small batch sizes: one real training step (SGD with momentum) measured by
:func:`layerwise.memory_measure.measure_step` (saved-tensor hooks; parameter, gradient and
optimizer-state bytes after the step), fp32 and CPU autocast bf16, beside the estimate from
the shipped torchvision spec (framework pytorch) and from the Keras spec (framework
tensorflow, for reference). Then the published per-GPU batch sizes NVIDIA trains ResNet-50
with (DeepLearningExamples, PyTorch/Classification/ConvNets/configs.yml) against the
estimate's ``max_batch``, and the T4 x 4096 verdict.

    nice .venv/bin/python benchmarks/memory_check.py [--batches 2 8 16] [--json out.json]

Results: docs/memory.md. Runtime: ~5 min on a loaded 2-core box (the peak, measured at
batch 2 only by default, is the slow part: every op goes through Python).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import lib  # noqa: F401  (sys.path: the repository, tests/)
import torch
from torch import nn

from layerwise.memory import GIB, estimate_memory, network_layers
from layerwise.memory_measure import measure_step

MIB = 2**20


def _cbr(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
         act: type[nn.Module] | None = nn.ReLU) -> list[nn.Module]:
    mods: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                       bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        mods.append(act(inplace=True))
    return mods


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3 conv), in-place ReLUs."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(*_cbr(cin, width, 1), *_cbr(width, width, 3, stride),
                                  *_cbr(width, cout, 1, act=None))
        self.down = (nn.Sequential(*_cbr(cin, cout, 1, stride, act=None))
                     if stride != 1 or cin != cout else None)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.down is None else self.down(x)
        return self.relu(self.body(x) + skip)


def _resnet(blocks_per_stage: tuple[int, int, int, int]) -> nn.Module:
    """A bottleneck ResNet in torchvision's layout with these blocks per stage."""
    layers: list[nn.Module] = [*_cbr(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in zip((64, 128, 256, 512), blocks_per_stage, (1, 2, 2, 2),
                                     strict=True):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def resnet50() -> nn.Module:
    return _resnet((3, 4, 6, 3))


def vgg16() -> nn.Module:
    layers: list[nn.Module] = []
    cin = 3
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
            cin = int(v)
    layers += [nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 49, 4096),
               nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
               nn.Dropout(), nn.Linear(4096, 1000)]
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand (t > 1), 3x3 depthwise, 1x1 project; residual if it can."""

    def __init__(self, cin: int, cout: int, stride: int, t: int):
        super().__init__()
        hidden = cin * t
        mods = _cbr(cin, hidden, 1, act=nn.ReLU6) if t != 1 else []
        mods += [*_cbr(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                 *_cbr(hidden, cout, 1, act=None)]
        self.body = nn.Sequential(*mods)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2() -> nn.Module:
    layers: list[nn.Module] = [*_cbr(3, 32, 3, 2, act=nn.ReLU6)]
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += [*_cbr(cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Dropout(0.2), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def resnet101() -> nn.Module:
    """ResNet-101: resnet50's stages with 23 blocks in the third (held-out check)."""
    return _resnet((3, 4, 23, 3))


def vgg11() -> nn.Module:
    """VGG-11 (configuration A) with vgg16's classifier (held-out check)."""
    net = vgg16()
    layers: list[nn.Module] = []
    cin = 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
            cin = int(v)
    return nn.Sequential(*layers, *list(net.children())[-9:])


NETWORKS = {"resnet50": (resnet50, "resnet50"), "vgg16": (vgg16, "vgg16"),
            "mobilenet_v2": (mobilenet_v2, "mobilenetv2"), "resnet101": (resnet101, "resnet101"),
            "vgg11": (vgg11, "vgg11")}
HELD_OUT = ("resnet101", "vgg11")  # not looked at while the rules were chosen
# NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/configs.yml (resnet50 per-GPU
# batch sizes it trains with; momentum SGD): (GPU, precision, batch).
PUBLISHED = (("Tesla V100 SXM2 16GB", "fp32", 112), ("Tesla V100 SXM2 16GB", "fp16", 256),
             ("T4", "fp32", 128), ("T4", "fp16", 256), ("Tesla V100 SXM3 32GB", "fp32", 256),
             ("A100 SXM4 80GB", "tf32", 256), ("A100 SXM4 80GB", "fp16", 256))


def _row(name: str, batch: int, precision: str, peak: bool) -> dict:
    build, keras_name = NETWORKS[name]
    model = build()
    spec_params = network_layers(name, "pytorch").params
    own = sum(p.numel() for p in model.parameters())
    if own != spec_params:
        raise SystemExit(f"{name}: {own} parameters here, {spec_params} in the shipped spec")
    amp = torch.bfloat16 if precision == "bf16" else None
    t0 = time.perf_counter()
    m = measure_step(model, batch, 224, optimizer="momentum", amp_dtype=amp, peak=peak)
    seconds = time.perf_counter() - t0
    est = estimate_memory(name, batch_size=batch, precision=precision, optimizer="momentum",
                          framework="pytorch")
    keras = estimate_memory(keras_name, batch_size=batch, precision=precision,
                            optimizer="momentum", framework="tensorflow")
    measured_static = m.weights_bytes + m.weight_copy_bytes + m.gradients_bytes + m.optimizer_bytes
    est_static = est.weights_bytes + est.gradients_bytes + est.optimizer_bytes
    return {
        "network": name, "batch": batch, "precision": precision,
        "measured_saved_mib": m.saved_bytes / MIB,
        # saved tensors only: the FP32 images beside their half copy (input_bytes) are alive
        # but not saved for backward, so they count in the peak only
        "estimated_saved_mib": est.activations_bytes / MIB,
        "keras_estimated_saved_mib": keras.activations_bytes / MIB,
        "measured_static_mib": measured_static / MIB, "estimated_static_mib": est_static / MIB,
        "measured_total_mib": (m.saved_bytes + measured_static) / MIB,
        "estimated_total_mib": (est.activations_bytes + est_static) / MIB,
        "buffers_mib": m.buffers_bytes / MIB, "step_seconds": seconds,
        "measured_peak_mib": m.peak_bytes / MIB if m.peak_bytes is not None else None,
        # the estimate less the GPU-only constants (context, workspace): what a CPU step holds
        "estimated_peak_mib": (est.total_bytes - est.context_bytes - est.workspace_bytes) / MIB,
    }


def _published() -> list[dict]:
    rows = []
    for gpu, precision, batch in PUBLISHED:
        est = estimate_memory("resnet50", batch_size=batch, precision=precision,
                              optimizer="momentum", framework="pytorch", gpu=gpu)
        rows.append({"gpu": est.gpu, "precision": precision, "published_batch": batch,
                     "estimated_gib": est.total_bytes / GIB, "fits": est.fits,
                     "max_batch": est.max_batch})
    return rows


def _print(r: dict) -> None:
    err = r["estimated_saved_mib"] / r["measured_saved_mib"] - 1
    terr = r["estimated_total_mib"] / r["measured_total_mib"] - 1
    peak = "" if r["measured_peak_mib"] is None else (
        f"  {r['measured_peak_mib']:8.1f}/{r['estimated_peak_mib']:8.1f} "
        f"({r['estimated_peak_mib'] / r['measured_peak_mib'] - 1:+6.1%})")
    print(f"{r['network']:13s} {r['batch']:5d} {r['precision']:5s} "
          f"{r['measured_saved_mib']:9.1f} / {r['estimated_saved_mib']:8.1f} ({err:+6.1%}) "
          f"{r['keras_estimated_saved_mib']:9.1f}  "
          f"{r['measured_static_mib']:7.1f}/{r['estimated_static_mib']:7.1f}  "
          f"{r['measured_total_mib']:8.1f}/{r['estimated_total_mib']:8.1f} ({terr:+6.1%})"
          f"{peak}  [{r['step_seconds']:.0f} s]", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[2, 8, 16])
    ap.add_argument("--networks", nargs="+", default=["resnet50", "vgg16", "mobilenet_v2"])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    ap.add_argument("--peak-batches", type=int, nargs="*", default=[2],
                    help="batches whose peak is also measured (slower)")
    ap.add_argument("--peak-precisions", nargs="*", default=["fp32", "bf16"])
    ap.add_argument("--held-out", nargs="*", default=list(HELD_OUT),
                    help="networks checked once (batch 2, fp32) after the rules were fixed")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    rows = []
    print("network       batch prec  saved MiB meas/est (err)   keras-est  static meas/est  "
          "total meas/est (err)      peak meas/est (err)")
    plan = [(n, b, p) for n in args.networks for p in args.precisions for b in args.batches]
    plan += [(n, 2, "fp32") for n in args.held_out]
    for name, batch, precision in plan:
        peak = batch in args.peak_batches and precision in args.peak_precisions
        r = _row(name, batch, precision, peak)
        r["held_out"] = name in args.held_out
        rows.append(r)
        _print(r)
    published = _published()
    print("\nresnet50 (PyTorch), published DeepLearningExamples per-GPU batch vs estimate:")
    for p in published:
        print(f"  {p['gpu']:22s} {p['precision']:5s} batch {p['published_batch']:4d}: "
              f"{p['estimated_gib']:5.1f} GiB, fits={p['fits']}, max_batch={p['max_batch']}")
    t4 = estimate_memory("resnet50", batch_size=4096, gpu="T4")
    print(f"\nT4 x 4096 (framework tensorflow, fp32, sgd): {t4.summary()}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "published": published,
                                         "t4_4096": t4.as_dict()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
