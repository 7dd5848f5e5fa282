"""jobcast JSON-lines format: the writer, the parser and their rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

from ingest.events import ParseContext, ParseError
from ingest.parsers import caffe, jsonl, keras_stdout, tf_cnn
from jobcast.instrument.jsonl import JsonlWriter

ROOT = REPO
KERAS = ROOT / "tests" / "data" / "keras"
CTX = ParseContext(source="test")


class Clock:
    """A settable clock for the writer (unix seconds)."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def write_run(path: Path, *, epochs: int = 2, steps: int = 10, test_steps: int = 3,
              finish: bool = True, clock: Clock | None = None) -> Clock:
    clock = clock or Clock()
    writer = JsonlWriter(path, clock=clock)
    writer.run_start(network="ResNet20", deployment="nvidia-v100-sxm2-16gb-x4", batch_size=512,
                     framework="test", epochs=epochs, steps_per_epoch=steps)
    for epoch in range(1, epochs + 1):
        writer.phase_start("train", epoch)
        for step in range(1, steps + 1):
            clock.advance(0.5)
            if step % 4 == 0:
                writer.progress(step)
        writer.phase_end(steps)
        writer.phase_start("test", epoch)
        clock.advance(0.25 * test_steps)
        writer.phase_end(test_steps, batch_size=256)
        clock.advance(0.1)
    if finish:
        writer.run_end()
    writer.close()
    return clock


def test_writer_parser_round_trip(tmp_path):
    path = tmp_path / "run.jsonl"
    write_run(path)
    lines = path.read_text().splitlines()
    assert jsonl.sniff(lines)
    assert all(json.loads(line)["v"] == 1 for line in lines)
    (run,) = jsonl.parse(lines, CTX)
    assert run.network == "resnet20" and run.batch_size == 512
    assert run.deployment.key == "nvidia-v100-sxm2-16gb-x4"
    assert run.start_time == 1_700_000_000.0 and run.meta["status"] == "completed"
    assert [(s.phase, s.epoch_start) for s in run.segments] == [
        ("train", 1.0), ("test", 1.0), ("train", 2.0), ("test", 2.0)]
    train, test = run.segments[0], run.segments[1]
    assert (train.iterations, test.iterations) == (10, 3)
    assert train.seconds == pytest.approx(10 * 0.5) and test.seconds == pytest.approx(0.75)
    assert train.batch_size == 512 and test.batch_size == 256
    assert [p for point in train.points for p in point] == pytest.approx([4, 2, 8, 4, 10, 5])
    assert test.start_time == pytest.approx(train.start_time + train.seconds)
    assert run.first_line == 1 and run.last_line == len(lines)


def test_real_keras_samples():
    for verbose in (1, 2):
        lines = (KERAS / f"fit_verbose{verbose}.jsonl").read_text().splitlines()
        fit, evaluate = jsonl.parse(lines, CTX)
        assert fit.meta["kind"] == "fit" and evaluate.meta["kind"] == "evaluate"
        assert [s.phase for s in fit.segments] == ["train", "test"] * 3
        assert {s.iterations for s in fit.segments if s.phase == "train"} == {40}
        assert {s.iterations for s in fit.segments if s.phase == "test"} == {8}
        assert [s.phase for s in evaluate.segments] == ["test"]
        assert fit.network == "tinycnn" and fit.deployment.key == "cpu-x1"
        assert fit.stack.startswith("Keras 3")
        ends = [s.start_time + s.seconds for s in fit.segments]
        assert ends == sorted(ends)


def test_sniff_only_jsonl():
    lines = (KERAS / "fit_verbose2.jsonl").read_text().splitlines()
    assert not caffe.sniff(lines) and not tf_cnn.sniff(lines) and not keras_stdout.sniff(lines)
    assert not jsonl.sniff(['{"a": 1}']) and not jsonl.sniff([":::MLLOG {}"])


def test_killed_run_keeps_closed_phases(tmp_path):
    path = tmp_path / "run.jsonl"
    clock = write_run(path, epochs=1, finish=False)
    writer = JsonlWriter(path, clock=clock)
    writer.run_open = True
    writer.phase_start("train", 2)
    writer.progress(4)
    writer.close()
    (run,) = jsonl.parse(path.read_text().splitlines(), CTX)
    assert run.meta["truncated"]
    assert [s.phase for s in run.segments] == ["train", "test"]


def test_several_runs_and_unknown_events(tmp_path):
    path = tmp_path / "run.jsonl"
    clock = write_run(path, epochs=1)
    with open(path, "a") as f:
        f.write(json.dumps({"v": 1, "event": "checkpoint", "time": clock.now, "x": 1}) + "\n")
        f.write("\n")
    write_run(path, epochs=1, clock=clock)
    first, second = jsonl.parse(path.read_text().splitlines(), CTX)
    assert second.start_time > first.start_time
    assert second.first_line > first.last_line


def edit_line(lines: list[str], index: int, **changes) -> list[str]:
    obj = json.loads(lines[index])
    obj.update(changes)
    for key, value in changes.items():
        if value is None:
            del obj[key]
    return [*lines[:index], json.dumps(obj), *lines[index + 1:]]


def reopen(lines: list[str]) -> list[str]:
    """A second phase_start (at the time of line 2) while the train phase is open."""
    again = edit_line(lines, 1, time=json.loads(lines[2])["time"])[1]
    return [*lines[:3], again, *lines[3:]]


# (mutation, reason, 0-based index of the line the error must name)
# lines: 0 run_start, 1 phase_start train, 2 progress 4, 3 progress 8, 4 phase_end train, ...
@pytest.mark.parametrize(
    ("mutate", "reason", "where"),
    [
        (lambda ls: [*ls[:5], ls[5][:20]], "not JSON", 5),  # cut mid-record
        (lambda ls: edit_line(ls, 3, v=2), "version", 3),
        (lambda ls: edit_line(ls, 3, time="soon"), "number", 3),
        (lambda ls: edit_line(ls, 3, time=None), "number", 3),
        (lambda ls: edit_line(ls, 3, time=1_600_000_000), "backwards", 3),
        (lambda ls: edit_line(ls, 3, step=99), "iterations", 4),
        (lambda ls: edit_line(ls, 3, step=2), "backwards", 3),
        (lambda ls: edit_line(ls, 3, phase="test"), "phase", 3),
        (lambda ls: edit_line(ls, 1, event="progress", step=1), "without an open phase", 1),
        (reopen, "is open", 3),
        (lambda ls: ls[1:], "before any run_start", 0),
        (lambda ls: edit_line(ls, 1, phase="warmup"), "phase must be", 1),
        (lambda ls: edit_line(ls, 0, batch_size="big"), "batch_size", 0),
        (lambda ls: edit_line(ls, 4, iterations=None), "iterations", 4),
        (lambda ls: [*ls[:2], "[1, 2]", *ls[2:]], "JSON object", 2),
    ],
)
def test_rule_violations_are_errors_with_the_line(tmp_path, mutate, reason, where):
    path = tmp_path / "run.jsonl"
    write_run(path)
    changed = mutate(path.read_text().splitlines())
    with pytest.raises(ParseError, match=reason) as err:
        jsonl.parse(changed, CTX)
    assert err.value.line == where + 1


def test_only_evaluation_is_no_training(tmp_path):
    lines = (KERAS / "fit_verbose2.jsonl").read_text().splitlines()
    evaluate_only = lines[[json.loads(x).get("kind") for x in lines].index("evaluate"):]
    with pytest.raises(ParseError, match="no training progress"):
        jsonl.parse(evaluate_only, CTX)


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("nvidia-a100-sxm4-80gb-x8", "nvidia-a100-sxm4-80gb-x8"),
        ("nvidia-a100-sxm-40gb-x4-n4", "nvidia-a100-sxm4-40gb-x4-n4"),  # canonical GPU key
        ("8x A100-SXM4-80GB", "nvidia-a100-sxm4-80gb-x8"),
        ("Tesla V100-SXM2-16GB", "nvidia-v100-sxm2-16gb-x1"),
        ({"accelerator": "H100", "per_node": 8, "nodes": 2}, "nvidia-h100-x8-n2"),
    ],
)
def test_deployment_forms(value, key):
    assert jsonl.deployment_from(value, 1).key == key


def test_writer_refuses_misuse(tmp_path):
    writer = JsonlWriter(tmp_path / "x.jsonl", clock=Clock())
    with pytest.raises(RuntimeError):
        writer.progress(1)
    with pytest.raises(ValueError):
        writer.run_start(batch_size=0)
    writer.run_start()
    with pytest.raises(ValueError):
        writer.phase_start("validation", 1)
    writer.close()


def test_imports_stay_light():
    code = ("import sys, jobcast.instrument.jsonl, ingest.parsers.jsonl, "
            "ingest.parsers.keras_stdout, "
            "ingest.parsers.caffe, ingest.parsers.tf_cnn; "
            "bad = [m for m in ('keras', 'tensorflow') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
