"""Exported W&B history -> one train run: CSV (``wandb.Api().run(...).history()`` written by
pandas, with or without its index column) or JSON lines (the same rows, one object a line;
older W&B run folders' ``wandb-history.jsonl``), or a JSON array of those rows.

Rules
-----
* A row is W&B's: ``_step``, ``_timestamp`` (unix seconds) and ``_runtime`` (seconds since
  the run started) beside the logged metrics. The marks, the step key (Lightning's
  ``trainer/global_step`` and the like before ``_step``) and the progress metric are those of
  the ``.wandb`` reader (:func:`ingest.parsers.wandb.history_marks`); without ``_timestamp``
  the rows cannot be timed (ParseError).
* The run started at ``_timestamp - _runtime`` of its first row (where both are given), so
  the first interval holds the start-up and is warm-up
  (:func:`ingest.parsers.steps.train_segments`).
* Empty cells are not logged values; a cell that is not a number is not a value of a metric
  (W&B exports media and tables as text); a ``_step`` or ``_timestamp`` that is not a number is
  a ParseError at its line.
* Job facts from a ``config.yaml`` and the GPU from a ``wandb-metadata.json`` beside the file
  (or in ``files/``), else the flags. Rows lines are 1-based lines of the file (the header is
  line 1 in a CSV).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from pathlib import Path

from ingest.events import ParseContext, ParsedRun, ParseError
from ingest.parsers.hparams import flag_devices, flatten, job_facts
from ingest.parsers.steps import is_eval, progress_key, train_segments
from ingest.parsers.wandb import (
    WandbContext,
    history_marks,
    metadata_deployment,
    run_files,
    run_files_of,
)
from ingest.validate import loads

FORMAT = "wandb_history"
LABEL = "W&B exported history"
MAX_COLUMNS = 500


def _is_row(obj: object) -> bool:
    return isinstance(obj, dict) and "_step" in obj and ("_timestamp" in obj or "_runtime" in obj)


def sniff(head: list[str]) -> bool:
    """A CSV header with ``_step`` and ``_timestamp``/``_runtime`` columns, or JSON rows with
    those keys."""
    first = next((line.strip() for line in head if line.strip()), "")
    if first.startswith("{"):
        try:
            return _is_row(loads(first))
        except ValueError:
            return False
    if first.startswith("["):
        return '"_step"' in "".join(head) and '"_timestamp"' in "".join(head)
    columns = {c.strip().strip('"') for c in first.split(",")}
    return "_step" in columns and bool(columns & {"_timestamp", "_runtime"})


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 40:
            return None
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def _rows(lines: list[str]) -> list[tuple[int, dict]]:
    """(line, row) pairs, the values numbers or None."""
    first = next((line.strip() for line in lines if line.strip()), "")
    raw: list[tuple[int, object]] = []
    if first.startswith("{"):
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    raw.append((number, loads(line)))
                except ValueError:
                    raise ParseError(f"not a JSON row: {line[:60]!r}", line=number) from None
    elif first.startswith("["):
        try:
            rows = loads("\n".join(lines))
        except (ValueError, RecursionError):
            raise ParseError("not a JSON array of rows", line=1) from None
        if not isinstance(rows, list):
            raise ParseError("not a JSON array of rows", line=1)
        raw = [(index, row) for index, row in enumerate(rows, start=1)]
    else:
        reader = csv.reader(lines)
        header = next(reader, [])[:MAX_COLUMNS]
        for number, cells in enumerate(reader, start=2):
            raw.append((number, dict(zip(header, cells, strict=False))))
    out = []
    for number, row in raw:
        if not isinstance(row, dict):
            raise ParseError("a row must be an object", line=number)
        values = {str(k): _number(v) for k, v in list(row.items())[:MAX_COLUMNS] if str(k)}
        for key in ("_step", "_timestamp"):
            if row.get(key) not in (None, "") and values.get(key) is None:
                raise ParseError(f"{key} = {str(row[key])[:30]!r} is not a number", line=number)
        out.append((number, values))
    return out


def context(path: Path, source: str, overrides) -> ParseContext:
    """The flags plus the ``config.yaml`` and ``wandb-metadata.json`` beside the file."""
    from ingest.parsers import with_overrides

    ctx = with_overrides(ParseContext(), source, overrides)
    return WandbContext(**vars(ctx), files=run_files(path.parent))


def _origin(rows: list[tuple[int, dict]]) -> float | None:
    for _, row in rows:
        stamp, runtime = row.get("_timestamp"), row.get("_runtime")
        if stamp is not None and runtime is not None and runtime >= 0:
            return stamp - runtime
        if stamp is not None:
            return None
    return None


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """One run from exported W&B history rows (module doc)."""
    rows = _rows(list(lines))
    if not any(row.get("_timestamp") is not None for _, row in rows):
        raise ParseError("no _timestamp in the rows: the steps cannot be timed (export the "
                         "history with its _timestamp column)", line=1)
    series, step_key = history_marks(rows)
    key = progress_key(series, "log the train loss every step")
    files = run_files_of(ctx)
    params = dict(files.get("config") or {})
    params = {k: v for k, v in flatten(params).items() if not k.startswith("_wandb")}
    deployment = metadata_deployment(files.get("metadata"))
    devices = deployment.count if deployment else flag_devices(ctx.deployment)
    facts = job_facts(params, devices)
    batch = ctx.batch_size or facts.batch_size
    origin = _origin(rows)
    segments, meta = train_segments(series[key], origin, batch)
    meta.update({"progress_key": key, "step_key": step_key, "timing": "history _timestamp",
                 "clock_resolution_s": 1e-6})
    if deployment is not None:
        meta["gpu_from"] = "wandb-metadata.json"
    if facts.source:
        meta["facts_from"] = facts.source
    if facts.warnings:
        meta["warnings"] = list(facts.warnings)
    if any(is_eval(k) for k in series):
        meta["validation_in_train_time"] = True
    marks = series[key]
    return [ParsedRun(
        format=FORMAT, network=facts.network, deployment=deployment or facts.deployment,
        batch_size=batch, start_time=origin if origin is not None else marks[0].time,
        segments=segments, meta=meta, first_line=rows[0][0], last_line=marks[-1].line,
    )]

