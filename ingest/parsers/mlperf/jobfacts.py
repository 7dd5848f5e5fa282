"""Whole-job facts of one MLPerf run: start-up, time to train, evaluation and the gaps.

Rules (keys of the run's ``meta``; times are unix seconds, spans seconds)
-------------------------------------------------------------------------
* ``init_start``, ``init_stop``, ``run_start``, ``run_stop``: the time of the run's first
  record of that key that has a time (``None`` where not logged, or where the record lost its
  time to an ``out_of_order_mark`` repair: a header written later times nothing).
* ``init_seconds``: ``init_start`` -> ``run_start``; where ``run_start`` is missing,
  ``init_start`` -> ``init_stop``. MLPerf's start-up (not part of its time to train).
* ``run_seconds``: ``run_start`` -> ``run_stop``, MLPerf's time to train. A ``run_start``
  stamped before an ``init_stop``/``init_start`` logged above it (Google's v0.7 tpu-v3-8192
  logs a round 1592800000000 ms, 15 h early) times nothing (``phase_order``): no
  ``run_seconds``, and ``init_seconds`` runs to ``init_stop``.
* ``train_seconds``: the sum of the train segments; ``eval_seconds``: the sum of the test
  segments (evals run inside a block without ``eval_start`` have none: their time is in
  ``train_seconds``, ``meta["train_includes_eval"]``).
* ``eval_overlap_seconds``: eval time spent beside training (asynchronous evals: NVIDIA's
  detection and segmentation code evaluates while the next epoch trains; Google's pipelined
  TPU runners), = train + eval seconds - the seconds at least one segment covers.
* ``gap_seconds``: ``run_seconds - train_seconds - eval_seconds + eval_overlap_seconds``
  (the run's seconds that no segment covers): what the run spent between its timed phases
  (data loading, checkpoints, the tail after the last eval).
* ``epochs_trained``: the epochs the train segments cover (each segment's epoch count);
  ``evals``: the eval results logged (``eval_accuracy`` records).
* Nothing negative or non-finite is stored. A span whose end is before its start by more than
  the clock's resolution (``meta["clock_resolution_s"]``) is not stored and noted
  (``phase_order``); within it, it is 0. ``gap_seconds`` below zero by more than the
  resolution times the segment count (segments outside run_start..run_stop) is clamped to 0
  and noted (``phase_overlap``); within it, clamped silently. A span that a
  clock step (``clock_step`` repair) crosses is not stored.
"""

from __future__ import annotations

from ingest.events import Segment
from ingest.parsers.mlperf.records import Event
from ingest.parsers.mlperf.repairs import Repairs

_MARKS = ("init_start", "init_stop", "run_start", "run_stop")


def job_facts(run: list[Event], segments: list[Segment], epochs: float, resolution: float,
              clock_steps: list[int], fix: Repairs) -> dict[str, object]:
    """The run's whole-job facts (module rules); repairs go to ``fix``."""
    marks: dict[str, Event] = {}
    for ev in run:
        if ev.key in _MARKS and ev.key not in marks and ev.time is not None:
            marks[ev.key] = ev
    facts: dict[str, object] = {k: (marks[k].time if k in marks else None) for k in _MARKS}

    def span(a: str, b: str) -> float | None:
        if a not in marks or b not in marks:
            return None
        first, last = marks[a], marks[b]
        if any(first.line < n <= last.line for n in clock_steps):
            return None
        seconds = (last.time or 0.0) - (first.time or 0.0)  # both timed (marks hold no None)
        if seconds < -resolution:
            fix.add("phase_order", last.line,
                    f"{b} (line {last.line}) is {-seconds:.3f} s before {a} (line "
                    f"{first.line}): {a}..{b} is not stored")
            return None
        return max(seconds, 0.0)

    start = marks.get("run_start")
    for key in ("init_stop", "init_start"):
        early = marks.get(key)
        if start is None or early is None or early.line > start.line:
            continue
        ahead = (early.time or 0.0) - (start.time or 0.0)  # both timed (marks hold no None)
        if ahead > resolution:
            fix.add("phase_order", start.line,
                    f"run_start (line {start.line}) is stamped {ahead:.1f} s before {key} "
                    f"(line {early.line}), which precedes it: it times nothing, no "
                    "run_seconds")
            del marks["run_start"]
            break
    init = span("init_start", "run_start") if "run_start" in marks else span(
        "init_start", "init_stop")
    run_s = span("run_start", "run_stop")
    train = sum(s.seconds for s in segments if s.phase == "train")
    evals = sum(s.seconds for s in segments if s.phase == "test")
    covered = _union(segments)
    facts.update(init_seconds=init, run_seconds=run_s, train_seconds=train,
                 eval_seconds=evals, eval_overlap_seconds=max(train + evals - covered, 0.0),
                 epochs_trained=epochs, gap_seconds=None)
    if run_s is not None:
        gap = run_s - covered
        if gap < -resolution * (len(segments) + 1):
            fix.add("phase_overlap", marks["run_stop"].line,
                    f"the train and eval segments cover {covered:.1f} s, {-gap:.1f} s more "
                    f"than run_start..run_stop ({run_s:.1f} s): gap_seconds clamped to 0")
        facts["gap_seconds"] = max(gap, 0.0)
    return facts


def _union(segments: list[Segment]) -> float:
    """Seconds covered by at least one segment (segments as stored: start and length)."""
    spans = sorted((s.start_time, s.start_time + s.seconds) for s in segments
                   if s.start_time is not None)
    total = 0.0
    end = -float("inf")
    for a, b in spans:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
