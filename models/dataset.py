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
"""

from __future__ import annotations

import pandas as pd

from ingest.store import Store, StoredRun

MAX_POINTS_PER_RUN_PHASE = 200
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
]


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
        stack = software_stack(run.framework)
        spelling.setdefault(stack_key(stack), stack)
    return spelling


def progress_points(store: Store) -> pd.DataFrame:
    """One row per progress point of every run and phase in the store (see module doc)."""
    stored = store.runs()
    spelling = stack_spellings(stored)
    by_run: dict[int, list[dict]] = {}
    for seg in store.segments([r.id for r in stored]):
        by_run.setdefault(seg["run_id"], []).append(seg)
    rows: list[dict] = []
    for run in stored:
        for phase in ("train", "test"):
            segs = [s for s in by_run.get(run.id, []) if s["phase"] == phase]
            curve = _cumulative_curve(segs)
            if not curve:
                continue
            batch = next((s["batch_size"] for s in segs if s["batch_size"]), run.batch_size)
            for i, (iters, secs) in enumerate(curve):
                rows.append(
                    {
                        "run_id": run.id,
                        "source": run.source,
                        "network": run.network,
                        "deployment": run.deployment,
                        "stack": spelling[stack_key(run.framework)],
                        "phase": phase,
                        "batch_size": int(batch),
                        "iterations": iters,
                        "seconds": secs,
                        "final": i == len(curve) - 1,
                        "start_time": run.start_time,
                    }
                )
    return pd.DataFrame(rows, columns=COLUMNS)


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
