"""tf_cnn_benchmarks parser on the real Lambda A100 log and variants of it."""

from __future__ import annotations

import re

import pytest
from paths import DATA, SHARED_LOGS

from ingest.events import ParseContext, ParseError
from ingest.parsers import caffe, jsonl, keras_stdout, tf_cnn

SAMPLE = DATA / "tf_cnn" / "lambda_7742-8xA100_real_fp16_resnet50-448.txt"
SHARED = SHARED_LOGS
CTX = ParseContext(source="test")
STEP = re.compile(r"^(\d+)\timages/sec: .* (\d{9,})$")
IMAGENET_TRAIN = 1_281_167


def read() -> list[str]:
    return SAMPLE.read_text().splitlines()


def step_lines(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if STEP.match(line)]


def test_sniff():
    lines = read()
    assert tf_cnn.sniff(lines[:200])
    assert not caffe.sniff(lines[:200]) and not keras_stdout.sniff(lines[:200])
    assert not jsonl.sniff(lines[:200])
    for path in [*sorted((DATA / "caffe").glob("*.log")), *sorted((DATA / "keras").glob("fit_*"))]:
        assert not tf_cnn.sniff(path.read_text().splitlines()[:200]), path


def test_real_sample():
    lines = read()
    (run,) = tf_cnn.parse(lines, CTX)
    assert run.network == "resnet50"
    assert run.stack == "TensorFlow 2.3"
    assert run.deployment.accelerator == "A100-SXM4-40GB"
    assert run.deployment.key == "nvidia-a100-sxm4-40gb-x8"
    assert run.batch_size == 3584 and run.meta["batch_per_device"] == 448
    assert run.batch_size == run.meta["batch_per_device"] * run.deployment.per_node
    assert not run.meta.get("truncated")

    steps = step_lines(lines)
    first, last = STEP.match(lines[steps[0]]), STEP.match(lines[steps[-1]])
    (segment,) = run.segments
    assert segment.phase == "train"
    assert segment.iterations == int(last[1]) - int(first[1])
    assert segment.start_time == run.start_time == int(first[2])
    assert segment.seconds == int(last[2]) - int(first[2])
    assert len(segment.points) == len(steps)
    assert segment.points[-1] == (segment.iterations, segment.seconds)
    assert segment.line == steps[-1] + 1
    # throughput from the wall clock agrees with the tool's own figure
    total = float(re.search(r"total images/sec: ([\d.]+)", "\n".join(lines))[1])
    assert run.meta["total_images_per_sec"] == total
    wall_rate = segment.iterations * run.batch_size / segment.seconds
    assert wall_rate == pytest.approx(total, rel=0.05)


def test_without_unix_times_seconds_come_from_images_per_sec():
    lines = read()
    stripped = [re.sub(r" \d{9,}$", "", line) if STEP.match(line) else line for line in lines]
    (timed,) = tf_cnn.parse(lines, CTX)
    (estimated,) = tf_cnn.parse(stripped, CTX)
    assert estimated.meta["timing"] == "images/sec" and estimated.segments[0].start_time is None
    assert estimated.segments[0].iterations == timed.segments[0].iterations
    assert estimated.segments[0].seconds == pytest.approx(timed.segments[0].seconds, rel=0.05)


def test_truncated_run_keeps_its_steps():
    lines = read()
    steps = step_lines(lines)
    (run,) = tf_cnn.parse(lines[: steps[5] + 1], CTX)
    assert run.meta["truncated"]
    assert len(run.segments[0].points) == 6


def test_two_benchmarks_in_one_file():
    lines = read()
    later = [re.sub(r"(\d{9,})$", lambda m: str(int(m[1]) + 600), line) for line in lines]
    runs = tf_cnn.parse(lines + later, CTX)
    assert len(runs) == 2
    assert runs[1].first_line > runs[0].last_line
    assert runs[0].segments[0].iterations == runs[1].segments[0].iterations
    assert runs[1].start_time - runs[0].start_time == 600
    with pytest.raises(ParseError, match="backwards"):  # the same run twice: clock goes back
        tf_cnn.parse(lines + lines, CTX)


@pytest.mark.parametrize(
    ("index", "edit"),
    [
        (-1, lambda line: line[:25]),  # cut mid-record
        (3, lambda line: line.replace("images/sec: ", "images/sec: x")),
        (3, lambda line: re.sub(r" \d{9,}$", "", line)),  # time missing on one line only
        (3, lambda line: re.sub(r"(\d{9,})$", lambda m: str(int(m[1]) - 60), line)),
        (3, lambda line: re.sub(r"^\d+", "5", line)),  # step goes backwards
        (3, lambda line: line.replace("+/-", "+/- abc")),
    ],
)
def test_garbled_step_line_is_an_error_with_its_line(index, edit):
    lines = read()
    steps = step_lines(lines)
    target = steps[index]
    changed = [*lines[: target], edit(lines[target]), *lines[target + 1:]]
    if index == -1:
        changed = changed[: target + 1]
    with pytest.raises(ParseError) as err:
        tf_cnn.parse(changed, CTX)
    assert err.value.line == target + 1, err.value


def test_no_step_lines_is_an_error():
    lines = read()
    with pytest.raises(ParseError, match="no step lines"):
        tf_cnn.parse(lines[: step_lines(lines)[0]], CTX)


def test_missing_batch_size_uses_ctx():
    lines = [line for line in read() if not line.startswith("Batch size")]
    (run,) = tf_cnn.parse(lines, ParseContext(batch_size=1024))
    assert run.batch_size == 1024 and run.meta["batch_from_ctx"]


@pytest.mark.skipif(not (SHARED / "tf_cnn_benchmarks").is_dir(), reason="shared data absent")
@pytest.mark.parametrize("path", sorted((SHARED / "tf_cnn_benchmarks").glob("*")),
                         ids=lambda p: p.name)
def test_every_real_tf_cnn_log_parses_plausibly(path):
    lines = path.read_text().splitlines()
    assert tf_cnn.sniff(lines[:200])
    for run in tf_cnn.parse(lines, ParseContext(source=str(path))):
        (segment,) = run.segments
        assert segment.iterations >= 10 and segment.seconds > 0
        rate = segment.iterations * run.batch_size / segment.seconds
        per_device = rate / max(1, run.deployment.per_node if run.deployment else 1)
        assert 10 < per_device < 20_000
        assert 30 < IMAGENET_TRAIN / rate < 10 * 3600  # seconds per ImageNet epoch
