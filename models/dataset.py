"""Turn stored runs into the training table of the end-to-end models.

Each run contributes, per phase, its cumulative progress curve: after ``iterations``
steps of that phase the run had spent ``seconds`` in it (time in the other phase left
out). Every epoch / step mark the log has becomes a point, so a model sees the whole
curve of each run, warm-up included, not only its total.

Software stacks are keyed case- and whitespace-insensitively (:func:`stack_key`): the runs of
``"MXNet NVIDIA Release 21.09"`` and ``"MxNet  NVIDIA Release 21.09"`` are one stack, and the
``stack`` column spells it the way its earliest run did (runs without a start time count
after those with one; ties go by source and run order), so every row of one stack reads the
same.

Each row also carries the run's ``variant`` key and ``system`` (``models.variant``) and its
``clock_resolution_s``. A run that cannot be used (no network or deployment, a batch size
or a segment value that is not a finite positive number, a point that is not finite, broken
variant/system/resolution meta) gives no rows: :func:`collect_points` names it as a
:class:`SkippedRun` with the reason, and never raises for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from fleet.errors import ErrorInfo
from ingest.store import Store, StoredRun
from models.variant import BrokenMeta, run_resolution, run_system, variant_key

MAX_POINTS_PER_RUN_PHASE = 200
SKIPPED_KIND = "skipped_run"  # the error kind of a stored run the fit cannot use
COLUMNS = [
    "run_id",
    "source",
    "network",
    "deployment",
    "stack",
    "phase",
    "batch_size",
    "iterations",
    "seconds",
    "final",
    "start_time",
    "variant",
    "system",
    "clock_resolution_s",
]


@dataclass(frozen=True)
class SkippedRun:
    """A stored run the fit cannot use, with its key (as far as known) and the reason."""

    source: str
    run: int  # run number in its file, from 1
    network: str
    deployment: str
    stack: str
    variant: str
    system: str
    phases: tuple[str, ...]
    reason: str
    model_id: str = ""  # the (pooled) model its key would have; set by the fit

    def info(self) -> ErrorInfo:
        """Why the run was skipped in the one error shape (:class:`fleet.errors.ErrorInfo`,
        kind ``skipped_run``, ``file`` its source)."""
        return ErrorInfo(kind=SKIPPED_KIND, message=self.reason, file=self.source or None)

    def to_dict(self) -> dict:
        """The ``jobcast fit --json`` entry of a skipped run (an ``error`` entry of its key's
        model, with ``skipped`` and the run's ``source`` and number; ``problem``:
        :meth:`info`)."""
        return {"model": self.model_id, "error": f"run skipped: {self}", "skipped": self.reason,
                "source": self.source, "run": self.run, "network": self.network,
                "deployment": self.deployment, "problem": self.info().as_dict()}

    def __str__(self) -> str:
        return f"{self.source} run {self.run}: {self.reason}"


def software_stack(framework: str | None) -> str:
    """The stack as logged (ends stripped), or ``""`` when unknown; keyed by :func:`stack_key`."""
    return (framework or "").strip()


def stack_key(stack: str | None) -> str:
    """The key of a stack: case folded, runs of whitespace read as one space, ends stripped.

    Two spellings are one stack exactly when their keys are equal; ``""`` is the unknown stack.
    """
    return " ".join(str(stack or "").split()).casefold()


def stack_spellings(stored: list[StoredRun]) -> dict[str, str]:
    """Stack key -> the spelling the earliest run used (see the module doc for the order)."""

    def order(run: StoredRun) -> tuple:
        return (run.start_time is None, run.start_time or 0.0, run.source, run.run_index)

    spelling: dict[str, str] = {}
    for run in sorted(stored, key=order):
        stack = software_stack(run.stack)
        spelling.setdefault(stack_key(stack), stack)
    return spelling


def progress_points(store: Store) -> pd.DataFrame:
    """One row per progress point of every usable run and phase in the store (module doc)."""
    return collect_points(store)[0]


def collect_points(store: Store) -> tuple[pd.DataFrame, list[SkippedRun]]:
    """The progress points of the usable runs, and the runs skipped with their reasons."""
    stored = store.runs()
    spelling = stack_spellings(stored)
    by_run: dict[int, list[dict]] = {}
    for seg in store.segments([r.id for r in stored]):
        by_run.setdefault(seg["run_id"], []).append(seg)
    rows: list[dict] = []
    skipped: list[SkippedRun] = []
    for run in stored:
        try:
            rows.extend(_run_rows(run, by_run.get(run.id, []), spelling))
        except _Unusable as exc:
            skipped.append(_skipped(run, by_run.get(run.id, []), spelling, str(exc)))
    return pd.DataFrame(rows, columns=COLUMNS), skipped


class _Unusable(ValueError):
    """Why a run gives no rows."""


def _finite_positive(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def _run_rows(run: StoredRun, segs: list[dict], spelling: dict[str, str]) -> list[dict]:
    """The rows of one run; :class:`_Unusable` says why there are none."""
    if not run.network or not run.deployment:
        raise _Unusable("the run names no network or no deployment")
    meta = run.meta if isinstance(run.meta, dict) else {}
    try:
        variant, system, resolution = (
            variant_key(meta.get("variant")), run_system(meta), run_resolution(meta))
    except BrokenMeta as exc:
        raise _Unusable(f"broken meta: {exc}") from None
    if run.start_time is not None and not math.isfinite(run.start_time):
        raise _Unusable(f"start time {run.start_time} is not finite")
    for seg in segs:
        for name in ("iterations", "seconds"):
            value = seg[name]
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise _Unusable(f"{seg['phase']} segment {name} {value} is not a finite "
                                "number >= 0")
        if any(not all(math.isfinite(float(v)) for v in p) for p in seg["points"]):
            raise _Unusable(f"{seg['phase']} segment has a point that is not finite")
    rows: list[dict] = []
    for phase in ("train", "test"):
        phase_segs = [s for s in segs if s["phase"] == phase]
        curve = _cumulative_curve(phase_segs)
        if not curve:
            continue
        batch = next((s["batch_size"] for s in phase_segs if s["batch_size"]), run.batch_size)
        if not _finite_positive(batch):
            raise _Unusable(f"{phase} batch size {batch} is not positive")
        for i, (iters, secs) in enumerate(curve):
            rows.append(
                {
                    "run_id": run.id,
                    "source": run.source,
                    "network": run.network,
                    "deployment": run.deployment,
                    "stack": spelling[stack_key(run.stack)],
                    "phase": phase,
                    "batch_size": int(batch),
                    "iterations": iters,
                    "seconds": secs,
                    "final": i == len(curve) - 1,
                    "start_time": run.start_time,
                    "variant": variant,
                    "system": system,
                    "clock_resolution_s": resolution,
                }
            )
    return rows


def _skipped(run: StoredRun, segs: list[dict], spelling: dict[str, str],
             reason: str) -> SkippedRun:
    meta = run.meta if isinstance(run.meta, dict) else {}
    try:
        variant = variant_key(meta.get("variant"))
    except BrokenMeta:
        variant = ""
    try:
        system = run_system(meta)
    except BrokenMeta:
        system = ""
    return SkippedRun(
        source=run.source, run=run.run_index + 1, network=run.network or "",
        deployment=run.deployment or "", stack=spelling.get(stack_key(run.stack), ""),
        variant=variant, system=system,
        phases=tuple(p for p in ("train", "test") if any(s["phase"] == p for s in segs)),
        reason=reason)


def _cumulative_curve(segs: list[dict]) -> list[tuple[float, float]]:
    """Chain segments into one (iterations, seconds) curve, thinned to a bounded size."""
    curve: list[tuple[float, float]] = []
    done_iters = done_secs = 0.0
    for seg in segs:
        inner = [p for p in seg["points"] if 0 < p[0] < seg["iterations"]]
        for it, sec in inner:
            curve.append((done_iters + it, done_secs + sec))
        done_iters += seg["iterations"]
        done_secs += seg["seconds"]
        curve.append((done_iters, done_secs))
    curve = [p for p in curve if p[0] > 0 and p[1] > 0]
    if len(curve) > MAX_POINTS_PER_RUN_PHASE:
        step = len(curve) / (MAX_POINTS_PER_RUN_PHASE - 1)
        keep = {round(i * step) for i in range(MAX_POINTS_PER_RUN_PHASE - 1)} | {len(curve) - 1}
        curve = [p for i, p in enumerate(curve) if i in keep]
    return curve
