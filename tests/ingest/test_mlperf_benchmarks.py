"""Every MLPerf CNN benchmark's logs read right: iterations per epoch checked against the data
set and the global batch, network names that say what was trained, whole-job facts per run.

The logs are real result files (``tests/data/mlperf_benchmarks``, provenance in
tests/data/README.md), whole or cut as that README says; expected values are read plainly from
their records here, never from the parser.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from paths import DATA

from ingest.events import ParsedRun, ParseError
from ingest.parsers import detect, mlperf, registered
from ingest.parsers.mlperf.benchmarks import (
    BENCHMARKS,
    TOLERANCE,
    network_for,
    read_count,
)
from ingest.parsers.mlperf.jobfacts import job_facts
from ingest.parsers.mlperf.records import Event
from ingest.parsers.mlperf.repairs import Repairs
from ingest.parsers.mlperf.system import context_for
from ingest.pipeline import IngestOptions, parse_data

HERE = DATA / "mlperf_benchmarks"
RETINANET = HERE / "v4.0/Quanta_Cloud_Technology/results/D54U-3U/ssd/result_1.txt"
MASK_NV = HERE / "v3.0/NVIDIA/results/dgxh100_ngc23.04_pytorch/maskrcnn/result_0.txt"
MASK_GOOGLE = HERE / "v0.7/Google/results/tpu-v4-16-TF/maskrcnn/result_0.txt"
SSD_V06 = HERE / "v0.6/Google/results/tpu-v3-32/ssd/result_3.txt"
UNET_V40 = HERE / "v4.0/ASUSTeK/results/ESC8000A-E12-8xH100-PCIE-80GB/unet3d/result_1.txt"
UNET_V11 = HERE / "v1.1/NVIDIA/results/dgxa100_ngc21.09_mxnet/unet3d/result_00.txt"
UNET_HEAD = HERE / "v1.0/NVIDIA/results/dgxa100_n100_ngc21.05_mxnet/unet3d/result_0.txt"
RESNET = DATA / "mlperf/v0.7/NVIDIA/results/dgxa100_ngc20.06_mxnet/resnet/result_0.txt"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _one(lines: list[str], path: Path) -> ParsedRun:
    [run] = mlperf.parse(lines, context_for(path))
    return run


def _records(lines: list[str], key: str) -> list[tuple[int, float, object, dict]]:
    """(1-based line, unix time, value, metadata) of each record with ``key``, read plainly:
    ``:::MLLOG {json}`` or ``:::MLL <time> <key>: {json}``."""
    out = []
    for n, line in enumerate(lines, start=1):
        if line.startswith(":::MLLOG "):
            rec = json.loads(line[len(":::MLLOG "):])
            if rec["key"] == key:
                out.append((n, rec["time_ms"] / 1000.0, rec["value"], rec.get("metadata", {})))
        elif line.startswith(":::MLL "):
            _, stamp, name, payload = line.split(" ", 3)
            if name == f"{key}:":
                rec = json.loads(payload)
                out.append((n, float(stamp), rec["value"], rec.get("metadata", {})))
    return out


def _value(lines: list[str], key: str) -> object:
    return _records(lines, key)[0][2]


def _kinds(run: ParsedRun) -> set[str]:
    return {r["kind"] for r in run.meta.get("repairs", [])}


def _train(run: ParsedRun) -> list:
    return [s for s in run.segments if s.phase == "train"]


def _test(run: ParsedRun) -> list:
    return [s for s in run.segments if s.phase == "test"]


# ------------------------------------------------------------ iterations per epoch


def test_retinanet_batch_count_logged_as_train_samples_is_read_as_iterations() -> None:
    lines = _lines(RETINANET)
    batch, logged = _value(lines, "global_batch_size"), _value(lines, "train_samples")
    eval_logged = _value(lines, "eval_samples")
    assert (batch, logged, eval_logged) == (128, 9143, 194)  # the file as bundled
    # OpenImages-MLPerf holds 1,170,301 train / 24,781 eval images: these are batch counts
    assert logged == math.ceil(1_170_301 / batch) and eval_logged == math.ceil(24_781 / batch)
    run = _one(lines, RETINANET)
    assert run.network == "retinanet-resnext50"
    stop_line = _records(lines, "run_stop")[0][0]
    epochs = [e for e in _records(lines, "epoch_stop") if e[0] < stop_line]
    assert [s.iterations for s in _train(run)] == [logged] * len(epochs)
    assert {s.iterations for s in _test(run)} == {eval_logged}
    assert run.meta["steps_per_epoch"] == logged
    assert run.meta["train_samples"] == 1_170_301 and run.meta["train_samples_logged"] == logged
    assert run.meta["eval_samples"] == 24_781 and run.meta["eval_samples_logged"] == eval_logged
    assert "samples_as_batches" in _kinds(run)
    assert any("is a batch count" in w and "9143 iterations per epoch" in w
               for w in run.meta["warnings"])


def test_maskrcnn_schedule_length_logged_as_train_samples_uses_the_coco_size() -> None:
    lines = _lines(MASK_NV)
    batch, logged = _value(lines, "global_batch_size"), _value(lines, "train_samples")
    assert (batch, logged) == (96, 40000)  # len(data_loader) of the whole schedule
    run = _one(lines, MASK_NV)
    assert run.network == "maskrcnn-resnet50-fpn"
    [epoch] = _train(run)
    assert epoch.iterations == math.ceil(117_266 / batch)  # 1222, not ceil(40000/96) = 417
    assert run.meta["train_samples"] == 117_266
    [rep] = [r for r in run.meta["repairs"] if r["kind"] == "dataset_size_used"]
    assert rep["line"] == _records(lines, "train_samples")[0][0]


@pytest.mark.parametrize(("logged", "size", "batch", "accelerators", "how", "steps"), [
    (4572, 1_170_301, 256, 8, "batches", 4572),        # RetinaNet v2.0+, NVIDIA
    (4571, 1_170_301, 256, 16, "batches", 4571),       # Intel: the last partial batch dropped
    (1_170_301, 1_170_301, 2048, 256, "samples", 572),  # Google v2.0 logs images
    (97, 24_781, 256, 8, "batches", 97),
    (160_000, 1_281_167, 2048, 8, "per_accelerator", 625),  # Ailiverse v3.1 (Composer)
    (40_000, 117_266, 96, 8, "dataset", 1222),         # Mask R-CNN: the schedule's batches
    (1, 5_000, 96, 8, "dataset", 53),
    (118_287, 117_266, 256, 8, "samples", 463),        # all of COCO train2017
    (65_536, 50_000, 32_768, 512, "samples", 2),       # an eval padded to whole batches
    (168, 168, 56, 8, "samples", 3),                   # UNet3D
    (42, 42, 56, 8, "samples", 1),
    (20, None, 256, 8, "batches", 20),                 # no known data set: << the batch
    (97, None, 256, 8, "samples", 1),
    (5000, None, 256, 8, "samples", 20),
    (None, 117_266, 1024, 16, "assumed", 115),
])
def test_count_readings(logged, size, batch, accelerators, how, steps) -> None:
    count = read_count(logged, size, batch, accelerators)
    assert (count.how, count.steps) == (how, steps)


@given(logged=st.integers(1, 10**8), batch=st.integers(1, 70_000),
       accelerators=st.one_of(st.none(), st.integers(1, 10_000)),
       bench=st.sampled_from(BENCHMARKS), train=st.booleans())
def test_an_epoch_never_has_fewer_iterations_than_its_data_set_allows(
        logged, batch, accelerators, bench, train) -> None:
    size = bench.train_samples if train else bench.eval_samples
    count = read_count(logged, size, batch, accelerators)
    assert count.steps >= math.floor(size * (1 - TOLERANCE) / batch)
    assert count.steps >= 1 and count.samples >= 1


# ------------------------------------------------------------ network names


@pytest.mark.parametrize(("path", "network"), [
    (RESNET, "resnet50"),
    (SSD_V06, "ssd-resnet34"),
    (RETINANET, "retinanet-resnext50"),
    (MASK_GOOGLE, "maskrcnn-resnet50-fpn"),
    (MASK_NV, "maskrcnn-resnet50-fpn"),
    (UNET_V40, "unet3d"),
    (UNET_V11, "unet3d"),
])
def test_network_names_say_what_was_trained(path: Path, network: str) -> None:
    [run] = mlperf.parse(_lines(path), context_for(path))
    assert run.network == network


@pytest.mark.parametrize(("args", "network"), [
    (("ssd", "v1.1", "v0.7+", 117_266, 32), "ssd-resnet34"),
    (("ssd", "v2.0", "v0.7+", 4572, 256), "retinanet-resnext50"),
    (("SSD", None, "v0.7+", 4572, 256), "retinanet-resnext50"),  # no round: the data decides
    (("ssd", None, "v0.7+", 117_266, 32), "ssd-resnet34"),
    (("ssd", None, "v0.6", None, 32), "ssd-resnet34"),  # v0.6 log generation: SSD only
    (("ssd", None, "v0.7+", None, 32), "ssd"),  # nothing tells: the logged name is kept
    (("resnet", None, None, None, 256), "resnet50"),
    (("ResNet50_v1.5", None, None, None, 256), "resnet50"),
    (("maskrcnn", "v3.1", None, None, 96), "maskrcnn-resnet50-fpn"),
    (("unet3d", "v4.0", None, None, 56), "unet3d"),
    (("bert", "v4.0", None, None, 56), "bert"),
])
def test_network_for(args, network) -> None:
    assert network_for(*args)[0] == network


# ------------------------------------------------------------ whole-job facts


def _check_job_facts(lines: list[str], run: ParsedRun) -> None:
    meta = run.meta
    t = {k: _records(lines, k)[0][1] for k in ("init_start", "init_stop", "run_start",
                                                "run_stop")}
    for key, value in t.items():
        assert meta[key] == value
    assert meta["init_seconds"] == pytest.approx(t["run_start"] - t["init_start"])
    assert meta["run_seconds"] == pytest.approx(t["run_stop"] - t["run_start"])
    train, test = sum(s.seconds for s in _train(run)), sum(s.seconds for s in _test(run))
    assert meta["train_seconds"] == pytest.approx(train)
    assert meta["eval_seconds"] == pytest.approx(test)
    # the run's time = train + eval - eval beside training + the time between phases
    assert meta["run_seconds"] == pytest.approx(
        train + test - meta["eval_overlap_seconds"] + meta["gap_seconds"], abs=1e-6)
    assert meta["epochs_trained"] == sum(s.epoch_end - s.epoch_start + 1 for s in _train(run))
    assert meta["evals"] == len(_records(lines, "eval_accuracy"))
    for key in ("init_seconds", "run_seconds", "train_seconds", "eval_seconds",
                "eval_overlap_seconds", "gap_seconds"):
        assert math.isfinite(meta[key]) and meta[key] >= 0


def test_whole_job_facts_of_a_resnet_run() -> None:
    lines = _lines(RESNET)
    run = _one(lines, RESNET)
    _check_job_facts(lines, run)
    assert run.meta["eval_overlap_seconds"] == 0  # NVIDIA MXNet evaluates between epochs
    assert run.meta["epochs_trained"] == len(_records(lines, "epoch_stop"))


def test_whole_job_facts_of_a_detection_run() -> None:
    lines = _lines(RETINANET)
    run = _one(lines, RETINANET)
    _check_job_facts(lines, run)
    # NVIDIA's detection code evaluates while the next epoch trains: eval_stop after the
    # next epoch_start
    epochs = [t for _, t, _, _ in _records(lines, "epoch_start")]
    evals = zip(_records(lines, "eval_start"), _records(lines, "eval_stop"), strict=True)
    beside = [(a[1], b[1]) for a, b in evals if any(a[1] < t < b[1] for t in epochs)]
    assert beside and run.meta["eval_overlap_seconds"] > 0
    # the epoch_stop logged after run_stop belongs to no run
    assert "after_run_stop" in _kinds(run)


def test_job_facts_never_store_a_negative_span() -> None:
    def ev(key: str, t: float, line: int) -> Event:
        return Event(key, t, None, {}, line)

    fix = Repairs()
    run = [ev("init_start", 100.0, 1), ev("init_stop", 90.0, 2), ev("run_stop", 95.0, 9)]
    facts = job_facts(run, [], 0, 0.001, [], fix)  # no run_start: init_start..init_stop
    assert facts["init_seconds"] is None and facts["run_seconds"] is None
    assert [r.kind for r in fix.items] == ["phase_order"]


def test_a_run_start_stamped_before_its_header_times_nothing() -> None:
    """Google's v0.7 tpu-v3-8192 SSD log stamps run_start 1592800000000 ms, 15 h before the
    records above it: here the same done to a real ResNet log."""
    lines = _lines(RESNET)
    clean = _one(lines, RESNET)
    n, t, _, _ = _records(lines, "run_start")[0]
    lines[n - 1] = lines[n - 1].replace(f'"time_ms": {round(t * 1000)}',
                                        f'"time_ms": {round(t * 1000) - 55_321_000}')
    run = _one(lines, RESNET)
    assert run.meta["run_start"] is None and run.meta["run_seconds"] is None
    assert run.meta["init_seconds"] == pytest.approx(
        clean.meta["init_stop"] - clean.meta["init_start"])  # the header keeps its times
    assert [(s.seconds, s.iterations) for s in run.segments] == [
        (s.seconds, s.iterations) for s in clean.segments]
    [rep] = [r for r in run.meta["repairs"] if r["kind"] == "out_of_order_mark"]
    assert rep["line"] == n


# ------------------------------------------------------------ UNet3D


def test_unet3d_epochs_logged_in_samples() -> None:
    lines = _lines(UNET_V40)
    spe, batch = _value(lines, "samples_per_epoch"), _value(lines, "global_batch_size")
    blocks = _records(lines, "block_start")
    stop_line = _records(lines, "run_stop")[0][0]
    in_run = [b for b in blocks if b[0] < stop_line]
    assert (spe, batch, in_run[0][3]["epoch_count"]) == (168, 56, 3360)  # 20 epochs of 168
    run = _one(lines, UNET_V40)  # one run: the block after run_stop is none
    train = _train(run)
    assert len(train) == len(in_run)
    assert {s.iterations for s in train} == {20 * math.ceil(168 / batch)}  # 60, not 10080
    assert run.meta["epochs_trained"] == sum(b[3]["epoch_count"] for b in in_run) / spe
    assert run.meta["eval_every_epochs"] == 20
    assert _test(run)[-1].epoch_start == _records(lines, "eval_start")[-1][3]["epoch_num"] / spe
    assert {"epochs_in_samples", "after_run_stop"} <= _kinds(run)
    assert run.meta["run_seconds"] == pytest.approx(
        _records(lines, "run_stop")[0][1] - _records(lines, "run_start")[0][1])


def test_unet3d_block_stops_numbered_with_the_last_epoch() -> None:
    lines = _lines(UNET_V11)  # the first 46 lines: four blocks of 20 epochs
    starts, stops = _records(lines, "block_start"), _records(lines, "block_stop")
    assert [s[3]["first_epoch_num"] for s in starts] == [1, 20, 40, 60]
    assert [s[3]["first_epoch_num"] for s in stops] == [20, 40, 60, 80]
    run = _one(lines, UNET_V11)
    train = _train(run)
    assert [s.seconds for s in train] == pytest.approx(
        [b[1] - a[1] for a, b in zip(starts, stops, strict=True)], abs=1e-6)
    assert {s.iterations for s in train} == {20 * 168 / 56}
    assert "mismatched_block_stop" in _kinds(run)
    assert run.meta["truncated"] and run.meta["run_seconds"] is None  # cut before run_stop


def test_unet3d_log_whose_records_start_after_one_line_per_node_is_detected() -> None:
    lines = _lines(UNET_HEAD)  # the first 40 lines: 'Beginning trial', cache clearing
    assert not any(":::ML" in line for line in lines)
    assert mlperf.sniff(lines)
    assert detect(lines, registered()) is mlperf
    with pytest.raises(ParseError, match="no MLPerf log records"):
        mlperf.parse(lines, context_for(UNET_HEAD))


# ------------------------------------------------------------ detection quirks


def test_pipelined_tpu_runner_blocks_end_where_the_next_block_starts() -> None:
    lines = _lines(SSD_V06)
    starts = _records(lines, "block_start")
    stop_line = _records(lines, "run_stop")[0][0]
    run = _one(lines, SSD_V06)
    assert run.network == "ssd-resnet34"
    assert run.meta["train_samples_assumed"] and run.meta["steps_per_epoch"] == math.ceil(
        117_266 / _value(lines, "global_batch_size"))
    train = _train(run)
    closed = [(a, b) for a, b in zip(starts, starts[1:], strict=False) if b[0] < stop_line]
    assert [s.seconds for s in train] == pytest.approx(
        [b[1] - a[1] for a, b in closed], abs=1e-6)
    assert all(s.seconds > 1 for s in train)  # not cut at the eval queued at its start
    assert {"late_block_stop", "after_run_stop"} <= _kinds(run)
    assert "unclosed_block" not in _kinds(run)


def test_maskrcnn_accuracy_is_a_mapping_of_metrics() -> None:
    lines = _lines(MASK_GOOGLE)
    last = _records(lines, "eval_accuracy")[-1][2]
    run = _one(lines, MASK_GOOGLE)
    assert run.meta["final_eval_accuracy"] == {k.lower(): v for k, v in last.items()}
    assert run.meta["train_samples"] == _value(lines, "train_samples")  # images: as logged


def test_an_eval_logged_in_one_instant_gives_no_test_segment() -> None:
    """NVIDIA's v0.7 SSD logs its asynchronous evals' start, accuracy and stop in one
    millisecond (at the stop); here the same done to the second eval of a real ResNet log."""
    lines = _lines(RESNET)
    clean = _one(lines, RESNET)
    n0, t0, _, _ = _records(lines, "eval_start")[1]
    n1, t1, _, _ = _records(lines, "eval_stop")[1]
    lines[n0 - 1] = lines[n0 - 1].replace(f'"time_ms": {round(t0 * 1000)}',
                                          f'"time_ms": {round(t1 * 1000)}')
    data = "\n".join(lines).encode()
    parsed = parse_data(str(RESNET), RESNET, data, IngestOptions(), registered())  # stored whole
    [run] = parsed.runs
    assert len(_test(run)) == len(_test(clean)) - 1
    gone = _test(clean)[1]
    assert all(s.seconds > 0 for s in run.segments)
    # the epoch before it now runs to the next epoch_start: it takes the eval's time
    assert sum(s.seconds for s in _train(run)) == pytest.approx(
        sum(s.seconds for s in _train(clean)) + gone.seconds, abs=1e-6)
    [rep] = [r for r in run.meta["repairs"] if r["kind"] == "instant_eval"]
    assert rep["line"] == n0
