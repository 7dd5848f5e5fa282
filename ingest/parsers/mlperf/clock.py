"""The clock of an MLPerf log's records: clock steps, lone marks and records out of order.

Rules (run by the parser on a whole scan, :func:`check_clock`)
----------------------------------------------------------------
* The training marks (:data:`.records.TIMING_KEYS`) must not go back more than 5 s. A mark
  that goes back while the next mark returns to the old clock is a lone mark out of order:
  an error (its span cannot be trusted). A mark after which the clock stays back is a host
  clock step: a ``clock_step`` repair, the line kept in ``Scan.clock_steps`` (``spans``
  drops any span across it).
* A ``run_start`` stamped more than 5 s before the records above it, while the next mark
  agrees with them, loses its time (``out_of_order_mark``; :func:`_early_run_starts`).
* Any other record stamped more than 5 s outside its neighbouring marks, or more than 5 s
  before an earlier record, loses its time (``out_of_order_mark`` repair): it times nothing
  (headers that a tool wrote later, Intel, or with another clock, Dell).
"""

from __future__ import annotations

from ingest.events import ParseError
from ingest.parsers.mlperf.records import BACKWARDS_TOLERANCE_S, TIMING_KEYS, Scan


def check_clock(scan: Scan) -> None:
    """The clock rules of the module doc: raise on a lone mark out of order, note clock steps
    (``scan.clock_steps``) and drop the times of records out of order with the marks."""
    events = scan.events
    _early_run_starts(scan)
    timing = [i for i, e in enumerate(events) if e.key in TIMING_KEYS and e.time is not None]
    latest: float | None = None
    latest_line = 0
    for n, i in enumerate(timing):
        ev = events[i]
        t = ev.time
        assert t is not None
        if latest is not None and t < latest - BACKWARDS_TOLERANCE_S:
            following = events[timing[n + 1]].time if n + 1 < len(timing) else None
            if following is None or following >= latest - BACKWARDS_TOLERANCE_S:
                raise ParseError(f"time goes back {latest - t:.1f} s from line {latest_line} "
                                 f"({ev.key!r}) and the next mark returns to the earlier "
                                 "clock: a training mark out of order cannot be trusted",
                                 line=ev.line)
            scan.clock_steps.append(ev.line)
            scan.repairs.add("clock_step", ev.line,
                             f"the clock went back {latest - t:.1f} s at {ev.key!r} (from line "
                             f"{latest_line}) and stayed back: a host clock step; spans across "
                             "it are dropped")
            latest, latest_line = t, ev.line
        elif latest is None or t > latest:
            latest, latest_line = t, ev.line
    # records that time nothing: inside the window of their neighbouring marks, in order
    nxt: float | None = None
    next_time: list[float | None] = [None] * len(events)
    for i in range(len(events) - 1, -1, -1):
        next_time[i] = nxt
        if events[i].key in TIMING_KEYS and events[i].time is not None:
            nxt = events[i].time
    steps = set(scan.clock_steps)
    prev: float | None = None
    kept: float | None = None
    kept_line = 0
    for i, ev in enumerate(events):
        if ev.line in steps:
            kept = None
        t = ev.time
        if t is None:
            continue
        if ev.key in TIMING_KEYS:
            prev = t
            if kept is None or t > kept:
                kept, kept_line = t, ev.line
            continue
        after = next_time[i]
        why = None
        if prev is not None and t < prev - BACKWARDS_TOLERANCE_S:
            why = f"{prev - t:.1f} s before the training mark before it"
        elif after is not None and t > after + BACKWARDS_TOLERANCE_S:
            why = f"{t - after:.1f} s after the training mark after it"
        elif kept is not None and t < kept - BACKWARDS_TOLERANCE_S:
            why = f"{kept - t:.1f} s before line {kept_line}"
        if why is None:
            if kept is None or t > kept:
                kept, kept_line = t, ev.line
            continue
        ev.time = None
        scan.repairs.add("out_of_order_mark", ev.line,
                         f"{ev.key!r} is stamped {why}; its time is ignored (it times nothing)")


def _early_run_starts(scan: Scan) -> None:
    """A ``run_start`` stamped more than 5 s before a record above it, while the next training
    mark agrees with that record, loses its time (``out_of_order_mark``): it times no segment,
    only the run (Google's v0.7 tpu-v3-8192 SSD logs 1592800000000 ms, 15 h early)."""
    events = scan.events
    above: float | None = None  # latest time of the records so far
    for i, ev in enumerate(events):
        t = ev.time
        if t is None:
            continue
        if ev.key == "run_start" and above is not None and t < above - BACKWARDS_TOLERANCE_S:
            nxt = next((e.time for e in events[i + 1:] if e.key in TIMING_KEYS
                        and e.time is not None), None)
            if nxt is None or nxt >= above - BACKWARDS_TOLERANCE_S:
                ev.time = None
                scan.repairs.add("out_of_order_mark", ev.line,
                                 f"'run_start' is stamped {above - t:.1f} s before the records "
                                 "above it and the training mark after it; its time is "
                                 "ignored (the run's time to train is not known)")
                continue
        if above is None or t > above:
            above = t
