"""MLPerf Training log parser and layout, on real result logs of v0.5 to v4.0."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from paths import DATA as SAMPLES
from paths import SHARED_LOGS

from ingest.events import ParseContext, ParsedRun, ParseError
from ingest.parsers import mlperf
from ingest.parsers.mlperf.system import context_for, layout_parts, load_system

DATA = SAMPLES / "mlperf"
REAL = SHARED_LOGS / "mlperf"

V05 = "v0.5/v0.5.0/nvidia/submission/results/dgx1_ngc18.11_mxnet/resnet/result_0.txt"
V06 = "v0.6/NVIDIA/results/dgx1_ngc19.05_mxnet/resnet/result_2.txt"
V07 = "v0.7/NVIDIA/results/dgxa100_ngc20.06_mxnet/resnet/result_0.txt"
GOOGLE = "v1.0/Google/results/tpu-v4-128-TF/resnet/result_0.txt"
HABANA = "v3.1/Intel-HabanaLabs/results/HLS-Gaudi2-PT/resnet/result_0.txt"
TINY_NO_STOP = "v4.0/tinycorp/results/tinybox_green/resnet/result_0.txt"
TINY = "v4.0/tinycorp/results/tinybox_green/resnet/result_1.txt"
IMAGENET = 1_281_167


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _parse(rel: str) -> tuple[list[str], ParsedRun]:
    path = DATA / rel
    lines = _lines(path)
    runs = mlperf.parse(lines, context_for(path))
    assert len(runs) == 1
    return lines, runs[0]


def _raw(lines: list[str], key: str) -> list[tuple[int, float, dict, object]]:
    """(line, unix time, metadata, value) of every record with this key, read plainly."""
    out = []
    for n, line in enumerate(lines, start=1):
        if line.startswith(":::MLLOG "):
            rec = json.loads(line[len(":::MLLOG "):])
            if rec["key"] == key:
                out.append((n, rec["time_ms"] / 1000.0, rec.get("metadata", {}), rec["value"]))
        elif line.startswith(":::MLL "):
            _, ts, k, payload = line.split(" ", 3)
            if k == key + ":":
                rec = json.loads(payload)
                out.append((n, float(ts), rec.get("metadata", {}), rec["value"]))
        elif line.startswith(":::MLPv0.5.0 "):
            parts = line.split(" ", 4)  # marker, benchmark, time, (file:line), rest
            k, _, value = parts[4].partition(": ")
            if k == key:
                out.append((n, float(parts[2]), {}, json.loads(value) if value else None))
    return out


def _phase(run: ParsedRun, phase: str):
    return [s for s in run.segments if s.phase == phase]


def _end(seg) -> float:
    return seg.start_time + seg.seconds


def _check_points(run: ParsedRun) -> None:
    for seg in run.segments:
        assert seg.points, "every segment ends with its own (iterations, seconds) point"
        assert seg.points[-1] == (seg.iterations, seg.seconds)
        its = [p[0] for p in seg.points]
        secs = [p[1] for p in seg.points]
        assert its == sorted(its) and len(set(its)) == len(its)
        assert secs == sorted(secs)
        assert all(0 <= s <= seg.seconds for s in secs)


# ---------------------------------------------------------------- sniff


def test_sniff_recognises_each_generation() -> None:
    for rel in (V05, V06, V07, GOOGLE, TINY):
        assert mlperf.sniff(_lines(DATA / rel)[:200]), rel


def test_sniff_rejects_other_formats() -> None:
    others = [
        "I0402 07:44:16.590070 12345 solver.cpp:228] Iteration 100, loss = 2.3",
        "Epoch 1/10",
        "1875/1875 [==============================] - 12s 6ms/step - loss: 0.29",
        "100\timages/sec: 2345.6 +/- 1.2 (jitter = 3.4)\t7.123 1556011234",
        '{"phase": "train", "iterations": 100, "seconds": 12.5}',
        "Batch size: 256 global",
    ]
    assert not mlperf.sniff(others)
    if REAL.parent.is_dir():
        for path in REAL.parent.rglob("*"):
            if path.is_file() and REAL not in path.parents:
                head = path.read_text(errors="replace").splitlines()[:200]
                assert not mlperf.sniff(head), path


# ---------------------------------------------------------------- v0.5


def test_v05_epochs_evals_and_times() -> None:
    lines, run = _parse(V05)
    marks = _raw(lines, "train_epoch")
    starts, stops = _raw(lines, "eval_start"), _raw(lines, "eval_stop")
    train, test = _phase(run, "train"), _phase(run, "test")
    assert len(train) == len(marks) > 0
    assert len(test) == len(starts) == len(stops) > 0
    assert [s.epoch_start for s in train] == [float(m[3]) for m in marks]
    assert train[0].start_time == marks[0][1]
    # an epoch ends at the next record: the first ends where epoch 1 starts
    assert _end(train[0]) == pytest.approx(marks[1][1])
    assert test[0].start_time == starts[0][1]
    assert _end(test[-1]) == pytest.approx(stops[-1][1])
    assert run.meta["log_generation"] == "v0.5"
    assert run.meta["mlperf_version"] == "v0.5"
    assert run.meta["status"] is None  # v0.5 run_stop carries no status
    assert run.meta["warmup_epoch"] == train[0].epoch_start
    assert run.meta["evals"] == len(starts)


def test_v05_global_batch_is_per_gpu_times_gpus() -> None:
    lines, run = _parse(V05)
    per_gpu = _raw(lines, "input_batch_size")[0][3]
    assert run.meta["per_accelerator_batch_size"] == per_gpu
    dep = run.deployment
    assert dep is not None and dep.per_node * dep.nodes > 1
    assert run.batch_size == per_gpu * dep.per_node * dep.nodes
    train_samples = _raw(lines, "preproc_num_train_examples")[0][3]
    assert run.meta["train_samples"] == train_samples
    for seg in _phase(run, "train"):
        assert seg.iterations == math.ceil(train_samples / run.batch_size)
        assert seg.batch_size == run.batch_size
    eval_samples = _raw(lines, "preproc_num_eval_examples")[0][3]
    for seg in _phase(run, "test"):
        assert seg.iterations == math.ceil(eval_samples / run.batch_size)


def test_v05_network_deployment_framework_from_entry_json() -> None:
    _, run = _parse(V05)
    entry = json.loads((DATA / V05).parents[1].joinpath("entry.json").read_text())
    node = entry["nodes"][0]
    assert run.network == "resnet50"
    assert run.deployment.per_node == node["num_accelerators"]
    assert run.deployment.nodes == node["num_nodes"]
    assert run.deployment.key.startswith("nvidia-v100")
    assert run.stack == entry["framework"]
    assert run.meta["submitter"] == "nvidia"


def test_v05_without_system_needs_a_batch_size() -> None:
    lines = _lines(DATA / V05)
    with pytest.raises(ParseError) as err:
        mlperf.parse(lines, ParseContext())
    assert err.value.line == _raw(lines, "input_batch_size")[0][0]
    assert "input_batch_size" in err.value.reason
    run = mlperf.parse(lines, ParseContext(batch_size=4096))[0]
    assert run.batch_size == 4096 and run.deployment is None


def test_v05_eval_without_stop_ends_at_next_record() -> None:
    lines = [ln for ln in _lines(DATA / V05) if " eval_stop" not in ln]
    run = mlperf.parse(lines, context_for(DATA / V05))[0]
    test = _phase(run, "test")
    assert len(test) == len(_raw(lines, "eval_start"))
    marks = {m[1] for m in _raw(lines, "train_epoch")} | {_raw(lines, "run_stop")[0][1]}
    for seg in test:
        assert any(_end(seg) == pytest.approx(t) for t in marks)


def test_v05_marks_sharing_a_timestamp_form_one_segment() -> None:
    """Google v0.5 logs several train_epoch marks at once: one segment spans them."""
    lines = _lines(DATA / V05)
    marks = _raw(lines, "train_epoch")
    t0 = lines[marks[0][0] - 1].split(" ")[2]
    for n, *_ in marks[1:3]:  # epochs 1 and 2 logged at the time of epoch 0
        parts = lines[n - 1].split(" ")
        parts[2] = t0
        lines[n - 1] = " ".join(parts)
    run = mlperf.parse(lines, context_for(DATA / V05))[0]
    first = _phase(run, "train")[0]
    assert (first.epoch_start, first.epoch_end) == (0.0, 2.0)
    assert first.iterations == 3 * run.meta["steps_per_epoch"]
    assert len(_phase(run, "train")) == len(marks) - 2


# ---------------------------------------------------------------- v0.6


def test_v06_epochs_evals_and_times() -> None:
    lines, run = _parse(V06)
    starts, stops = _raw(lines, "epoch_start"), _raw(lines, "epoch_stop")
    ev_starts, ev_stops = _raw(lines, "eval_start"), _raw(lines, "eval_stop")
    train, test = _phase(run, "train"), _phase(run, "test")
    assert len(train) == len(starts) == len(stops) > 0
    assert len(test) == len(ev_starts) == len(ev_stops) > 0
    assert train[0].start_time == starts[0][1]
    assert _end(train[-1]) == pytest.approx(stops[-1][1])
    assert _end(test[-1]) == pytest.approx(ev_stops[-1][1])
    assert [s.epoch_start for s in train] == [m[2]["epoch_num"] for m in starts]
    assert run.batch_size == _raw(lines, "global_batch_size")[0][3]
    # v0.6 logs no dataset sizes: ImageNet's are assumed and said so
    assert run.meta["train_samples_assumed"] and run.meta["train_samples"] == IMAGENET
    assert train[0].iterations == math.ceil(IMAGENET / run.batch_size)
    assert run.meta["status"] == "success"
    assert run.meta["mlperf_version"] == "v0.6"
    assert run.meta["eval_every_epochs"] > 1


def test_v06_duplicate_rank_lines_are_dropped() -> None:
    lines, run = _parse(V06)
    assert len(_raw(lines, "init_start")) > 1
    assert run.meta["duplicate_records_dropped"] >= len(_raw(lines, "init_start")) - 1


def test_v06_system_file_lines_give_deployment() -> None:
    _, run = _parse(V06)
    assert run.deployment is not None
    assert run.deployment.key == "nvidia-v100-sxm2-16gb-x8"
    assert run.stack == "MXNet NVIDIA Release 19.05"


def test_v06_mxnet_display_lines_give_points() -> None:
    lines, run = _parse(V06)
    _check_points(run)
    train = _phase(run, "train")
    assert all(len(s.points) > 2 for s in train)
    assert run.meta["display_clock_offset_s"] % 900 == 0
    # the marks lie on a steady pace: the mid-epoch mark is near half the epoch time
    seg = train[len(train) // 2]
    mid = seg.points[len(seg.points) // 2]
    assert 0.3 < (mid[1] / seg.seconds) / (mid[0] / seg.iterations) < 3


# ---------------------------------------------------------------- v0.7+


def test_v07_epochs_evals_times_and_system() -> None:
    lines, run = _parse(V07)
    assert all('"event_type"' in ln for ln in lines if ln.startswith(":::MLLOG"))
    starts = _raw(lines, "epoch_start")
    ev_stops = _raw(lines, "eval_stop")
    train, test = _phase(run, "train"), _phase(run, "test")
    assert len(train) == len(starts) > 0 and len(test) == len(ev_stops) > 0
    assert train[0].start_time == starts[0][1]
    assert _end(test[-1]) == ev_stops[-1][1]
    assert run.start_time == _raw(lines, "run_start")[0][1]
    assert run.meta["run_stop"] == _raw(lines, "run_stop")[0][1]
    assert run.meta["train_samples"] == _raw(lines, "train_samples")[0][3]
    assert "train_samples_assumed" not in run.meta
    assert run.deployment.key == "nvidia-a100-sxm4-40gb-x8"  # "(400W)" note dropped
    assert run.stack == "MXNet NVIDIA Release 20.06"
    assert run.meta["mlperf_version"] == "v0.7"
    assert run.meta["system"] == "NVIDIA/dgxa100_ngc20.06_mxnet"  # submitter/system
    assert run.first_line == next(n for n, ln in enumerate(lines, 1) if ln.startswith(":::"))
    assert run.last_line == _raw(lines, "run_stop")[0][0]
    _check_points(run)


def test_google_blocks_without_event_type() -> None:
    lines, run = _parse(GOOGLE)
    assert not any('"event_type"' in ln for ln in lines)
    blocks = _raw(lines, "block_start")
    train = _phase(run, "train")
    assert len(train) == len(blocks) > 0
    assert _phase(run, "test") == []  # Google logs no eval_start/eval_stop
    assert run.meta["train_includes_eval"] is True
    steps = math.ceil(_raw(lines, "train_samples")[0][3] / run.batch_size)
    for seg, (_, t, meta, _) in zip(train, blocks, strict=True):
        assert seg.start_time == t
        assert seg.epoch_start == meta["first_epoch_num"]
        assert seg.epoch_end - seg.epoch_start + 1 == meta["epoch_count"]
        assert seg.iterations == meta["epoch_count"] * steps
    assert _end(train[-1]) == _raw(lines, "block_stop")[-1][1]
    assert run.deployment.key == "google-tpu-v4-x4-n16"  # generation from the system name
    assert run.stack == "TensorFlow"


def test_habana_blocks_end_where_their_eval_starts() -> None:
    lines, run = _parse(HABANA)
    blocks, evals = _raw(lines, "block_start"), _raw(lines, "eval_start")
    train, test = _phase(run, "train"), _phase(run, "test")
    assert len(train) == len(blocks) and len(test) == len(evals) > 0
    for seg, (_, t, meta, _) in zip(train, blocks, strict=True):
        assert seg.start_time == t
        assert seg.epoch_end - seg.epoch_start + 1 == meta["epoch_count"]
    for seg, ev in zip(train, evals, strict=True):
        assert _end(seg) == ev[1]
    assert "train_includes_eval" not in run.meta
    assert run.deployment.key == "habana-gaudi2-x8"


def test_tinycorp_point_in_time_epoch_stop() -> None:
    lines, run = _parse(TINY)
    stops = _raw(lines, "epoch_stop")
    assert len(_phase(run, "train")) == len(stops) > 0
    # the last epoch ends where the eval after it starts, 1 ms after its epoch_stop
    last_eval = _raw(lines, "eval_start")[-1][1]
    assert 0 <= last_eval - stops[-1][1] < 0.01
    assert _end(_phase(run, "train")[-1]) == last_eval
    assert run.meta["status"] == "success" and not run.meta["truncated"]
    assert run.stack.startswith("tinygrad")


def test_tinycorp_run_without_run_stop_keeps_its_epochs() -> None:
    lines, run = _parse(TINY_NO_STOP)
    assert _raw(lines, "run_stop") == []
    assert len(_phase(run, "train")) == len(_raw(lines, "epoch_stop"))
    assert len(_phase(run, "test")) == len(_raw(lines, "eval_stop"))
    assert run.meta["run_stop"] is None and run.meta["status"] is None
    assert run.meta["truncated"] is True


def test_first_train_segment_is_flagged_as_warmup() -> None:
    _, run = _parse(TINY)
    first = _phase(run, "train")[0]
    assert run.meta["warmup_epoch"] == first.epoch_start
    assert run.meta["first_segment_slowdown"] > 1  # tinygrad's first epoch compiles


# ---------------------------------------------------------------- quirks


def test_lines_copied_by_several_ranks_change_nothing() -> None:
    lines = _lines(DATA / GOOGLE)
    ctx = context_for(DATA / GOOGLE)
    doubled = [copy for ln in lines for copy in (ln, ln)]
    once, twice = mlperf.parse(lines, ctx)[0], mlperf.parse(doubled, ctx)[0]
    assert [(s.start_time, s.seconds) for s in twice.segments] == [
        (s.start_time, s.seconds) for s in once.segments]


def test_noise_and_rank_labels_are_tolerated() -> None:
    lines = _lines(DATA / TINY)
    noisy = []
    for ln in lines:
        noisy += ["slurmstepd: task_p_pre_launch: Using sched_affinity for tasks", "0: " + ln,
                  "WARNING: something harmless", ""]
    a = mlperf.parse(lines, ParseContext())[0]
    b = mlperf.parse(noisy, ParseContext())[0]
    assert [s.seconds for s in a.segments] == [s.seconds for s in b.segments]


def test_two_runs_in_one_file() -> None:
    first = _lines(DATA / TINY_NO_STOP)  # earlier run, ends without run_stop
    second = _lines(DATA / TINY)
    runs = mlperf.parse(first + second, ParseContext())
    assert len(runs) == 2
    assert runs[0].last_line == len(first)
    assert runs[1].first_line == len(first) + 1
    assert len(runs[1].segments) == len(mlperf.parse(second, ParseContext())[0].segments)


# ---------------------------------------------------------------- errors


def test_file_cut_mid_record_is_an_error_on_that_line() -> None:
    lines = _lines(DATA / V07)
    n = _raw(lines, "epoch_stop")[7][0]
    cut = lines[: n - 1] + [lines[n - 1][:30]]
    assert cut[-1].startswith(":::MLLOG")
    with pytest.raises(ParseError) as err:
        mlperf.parse(cut, ParseContext())
    assert err.value.line == len(cut)
    assert "cut off" in err.value.reason


def test_garbled_json_line_is_an_error_on_that_line() -> None:
    for rel in (V06, V07):
        lines = _lines(DATA / rel)
        n = _raw(lines, "epoch_stop")[3][0]
        lines[n - 1] = lines[n - 1].replace('"metadata"', '"metadata', 1)
        with pytest.raises(ParseError) as err:
            mlperf.parse(lines, ParseContext())
        assert err.value.line == n, rel
        assert "JSON" in err.value.reason


def test_cut_v05_record_is_an_error() -> None:
    lines = _lines(DATA / V05)
    n = _raw(lines, "train_epoch")[5][0]
    lines[n - 1] = lines[n - 1][:25]
    with pytest.raises(ParseError) as err:
        mlperf.parse(lines, context_for(DATA / V05))
    assert err.value.line == n


def test_run_killed_mid_epoch_keeps_complete_segments() -> None:
    lines = _lines(DATA / V07)
    starts = _raw(lines, "epoch_start")
    cut = lines[: starts[10][0] + 5]  # inside epoch 11, at a line boundary
    run = mlperf.parse(cut, ParseContext())[0]
    assert len(_phase(run, "train")) == 10
    assert run.meta["truncated"] is True


def test_non_numeric_batch_size_is_an_error() -> None:
    lines = _lines(DATA / TINY)
    n = _raw(lines, "global_batch_size")[0][0]
    lines[n - 1] = re.sub(r'"value": \d+', '"value": "big"', lines[n - 1])
    with pytest.raises(ParseError) as err:
        mlperf.parse(lines, ParseContext())
    assert err.value.line == n and "global_batch_size" in err.value.reason


def test_time_going_backwards_is_an_error() -> None:
    lines = _lines(DATA / TINY)
    n, t, _, _ = _raw(lines, "epoch_stop")[2]
    lines[n - 1] = lines[n - 1].replace(str(int(t * 1000)), str(int(t * 1000) - 3_600_000))
    with pytest.raises(ParseError) as err:
        mlperf.parse(lines, ParseContext())
    assert err.value.line == n


def test_stop_that_does_not_match_is_an_error() -> None:
    lines = _lines(DATA / TINY)
    n = _raw(lines, "epoch_stop")[4][0]
    lines[n - 1] = lines[n - 1].replace('"epoch_num": 5', '"epoch_num": 9')
    with pytest.raises(ParseError) as err:
        mlperf.parse(lines, ParseContext())
    assert err.value.line == n


def test_log_without_records_or_training_is_an_error() -> None:
    with pytest.raises(ParseError):
        mlperf.parse(["hello", "world"], ParseContext())
    header = [ln for ln in _lines(DATA / TINY) if '"key": "epoch_' not in ln
              and '"key": "eval_' not in ln]
    with pytest.raises(ParseError) as err:
        mlperf.parse(header, ParseContext())
    assert "training" in err.value.reason


# ---------------------------------------------------------------- layout


def test_layout_finds_each_kind_of_system_file() -> None:
    v05 = context_for(DATA / V05)
    assert v05.described_in.endswith("entry.json")
    assert v05.version == "v0.5"
    v06 = context_for(DATA / V06)
    assert isinstance(v06.system["entry"]["nodes"], dict)  # Python literals decoded
    v07 = context_for(DATA / V07)
    assert v07.submitter == "NVIDIA"
    assert not any(str(k).startswith("_") for k in v07.system)  # typed fields, no bag keys
    assert v07.folder_network == "resnet"
    assert v07.folder_system == "dgxa100_ngc20.06_mxnet"
    assert layout_parts(Path("/tmp/some.log")) is None
    assert context_for(Path("/tmp/some.log")).system is None


def test_layout_with_spaces_in_folder_names(tmp_path: Path) -> None:
    org = tmp_path / "training results v1.0" / "Some Org"
    log = org / "results" / "tpu v4 128" / "resnet" / "result_0.txt"
    log.parent.mkdir(parents=True)
    shutil.copy(DATA / GOOGLE, log)
    (org / "systems").mkdir()
    system = DATA / "v1.0/Google/systems/tpu-v4-128-TF.json"
    shutil.copy(system, org / "systems" / "tpu v4 128.json")
    ctx = context_for(log)
    assert ctx.folder_system == "tpu v4 128"
    assert ctx.version == "v1.0"
    run = mlperf.parse(_lines(log), ctx)[0]
    assert run.deployment is not None and run.meta["submitter"] == "Some Org"


def test_layout_malformed_system_json_names_the_file(tmp_path: Path) -> None:
    org = tmp_path / "Org"
    log = org / "results" / "box" / "resnet" / "result_0.txt"
    log.parent.mkdir(parents=True)
    shutil.copy(DATA / TINY, log)
    (org / "systems").mkdir()
    bad = org / "systems" / "box.json"
    bad.write_text('{\n  "submitter": "Org",\n  "number_of_nodes": 1\n  "x": 2\n}\n')
    with pytest.raises(ParseError) as err:
        context_for(log)
    assert err.value.source == str(bad)
    assert err.value.line == 4
    assert str(bad) in str(err.value)


def test_layout_missing_system_file_still_parses(tmp_path: Path) -> None:
    log = tmp_path / "Org" / "results" / "box" / "resnet" / "result_0.txt"
    log.parent.mkdir(parents=True)
    shutil.copy(DATA / TINY, log)
    ctx = context_for(log)
    assert ctx.system is None and ctx.folder_network == "resnet"
    run = mlperf.parse(_lines(log), ctx)[0]
    assert run.deployment is None and run.stack is None
    assert run.network == "resnet50" and run.meta["system"] == "Org/box"


def test_system_descriptions_with_quirks() -> None:
    dell = load_system(DATA / "v0.7/DellEMC/systems/C4140.json")
    assert "number_of_nodes" not in dell  # Dell EMC writes "number of nodes"
    dep = mlperf.system_deployment(dell)
    assert dep is not None and dep.key == "nvidia-v100-sxm2-32gb-x4"
    assert "," in dell["framework"]  # one system file for several stacks
    assert mlperf.system_framework(dell, {"mxnet"}) == "NGC MXNet 20.06"
    assert mlperf.system_framework(dell, set()) == dell["framework"].strip()
    no_count = {"accelerator_model_name": "X", "accelerators_per_node": ""}
    assert mlperf.system_deployment(no_count) is None
    # MLPerf v5.0 (Dell XE9680L, as filed): the part is in the parenthesised note
    b200 = {"accelerator_model_name": "NVIDIA Blackwell GPU (B200-SXM-180GB)",
            "accelerators_per_node": "8", "number_of_nodes": "1"}
    found = mlperf.system_deployment(b200)
    assert found is not None and found.key == "nvidia-b200-x8"
    watts = {"accelerator_model_name": "NVIDIA A100-SXM4-40GB (400W)",
             "accelerators_per_node": "8", "number_of_nodes": "1"}
    found = mlperf.system_deployment(watts)
    assert found is not None and found.key == "nvidia-a100-sxm4-40gb-x8"


# ---------------------------------------------------------------- all real logs


def _real_logs() -> list[Path]:
    return sorted(REAL.rglob("result_*.txt")) if REAL.is_dir() else []


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/logs/mlperf not present")
def test_all_generations_present_in_real_logs() -> None:
    gens = set()
    for path in _real_logs():
        gens.add(mlperf.parse(_lines(path), context_for(path))[0].meta["log_generation"])
    assert gens == {"v0.5", "v0.6", "v0.7+"}


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/logs/mlperf not present")
@pytest.mark.parametrize("path", _real_logs(), ids=lambda p: str(p.relative_to(REAL)))
def test_every_real_log_parses_plausibly(path: Path) -> None:
    lines = _lines(path)
    assert mlperf.sniff(lines[:200])
    runs = mlperf.parse(lines, context_for(path))
    assert len(runs) == 1
    run = runs[0]
    assert run.network == "resnet50"
    assert run.deployment is not None and run.stack
    assert run.batch_size and run.batch_size > 0
    train = _phase(run, "train")
    assert train
    for seg in train:  # seconds per ImageNet epoch: seconds (TPU pod) to hours (2 GPUs)
        epochs = seg.iterations / run.meta["steps_per_epoch"]
        assert 1 < seg.seconds / epochs < 4 * 3600
    for seg in _phase(run, "test"):
        assert 0 < seg.seconds < 600
    starts = [s.start_time for s in run.segments]
    assert starts == sorted(starts)
    for a, b in zip(run.segments, run.segments[1:], strict=False):
        if not run.meta.get("train_includes_eval"):
            assert _end(a) <= b.start_time + 1e-3  # segments do not overlap
    end = run.meta["run_stop"] or run.meta["last_event_time"]
    wall = end - run.meta["run_start"]
    total = sum(s.seconds for s in run.segments)
    assert 0.8 * wall <= total <= wall + 1e-3
    _check_points(run)
