"""Range checks at the edge (ingest/validate.py) and the hostile inputs of issue 13: each one
is a rejection naming the file, the line and the reason, never a crash or a stored value
that is not finite, positive and plausible."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from paths import DATA

from fleet.deployment import Deployment
from ingest.events import ParsedRun, ParseError, Segment
from ingest.parsers import registered
from ingest.pipeline import IngestOptions, ingest_paths, parse_data
from ingest.store import Store
from ingest.validate import (
    MAX_BATCH_SIZE,
    MAX_SEGMENT_SECONDS,
    loads,
    plausible_time,
    validate_run,
)
from models.job import JobPlan

KERAS = DATA / "keras"
JSONL = KERAS / "fit_verbose2.jsonl"
KERAS_TXT = KERAS / "fit_verbose2.txt"
KERAS_FLAGS = IngestOptions(network="tinycnn", batch_size=32, deployment="1x cpu")
CAFFE = DATA / "caffe" / "ducha_caffenet128_lsuv_bs128_lr002.log"
MLPERF_V07 = DATA / "mlperf/v0.7/NVIDIA/results/dgxa100_ngc20.06_mxnet/resnet/result_0.txt"
MLPERF_V06 = DATA / "mlperf/v0.6/NVIDIA/results/dgx1_ngc19.05_mxnet/resnet/result_2.txt"
TF_CNN = DATA / "tf_cnn" / "lambda_7742-8xA100_real_fp16_resnet50-448.txt"
HUGE = "9" * 5000


def parse(path: Path, data: bytes | str, overrides: IngestOptions = IngestOptions()):
    if isinstance(data, str):
        data = data.encode()
    return parse_data(str(path), path, data, overrides, registered())


def rejected(path: Path, data: bytes | str,
             overrides: IngestOptions = IngestOptions()) -> ParseError:
    """The ParseError for ``data``; it must name the file, a line, and not be a parser bug."""
    with pytest.raises(ParseError) as info:
        parse(path, data, overrides)
    err = info.value
    assert str(err).startswith(f"{path}:"), str(err)
    assert "parser failed" not in err.reason, err.reason  # a clean rejection, not a crash
    assert err.line is not None
    return err


def lines_of(path: Path) -> list[str]:
    return path.read_text().split("\n")


def jsonl_with(index: int, **fields) -> str:
    """The JSON-lines sample with fields of line ``index`` (0-based) replaced."""
    lines = lines_of(JSONL)
    obj = json.loads(lines[index])
    obj.update(fields)
    lines[index] = json.dumps(obj)
    return "\n".join(lines)


# -- the real samples pass the checks unchanged ---------------------------------------------


@pytest.mark.parametrize("path, overrides", [
    (JSONL, IngestOptions()), (KERAS_TXT, KERAS_FLAGS),
    (CAFFE, IngestOptions(deployment="1x GTX 1080")),
    (MLPERF_V07, IngestOptions()), (MLPERF_V06, IngestOptions()), (TF_CNN, IngestOptions()),
])
def test_real_samples_pass_the_range_checks(path, overrides):
    parsed = parse(path, path.read_bytes(), overrides)
    assert parsed.runs and all(run.segments for run in parsed.runs)
    for index, run in enumerate(parsed.runs):
        validate_run(run, index)  # no exception: every value in range


# -- jobcast JSON-lines ----------------------------------------------------------------------


def test_jsonl_5000_digit_line_is_a_rejection_at_its_line():
    lines = lines_of(JSONL)
    lines.insert(3, HUGE)
    err = rejected(JSONL, "\n".join(lines))
    assert err.line == 4 and "JSON object" in err.reason


@pytest.mark.parametrize("value, words", [
    (int(HUGE[:400]), "finite"), (float("nan"), "finite"), (float("inf"), "finite"),
    (-5.0, "unix seconds"), (1e12, "unix seconds"),
])
def test_jsonl_time_must_be_finite_plausible_unix_seconds(value, words):
    err = rejected(JSONL, jsonl_with(2, time=value))
    assert err.line == 3 and words in err.reason


def test_jsonl_huge_batch_size_is_rejected_before_the_store():
    err = rejected(JSONL, jsonl_with(0, batch_size=10**30))
    assert err.line == 1 and "batch_size" in err.reason
    err = rejected(JSONL, jsonl_with(0, batch_size=10**12))
    assert err.line == 1 and f"{MAX_BATCH_SIZE:,}" in err.reason


def test_jsonl_zero_count_deployment_is_a_rejection():
    err = rejected(JSONL, jsonl_with(0, deployment="0x cpu"))
    assert err.line == 1 and "0x cpu" in err.reason
    err = rejected(JSONL, jsonl_with(0, deployment={"accelerator": "cpu", "per_node": 1e999}))
    assert err.line == 1 and "deployment" in err.reason


def test_jsonl_test_segment_of_zero_iterations_is_rejected_at_its_line():
    lines = lines_of(JSONL)
    end = next(i for i, line in enumerate(lines)
               if '"phase_end"' in line and '"test"' in line)
    err = rejected(JSONL, jsonl_with(end, iterations=0))
    assert err.line == end + 1
    assert "test segment" in err.reason and "iterations = 0" in err.reason


# -- Keras stdout ----------------------------------------------------------------------------


def keras_with(old: str, new: str) -> str:
    text = KERAS_TXT.read_text()
    assert old in text
    return text.replace(old, new, 1)


def keras_line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), start=1) if needle in line)


@pytest.mark.parametrize("timing, reason", [
    ("0s - 0ms/step", "seconds = 0"),
    (f"0s - {HUGE}ms/step", "not a finite number"),
    (f"{HUGE}s - 1ms/step", "not a finite number"),
    ("9999999s - 99999999s/step", "at most 30 days"),
])
def test_keras_epoch_times_must_be_positive_finite_and_plausible(timing, reason):
    text = keras_with("40/40 - 0s - 12ms/step", f"40/40 - {timing}")
    err = rejected(KERAS_TXT, text, KERAS_FLAGS)
    assert err.line == keras_line(text, timing[:8]) and reason in err.reason


def test_keras_5000_digit_epoch_number_is_a_rejection():
    text = keras_with("Epoch 2/3", f"Epoch {HUGE}/3")
    err = rejected(KERAS_TXT, text, KERAS_FLAGS)
    assert err.line == keras_line(text, "Epoch 999") and "digits" in err.reason


# -- Caffe -----------------------------------------------------------------------------------


def test_caffe_huge_iteration_is_a_rejection_at_its_line():
    lines = lines_of(CAFFE)
    index = next(i for i, line in enumerate(lines) if "] Iteration 20, loss" in line)
    lines[index] = lines[index].replace("Iteration 20,", f"Iteration {HUGE},")
    err = rejected(CAFFE, "\n".join(lines), IngestOptions(deployment="1x GTX 1080"))
    assert err.line == index + 1 and "5000 digits" in err.reason


@pytest.mark.parametrize("instant", [HUGE, HUGE[:30], "0"])
def test_caffe_garbled_abort_instant_is_no_evidence_of_the_year(instant):
    text = CAFFE.read_text()
    assert "*** Aborted at 1459572179 (unix time)" in text
    text = text.replace("Aborted at 1459572179", f"Aborted at {instant}")
    parsed = parse(CAFFE, text, IngestOptions(deployment="1x GTX 1080"))
    assert "Aborted" not in parsed.runs[0].meta["year_source"]


# -- MLPerf and tf_cnn_benchmarks (the crashes the fuzzer found there) ----------------------


@pytest.mark.parametrize("path", [MLPERF_V07, MLPERF_V06])
def test_mlperf_5000_digit_value_is_a_rejection(path):
    lines = lines_of(path)
    index = next(i for i, line in enumerate(lines) if "global_batch_size" in line)
    head, _, tail = lines[index].partition('"value": ')
    number = tail[: len(tail) - len(tail.lstrip("0123456789"))]
    lines[index] = head + '"value": ' + HUGE + tail[len(number):]
    err = rejected(path, "\n".join(lines))
    assert err.line == index + 1 and "global_batch_size" in err.reason


def test_tf_cnn_5000_digit_step_is_a_rejection():
    lines = lines_of(TF_CNN)
    index = next(i for i, line in enumerate(lines) if "images/sec:" in line)
    lines[index] = HUGE + lines[index].lstrip()[lines[index].lstrip().index("\t"):]
    err = rejected(TF_CNN, "\n".join(lines))
    assert err.line == index + 1


# -- validate_run and Segment, rule by rule --------------------------------------------------


def good_run() -> ParsedRun:
    seg = Segment("train", iterations=100.0, seconds=50.0, batch_size=64,
                  start_time=1.6e9, epoch_start=1.0, epoch_end=1.0, iteration_start=0,
                  iteration_end=99, line=7, points=((50.0, 25.0), (100.0, 50.0)))
    return ParsedRun(format="jsonl", network="resnet50", deployment=Deployment("V100", 8),
                     stack="tf", batch_size=64, start_time=1.6e9, segments=[seg],
                     first_line=1)


@pytest.mark.parametrize("change, reason", [
    (dict(iterations=2e9), "iterations = 2000000000.0"),
    (dict(iterations=0.5, points=()), "iterations = 0.5"),
    (dict(seconds=MAX_SEGMENT_SECONDS * 2), "at most 30 days"),
    (dict(seconds=0.0, points=()), "seconds = 0.0"),
    (dict(batch_size=0), "batch size = 0"),
    (dict(start_time=-1.0), "start time = -1.0"),
    (dict(start_time=5e9), "start time"),
    (dict(epoch_start=-1.0), "epoch_start = -1.0"),
    (dict(epoch_start=3.0, epoch_end=2.0), "before epoch_start"),
    (dict(iteration_start=-4), "iteration_start = -4"),
    (dict(iteration_end=10**17), "iteration_end"),
    (dict(points=((150.0, 10.0),)), "outside the segment"),
    (dict(points=((50.0, 30.0), (60.0, 20.0))), "goes back"),
    (dict(points=((float("nan"), 1.0),)), "two finite numbers"),
])
def test_segment_rules_name_run_segment_line_and_reason(change, reason):
    run = good_run()
    run.segments = [replace(run.segments[0], **change)]
    with pytest.raises(ParseError) as info:
        validate_run(run, 0)
    assert info.value.line == 7
    assert info.value.reason.startswith("run 1, train segment 1: ")
    assert reason in info.value.reason


@pytest.mark.parametrize("change, reason", [
    (dict(batch_size=MAX_BATCH_SIZE + 1), "batch size"),
    (dict(batch_size=2.5), "batch size"),
    (dict(start_time=float("inf")), "start time"),
    (dict(deployment=Deployment("V100", 10**6)), "accelerators per node"),
    (dict(deployment=Deployment("V100", 1, 10**7)), "nodes"),
    (dict(network="n" * 200), "200 characters"),
    (dict(stack="tf\x00"), "control characters"),
])
def test_run_rules_name_the_run_and_its_first_line(change, reason):
    run = replace(good_run(), **change)
    with pytest.raises(ParseError) as info:
        validate_run(run, 1)
    assert info.value.line == 1 and info.value.reason.startswith("run 2: ")
    assert reason in info.value.reason


def test_good_run_passes():
    validate_run(good_run(), 0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 10**400])
def test_segment_refuses_non_finite_or_negative_numbers_with_its_line(value):
    with pytest.raises(ParseError) as info:
        Segment("test", iterations=value, seconds=1.0, line=12)
    assert info.value.line == 12 and "iterations" in info.value.reason


def test_json_integers_never_reach_python_int_limits():
    obj = loads('{"a": ' + HUGE + ', "b": 12, "c": -123456789012345678901}')
    assert obj["a"] == math.inf and obj["b"] == 12 and isinstance(obj["b"], int)
    assert obj["c"] == pytest.approx(-1.2345678901234568e20)
    assert plausible_time(1.6e9) and not plausible_time(10**400) and not plausible_time(0)


# -- one bad file never stores nonsense nor stops the others ---------------------------------


def test_store_holds_only_finite_values_after_hostile_files(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    good = logs / "good.jsonl"
    good.write_bytes(JSONL.read_bytes())
    for name, text in (("nan.jsonl", jsonl_with(2, time=float("nan"))),
                       ("zero.jsonl", jsonl_with(8, iterations=0)),
                       ("huge.jsonl", jsonl_with(0, batch_size=10**30))):
        (logs / name).write_text(text)
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    report = ingest_paths(store, [str(logs)])
    assert [source for source, _ in report.added] == [str(good)]
    assert sorted(Path(e.source).name for e in report.rejected) == [
        "huge.jsonl", "nan.jsonl", "zero.jsonl"]
    assert all(e.line is not None for e in report.rejected)
    segments = store.segments()
    assert segments and all(math.isfinite(s["seconds"]) and s["seconds"] > 0
                            and s["iterations"] >= 1 for s in segments)


# -- job plans -------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, words", [
    (dict(epochs=math.inf, dataset_size=1000), "finite"),
    (dict(epochs=math.nan, dataset_size=1000), "finite"),
    (dict(epochs=1e308, dataset_size=1000), "train steps"),
    (dict(epochs=-1.0, dataset_size=1000), ">= 0"),
    (dict(epochs=1.0, dataset_size=0), "dataset size"),
    (dict(iterations=10**30), "iterations"),
    (dict(iterations=1.5), "whole"),
    (dict(batch_size=2_000_000_000, iterations=10), "batch size"),
    (dict(epochs=90.0, dataset_size=10**6, eval_every=1e-300, eval_size=50_000), "test steps"),
    (dict(epochs=1.0, dataset_size=10, eval_every=math.inf, eval_size=5), "eval_every"),
])
def test_job_plan_refuses_non_finite_or_absurd_numbers(fields, words):
    base = dict(network="resnet50", deployment="nvidia-v100-x1", batch_size=32)
    with pytest.raises(ValueError, match=words):
        plan = JobPlan(**{**base, **fields})
        plan.train_iterations()
        plan.test_iterations()


def test_job_plan_counts_steps():
    plan = JobPlan("resnet50", "nvidia-v100-x1", 256, epochs=90.0, dataset_size=1_281_167,
                   eval_every=1.0, eval_size=50_000)
    assert plan.train_iterations() == math.ceil(90 * math.ceil(1_281_167 / 256))
    assert plan.test_iterations() == 90 * math.ceil(50_000 / 256)
