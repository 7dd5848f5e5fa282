"""Hugging Face ``Trainer`` state: the ``trainer_state.json`` that ``trainer.save_state()``
writes at the end of training, with the model's ``config.json`` beside it.

What is read
------------
* ``global_step``, ``max_steps``, ``num_train_epochs``, ``epoch``, ``train_batch_size`` (per
  device times the GPUs of one process) and ``log_history``: the final entry with
  ``train_runtime`` (seconds, 4 decimals), ``train_steps_per_second`` and
  ``train_samples_per_second``; evaluation entries with ``eval_runtime`` and
  ``eval_steps_per_second``; loss entries (``loss``, ``step``).
* ``config.json`` beside it (context): ``_name_or_path`` (its last path part) or
  ``model_type`` as the network. ``training_args.bin`` is a pickle and is never read.
* A checkpoint's state (``checkpoint-N/trainer_state.json``) is written before training
  ends and holds no ``train_runtime``: it is a side file (:func:`side_file`), never a run.

Segments
--------
* One ``train`` segment: iterations = the steps this ``train()`` call ran (``round(steps/s x
  runtime)``, which is ``global_step`` unless the run resumed), seconds = ``train_runtime``
  less the evaluations logged before it (they run inside the training loop), epochs 1 ..
  ``epoch``. ``log_history`` has no clock per step: no points, and the warm-up cannot be
  separated (``meta["warmup"]`` says so).
* One ``test`` segment per evaluation entry: iterations ``round(eval_runtime x
  eval_steps_per_second)``, seconds ``eval_runtime``.
* Facts: global batch = samples per step (``train_samples_per_second /
  train_steps_per_second``) rounded to a multiple of ``train_batch_size`` (gradient
  accumulation and processes included), else ``train_batch_size``
  (``meta["batch_assumed"]``); no GPU name (``--deployment``).

Errors: ParseError for a file that is not a JSON object (with the line JSON stops at), a
state without ``log_history`` or without the ``train_runtime`` entry, and fields that are
not finite numbers (the entry's line where it can be found).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path

from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import ParseOverrides, with_overrides
from ingest.parsers.history_common import (
    Facts,
    HistoryContext,
    build_run,
    facts,
    history_context,
    json_number,
    name_value,
    positive_int,
    read_json,
    sibling,
)
from ingest.validate import loads

FORMAT = "hf_trainer"
LABEL = "Hugging Face trainer_state.json"
FRAMEWORK = "PyTorch (Hugging Face Trainer)"
NAME = "trainer_state.json"
_CHECKPOINT = re.compile(r"checkpoint-\d+")


def claims(path: Path) -> bool:
    """A file named ``trainer_state.json``."""
    return path.name == NAME


def side_file(path: Path) -> bool:
    """A checkpoint's ``trainer_state.json`` (no ``train_runtime`` yet: module doc)."""
    return path.name == NAME and bool(_CHECKPOINT.fullmatch(path.parent.name))


def sniff(head: list[str]) -> bool:
    """True if the head is a JSON object with ``log_history`` and ``global_step`` keys."""
    text = "\n".join(head)
    return text.lstrip().startswith("{") and '"log_history"' in text and '"global_step"' in text


def context(path: Path, source: str, overrides: ParseOverrides) -> HistoryContext:
    """The model's ``config.json`` beside the state (module doc)."""
    ctx = with_overrides(ParseContext(), source, overrides)
    config_path = sibling(path, "config.json")
    config = read_json(config_path) if config_path else None
    found: dict[str, object] = {}
    if config:
        name = name_value(config.get("_name_or_path"))
        name = name.rstrip("/").rsplit("/", 1)[-1] if name else name_value(config.get("model_type"))
        if name:
            found["network"] = name
    return history_context(ctx, found, [str(config_path)] if found else [])


def _entry_lines(lines: list[str]) -> list[int]:
    """The line of each ``log_history`` entry's opening brace (pretty-printed JSON), so an
    error can name it; empty when the layout is not the usual one."""
    starts, inside, depth = [], False, 0
    for number_, line in enumerate(lines, start=1):
        text = line.strip()
        if not inside:
            inside = text.startswith('"log_history"')
            continue
        if text.startswith("{") and depth == 0:
            starts.append(number_)
        depth += text.count("{") - text.count("}")
        if depth < 0 or (depth == 0 and text.startswith("]")):
            break
    return starts


def _load(lines: list[str]) -> dict:
    try:
        state = loads("\n".join(lines))
    except json.JSONDecodeError as exc:
        raise ParseError(f"not JSON ({exc.msg})", line=exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"not JSON ({str(exc)[:60]})", line=1) from None
    if not isinstance(state, dict):
        raise ParseError("trainer_state.json must be a JSON object", line=1)
    if not isinstance(state.get("log_history"), list):
        raise ParseError("no log_history list: not a Trainer state", line=1)
    return state


def _steps(entry: dict, runtime_key: str, rate_key: str, line: int) -> int | None:
    runtime = json_number(entry, runtime_key, line)
    rate = json_number(entry, rate_key, line, required=False)
    if rate is None or runtime is None:
        return None
    product = rate * runtime
    return round(product) if math.isfinite(product) and 0 <= product <= 1e15 else None


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse a Trainer's final ``trainer_state.json`` (see module doc)."""
    lines = lines if isinstance(lines, list) else list(lines)
    state = _load(lines)
    history = [e for e in state["log_history"] if isinstance(e, dict)]
    at = _entry_lines(lines)
    line_of = {id(e): (at[i] if i < len(at) else 1) for i, e in enumerate(history)}
    final_index = next((i for i, e in enumerate(history) if "train_runtime" in e), None)
    if final_index is None:
        raise ParseError("no train_runtime entry in log_history: a state saved before training "
                         "ended (call trainer.save_state() after train())", line=1)
    final = history[final_index]
    line = line_of[id(final)]
    runtime = json_number(final, "train_runtime", line)
    assert runtime is not None
    segments: list[Segment] = []
    eval_before = 0.0
    for i, entry in enumerate(history):
        if "eval_runtime" not in entry:
            continue
        eline = line_of[id(entry)]
        seconds = json_number(entry, "eval_runtime", eline)
        batches = _steps(entry, "eval_runtime", "eval_steps_per_second", eline)
        epoch = json_number(entry, "epoch", eline, required=False)
        if i < final_index:
            eval_before += seconds or 0.0
        if batches and seconds and batches >= 1:
            segments.append(Segment("test", float(batches), seconds, line=eline,
                                    epoch_start=epoch, epoch_end=epoch))
    global_step = json_number(state, "global_step", 1, required=False)
    ran = _steps(final, "train_runtime", "train_steps_per_second", line)
    steps: float | None = global_step if ran is None or global_step is None or abs(
        ran - global_step) <= max(1.0, 0.01 * global_step) else float(ran)
    meta: dict[str, object] = {
        "timing": "train_runtime less the evaluations inside training (4 decimals)",
        "warmup": "not separable: log_history has no clock per step (the warm-up is in the "
                  "one train segment)",
        "global_step": global_step,
    }
    if steps is not None and global_step is not None and steps != global_step:
        meta["resumed_from_step"] = global_step - steps
    epochs = json_number(state, "epoch", 1, required=False)
    train_s = runtime - eval_before
    if steps is None or steps < 1 or train_s <= 0:
        raise ParseError(f"train segment of {steps} steps in {train_s:g} s: nothing to store",
                         line=line)
    segments.insert(0, Segment("train", float(steps), train_s, line=line,
                               epoch_start=1.0 if epochs else None,
                               epoch_end=max(1.0, epochs) if epochs else None))
    per_device = positive_int(state.get("train_batch_size"))
    batch = None
    samples_rate = json_number(final, "train_samples_per_second", line, required=False)
    steps_rate = json_number(final, "train_steps_per_second", line, required=False)
    ratio = samples_rate / steps_rate / per_device if per_device and samples_rate and \
        steps_rate else None
    if per_device and ratio is not None and math.isfinite(ratio) and 0 < ratio <= 1e6:
        factor = max(1, round(ratio))
        batch = per_device * factor
        meta["batch_multiple"] = factor
    elif per_device:
        batch, meta["batch_assumed"] = per_device, "train_batch_size (no rates to check it)"
    for key in ("max_steps", "num_train_epochs", "logging_steps", "train_batch_size"):
        if isinstance(state.get(key), int | float) and not isinstance(state.get(key), bool):
            meta[key] = state[key]
    found = facts(Facts(batch_size=batch), ctx, meta)
    first_line = at[0] if at else 1
    return [build_run(FORMAT, FRAMEWORK, found, segments, meta, first_line, len(lines))]
