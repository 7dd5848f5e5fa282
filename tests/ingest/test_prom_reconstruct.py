"""Reconstructing phase segments from Prometheus samples (pure: no server, no TensorFlow).

A scripted job drives the real exporter with a settable clock; a TraceRecorder samples
its metrics at chosen times, as scrapes would, and the samples go through
``segments_from_samples``. The job's own script is the ground truth.
"""

from __future__ import annotations

import random

import pytest
from clock import T0, Clock

from ingest.prometheus import (
    MetricNames,
    canonical_hash,
    job_selector,
    parse_duration,
    parse_matcher,
    parse_time,
    promql_string,
    segments_from_samples,
    selector,
)
from jobcast.instrument.prometheus import PromExporter, TraceRecorder


def script(*, epochs=4, steps=20, test_steps=5, step_s=0.05, test_step_s=0.02, gap_s=0.3,
           start=T0, test_every=1, end=True, crash_in_epoch=None, restart_at=None):
    """A job as (time, action) events plus its true segments (phase, epoch, start, it, s)."""
    events: list[tuple[float, object]] = []
    truth: list[tuple[str, int, float, int, float]] = []
    t = start
    events.append((t, lambda ex: ex.run_start(epochs=epochs, steps_per_epoch=steps,
                                              planned_iterations={"test": test_steps})))
    t += gap_s
    for epoch in range(1, epochs + 1):
        t0 = t
        events.append((t, lambda ex, e=epoch, at=t: ex.phase_start("train", e, at=at)))
        for step in range(1, steps + 1):
            t += step_s * (1.5 if epoch == 1 and step <= 3 else 1.0)  # warm-up
            if crash_in_epoch == epoch and step == steps // 2:
                return events, truth
            events.append((t, lambda ex, s=step, at=t: ex.progress(s, at=at)))
        events.append((t, lambda ex, at=t: ex.phase_end(steps, at=at)))
        truth.append(("train", epoch, t0, steps, t - t0))
        if epoch % test_every == 0:
            t1 = t
            events.append((t, lambda ex, e=epoch, at=t: ex.phase_start("test", e, at=at)))
            for step in range(1, test_steps + 1):
                t += test_step_s
                events.append((t, lambda ex, s=step, at=t: ex.progress(s, at=at)))
            events.append((t, lambda ex, at=t: ex.phase_end(test_steps, at=at)))
            truth.append(("test", epoch, t1, test_steps, t - t1))
        t += gap_s
    if end:
        events.append((t, lambda ex, at=t: ex.run_end(at=at)))
    return events, truth


def record(events, sample_times, *, job_id="job-a", names=None, recorder=None,
           exporter=None) -> tuple[TraceRecorder, PromExporter]:
    """Play ``events`` on an exporter, sampling at ``sample_times`` (merged in time order)."""
    clock = Clock()
    exporter = exporter or PromExporter(job_id, network="ResNet20",
                                        deployment="nvidia-v100-sxm2-16gb-x4",
                                        batch_size=128, framework="test-stack",
                                        names=names, clock=clock)
    recorder = recorder or TraceRecorder()
    recorder.watch(exporter.registry)
    timeline = sorted([(t, 0, i, fn) for i, (t, fn) in enumerate(events)]
                      + [(t, 1, i, None) for i, t in enumerate(sample_times)],
                      key=lambda x: (x[0], x[1], x[2]))
    for t, kind, _, fn in timeline:
        if kind == 0:
            exporter.clock.now = t
            fn(exporter)
        else:
            recorder.sample(at=t)
    recorder.unwatch(exporter.registry)
    return recorder, exporter


def scrape_times(start, end, interval, jitter=0.0, seed=0):
    rng = random.Random(seed)
    times, t = [], start
    while t < end:
        times.append(t)
        t += interval * (1 + jitter * (2 * rng.random() - 1))
    return times


def span(events):
    return events[0][0], events[-1][0]


def assert_matches(segments, truth, tol=1e-6):
    got = [(s.phase, int(s.epoch_start), s.start_time, s.iterations, s.seconds)
           for s in segments]
    assert len(got) == len(truth)
    for g, t in zip(got, truth, strict=True):
        assert g[:2] == t[:2]
        assert g[2] == pytest.approx(t[2], abs=tol)
        assert g[3] == t[3]
        assert g[4] == pytest.approx(t[4], abs=tol)


def test_every_phase_exact_with_frequent_scrapes():
    events, truth = script()
    lo, hi = span(events)
    rec, _ = record(events, scrape_times(lo, hi + 1, 0.05))
    (job,) = segments_from_samples(rec.series(), until=hi + 2)
    assert job.status == "finished" and job.attempt == 1 and not job.notes
    assert_matches(job.run.segments, truth)
    run = job.run
    assert (run.network, run.deployment.key, run.batch_size, run.stack) == (
        "resnet20", "nvidia-v100-sxm2-16gb-x4", 128, "test-stack")
    assert run.meta["epochs"] == 4 and run.meta["steps_per_epoch"] == 20
    for seg in run.segments:  # points are cumulative within the segment, end included
        its = [p[0] for p in seg.points]
        assert its == sorted(its) and its[-1] == seg.iterations
        assert all(b - a >= 0 for a, b in zip([p[1] for p in seg.points],
                                              [p[1] for p in seg.points][1:], strict=False))


def test_scrape_jitter_changes_points_not_segments():
    events, truth = script()
    lo, hi = span(events)
    point_sets = set()
    for seed in (1, 2, 3):
        rec, _ = record(events, scrape_times(lo, hi + 1, 0.15, jitter=0.9, seed=seed))
        (job,) = segments_from_samples(rec.series(), until=hi + 2)
        assert not job.notes
        assert_matches(job.run.segments, truth)
        point_sets.add(tuple(s.points for s in job.run.segments))
    assert len(point_sets) == 3  # the scrapes differed; the segments did not


def test_gap_merges_unseen_phases_and_keeps_totals():
    events, truth = script(epochs=5)
    lo, hi = span(events)
    times = [t for t in scrape_times(lo, hi + 1, 0.05)
             if not (truth[2][2] - 0.01 < t < truth[6][2] + 0.01)]  # epochs 2-3 unseen
    rec, _ = record(events, times)
    (job,) = segments_from_samples(rec.series(), until=hi + 2)
    assert any("merged" in n for n in job.notes)
    for phase in ("train", "test"):
        segs = [s for s in job.run.segments if s.phase == phase]
        want = [t for t in truth if t[0] == phase]
        assert len(segs) < len(want)
        assert sum(s.iterations for s in segs) == sum(t[3] for t in want)
        assert sum(s.seconds for s in segs) == pytest.approx(sum(t[4] for t in want), abs=1e-6)
    merged = [s for s in job.run.segments if s.epoch_end is None]
    assert merged and all(s.iterations > 20 or s.phase == "test" for s in merged)


def test_counter_reset_starts_a_new_attempt():
    first, _ = script(epochs=3, crash_in_epoch=2)
    second, truth2 = script(epochs=2, start=first[-1][0] + 5.0)
    lo, hi = first[0][0], second[-1][0]
    rec = TraceRecorder()
    record(first, scrape_times(lo, first[-1][0] + 1, 0.05), recorder=rec)
    record(second, scrape_times(second[0][0], hi + 1, 0.05), recorder=rec)
    jobs = segments_from_samples(rec.series(), until=hi + 2)
    assert [j.attempt for j in jobs] == [1, 2]
    crashed, resumed = jobs
    assert crashed.status == "restarted" and crashed.run.meta["truncated"]
    # the epoch cut by the crash is dropped; the closed ones are kept
    assert [s.epoch_start for s in crashed.run.segments if s.phase == "train"] == [1.0]
    assert resumed.status == "finished"
    assert_matches(resumed.run.segments, truth2)
    # without the job_start series, the counters going down still split the attempts
    series = [s for s in rec.series()
              if s["metric"]["__name__"] != "jobcast_job_start_timestamp_seconds"]
    assert len(segments_from_samples(series, until=hi + 2)) == 2


def test_running_lost_and_open_phase():
    events, truth = script(epochs=3, crash_in_epoch=3)
    lo, hi = span(events)
    rec, _ = record(events, scrape_times(lo, hi + 0.01, 0.05))
    (running,) = segments_from_samples(rec.series(), until=hi + 1)
    assert running.status == "running"
    (lost,) = segments_from_samples(rec.series(), until=hi + 3600, stale_after=300)
    assert lost.status == "lost" and lost.run.meta["truncated"]
    # the open third epoch is not a segment; its progress is in the live totals
    assert_matches(lost.run.segments, truth)
    train = lost.progress["train"]
    assert train.active and train.phases == 3 and train.iterations > 2 * 20
    assert train.planned == 60


def test_phase_kinds_alternate_and_test_every_other_epoch():
    events, truth = script(epochs=4, test_every=2, test_steps=7)
    lo, hi = span(events)
    rec, _ = record(events, scrape_times(lo, hi + 1, 0.04))
    (job,) = segments_from_samples(rec.series(), until=hi + 2)
    assert [s.phase for s in job.run.segments] == [t[0] for t in truth]
    assert [s.epoch_start for s in job.run.segments if s.phase == "test"] == [2.0, 4.0]
    starts = [s.start_time for s in job.run.segments]
    assert starts == sorted(starts)


def test_concurrent_targets_keep_one():
    events, _ = script(epochs=2)
    lo, hi = span(events)
    rec, _ = record(events, scrape_times(lo, hi + 1, 0.05))
    series = rec.series()
    twin = []
    for s in series:  # a second worker exporting the same job, 0.02 s later, lagging
        values = [[t + 0.02, str(float(v) * 0.9)] for t, v in s["values"]]
        twin.append({"metric": {**s["metric"], "instance": "worker-2"}, "values": values})
    for s in series:
        s["metric"] = {**s["metric"], "instance": "worker-1"}
    (job,) = segments_from_samples(series + twin, until=hi + 2)
    assert job.attempt == 1 and any("worker" in n for n in job.notes)


def test_configured_names_are_used_and_others_ignored():
    names = MetricNames(prefix="team_train", job_label="run", network_label="net",
                        deployment_label="hw", phase_label="stage")
    events, truth = script(epochs=2)
    lo, hi = span(events)
    rec, _ = record(events, scrape_times(lo, hi + 1, 0.05), names=names)
    series = rec.series()
    assert all(s["metric"]["__name__"].startswith("team_train_") for s in series)
    assert all("run" in s["metric"] for s in series)
    (job,) = segments_from_samples(series, names, until=hi + 2)
    assert_matches(job.run.segments, truth)
    assert segments_from_samples(series, MetricNames(), until=hi + 2) == []
    with pytest.raises(ValueError, match="reserved"):
        MetricNames(job_label="instance").validate()
    with pytest.raises(ValueError, match="not a valid"):
        MetricNames(prefix="bad-prefix").validate()


def test_canonical_hash_depends_on_segments_only():
    events, _ = script(epochs=2)
    lo, hi = span(events)
    a, _ = record(events, scrape_times(lo, hi + 1, 0.05))
    b, _ = record(events, scrape_times(lo, hi + 1, 0.05))
    c, _ = record(events, scrape_times(lo, hi + 1, 0.07))
    ha = canonical_hash(segments_from_samples(a.series(), until=hi + 2))
    hb = canonical_hash(segments_from_samples(b.series(), until=hi + 2))
    hc = canonical_hash(segments_from_samples(c.series(), until=hi + 2))
    assert ha == hb and ha != hc


def test_openmetrics_trace_is_backfillable():
    events, _ = script(epochs=2)
    lo, hi = span(events)
    rec, _ = record(events, scrape_times(lo, hi + 1, 0.05), job_id='odd "id"\\ with\nnewline')
    text = rec.openmetrics()
    lines = text.splitlines()
    assert lines[-1] == "# EOF" and "" not in lines
    families = [ln.split()[2] for ln in lines if ln.startswith("# TYPE")]
    assert len(families) == len(set(families))  # each family in one block
    last: dict[str, float] = {}
    for ln in lines:
        if ln.startswith("#"):
            continue
        head, _, rest = ln.rpartition("} ")
        value, stamp = rest.split()
        assert float(stamp) >= last.get(head, 0.0)  # in time order per series
        last[head] = float(stamp)
        assert 1e9 < float(stamp) < 1e10  # seconds, not milliseconds
    assert '\\"id\\"' in text and "\\n" in text


def _unquote(literal: str) -> str:
    """Decode a PromQL double-quoted string the way Prometheus (Go) does."""
    assert literal[0] == literal[-1] == '"'
    body, out, i = literal[1:-1], [], 0
    simple = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
    while i < len(body):
        ch = body[i]
        assert ch != '"', "unescaped quote"
        if ch == "\\":
            nxt = body[i + 1]
            if nxt == "x":
                out.append(chr(int(body[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append(simple[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


@pytest.mark.parametrize("value", ['a"} or vector(1) #', 'x", job_id=~".*', "back\\slash\\",
                                   "new\nline\ttab\r", "\x01ctl\x7f", "ünïcödé ✓", ""])
def test_label_values_are_escaped(value):
    literal = promql_string(value)
    assert _unquote(literal) == value
    sel = selector([("job_id", "=", value), ("network", "=~", value)])
    assert sel.count('job_id="') == 1 and sel.startswith("{") and sel.endswith("}")
    assert job_selector(MetricNames(), job_id=value).endswith(f"job_id={literal}}}")


def test_selector_arguments_are_checked():
    assert parse_matcher("network=resnet50") == ("network", "=", "resnet50")
    assert parse_matcher('deployment=~"nvidia-.*"') == ("deployment", "=~", "nvidia-.*")
    assert parse_matcher("job_id!=a=b") == ("job_id", "!=", "a=b")
    for bad in ("=x", "no operator", "__name__=x", "9x=1"):
        with pytest.raises(ValueError, match="bad selector"):
            parse_matcher(bad)
    with pytest.raises(ValueError, match="label name"):
        selector([('a"b', "=", "x")])


def test_time_arguments():
    now = 1_800_000_000.0
    assert parse_time("now", now) == now
    assert parse_time("2h", now) == now - 7200
    assert parse_time("1d12h", now) == now - 129600
    assert parse_time("1700000000", now) == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20Z", now) == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20", now) == 1_700_000_000.0  # naive = UTC
    assert parse_duration("90s") == 90 and parse_duration("1.5m") == 90
    for bad in ("yesterday", "2x", ""):
        with pytest.raises(ValueError):
            parse_time(bad, now)


def test_exporter_rejects_misuse():
    ex = PromExporter("j", clock=Clock())
    with pytest.raises(RuntimeError, match="run_start"):
        ex.phase_start("train", 1)
    ex.run_start()
    with pytest.raises(ValueError, match="phase must be"):
        ex.phase_start("eval", 1)
    ex.phase_start("train", 1)
    with pytest.raises(RuntimeError, match="still open"):
        ex.phase_start("test", 1)
    ex.progress(5)
    with pytest.raises(ValueError, match="backwards"):
        ex.progress(3)
    with pytest.raises(ValueError, match="job_id"):
        PromExporter("")
    with pytest.raises(ValueError, match="batch_size"):
        PromExporter("j", batch_size=0)
