"""Weights & Biases run folders: the ``run-<id>.wandb`` transaction log -> one train run.

Offline (``WANDB_MODE=offline``: ``wandb/offline-run-<date>-<id>/``) and synced
(``wandb/run-<date>-<id>/``) folders. The ``.wandb`` file is read without the ``wandb``
package (:func:`ingest.parsers.wire.leveldb_records`, field numbers of W&B's public
``wandb_internal.proto``); the exported history (CSV / JSON lines) is
:mod:`ingest.parsers.wandb_export`.

What is read
------------
* :func:`decode` turns each record into one JSON line (a message's "line" is the record
  number): the run record (id, project, start time, config), config updates, the
  environment record (GPU type and count, NVIDIA GPU names), history rows (the numeric values
  of ``_step``, ``_timestamp``, ``_runtime`` and the metrics; a nested key is joined with
  ``/``), the exit record. Other records become ``{"w": ""}``. A record with a bad checksum is
  a ParseError at its number.
* The history's marks: of the metrics (:func:`ingest.parsers.steps.progress_key`: the train
  loss, as a rule), each row that holds it at its step and ``_timestamp``. The step is the
  row's own step counter where one is logged with it (:data:`STEP_KEYS`, e.g. Lightning's
  ``trainer/global_step``, Hugging Face's ``train/global_step``), else W&B's ``_step`` (which
  counts ``log`` calls: log evaluation in the same call or with ``step=``). The run starts
  at the run record's start time (``wandb.init``), so the first interval holds the start-up
  (:func:`ingest.parsers.steps.train_segments`: warm-up apart, reported).
* A log without an exit record is a ParseError: the run is still running (or was killed);
  ingest it once it has finished. An exit code other than 0 is kept (``meta["exit_code"]``).
* Job facts (:mod:`.hparams`) from the run's config (then ``files/config.yaml``); the GPU
  model and count from the environment record, else ``files/wandb-metadata.json`` (``gpu``,
  ``gpu_count``), else the config, else ``--deployment``.
* Side files (skipped by a folder ingest): everything else in a W&B run folder and the
  ``debug*.log`` files of a ``wandb/`` folder.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.deployment import Deployment
from ingest.events import ParseContext, ParsedRun, ParseError
from ingest.parsers import wire
from ingest.parsers.hparams import facts_meta, flag_devices, flatten, job_facts
from ingest.parsers.steps import Mark, is_eval, progress_key, train_segments
from ingest.validate import loads

FORMAT = "wandb"
LABEL = "W&B run"

STEP_KEYS = ("trainer/global_step", "train/global_step", "global_step", "trainer.global_step")
MAX_KEYS_PER_ROW = 200
MAX_META_BYTES = 1 << 20
_RUN_FOLDER = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-\w+$")
_RECORDS = {2: "h", 5: "config", 17: "run", 18: "exit", 26: "env", 21: "header"}


def claims(path: Path) -> bool:
    """A W&B transaction log by its name (``run-<id>.wandb``)."""
    return path.suffix == ".wandb" and path.name.startswith("run-")


def side_file(path: Path) -> bool:
    """Any other file of a W&B run folder, or a ``wandb/debug*.log``."""
    if claims(path):
        return False
    if any(_RUN_FOLDER.match(part) for part in path.parts[:-1]):
        return True
    return path.parent.name == "wandb" and path.name.startswith("debug")


# --- decoding ---------------------------------------------------------------------------------

def _json_value(text: str) -> object:
    try:
        return loads(text)
    except (ValueError, RecursionError):
        return None


def _items(data: bytes, spans: list, limit: int) -> dict[str, object]:
    """``key``/``nested_key`` + ``value_json`` items (history, config) as a mapping."""
    out: dict[str, object] = {}
    for span in spans[:limit]:
        item = wire.message(data, *span)
        if 1 in item:
            key = wire.text(data, item[1][0])
        else:
            key = "/".join(wire.text(data, k) for k in item.get(2, []))
        if key and 16 in item:
            out[key] = _json_value(wire.text(data, item[16][0]))
    return out


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _timestamp(data: bytes, span) -> float | None:
    ts = wire.message(data, *span)
    seconds = wire.as_signed(ts[1][0]) if 1 in ts else 0
    nanos = wire.as_signed(ts[2][0]) if 2 in ts else 0
    return seconds + nanos / 1e9 if abs(seconds) < 10**11 else None


def _record(data: bytes, kind: str, body: dict[int, list]) -> dict[str, object]:
    line: dict[str, object] = {"w": kind}
    if kind == "h":
        row = _items(data, body.get(1, []), MAX_KEYS_PER_ROW)
        line["v"] = {k: _number(v) for k, v in row.items()}
        if 2 in body:
            step = wire.message(data, *body[2][0])
            line["n"] = wire.as_signed(step[1][0]) if 1 in step else 0
    elif kind == "config":
        line["c"] = _items(data, body.get(1, []), 10_000)
    elif kind == "run":
        for number, name in ((1, "id"), (3, "project"), (8, "name"), (13, "host")):
            if number in body:
                line[name] = wire.text(data, body[number][0])[:200]
        if 17 in body:
            line["start"] = _timestamp(data, body[17][0])
        if 4 in body:
            line["c"] = _items(data, wire.message(data, *body[4][0]).get(1, []), 10_000)
    elif kind == "exit":
        line["code"] = wire.as_signed(body[1][0]) if 1 in body else 0
        line["runtime"] = wire.as_signed(body[2][0]) if 2 in body else None
    elif kind == "env":
        if 18 in body:
            line["gpu"] = wire.text(data, body[18][0])[:100]
        if 19 in body:
            line["gpus"] = int(body[19][0])
        names = [wire.message(data, *g) for g in body.get(24, [])[:1024]]
        line["names"] = [wire.text(data, g[1][0])[:100] for g in names if 1 in g]
    return line


def decode(data: bytes) -> list[str]:
    """One JSON line per record of a ``.wandb`` file (module doc)."""
    try:
        records, _ = wire.leveldb_records(data)
    except wire.WireError as exc:
        raise ParseError(exc.reason, line=exc.record or 1) from None
    lines = []
    for number, record in enumerate(records, start=1):
        try:
            top = wire.message(record)
            kind = next((name for field, name in _RECORDS.items() if field in top), "")
            line = _record(record, kind, wire.message(record, *top[_field(kind)][0])) \
                if kind else {"w": ""}
        except (wire.WireError, TypeError, ValueError, IndexError, KeyError,
                OverflowError, StopIteration) as exc:  # fields of unexpected wire types
            why = exc.reason if isinstance(exc, wire.WireError) else type(exc).__name__
            raise ParseError(f"record {number} is not a W&B record ({why})",
                             line=number) from None
        lines.append(json.dumps(line, separators=(",", ":")))
    if not lines:
        raise ParseError("no records in the W&B log", line=1)
    return lines


def _field(kind: str) -> int:
    return next(field for field, name in _RECORDS.items() if name == kind)


def sniff(head: list[str]) -> bool:
    """True if the first decoded record is a W&B header record."""
    first = wire.first_decoded(head)
    return first is not None and first.get("w") == "header"


# --- side files -------------------------------------------------------------------------------

def _read_json(path: Path) -> dict | None:
    try:
        if path.stat().st_size > MAX_META_BYTES:
            return None
        tree = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    return tree if isinstance(tree, dict) else None


def run_files(folder: Path) -> dict[str, object]:
    """``files/wandb-metadata.json`` and ``files/config.yaml`` of a W&B run folder (or of the
    folder itself, for an exported history beside them): ``{"metadata": ..., "config": ...}``."""
    out: dict[str, object] = {}
    for where in (folder / "files", folder):
        meta = _read_json(where / "wandb-metadata.json")
        if meta is not None and "metadata" not in out:
            out["metadata"] = meta
        config_path = where / "config.yaml"
        if "config" not in out and config_path.is_file():
            try:
                if config_path.stat().st_size <= MAX_META_BYTES:
                    import yaml

                    tree = yaml.safe_load(config_path.read_text(encoding="utf-8",
                                                                errors="replace"))
                    if isinstance(tree, dict):
                        out["config"] = flatten(tree)
            except Exception:  # noqa: BLE001 - a config that does not load gives no facts
                pass
    return out


@dataclass(frozen=True)
class WandbContext(ParseContext):
    """A :class:`ParseContext` plus the run folder's files (:func:`run_files`)."""

    files: dict[str, object] = field(default_factory=dict)


def run_files_of(ctx: ParseContext) -> dict[str, Any]:
    """The run folder's files a context holds (none but a :class:`WandbContext`'s)."""
    return dict(ctx.files) if isinstance(ctx, WandbContext) else {}


def context(path: Path, source: str, overrides) -> ParseContext:
    """The flags plus the run folder's metadata and config files."""
    from ingest.parsers import with_overrides

    ctx = with_overrides(ParseContext(), source, overrides)
    return WandbContext(**vars(ctx), files=run_files(path.parent))


def metadata_deployment(meta: object) -> Deployment | None:
    """The GPUs ``wandb-metadata.json`` names (``gpu``, ``gpu_count``), else None."""
    if not isinstance(meta, dict):
        return None
    name, count = meta.get("gpu"), meta.get("gpu_count")
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 65536:
        return None
    return Deployment(" ".join(name.split()), count)


# --- parsing ----------------------------------------------------------------------------------

def history_marks(rows: list[tuple[int, dict]]) -> tuple[dict[str, list[Mark]], str]:
    """Per metric, the marks of the rows holding it (the step: :data:`STEP_KEYS` else
    ``_step``), and the step key used."""
    step_key = next((k for k in STEP_KEYS if any(k in row for _, row in rows)), "_step")
    series: dict[str, list[Mark]] = {}
    for line, row in rows:
        step, stamp = row.get(step_key), row.get("_timestamp")
        if step is None or stamp is None:
            continue
        if not float(step).is_integer() or abs(step) > 1e15:
            raise ParseError(f"{step_key} = {step!r} is not a step number", line=line)
        for key, value in row.items():
            if key.startswith("_") or key in STEP_KEYS or value is None:
                continue
            series.setdefault(key, []).append(Mark(int(step), float(stamp), line))
    return series, step_key


def _gpus(env: dict, files: dict) -> tuple[Deployment | None, str | None]:
    name = env.get("gpu") or next(iter(env.get("names") or []), None)
    count = env.get("gpus") or len(env.get("names") or [])
    if isinstance(name, str) and name.strip() and isinstance(count, int) and 1 <= count <= 65536:
        return Deployment(" ".join(name.split()), count), "environment record"
    dep = metadata_deployment(files.get("metadata"))
    if dep is not None:
        return dep, "wandb-metadata.json"
    return None, None


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """One run from a decoded ``.wandb`` log (module doc)."""
    rows: list[tuple[int, dict]] = []
    run: dict = {}
    config: dict[str, object] = {}
    env: dict = {}
    exit_rec: dict | None = None
    for number, raw in enumerate(lines, start=1):
        try:
            rec = json.loads(raw)
        except ValueError:
            raise ParseError("not a decoded W&B record", line=number) from None
        kind = rec.get("w") if isinstance(rec, dict) else None
        if kind == "h" and isinstance(rec.get("v"), dict):
            rows.append((number, rec["v"]))
        elif kind == "run":
            run = {**rec, "line": number}
            config.update(rec.get("c") or {})
        elif kind == "config":
            config.update(rec.get("c") or {})
        elif kind == "env":
            env.update({k: v for k, v in rec.items() if v})
        elif kind == "exit":
            exit_rec = rec
    if not run:
        raise ParseError("no run record: not a W&B run log", line=1)
    if exit_rec is None:
        raise ParseError("no exit record: the run is still running (or was killed); ingest it "
                         "once it has finished", line=len(rows) and rows[-1][0] or 1)
    series, step_key = history_marks(rows)
    key = progress_key(series, "log the train loss every step")
    files = run_files_of(ctx)
    params = {k: v for k, v in flatten(config).items() if not k.startswith("_wandb")}
    for k, v in dict(files.get("config") or {}).items():
        if not str(k).startswith("_wandb"):
            params.setdefault(k, v)
    deployment, gpu_from = _gpus(env, files)
    devices = deployment.count if deployment else flag_devices(ctx.deployment)
    facts = job_facts(params, devices)
    batch = ctx.batch_size or facts.batch_size
    start = run.get("start")
    segments, meta = train_segments(series[key], start if isinstance(start, float) else None,
                                    batch)
    meta.update({"progress_key": key, "step_key": step_key, "timing": "history _timestamp",
                 "clock_resolution_s": 1e-6, "exit_code": exit_rec.get("code")})
    for name in ("id", "project", "name"):
        if run.get(name):
            meta[f"wandb_{name}"] = run[name]
    if gpu_from:
        meta["gpu_from"] = gpu_from
    meta.update(facts_meta(facts))
    if any(is_eval(k) for k in series):
        meta["validation_in_train_time"] = True
    marks = series[key]
    return [ParsedRun(
        format=FORMAT, network=facts.network, deployment=deployment or facts.deployment,
        stack=None, batch_size=batch,
        start_time=start if isinstance(start, float) else marks[0].time, segments=segments,
        meta=meta, first_line=run["line"], last_line=marks[-1].line,
    )]
