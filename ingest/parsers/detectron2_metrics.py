"""Detectron2's ``metrics.json`` (``JSONWriter``: one JSON object per line), with the
``config.yaml`` its ``default_setup`` writes beside it.

What is read
------------
* Train records: ``iteration`` (0-based, the last step of the period), ``time`` (the median
  step time over the writer's window, 20 steps by default), ``data_time``, ``lr``,
  ``eta_seconds``; evaluation records (``bbox/AP``, ... without ``time``) are counted only
  (``meta["evaluations"]``: ``metrics.json`` does not time them).
* ``config.yaml`` beside it (context, ``yaml.safe_load``): ``SOLVER.IMS_PER_BATCH`` (the global
  batch), ``SOLVER.MAX_ITER``; ``MODEL.META_ARCHITECTURE`` and ``MODEL.RESNETS.DEPTH`` are
  kept in ``meta["model"]`` (the network is ``--network``'s: detectron2 configs name no model).
* A restart appends to the file: an iteration that does not increase starts a new run.
* Side files (:func:`side_file`): ``log.txt`` and ``last_checkpoint`` of a detectron2
  output folder (``metrics.json`` beside them): the same run as ``metrics.json``.

Segments: one ``train`` segment per run: iterations ``last iteration + 1``; seconds the sum
over records of (steps since the previous record) x ``time``; a point per record. There is
no clock in the file (``meta["timing"]``). Warm-up: the steps up to the first record
(:func:`~ingest.parsers.history_common.split_warmup`; detectron2's own timer also leaves its
first 3 steps out of ``time``).

Errors: ParseError (with the line) for a line that is not a JSON object (a cut last line
included), a train record whose ``iteration`` or ``time`` is not a finite number >= 0, and
a file with no run of two or more timed records.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import ParseOverrides, with_overrides
from ingest.parsers.history_common import (
    Facts,
    HistoryContext,
    build_run,
    curve_points,
    facts,
    history_context,
    json_number,
    json_objects,
    positive_int,
    read_yaml,
    sibling,
    split_warmup,
    timed_marks,
)

FORMAT = "detectron2"
LABEL = "Detectron2 metrics.json"
FRAMEWORK = "PyTorch (Detectron2)"


def side_file(path: Path) -> bool:
    """``log.txt`` / ``last_checkpoint`` of a folder that holds ``metrics.json``."""
    if path.name not in ("log.txt", "last_checkpoint"):
        return False
    try:
        return (path.parent / "metrics.json").is_file()
    except OSError:
        return False


def claims(path: Path) -> bool:
    """A file named ``metrics.json``."""
    return path.name == "metrics.json"


def sniff(head: list[str]) -> bool:
    """True if the first non-blank line is a JSON object with ``iteration`` and ``time``
    (detectron2 writes keys sorted: ``data_time`` first)."""
    for line in head:
        text = line.strip()
        if not text:
            continue
        return (text.startswith("{") and '"iteration"' in text and '"time"' in text
                and ('"data_time"' in text or '"eta_seconds"' in text))
    return False


def context(path: Path, source: str, overrides: ParseOverrides) -> HistoryContext:
    """``config.yaml`` beside ``metrics.json`` (module doc)."""
    ctx = with_overrides(ParseContext(), source, overrides)
    config_path = sibling(path, "config.yaml")
    config = read_yaml(config_path) if config_path else None
    found: dict[str, object] = {}
    if config:
        solver: dict = config["SOLVER"] if isinstance(config.get("SOLVER"), dict) else {}
        model: dict = config["MODEL"] if isinstance(config.get("MODEL"), dict) else {}
        if positive_int(solver.get("IMS_PER_BATCH")):
            found["batch_size"] = positive_int(solver.get("IMS_PER_BATCH"))
        if positive_int(solver.get("MAX_ITER")):
            found["max_iter"] = positive_int(solver.get("MAX_ITER"))
        resnets: dict = model["RESNETS"] if isinstance(model.get("RESNETS"), dict) else {}
        arch = model.get("META_ARCHITECTURE")
        if isinstance(arch, str):
            found["model"] = {"meta_architecture": arch[:64],
                              "resnet_depth": positive_int(resnets.get("DEPTH"))}
    return history_context(ctx, found, [str(config_path)] if found else [])


def _records(lines: Iterable[str]) -> tuple[list[list[tuple[int, float, int]]], int]:
    runs: list[list[tuple[int, float, int]]] = []
    evals = 0
    for number_, obj in json_objects(lines, "metrics.json", " (cut?)"):
        if "time" not in obj:
            evals += "iteration" in obj
            continue
        iteration = json_number(obj, "iteration", number_)
        seconds = json_number(obj, "time", number_)
        assert iteration is not None and seconds is not None
        if not iteration.is_integer() or iteration < 0 or seconds < 0:
            raise ParseError(f"iteration {iteration:g} with time {seconds:g}: want a whole "
                             "iteration >= 0 and a time >= 0", line=number_)
        if not runs or iteration <= runs[-1][-1][0]:
            runs.append([])
        runs[-1].append((int(iteration), seconds, number_))
    return runs, evals


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse a detectron2 ``metrics.json`` (see module doc)."""
    runs, evals = _records(lines)
    config = ctx.config if isinstance(ctx, HistoryContext) else {}
    parsed = []
    for run in runs:
        marks, total = timed_marks((iteration + 1, seconds) for iteration, seconds, _ in run)
        if len(run) < 2 or total <= 0:
            continue
        steps = run[-1][0] + 1
        seg = Segment("train", float(steps), total, line=run[-1][2],
                      points=curve_points(marks, steps, total))
        meta: dict[str, object] = {
            "timing": "median step time x steps per record (metrics.json has no clock)",
            "evaluations": evals,
        }
        segments, warmup = split_warmup([seg], "the steps up to the first record "
                                                "(that many median step times)")
        meta.update(warmup)
        for key in ("max_iter", "model"):
            if config.get(key):
                meta[key] = config[key]
        found = facts(Facts(), ctx, meta)
        parsed.append(build_run(FORMAT, FRAMEWORK, found, segments, meta, run[0][2],
                                run[-1][2]))
    if not parsed:
        raise ParseError("no run with two or more timed records in metrics.json")
    return parsed
