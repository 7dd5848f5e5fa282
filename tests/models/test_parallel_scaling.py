"""Data-parallel steps per framework: DDP's buckets and overlap, DataParallel, TF replicated."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.deployment import Deployment
from models.replicated import shipped_scaling
from models.scaling import data_parallel_step
from models.torch_parallel import (
    MIB,
    DataParallelFit,
    Layer,
    buckets,
    ddp_step,
    gradient_allreduce_ms,
)

# a ResNet-like network: cheap early layers with few parameters, a big classifier at the end
NET = [Layer(ms=2.0, params=10_000 * (i + 1)) for i in range(50)] + [Layer(1.0, 2_000_000)]


def test_buckets_follow_the_backward_order_and_pytorch_caps():
    got = buckets(NET)
    assert sum(size for _, size in got) == pytest.approx(sum(x.params for x in NET) * 4)
    assert got[0][0] == len(NET) - 1  # the classifier's gradient comes first
    assert [first for first, _ in got] == sorted((first for first, _ in got), reverse=True)
    single = max(x.params * 4 for x in NET)
    assert got[0][1] <= max(1 * MIB, single)
    assert all(size <= 25 * MIB for _, size in got[1:])


def test_one_gpu_is_the_one_gpu_step():
    got = ddp_step(100.0, NET, Deployment("V100", 1))
    assert (got.ms, got.low_ms, got.high_ms, got.exposed_ms) == (100.0, 100.0, 100.0, 0.0)


def test_ddp_exposes_the_last_bucket_and_what_outlasts_the_backward_pass():
    dep = Deployment("V100", 8)
    got = ddp_step(100.0, NET, dep)
    last = gradient_allreduce_ms(buckets(NET)[-1][1] / 4, dep)
    assert got.exposed_ms >= last - 1e-9
    assert got.low_ms == 100.0 <= got.ms <= got.high_ms == pytest.approx(100.0 + got.allreduce_ms)
    # slower links or more GPUs expose more; a short backward pass hides less
    assert ddp_step(100.0, NET, Deployment("GeForce RTX 2080 Ti", 8)).exposed_ms > got.exposed_ms
    assert ddp_step(100.0, NET, Deployment("V100", 2)).exposed_ms <= got.exposed_ms
    assert ddp_step(1.0, NET, dep).exposed_ms > got.exposed_ms


def test_without_overlap_room_all_communication_shows():
    huge = [Layer(1.0, 50_000_000) for _ in range(4)]
    got = ddp_step(1.0, huge, Deployment("GeForce RTX 2080 Ti", 4))
    assert got.exposed_ms == pytest.approx(got.allreduce_ms - 2.0 / 3.0 * 0.25, rel=0.05)


def test_the_framework_picks_the_mechanism():
    layers = [{"ms": x.ms, "params": x.params} for x in NET]
    dep = Deployment("V100", 8)
    torch = data_parallel_step("pytorch", 100.0, dep, "fp16", layers)
    assert torch.strategy == "ddp" and torch.ms == ddp_step(100.0, NET, dep).ms
    assert data_parallel_step("TensorFlow", 100.0, dep, "fp16", layers).strategy == "allreduce"
    tf = data_parallel_step("TensorFlow", 100.0, dep, "fp16", layers, strategy="replicated")
    assert tf.strategy == "replicated"  # TF 1.x: asked for (or a TF 1.x stack, auto_strategy)
    tensors = sum(1 for x in NET if x.params)
    assert tf.ms == shipped_scaling().step(100.0, tf.allreduce_ms, 8, "fp16", tensors)[0]
    assert tf.ms > torch.ms  # TF 1.x replicated variables cost more than DDP's overlap
    dp = data_parallel_step("pytorch", 100.0, dep, "fp32", layers, strategy="dp")
    assert dp.strategy == "dp" and dp.ms > torch.ms
    with pytest.raises(ValueError, match="strategy"):
        data_parallel_step("pytorch", 100.0, dep, "fp32", layers, strategy="horovod")
    with pytest.raises(ValueError):
        data_parallel_step("jax", 100.0, dep, "fp32", layers)
    with pytest.raises(ValueError, match="positive"):
        ddp_step(0.0, NET, dep)


def test_dataparallel_fit_recovers_its_constants(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(80):
        gpus, layers = int(rng.integers(2, 5)), int(rng.integers(20, 300))
        s1, ar = float(rng.uniform(20, 200)), float(rng.uniform(1, 50))
        rows.append({"step1_ms": s1, "gpus": gpus, "layers": layers, "allreduce_ms": ar,
                     "step_ms": s1 + 0.15 * (gpus - 1) * layers + 0.8 * ar})
    fit = DataParallelFit().fit(rows)
    assert fit.layer_ms == pytest.approx(0.15) and fit.allreduce_factor == pytest.approx(0.8)
    assert fit.step(50.0, 1, 100, 10.0) == (50.0, 50.0, 50.0)
    loaded = DataParallelFit.load(fit.save(tmp_path / "dp.json"))
    assert loaded.to_dict() == fit.to_dict()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json"):
        DataParallelFit.load(tmp_path / "bad.json")


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_a_step_measured_on_four_gpus_moves_to_one_and_eight(framework):
    from models.scaling import rescale_parallel_step

    layers = [{"ms": 2.0, "params": 2e5}] * 60
    four, eight = Deployment("V100", 4), Deployment("V100", 8)
    measured = data_parallel_step(framework, 100.0, four, "fp32", layers).ms
    back = rescale_parallel_step(framework, measured, four, Deployment("V100", 1), "fp32", layers)
    assert back.ms == pytest.approx(100.0, rel=1e-6)
    on_eight = rescale_parallel_step(framework, measured, four, eight, "fp32", layers).ms
    assert on_eight == pytest.approx(data_parallel_step(framework, 100.0, eight, "fp32",
                                                        layers).ms, rel=1e-6)
