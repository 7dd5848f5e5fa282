"""MLPerf salvage: irregular real logs are stored with their repairs named, not rejected.

Each irregularity is either a real result log that has it (``tests/data/mlperf_irregular``,
see its provenance in tests/data/README.md) or a real clean log mutated to have it; the
recovered training time is checked against the records the repair did not touch.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from paths import DATA

from ingest.events import ParseContext, ParsedRun, ParseError
from ingest.parsers import detect, mlperf, registered
from ingest.parsers.mlperf.system import context_for
from ingest.pipeline import IngestOptions, ingest_paths, parse_data
from ingest.store import Store

SAMPLES = DATA / "mlperf"
IRREGULAR = DATA / "mlperf_irregular"
V05 = SAMPLES / "v0.5/v0.5.0/nvidia/submission/results/dgx1_ngc18.11_mxnet/resnet/result_0.txt"
V07 = SAMPLES / "v0.7/NVIDIA/results/dgxa100_ngc20.06_mxnet/resnet/result_0.txt"
GOOGLE = SAMPLES / "v1.0/Google/results/tpu-v4-128-TF/resnet/result_0.txt"
TINY = SAMPLES / "v4.0/tinycorp/results/tinybox_green/resnet/result_1.txt"
SIAT = IRREGULAR / "v0.7/SIAT/results/modelarts_512_tensorflow_close/resnet/result_0.txt"
PCL = IRREGULAR / "v1.0/PCL/results/CloudBrainII_256_mindspore_close/resnet/result_0.txt"
INTEL = IRREGULAR / "v1.0/Intel/results/1-node-8s-8380H-tensorflow/resnet/result_1.txt"
JAX = IRREGULAR / "v1.0/Google/results/tpu-v4-256-JAX-Distributed-Shampoo/resnet/result_0.txt"
MOSAIC = IRREGULAR / "v2.0/MosaicML/results/8xA100_80GB-baseline/resnet/result_0.txt"
DELL = IRREGULAR / "v3.0/Dell/results/R750xax4A100-PCIE-80GB/resnet/result_1.txt"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _records(lines: list[str], key: str) -> list[tuple[int, float, dict]]:
    """(1-based line, unix time, metadata) of each ``:::MLLOG`` record with ``key``, read
    plainly from the line (wherever the record starts on it)."""
    out = []
    for n, line in enumerate(lines, start=1):
        at = line.find(":::MLLOG ")
        if at >= 0:
            rec = json.loads(line[at + len(":::MLLOG "):])
            if rec["key"] == key:
                out.append((n, rec["time_ms"] / 1000.0, rec.get("metadata", {})))
    return out


def _one(lines: list[str], path: Path) -> ParsedRun:
    [run] = mlperf.parse(lines, context_for(path))
    return run


def _train(run: ParsedRun) -> list:
    return [s for s in run.segments if s.phase == "train"]


def _repairs(run: ParsedRun, kind: str) -> list[dict]:
    return [r for r in run.meta.get("repairs", []) if r["kind"] == kind]


def _tiled(lines: list[str], starts: list, stops: list) -> list[float]:
    """Each epoch's seconds by the tiling rule: from its epoch_start to the first epoch_start,
    eval_start or run_stop at or after its epoch_stop (module rules of ``mlperf.spans``)."""
    marks = sorted(t for key in ("epoch_start", "eval_start", "run_stop")
                   for _, t, _ in _records(lines, key))
    out = []
    for (_, t0, _), (_, t1, _) in zip(starts, stops, strict=False):
        out.append(next((t for t in marks if t >= t1 and t > t0), t1) - t0)
    return out


def _shift_ms(line: str, delta_ms: int) -> str:
    rec = json.loads(line[len(":::MLLOG "):])
    return line.replace(f'"time_ms": {rec["time_ms"]}', f'"time_ms": {rec["time_ms"] + delta_ms}')


# ------------------------------------------------------------------ epochs


def test_missing_epoch_stop_closes_the_epoch_at_the_next_mark() -> None:
    lines = _lines(V07)
    clean = _one(lines, V07)
    starts, stops = _records(lines, "epoch_start"), _records(lines, "epoch_stop")
    gone = 3  # drop the epoch_stop of the fourth epoch
    stop_line, stop_time, _ = stops[gone]
    cut = lines[: stop_line - 1] + lines[stop_line:]
    run = _one(cut, V07)
    [rep] = _repairs(run, "missing_epoch_stop")
    assert rep["line"] == starts[gone][0]
    assert any(rep["detail"] in w for w in run.meta["warnings"])
    # closed at the first eval_start / block_stop / epoch_start after its start
    marks = [t for key in ("eval_start", "block_stop", "epoch_start")
             for n, t, _ in _records(lines, key) if n > starts[gone][0]]
    want_end = min(marks)
    old, new = _train(clean), _train(run)
    assert len(new) == len(old)
    assert new[gone].start_time == starts[gone][1]
    assert new[gone].start_time + new[gone].seconds == pytest.approx(want_end, abs=1e-6)
    assert abs(want_end - stop_time) < 1.0  # the next mark follows the lost stop closely
    assert [s.seconds for i, s in enumerate(new) if i != gone] == [
        s.seconds for i, s in enumerate(old) if i != gone]


def test_stops_numbered_by_completed_epochs_close_the_open_epoch() -> None:
    lines = _lines(V07)
    clean = _one(lines, V07)
    stops = _records(lines, "epoch_stop")
    for n, _, meta in stops:
        num = meta["epoch_num"]
        lines[n - 1] = lines[n - 1].replace(f'"epoch_num": {num}', f'"epoch_num": {num + 1}')
    run = _one(lines, V07)
    [rep] = _repairs(run, "mismatched_epoch_stop")  # one entry for all of them
    assert rep["line"] == stops[0][0] and f"{len(stops)} x" in rep["detail"]
    assert [(s.seconds, s.iterations, s.epoch_start) for s in run.segments] == [
        (s.seconds, s.iterations, s.epoch_start) for s in clean.segments]


def test_real_composer_log_with_stops_one_ahead() -> None:
    lines = _lines(MOSAIC)
    run = _one(lines, MOSAIC)
    reps = _repairs(run, "mismatched_epoch_stop")
    assert reps and reps[0]["line"] == _records(lines, "epoch_stop")[0][0]
    starts, stops = _records(lines, "epoch_start"), _records(lines, "epoch_stop")
    train = _train(run)
    assert len(train) == len(stops)
    assert [s.seconds for s in train] == pytest.approx(_tiled(lines, starts, stops), abs=1e-6)
    assert [s.epoch_start for s in train] == [a[2]["epoch_num"] for a in starts[: len(stops)]]


def test_stop_with_an_unrelated_number_is_still_rejected() -> None:
    lines = _lines(V07)
    n, _, meta = _records(lines, "epoch_stop")[5]
    num = meta["epoch_num"]
    lines[n - 1] = lines[n - 1].replace(f'"epoch_num": {num}', f'"epoch_num": {num + 7}')
    with pytest.raises(ParseError) as err:
        _one(lines, V07)
    assert err.value.line == n and "does not match the open epoch" in err.value.reason


# ------------------------------------------------------------------ interleaving, clock


def test_records_inside_other_output_are_read_and_noted() -> None:
    lines = _lines(V07)
    clean = _one(lines, V07)
    n_stop = _records(lines, "epoch_stop")[2][0]
    lines[n_stop - 1] = "xz" + lines[n_stop - 1]  # terminal junk before a record
    n_gbs = _records(lines, "global_batch_size")[0][0]
    record = lines[n_gbs - 1]
    # the record written into the middle of another process's line
    lines[n_gbs - 1] = "Namespace(accuracy_threshold=0.759, kv_store='horovod'," + record + (
        ", eval_offset=2)")
    run = _one(lines, V07)
    reps = _repairs(run, "interleaved_record")
    assert [r["line"] for r in reps] == [min(n_stop, n_gbs)]
    assert "2 x" in reps[0]["detail"] and str(max(n_stop, n_gbs)) in reps[0]["detail"]
    assert run.batch_size == clean.batch_size
    assert [s.seconds for s in run.segments] == [s.seconds for s in clean.segments]


def test_real_log_with_junk_before_an_epoch_stop() -> None:
    lines = _lines(DELL)
    [junk] = [n for n, ln in enumerate(lines, 1) if ln.startswith("xz:::MLLOG")]
    run = _one(lines, DELL)
    [rep] = _repairs(run, "interleaved_record")
    assert rep["line"] == junk and "'xz'" in rep["detail"]
    starts, stops = _records(lines, "epoch_start"), _records(lines, "epoch_stop")
    assert [s.seconds for s in _train(run)] == pytest.approx(_tiled(lines, starts, stops),
                                                             abs=1e-6)


def test_headers_stamped_days_later_lose_their_time_only() -> None:
    lines = _lines(INTEL)  # Intel wrote the submission header with a later clock
    run = _one(lines, INTEL)
    [rep] = _repairs(run, "out_of_order_mark")
    first_header = next(n for n, ln in enumerate(lines, 1) if '"init_start"' in ln)
    assert rep["line"] == first_header
    assert run.start_time == _records(lines, "run_start")[0][1]
    starts, stops = _records(lines, "block_start"), _records(lines, "block_stop")
    assert len(starts) == len(stops) == len(_train(run))
    assert [s.seconds for s in _train(run)] == pytest.approx(
        [b[1] - a[1] for a, b in zip(starts, stops, strict=True)], abs=1e-6)


def test_clock_step_drops_only_the_span_across_it() -> None:
    lines = _lines(V07)
    clean = _one(lines, V07)
    stops = _records(lines, "epoch_stop")
    step_line = stops[5][0]  # the host clock steps back an hour at the sixth epoch_stop
    for i in range(step_line - 1, len(lines)):
        if lines[i].startswith(":::MLLOG "):
            lines[i] = _shift_ms(lines[i], -3_600_000)
    run = _one(lines, V07)
    reps = _repairs(run, "clock_step")
    assert reps and reps[0]["line"] == step_line
    old, new = _train(clean), _train(run)
    assert len(new) == len(old) - 1
    lost = [s for s in old if s.line == step_line]
    assert len(lost) == 1
    assert sum(s.seconds for s in new) == pytest.approx(
        sum(s.seconds for s in old) - lost[0].seconds, abs=1e-6)


def test_lone_training_mark_out_of_order_is_rejected() -> None:
    lines = _lines(V07)
    n = _records(lines, "epoch_start")[4][0]
    lines[n - 1] = _shift_ms(lines[n - 1], -3_600_000)
    with pytest.raises(ParseError) as err:
        _one(lines, V07)
    assert err.value.line == n and "time goes back" in err.value.reason


# ------------------------------------------------------------------ blocks


def test_block_start_inside_an_open_block_closes_it() -> None:
    lines = _lines(GOOGLE)
    clean = _one(lines, GOOGLE)
    starts, stops = _records(lines, "block_start"), _records(lines, "block_stop")
    n = stops[2][0]
    run = _one(lines[: n - 1] + lines[n:], GOOGLE)
    [rep] = _repairs(run, "unclosed_block")
    assert rep["line"] == starts[2][0]
    old, new = _train(clean), _train(run)
    assert len(new) == len(old)
    assert new[2].start_time + new[2].seconds == pytest.approx(starts[3][1], abs=1e-6)
    assert [s.seconds for i, s in enumerate(new) if i != 2] == [
        s.seconds for i, s in enumerate(old) if i != 2]


def test_real_mindspore_log_with_a_block_start_per_epoch() -> None:
    lines = _lines(PCL)
    run = _one(lines, PCL)
    reps = _repairs(run, "unclosed_block")
    assert reps and reps[0]["line"] == _records(lines, "block_start")[0][0]
    train = _train(run)
    assert len(train) == len(_records(lines, "block_start"))
    assert all(s.epoch_end == s.epoch_start for s in train)  # one epoch each
    assert [s.epoch_start for s in train] == sorted({s.epoch_start for s in train})
    # the spans tile the blocks: from the first block_start to the last block_stop, less
    # the evals between a block_stop and the next block_start
    first, last = _records(lines, "block_start")[0][1], _records(lines, "block_stop")[-1][1]
    pairs = zip(train, train[1:], strict=False)
    gaps = sum(b.start_time - (a.start_time + a.seconds) for a, b in pairs)
    assert sum(s.seconds for s in train) + gaps == pytest.approx(last - first, abs=1e-6)
    assert 0 <= gaps < 0.1


def test_real_log_whose_block_stops_name_the_next_block() -> None:
    lines = _lines(SIAT)
    run = _one(lines, SIAT)
    reps = _repairs(run, "mismatched_block_stop")
    starts, stops = _records(lines, "block_start"), _records(lines, "block_stop")
    assert reps and reps[0]["line"] == stops[0][0]
    train = _train(run)
    assert [s.seconds for s in train] == pytest.approx(
        [b[1] - a[1] for a, b in zip(starts, stops, strict=True)], abs=1e-6)
    assert sum(s.epoch_end - s.epoch_start + 1 for s in train) == sum(
        m["epoch_count"] for _, _, m in starts)


# ------------------------------------------------------------------ rejected


def test_log_cut_off_at_the_first_epoch_is_rejected_with_why() -> None:
    lines = _lines(V07)
    n = _records(lines, "epoch_start")[0][0]
    with pytest.raises(ParseError) as err:
        mlperf.parse(lines[:n], context_for(V07))
    assert err.value.line == _records(lines, "block_start")[0][0]  # the block opens first
    assert "no complete training segment" in err.value.reason
    assert "cut off" in err.value.reason


# ------------------------------------------------------------------ system, CPU, names


def _layout(tmp_path: Path, log: Path, system: dict | None) -> Path:
    org = tmp_path / "training_results_v9.9" / "Acme"
    dest = org / "results" / "box-1" / "resnet" / "result_0.txt"
    dest.parent.mkdir(parents=True)
    shutil.copy(log, dest)
    if system is not None:
        (org / "systems").mkdir()
        (org / "systems" / "box-1.json").write_text(json.dumps(system))
    return dest


CPU_SYSTEM = {
    "submitter": "Acme", "system_name": "box-1", "number_of_nodes": "2",
    "host_processor_model_name": "Intel(R) Xeon(R) Platinum 8380H CPU @ 2.90GHz",
    "host_processors_per_node": "4", "accelerators_per_node": "0",
    "accelerator_model_name": "N/A", "framework": "TensorFlow",
}


def test_cpu_only_system_is_stored_under_its_host_cpus(tmp_path: Path) -> None:
    log = _layout(tmp_path, TINY, CPU_SYSTEM)
    parsed = parse_data(str(log), log, log.read_bytes(), IngestOptions(), [mlperf])
    [run] = parsed.runs
    assert run.deployment.key == "intel-xeon-platinum-8380h-x4-n2"
    assert run.meta["device_kind"] == "cpu"
    [rep] = _repairs(run, "cpu_from_system")
    assert "4 x Intel Xeon Platinum 8380H" in rep["detail"] and rep["line"] is None
    assert run.meta["system"] == "Acme/box-1"


def test_system_without_accelerators_or_cpus_is_rejected_with_why(tmp_path: Path) -> None:
    system = {k: v for k, v in CPU_SYSTEM.items() if not k.startswith("host_")}
    log = _layout(tmp_path, TINY, system)
    with pytest.raises(ParseError) as err:
        parse_data(str(log), log, log.read_bytes(), IngestOptions(), [mlperf])
    assert "does not say which accelerators" in err.value.reason


def test_real_intel_cpu_submission() -> None:
    run = _one(_lines(INTEL), INTEL)
    assert run.deployment.key == "intel-xeon-platinum-8380h-x8"
    assert _repairs(run, "cpu_from_system")


def test_system_name_variant_and_clock_resolution(tmp_path: Path) -> None:
    v07 = _one(_lines(V07), V07)
    assert v07.meta["system"] == "NVIDIA/dgxa100_ngc20.06_mxnet"
    assert v07.meta["variant"] == {"precision": "fp16"}  # "--dtype float16" in the log
    assert v07.meta["clock_resolution_s"] == 0.001
    v05 = _one(_lines(V05), V05)
    assert v05.meta["system"] == "nvidia/dgx1_ngc18.11_mxnet"  # v0.5: <org>/submission/...
    digits = len(_lines(V05)[0].split()[2].split(".")[1])
    assert math.isclose(v05.meta["clock_resolution_s"], 10.0 ** -digits)
    assert "variant" not in _one(_lines(TINY), TINY).meta  # tinycorp states no precision
    # outside the layout: the system description's names, else the log's own
    system = context_for(V07).system
    [run] = mlperf.parse(_lines(V07), ParseContext(system=system))
    assert run.meta["system"] == f"NVIDIA/{system['system_name']}"
    [run] = mlperf.parse(_lines(TINY), ParseContext())
    org = json.loads(next(ln for ln in _lines(TINY) if '"submission_org"' in ln)[9:])["value"]
    plat = json.loads(next(ln for ln in _lines(TINY) if '"submission_platform"' in ln)[9:])
    assert run.meta["system"] == f"{org}/{plat['value']}"


# ------------------------------------------------------------------ detection, store


def test_records_after_a_long_shell_trace_or_a_glog_prefix_are_detected(tmp_path) -> None:
    trace = [f"+ export MLPERF_STEP_{i}=1" for i in range(300)]
    log = tmp_path / "result_0.txt"
    log.write_text("\n".join(trace + _lines(TINY)) + "\n")
    parsed = parse_data(str(log), log, log.read_bytes(), IngestOptions(deployment="8x A100"),
                        registered())
    assert parsed.fmt == "mlperf"
    assert parsed.runs[0].segments[0].line > len(trace)
    assert detect(_lines(JAX)[:200]) is mlperf  # "I0518 ... mllog.py:168] :::MLLOG"
    run = _one(_lines(JAX), JAX)
    assert len(_train(run)) == len(_records(_lines(JAX), "block_start"))


def test_repaired_runs_reach_the_store_with_their_warnings(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'jobcast.db'}")
    report = ingest_paths(store, [str(IRREGULAR)])
    logs = sorted(IRREGULAR.rglob("result_*.txt"))
    assert not report.rejected and len(report.added) == len(logs)
    kinds = {r["kind"] for run in store.runs() for r in run.meta.get("repairs", [])}
    assert kinds >= {"interleaved_record", "out_of_order_mark", "cpu_from_system",
                     "unclosed_block", "mismatched_block_stop", "mismatched_epoch_stop"}
    said = {text for _, _, text in report.warnings}
    for run in store.runs():
        for rep in run.meta.get("repairs", []):
            assert any(rep["kind"] in t or rep["detail"][:40] in t for t in said)


# ------------------------------------------------------------------ asynchronous epoch marks

def test_epoch_marks_logged_early_still_tile_the_training_time(tmp_path) -> None:
    """Every epoch_stop moved 5 s earlier (as a host that logs an epoch when it is queued):
    the epochs still end where the next segment starts, the train total is unchanged and the
    run says so (``epoch_gap``), in ``runs --json`` too."""
    from jobcast.cli.views import runs_payload

    lines = _lines(V07)
    early = [_shift_ms(line, -5000) if line.startswith(":::MLLOG ") and '"epoch_stop"' in line
             else line for line in lines]
    clean, shifted = _one(lines, V07), _one(early, V07)
    assert not _repairs(clean, "epoch_gap")
    total = sum(s.seconds for s in _train(clean))
    assert math.isclose(sum(s.seconds for s in _train(shifted)), total, rel_tol=1e-6)
    [rep] = _repairs(shifted, "epoch_gap")
    assert "counted as training" in rep["detail"]
    copy = tmp_path / "v0.7/NVIDIA/results/dgxa100_ngc20.06_mxnet/resnet/result_0.txt"
    copy.parent.mkdir(parents=True)
    copy.write_text("\n".join(early) + "\n", encoding="utf-8")
    (tmp_path / "v0.7/NVIDIA/systems").mkdir()
    shutil.copy(V07.parents[3] / "systems" / "dgxa100_ngc20.06_mxnet.json",
                tmp_path / "v0.7/NVIDIA/systems")
    store = Store(f"sqlite:///{tmp_path}/s.db")
    report = ingest_paths(store, [str(copy)])
    assert not report.rejected, report.rejected
    [run] = runs_payload(store)
    assert any("counted as training" in w for w in run["warnings"])
    assert [r["kind"] for r in run["meta"]["repairs"]] == ["epoch_gap"]
