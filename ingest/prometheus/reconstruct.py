"""Reconstruction: range-vector series -> :class:`JobTrace` objects (pure).

Rules
-----
* The exporter measures its values inside the job, so each scrape is an exact point of
  the job's cumulative curve per phase kind; phase boundaries come from the per-phase
  offsets (the cumulative values when a phase began), so a boundary is exact whenever any
  later scrape is seen. Scrape jitter is therefore harmless.
* A gap only loses points: phases that began and ended inside one gap are merged into one
  segment spanning them (with a note); a phase still open at the last scrape is dropped,
  as logs drop open phases.
* A counter reset or a new ``job_start`` value starts a new attempt (a restarted job).
* Several targets exporting one job id at the same time (e.g. every worker of a
  data-parallel job): only the target with most samples is kept. Targets one after the
  other (a job restarted on another host) are merged.
* Status: ``finished`` (the job exported an end), ``restarted`` (a later attempt
  follows), ``lost`` (no sample for ``stale_after`` before ``until``, no end) or
  ``running``; every status but ``finished`` sets ``meta["truncated"]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ingest.events import PHASES, ParsedRun, ParseError, Segment
from ingest.parsers.jsonl import deployment_from
from ingest.prometheus.names import COUNTERS, FORMAT, PER_PHASE, MetricNames


@dataclass
class PhaseProgress:
    """Where a phase kind stands at the last scrape of an attempt (cumulative values)."""

    iterations: float = 0.0
    seconds: float = 0.0
    phases: int = 0
    active: bool = False
    epoch: int | None = None
    batch_size: int | None = None
    planned: int | None = None
    curve: list[tuple[float, float, float]] = field(default_factory=list)  # (t, iters, secs)


@dataclass
class JobTrace:
    """One attempt of one job as read back from Prometheus.

    ``status``: ``finished`` (the job said it ended), ``running`` (samples until the end of
    the window), ``lost`` (samples stopped without an end, e.g. a crash) or ``restarted``
    (a later attempt of the same job follows). ``run`` holds the closed segments only.
    """

    job_id: str
    attempt: int
    status: str
    run: ParsedRun
    progress: dict[str, PhaseProgress]
    labels: dict[str, str]
    job_start: float | None
    job_end: float | None
    last_progress: float | None
    first_seen: float
    last_seen: float
    planned_epochs: int | None = None
    first_phase_start: float | None = None  # when the first phase seen began
    notes: list[str] = field(default_factory=list)


def _float(value) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _job_series(series: Iterable[dict], names: MetricNames):
    """Group series by job id: job -> {(key, phase): {t: v}}, plus label values seen.

    Several targets exporting one job id at the same time (e.g. every worker of a
    data-parallel job) would interleave: only the target with most samples is kept.
    Targets one after the other (a job restarted on another host) are merged.
    """
    per_target: dict[tuple[str, str], dict[tuple[str, str | None], dict[float, float]]] = {}
    labels: dict[str, dict[str, str]] = {}
    for item in series:
        metric = item.get("metric") or {}
        key = names.key_of(str(metric.get("__name__", "")))
        job = metric.get(names.job_label)
        if key is None or not job:
            continue
        phase = metric.get(names.phase_label) if key in PER_PHASE else None
        if key in PER_PHASE and phase not in PHASES:
            continue
        points = item.get("values")
        if points is None and item.get("value") is not None:
            points = [item["value"]]
        target_id = f"{metric.get('job', '')}/{metric.get('instance', '')}"
        target = per_target.setdefault((job, target_id), {}).setdefault((key, phase), {})
        for ts, raw in points or []:
            t, v = _float(ts), _float(raw)
            if t is not None and v is not None:
                target[t] = v
        seen = labels.setdefault(job, {})
        for name, label in (("network", names.network_label),
                            ("deployment", names.deployment_label),
                            ("instance", "instance"), ("scrape_job", "job")):
            if metric.get(label):
                seen.setdefault(name, metric[label])
        if key == "info" and points:
            last_t = max(_float(p[0]) or 0.0 for p in points)
            for name in ("framework", "status"):
                prev = seen.get(f"_{name}_t")
                if metric.get(name) and (prev is None or last_t >= float(prev)):
                    seen[name] = metric[name]
                    seen[f"_{name}_t"] = str(last_t)
    jobs: dict[str, dict[tuple[str, str | None], dict[float, float]]] = {}
    dropped: dict[str, list[str]] = {}
    by_job: dict[str, list[tuple[float, float, int, str, dict]]] = {}
    for (job, target_id), data in per_target.items():
        times = [t for samples in data.values() for t in samples]
        if times:
            by_job.setdefault(job, []).append(
                (min(times), max(times), len(times), target_id, data))
    for job, targets in by_job.items():
        kept: list[tuple[float, float, int, str, dict]] = []
        for span in sorted(targets):
            if kept and span[0] <= kept[-1][1]:  # overlaps the previous one: concurrent
                loser = min(kept[-1], span, key=lambda x: x[2])
                dropped.setdefault(job, []).append(loser[3])
                if loser is kept[-1]:
                    kept[-1] = span
                continue
            kept.append(span)
        merged: dict[tuple[str, str | None], dict[float, float]] = {}
        for *_, data in kept:
            for series_key, samples in data.items():
                merged.setdefault(series_key, {}).update(samples)
        jobs[job] = merged
    return jobs, labels, dropped


def _attempt_bounds(data: dict[tuple[str, str | None], dict[float, float]]) -> list[float]:
    """Times where a new attempt starts: ``job_start`` changes or a counter goes down."""
    starts = {}
    for (key, phase), samples in data.items():
        if key == "job_start" or key in COUNTERS:
            starts[(key, phase)] = sorted(samples.items())
    bounds = set()
    for (key, _), pairs in starts.items():
        for (_t0, v0), (t1, v1) in zip(pairs, pairs[1:], strict=False):
            if (key == "job_start" and v1 != v0) or (key in COUNTERS and v1 < v0 - 1e-9):
                bounds.add(t1)
    return sorted(bounds)


def _snapshots(data, lo: float, hi: float):
    """Forward-filled states at every sample time in ``[lo, hi)`` (values of this attempt)."""
    events = sorted(
        (t, key, v) for key, samples in data.items() for t, v in samples.items() if lo <= t < hi
    )
    state: dict[tuple[str, str | None], float] = {}
    snaps: list[tuple[float, dict]] = []
    for t, key, v in events:
        state[key] = v
        if snaps and snaps[-1][0] == t:
            snaps[-1] = (t, dict(state))
        else:
            snaps.append((t, dict(state)))
    return snaps


@dataclass
class _SegObs:
    off_i: float
    off_s: float
    start: float | None
    epoch: int | None
    batch: int | None
    first_seen: float
    points: list[tuple[float, float]] = field(default_factory=list)
    end: tuple[float, float] | None = None


def _phase_segments(snaps, phase: str) -> tuple[list[Segment], list[str], PhaseProgress]:
    obs: dict[int, _SegObs] = {}
    prog = PhaseProgress()
    for t, st in snaps:
        get = lambda key, st=st: st.get((key, phase))  # noqa: E731
        if get("iterations") is not None:
            prog.iterations = get("iterations")
            prog.seconds = get("seconds") or 0.0
            prog.curve.append((t, prog.iterations, prog.seconds))
        prog.planned = _int(get("planned"))
        prog.batch_size = _int(get("batch_size"))
        k = _int(get("phases")) or 0
        prog.phases = k
        prog.active = get("active") == 1.0
        prog.epoch = _int(get("epoch"))
        if k <= 0 or get("iterations") is None or get("offset_iterations") is None:
            continue
        seg = obs.get(k)
        if seg is None:
            seg = obs[k] = _SegObs(
                off_i=get("offset_iterations"), off_s=get("offset_seconds") or 0.0,
                start=get("phase_start"), epoch=_int(get("epoch")),
                batch=_int(get("batch_size")), first_seen=t,
            )
        rel = (get("iterations") - seg.off_i, (get("seconds") or 0.0) - seg.off_s)
        if get("active") == 1.0:
            seg.points.append(rel)
        else:
            seg.end = rel
    segments: list[Segment] = []
    notes: list[str] = []
    ks = sorted(obs)
    if ks and ks[0] > 1:
        first = obs[ks[0]]
        if first.off_i > 0 or first.off_s > 0:
            segments.append(_segment(phase, 0.0, 0.0, None, None, first.batch, [],
                                     (first.off_i, first.off_s), merged=ks[0] - 1))
            notes.append(f"{phase}: phases 1-{ks[0] - 1} were not scraped while running; "
                         "kept as one segment")
    for j, k in enumerate(ks):
        seg = obs[k]
        if j + 1 < len(ks):
            nxt = obs[ks[j + 1]]
            end = (nxt.off_i - seg.off_i, nxt.off_s - seg.off_s)
            merged = ks[j + 1] - k
            if merged > 1:
                notes.append(f"{phase}: phases {k}-{ks[j + 1] - 1} merged (the later ones "
                             "began and ended between two scrapes)")
        elif seg.end is not None:
            end, merged = seg.end, 1
        else:
            continue  # still open (or cut by a crash): dropped, as logs drop open phases
        segments.append(_segment(phase, seg.off_i, seg.off_s, seg.start, seg.epoch,
                                 seg.batch, seg.points, end, merged))
    return segments, notes, prog


def _segment(phase, off_i, off_s, start, epoch, batch, points, end, merged) -> Segment:
    iterations, seconds = max(0.0, end[0]), max(0.0, end[1])
    pts: list[tuple[float, float]] = []
    for it, sec in sorted(set(points)):
        if 0 < it < iterations and (not pts or it > pts[-1][0]):
            pts.append((it, min(max(sec, pts[-1][1] if pts else 0.0), seconds)))
    pts.append((iterations, seconds))
    return Segment(
        phase=phase,
        iterations=iterations,
        seconds=seconds,
        batch_size=batch,
        start_time=start,
        epoch_start=float(epoch) if epoch is not None else None,
        epoch_end=float(epoch) if epoch is not None and merged == 1 else None,
        iteration_start=int(round(off_i)),
        iteration_end=int(round(off_i + iterations)),
        points=tuple(pts),
    )


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def segments_from_samples(series: Iterable[dict], names: MetricNames | None = None, *,
                          until: float | None = None, stale_after: float = 300.0,
                          ) -> list[JobTrace]:
    """Reconstruct every job (and attempt) in range-vector ``series`` (pure function).

    ``series`` is what ``/api/v1/query`` returns for a range vector (a list of
    ``{"metric": {labels}, "values": [[t, "v"], ...]}``; instant ``"value"`` pairs work
    too). A job whose samples stop more than ``stale_after`` seconds before ``until``
    without an end is ``lost``; without ``until`` such a job counts as ``running``.
    """
    names = names or MetricNames()
    jobs, labels, dropped = _job_series(series, names)
    out: list[JobTrace] = []
    for job_id in sorted(jobs):
        data = jobs[job_id]
        seen = labels.get(job_id, {})
        times = sorted({t for samples in data.values() for t in samples})
        if not times:
            continue
        bounds = [times[0], *_attempt_bounds(data), math.inf]
        for attempt, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False), start=1):
            snaps = _snapshots(data, lo, hi)
            if not snaps:
                continue
            last = snaps[-1][1]
            job_start = last.get(("job_start", None))
            job_end = last.get(("job_end", None))
            segments: list[Segment] = []
            notes: list[str] = [
                f"target {t} also exported this job at the same time; ignored"
                for t in dropped.get(job_id, [])
            ]
            progress: dict[str, PhaseProgress] = {}
            first_seen: dict[int, float] = {}
            for phase in PHASES:
                segs, phase_notes, progress[phase] = _phase_segments(snaps, phase)
                segments += segs
                notes += phase_notes
            for i, seg in enumerate(segments):
                first_seen[i] = seg.start_time if seg.start_time is not None else -math.inf
            order = sorted(range(len(segments)), key=lambda i: (first_seen[i], i))
            segments = [segments[i] for i in order]
            if hi is not math.inf:
                status = "restarted"
            elif job_end is not None:
                status = "finished"
            elif until is not None and until - snaps[-1][0] > stale_after:
                status = "lost"
            else:
                status = "running"
            try:
                deployment = deployment_from(seen.get("deployment"), 0)
            except ParseError:
                deployment = None
                notes.append(f"deployment label {seen.get('deployment')!r} is not understood")
            meta: dict[str, object] = {
                "job_id": job_id, "attempt": attempt, "status": status,
                "scrapes": len(snaps),
            }
            if len(snaps) > 1:
                gaps = [b[0] - a[0] for a, b in zip(snaps, snaps[1:], strict=False)]
                meta["max_gap_s"] = round(max(gaps), 3)
                meta["median_interval_s"] = round(sorted(gaps)[len(gaps) // 2], 3)
            if status != "finished":
                meta["truncated"] = True
            for name in ("instance", "scrape_job"):
                if seen.get(name):
                    meta[name] = seen[name]
            phase_starts = [v for key, samples in data.items() if key[0] == "phase_start"
                            for t, v in samples.items() if lo <= t < hi]
            planned_epochs = _int(last.get(("planned_epochs", None)))
            if planned_epochs:
                meta["epochs"] = planned_epochs
            train = progress["train"]
            if planned_epochs and train.planned:
                meta["steps_per_epoch"] = train.planned // planned_epochs
            network = seen.get("network")
            run = ParsedRun(
                format=FORMAT,
                network=network.strip().lower() if network else None,
                deployment=deployment,
                stack=seen.get("framework") or None,
                batch_size=train.batch_size,
                start_time=job_start,
                segments=segments,
                meta=meta,
            )
            out.append(JobTrace(
                job_id=job_id, attempt=attempt, status=status, run=run, progress=progress,
                labels={k: v for k, v in seen.items() if not k.startswith("_")},
                job_start=job_start, job_end=job_end,
                last_progress=last.get(("last_progress", None)),
                first_seen=snaps[0][0], last_seen=snaps[-1][0],
                planned_epochs=planned_epochs,
                first_phase_start=min(phase_starts) if phase_starts else None, notes=notes,
            ))
    return out
