"""jobcast.instrument: the shared phase state machine and its two sinks agree.

The same phase events (a settable clock, no real time) go to the JSON-lines writer and to
the Prometheus exporter; the JSON-lines segments must equal what the exporter's metrics
say (totals, offsets, epochs, starts) and what the Prometheus reader rebuilds from them.
The two Keras callbacks, driven through the same hook sequence, must agree likewise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from clock import T0, Clock
from paths import REPO

from ingest.events import PHASES as EVENT_PHASES
from ingest.events import ParseContext
from ingest.parsers import jsonl as jsonl_parser
from ingest.prometheus import PHASES as PROM_PHASES
from ingest.prometheus import MetricNames, segments_from_samples
from jobcast.instrument.base import PHASES, PhaseTracker
from jobcast.instrument.jsonl import JsonlWriter
from jobcast.instrument.prometheus import PromExporter, TraceRecorder

ROOT = REPO
CTX = ParseContext(source="test")
NAMES = MetricNames()



def script(epochs: int = 3, steps: int = 6, test_steps: int = 4, test_every: int = 1,
           crash: bool = False) -> list[tuple[float, str, tuple]]:
    """Phase events ``(time, call, args)`` of a job; ``crash`` leaves a train phase open."""
    t, events = T0, [(T0, "run_start", ())]
    for epoch in range(1, epochs + 1):
        t += 0.25
        events.append((t, "phase_start", ("train", epoch)))
        for step in range(1, steps + 1):
            t += 0.5 + 0.125 * (step % 3)
            events.append((t, "progress", (step,)))
        if crash and epoch == epochs:
            return events
        events.append((t, "phase_end", (steps,)))
        if epoch % test_every == 0:
            events.append((t, "phase_start", ("test", epoch)))
            for step in range(1, test_steps + 1):
                t += 0.375
                events.append((t, "progress", (step,)))
            events.append((t, "phase_end", (test_steps,)))
    events.append((t + 0.5, "run_end", ()))
    return events


def play(events, tmp_path: Path, recorder: TraceRecorder | None = None):
    """Send ``events`` to both sinks at their times; sample the exporter after each time."""
    clock = Clock()
    writer = JsonlWriter(tmp_path / "job.jsonl", clock=clock)
    exporter = PromExporter("job-1", network="ResNet20", deployment="nvidia-v100-sxm2-16gb-x4",
                            batch_size=128, framework="test", clock=clock)
    if recorder is not None:
        recorder.watch(exporter.registry)
    for i, (t, call, args) in enumerate(events):
        clock.now = t
        if call == "run_start":
            writer.run_start(network="ResNet20", deployment="nvidia-v100-sxm2-16gb-x4",
                             batch_size=128, framework="test", epochs=3, steps_per_epoch=6)
            exporter.run_start(epochs=3, steps_per_epoch=6)
        else:
            getattr(writer, call)(*args)
            getattr(exporter, call)(*args)
        if recorder is not None and (i + 1 == len(events) or events[i + 1][0] > t):
            recorder.sample(at=t)
    writer.close()
    lines = (tmp_path / "job.jsonl").read_text().splitlines()
    return jsonl_parser.parse(lines, CTX), exporter


def metric(exporter: PromExporter, key: str, phase: str | None = None) -> float | None:
    labels = {"job_id": "job-1", "network": "ResNet20",
              "deployment": "nvidia-v100-sxm2-16gb-x4"}
    if phase is not None:
        labels["phase"] = phase
    return exporter.registry.get_sample_value(NAMES.series(key), labels)


def assert_metrics_match_segments(exporter: PromExporter, segments,
                                  phases: tuple[str, ...] = PHASES) -> None:
    """Per phase kind: totals are the segments' sums, offsets and starts the last one's."""
    for phase in phases:
        mine = [s for s in segments if s.phase == phase]
        assert metric(exporter, "phases", phase) == len(mine)
        assert metric(exporter, "iterations", phase) == pytest.approx(
            sum(s.iterations for s in mine))
        assert metric(exporter, "seconds", phase) == pytest.approx(sum(s.seconds for s in mine))
        if mine:
            last = mine[-1]
            assert metric(exporter, "offset_iterations", phase) == pytest.approx(
                sum(s.iterations for s in mine[:-1]))
            assert metric(exporter, "offset_seconds", phase) == pytest.approx(
                sum(s.seconds for s in mine[:-1]))
            assert metric(exporter, "phase_start", phase) == pytest.approx(last.start_time)
            assert metric(exporter, "epoch", phase) == last.epoch_start


def segment_keys(segments):
    return [(s.phase, s.epoch_start, s.iterations, round(s.start_time, 6), round(s.seconds, 6))
            for s in segments]


@pytest.mark.parametrize("test_every", [1, 2])
def test_both_sinks_agree_on_the_same_events(tmp_path, test_every):
    recorder = TraceRecorder()
    events = script(test_every=test_every)
    (run,), exporter = play(events, tmp_path, recorder)
    assert run.meta["status"] == "completed"
    assert_metrics_match_segments(exporter, run.segments)
    assert metric(exporter, "job_start") == run.start_time == T0
    assert metric(exporter, "job_end") == exporter.job_end == events[-1][0]
    assert metric(exporter, "planned", "train") == 3 * 6
    assert metric(exporter, "active", "train") == metric(exporter, "active", "test") == 0
    # the Prometheus reader rebuilds the same segments from the exporter's samples
    (job,) = segments_from_samples(recorder.series(), until=events[-1][0] + 1)
    assert job.status == "finished"
    assert segment_keys(job.run.segments) == segment_keys(run.segments)


def test_both_sinks_agree_on_a_crashed_job(tmp_path):
    (run,), exporter = play(script(crash=True), tmp_path)
    assert run.meta["truncated"]  # no run_end: the open train phase is dropped
    closed = run.segments
    assert [s.phase for s in closed] == ["train", "test", "train", "test"]
    assert exporter.active_phase == "train" and exporter.job_end is None
    assert_metrics_match_segments(exporter, closed, phases=("test",))
    # the open train phase counts in the totals only: its offset is the closed phases' sum
    trains = [s for s in closed if s.phase == "train"]
    assert metric(exporter, "offset_iterations", "train") == sum(s.iterations for s in trains)
    assert metric(exporter, "offset_seconds", "train") == pytest.approx(
        sum(s.seconds for s in trains))
    assert metric(exporter, "phases", "train") == 3
    assert metric(exporter, "iterations", "train") == 3 * 6
    assert metric(exporter, "active", "train") == 1


def test_phase_kinds_are_the_readers():
    assert PHASES == EVENT_PHASES == PROM_PHASES


@pytest.mark.parametrize("strict", [True, False])
def test_tracker_rules(strict):
    tr = PhaseTracker(strict=strict)
    if strict:
        with pytest.raises(RuntimeError, match="run_start"):
            tr.phase_start("train", 1, T0)
    with pytest.raises(RuntimeError, match="outside a phase"):
        tr.progress(1, T0)
    tr.run_start(T0, batch_size=64, epochs=2, steps_per_epoch=5,
                 planned_iterations={"test": 4})
    assert (tr.stats["train"].planned, tr.stats["test"].planned) == (10, 4)
    with pytest.raises(RuntimeError, match="run is open"):
        tr.run_start(T0)
    with pytest.raises(ValueError, match="phase must be"):
        tr.phase_start("eval", 1, T0)
    tr.phase_start("train", 1, T0 + 1)
    with pytest.raises(RuntimeError, match="still open"):
        tr.phase_start("test", 1, T0 + 1)
    tr.progress(3, T0 + 4)
    if strict:
        with pytest.raises(ValueError, match="backwards"):
            tr.progress(2, T0 + 5)
    tr.phase_end(5, T0 + 6)
    st = tr.stats["train"]
    assert (st.iterations, st.seconds, st.phases, st.batch_size) == (5, 5.0, 1, 64)
    assert tr.current is None and tr.last_progress == T0 + 6
    with pytest.raises(RuntimeError, match="phase_end without"):
        tr.phase_end(1, T0 + 6)
    tr.phase_start("train", 2, T0 + 6)
    tr.progress(2, T0 + 8)
    st = tr.stats["train"]
    assert (st.offset_iterations, st.offset_seconds, st.steps, st.seconds) == (5, 5.0, 2, 7.0)
    tr.run_end("failed", T0 + 9)
    assert not tr.running and tr.status == "failed"
    # strict keeps the phase left open marked active (readers drop it); the writer forgets it
    assert tr.active == ("train" if strict else None)


def test_imports_stay_light_and_inside_instrument():
    code = ("import sys, jobcast.instrument.base, jobcast.instrument.jsonl, "
            "jobcast.instrument.prometheus, jobcast.instrument.trace; "
            "bad = [m for m in sys.modules if m in ('keras', 'tensorflow') or "
            "m.startswith(('jobcast.service', 'jobcast.mlops', 'jobcast.cli'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- the Keras callbacks -------------------------------------------------------------------


def drive_keras(callbacks, clock: Clock, *, epochs: int = 3, initial_epoch: int = 0,
                steps: int = 5, val_steps: int = 3, eval_steps: int = 4) -> None:
    """Call the hooks ``model.fit(..., validation_data=...)`` then ``evaluate`` would call."""

    def hook(name, *args):
        for cb in callbacks:
            getattr(cb, name)(*args)

    for cb in callbacks:
        cb.set_params({"epochs": epochs, "steps": steps, "verbose": 0})
    hook("on_train_begin")
    for epoch in range(initial_epoch, epochs):
        clock.now += 0.125
        hook("on_epoch_begin", epoch)
        for batch in range(steps):
            clock.now += 0.25 + 0.125 * (batch % 2)
            hook("on_train_batch_begin", batch)
            hook("on_train_batch_end", batch)
        clock.now += 0.0625
        hook("on_test_begin")
        for batch in range(val_steps):
            clock.now += 0.125
            hook("on_test_batch_end", batch)
        clock.now += 0.03125
        hook("on_test_end")
        clock.now += 0.03125
        hook("on_epoch_end", epoch)
    clock.now += 0.5
    hook("on_train_end")
    clock.now += 1.0
    hook("on_test_begin")
    for batch in range(eval_steps):
        clock.now += 0.125
        hook("on_test_batch_end", batch)
    hook("on_test_end")


def test_keras_callbacks_agree(tmp_path):
    pytest.importorskip("keras")
    from jobcast.instrument.jsonl import JobcastLogger
    from jobcast.instrument.prometheus import PromCallback

    clock = Clock()
    path = tmp_path / "fit.jsonl"
    logger = JobcastLogger(path, every_n_steps=2, network="ResNet20",
                           deployment="nvidia-v100-sxm2-16gb-x4", batch_size=128,
                           test_batch_size=256, clock=clock)
    exporter = PromExporter("job-1", network="ResNet20", deployment="nvidia-v100-sxm2-16gb-x4",
                            batch_size=128, clock=clock)
    callback = PromCallback(exporter, validation_steps=3)
    drive_keras([logger, callback], clock, initial_epoch=1)
    assert logger.writer is logger.sink and callback.exporter is exporter
    fit, evaluate = jsonl_parser.parse(path.read_text().splitlines(), CTX)
    assert [(s.phase, s.epoch_start) for s in fit.segments] == [
        ("train", 2), ("test", 2), ("train", 3), ("test", 3)]
    assert [s.batch_size for s in fit.segments] == [128, 256, 128, 256]
    assert [s.points[0][0] for s in fit.segments] == [2, 2, 2, 2]  # every_n_steps
    # the exporter saw the same phases, and not the evaluate run outside fit
    assert_metrics_match_segments(exporter, fit.segments)
    assert metric(exporter, "planned", "train") == 2 * 5  # resumed at epoch 2 of 3
    assert metric(exporter, "planned", "test") == 2 * 3
    assert metric(exporter, "planned_epochs") == 2
    assert exporter.job_end is not None and exporter.job_end < evaluate.start_time
    assert exporter.framework and exporter.framework.startswith("Keras ")
    assert [(s.phase, s.epoch_start, s.iterations) for s in evaluate.segments] == [
        ("test", None, 4)]
