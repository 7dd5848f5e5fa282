"""TensorBoard event files (``events.out.tfevents.*``) -> one train run per file.

Written by ``torch.utils.tensorboard``, tensorboardX and TensorFlow 2 / Keras (scalars stored
as rank-0 tensors with the ``scalars`` plugin); read without TensorFlow (:mod:`.wire`).

What is read
------------
* :func:`decode` turns the file's TFRecords into one JSON line per record (so a message's
  "line" is the record number): the file-version event, the scalar values (``simple_value``
  or a rank-0 float/int tensor) by tag with the event's ``step`` and ``wall_time``, and the
  hparams plugin's session-start values. Other records (images, histograms, graphs) become
  ``{}``; their data checksum is not checked, a kept record's is. A record cut short or
  corrupt is a ParseError at its number (a file cut short may still be being written: ingest
  it once the run has finished).
* The progress tag (:func:`ingest.parsers.steps.progress_key`: the train loss per step, as a
  rule; Keras's ``batch_steps_per_second`` is not one). Its marks (step, wall time) make the
  segments (:func:`ingest.parsers.steps.train_segments`: warm-up apart, reported). The run
  starts when the writer opened (the file-version event's wall time) where that time has a fraction;
  TensorFlow writes it in whole seconds, so for TF2/Keras files the run starts at the Keras
  model-graph record written as ``fit`` begins (``write_graph=True``, the default), else the
  first mark starts the clock. A file with only per-epoch scalars (Keras's default
  ``update_freq="epoch"``) is a ParseError saying to log per batch.
* Job facts (network, batch size, deployment: :mod:`.hparams`) from, first to last: the
  hparams plugin data in the file, in a ``<float>/`` sub-folder (``add_hparams``), then the
  folder's ``hparams.yaml``, ``config.yaml``, ``args.yaml``, ``params.yaml``, ``config.json``,
  ``args.json`` (and its parent's where the folder is Keras's ``train``), else the flags
  (``--network``, ``--batch-size``, ``--deployment``); the pipeline rejects a run still
  lacking one, naming the flag.
* Side files (skipped by a folder ingest): those config files beside an event file, the
  event files of ``add_hparams`` sub-folders, and Keras's ``validation/`` event files (their
  time is inside the train steps' intervals: ``meta["validation_in_train_time"]``).
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ingest.events import ParseContext, ParsedRun, ParseError
from ingest.parsers import wire
from ingest.parsers.history_common import HistoryContext
from ingest.parsers.hparams import facts_meta, flag_devices, flatten, job_facts
from ingest.parsers.steps import Mark, is_eval, progress_key, train_segments

FORMAT = "tensorboard"
LABEL = "TensorBoard event file"

CONFIG_FILES = ("hparams.yaml", "config.yaml", "args.yaml", "params.yaml", "config.json",
                "args.json")
MAX_CONFIG_BYTES = 1 << 20
MAX_KEPT_RECORD = 1 << 16  # larger records (images, graphs) are never scalars
_NAME = re.compile(r"^events\.out\.tfevents\.")
_FLOAT_DIR = re.compile(r"^\d+(?:\.\d+)?$")
_DTYPES = {1: ("<f", 4), 2: ("<d", 8), 3: ("<i", 4), 9: ("<q", 8), 19: ("<e", 2)}
# what a record whose fields have unexpected wire types raises while it is read
_MALFORMED = (TypeError, ValueError, IndexError, KeyError, struct.error, OverflowError)


def claims(path: Path) -> bool:
    """An event file by its name."""
    return bool(_NAME.match(path.name))


def _has_events(folder: Path) -> bool:
    try:
        return any(_NAME.match(p.name) for p in folder.iterdir() if p.is_file())
    except OSError:
        return False


def side_file(path: Path) -> bool:
    """A config file beside an event file, an ``add_hparams`` sub-folder's event file, or a
    Keras ``validation/`` event file beside ``train/``."""
    if claims(path):
        parent = path.parent
        if _FLOAT_DIR.match(parent.name) and _has_events(parent.parent):
            return True
        return parent.name == "validation" and (parent.parent / "train").is_dir()
    return path.name in CONFIG_FILES and _has_events(path.parent)


# --- decoding: TFRecords -> JSON lines --------------------------------------------------------

def _tensor_scalar(data: bytes, span: tuple[int, int]) -> float | None:
    t = wire.message(data, *span)
    dtype = int(t.get(1, [0])[0])
    if dtype not in _DTYPES:
        return None
    if 2 in t and 2 in wire.message(data, *t[2][0]):  # a dimension: not a scalar
        return None
    fmt, size = _DTYPES[dtype]
    if 4 in t:
        start, end = t[4][0]
        if end - start != size:
            return None
        return float(struct.unpack(fmt, data[start:end])[0])
    for number, width in ((5, 4), (6, 8)):
        for raw in t.get(number, []):
            if isinstance(raw, tuple):
                values = wire.packed(data, raw, width)
                if len(values) == 1:
                    return (wire.as_float if width == 4 else wire.as_double)(values[0])
            else:
                return (wire.as_float if width == 4 else wire.as_double)(raw)
    for number in (7, 10):
        for raw in t.get(number, []):
            if not isinstance(raw, tuple):
                return float(wire.as_signed(raw))
    return None


def _proto_value(data: bytes, span: tuple[int, int]) -> object:
    v = wire.message(data, *span)
    if 2 in v:
        return wire.as_double(v[2][0])
    if 3 in v:
        return wire.text(data, v[3][0])
    if 4 in v:
        return bool(v[4][0])
    return None


def _hparams(data: bytes, content: tuple[int, int]) -> dict[str, object]:
    plugin = wire.message(data, *content)
    out: dict[str, object] = {}
    for start_info in plugin.get(3, []):
        for entry in wire.message(data, *start_info).get(1, []):
            e = wire.message(data, *entry)
            if 1 in e:
                out[wire.text(data, e[1][0])] = _proto_value(data, e[2][0]) if 2 in e else None
    return out


def _value(data: bytes, span: tuple[int, int], line: dict) -> None:
    v = wire.message(data, *span)
    tag = wire.text(data, v[1][0]) if 1 in v else ""
    plugin = ""
    if 9 in v:
        meta = wire.message(data, *v[9][0])
        if 1 in meta:
            pd = wire.message(data, *meta[1][0])
            plugin = wire.text(data, pd[1][0]) if 1 in pd else ""
            if plugin == "hparams" and 2 in pd:
                line.setdefault("hp", {}).update(_hparams(data, pd[2][0]))
                return
    if plugin == "graph_keras_model":
        line["graph"] = True  # Keras writes its model graph as training begins
        return
    value = None
    if 2 in v:
        value = wire.as_float(v[2][0])
    elif 8 in v and plugin in ("scalars", ""):
        value = _tensor_scalar(data, v[8][0])
        line["tensor"] = True
    if value is not None:
        line.setdefault("x", {})[tag] = value if math.isfinite(value) else None


def _record_line(data: bytes, start: int, end: int, number: int) -> str:
    if end - start > MAX_KEPT_RECORD:
        return "{}"
    event = wire.message(data, start, end)
    if 5 not in event and 3 not in event:
        return "{}"
    wire.check_tfrecord(data, start, end, number)
    line: dict[str, object] = {}
    if 1 in event:
        wall = wire.as_double(event[1][0])
        line["t"] = wall if math.isfinite(wall) else None
    line["s"] = wire.as_signed(event[2][0]) if 2 in event else 0
    if 3 in event:
        line["fv"] = wire.text(data, event[3][0])[:40]
    for summary in event.get(5, []):
        for value in wire.message(data, *summary).get(1, []):
            _value(data, value, line)
    return json.dumps(line, separators=(",", ":"))


def decode(data: bytes) -> list[str]:
    """One JSON line per TFRecord (module doc); ParseError at the record that breaks."""
    lines: list[str] = []
    number = 0
    try:
        for number, start, end in wire.tfrecords(data):
            try:
                lines.append(_record_line(data, start, end, number))
            except _MALFORMED as exc:  # fields of the wrong wire type, bad packed values
                raise wire.WireError(f"record {number} is not an event ({type(exc).__name__})",
                                     number) from None
    except wire.WireError as exc:
        hint = "; a file still being written? ingest it once the run has finished" \
            if "cut short" in exc.reason else ""
        where = exc.record or number + 1
        reason = exc.reason if exc.record else f"record {where}: {exc.reason}"
        raise ParseError(reason + hint, line=where) from None
    if not lines:
        raise ParseError("empty event file", line=1)
    return lines


def sniff(head: list[str]) -> bool:
    """True if the first decoded record is an event file's version record."""
    first = wire.first_decoded(head)
    return first is not None and str(first.get("fv", "")).startswith("brain.Event")


# --- side files -------------------------------------------------------------------------------

def _load_config(path: Path) -> dict | None:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    try:
        if path.suffix == ".json":
            tree = json.loads(text)
        else:
            # optional (the history extra): without it YAML configs are not read
            import yaml

            tree = yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - a config file that does not load gives no facts
        return None
    return tree if isinstance(tree, dict) else None


def _subfolder_hparams(folder: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    try:
        subs = sorted(p for p in folder.iterdir() if p.is_dir() and _FLOAT_DIR.match(p.name))
    except OSError:
        return out
    for sub in subs[:20]:
        for event_file in sorted(sub.glob("events.out.tfevents.*"))[:5]:
            try:
                for line in decode(event_file.read_bytes()):
                    hp = json.loads(line).get("hp")
                    if isinstance(hp, dict):
                        for key, value in hp.items():
                            out.setdefault(key, value)
            except Exception:  # noqa: BLE001 - a broken side file gives no facts
                continue
    return out


@dataclass(frozen=True)
class TensorBoardContext(HistoryContext):
    """A :class:`HistoryContext` (the folder's config files) plus the event file's
    ``writer`` (``"tf2"``, ``"torch"`` or ``"tensorboardX"``, from its name) and whether
    it is a Keras ``train`` folder beside a ``validation`` one (``validation_folder``)."""

    writer: str = ""
    validation_folder: bool = False


def context(path: Path, source: str, overrides) -> ParseContext:
    """The flags plus the folder's config files and ``add_hparams`` values (module doc)."""
    from ingest.parsers import with_overrides

    folder = path.parent
    folders = [folder, folder.parent] if folder.name in ("train", "training") else [folder]
    params: dict[str, object] = {}
    used: list[str] = []
    for key, value in _subfolder_hparams(folder).items():
        params.setdefault(key, value)
    if params:
        used.append("add_hparams sub-folder")
    for where in folders:
        for name in CONFIG_FILES:
            tree = _load_config(where / name)
            if tree is not None:
                used.append(str(where / name))
                for key, value in flatten(tree).items():
                    params.setdefault(key, value)
    writer = "tf2" if path.name.endswith(".v2") else (
        "torch" if re.search(r"\.\d+\.\d+$", path.name) else "tensorboardX")
    ctx = with_overrides(ParseContext(), source, overrides)
    return TensorBoardContext(**vars(ctx), config=params, config_files=tuple(used),
                              writer=writer, validation_folder=(folder.parent / "validation")
                              .is_dir() and folder.name == "train")


# --- parsing ----------------------------------------------------------------------------------

def _read(lines: Iterable[str]) -> tuple[dict[str, list[Mark]], dict, float | None, set[str]]:
    series: dict[str, list[Mark]] = {}
    hparams: dict[str, object] = {}
    origin: float | None = None
    flags: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        try:
            rec = json.loads(raw)
        except ValueError:
            raise ParseError("not a decoded event record", line=number) from None
        if not isinstance(rec, dict) or not rec:
            continue
        wall, step = rec.get("t"), rec.get("s")
        if ("fv" in rec or (rec.get("graph") and not series)) and isinstance(wall, float) \
                and not wall.is_integer():
            origin = wall if origin is None else origin
        if isinstance(rec.get("hp"), dict):
            for key, value in rec["hp"].items():
                hparams.setdefault(str(key), value)
        if rec.get("tensor"):
            flags.add("tensor")
        values = rec.get("x")
        if not isinstance(values, dict) or not values:
            continue
        if not isinstance(wall, int | float) or isinstance(wall, bool) or \
                not isinstance(step, int) or isinstance(step, bool):
            raise ParseError("scalar event without a wall time or step", line=number)
        for tag in values:
            tag = str(tag)
            if tag in ("keras", "batch_steps_per_second"):
                continue
            series.setdefault(tag, []).append(Mark(step, float(wall), number))
    return series, hparams, origin, flags


def _framework(writer: str, flags: set[str], tags: Iterable[str]) -> str | None:
    if writer == "tf2" or "tensor" in flags:
        keras = any(t.startswith(("batch_", "epoch_")) for t in tags)
        return "Keras" if keras else "TensorFlow"
    return "PyTorch" if writer == "torch" else None


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """One run from a decoded event file (module doc)."""
    series, hparams, origin, flags = _read(lines)
    tag = progress_key(series, "log per batch (Keras: TensorBoard(update_freq='batch') or an "
                       "integer)")
    side = ctx if isinstance(ctx, TensorBoardContext) else TensorBoardContext()
    params: dict[str, object] = dict(hparams)
    for key, value in side.config.items():
        params.setdefault(key, value)
    facts = job_facts(params, flag_devices(ctx.deployment))
    batch = ctx.batch_size or facts.batch_size
    segments, meta = train_segments(series[tag], origin, batch)
    writer = side.writer
    meta.update({"progress_tag": tag, "timing": "event wall_time", "writer": writer or None})
    meta["clock_resolution_s"] = 1e-6
    if side.config_files:
        meta["config_files"] = list(side.config_files)
    meta.update(facts_meta(facts))
    if side.validation_folder or any(is_eval(t) for t in series):
        meta["validation_in_train_time"] = True
    marks = series[tag]
    return [ParsedRun(
        format=FORMAT, network=facts.network, deployment=facts.deployment,
        stack=_framework(writer, flags, series), batch_size=batch,
        start_time=origin if origin is not None else marks[0].time, segments=segments,
        meta=meta, first_line=marks[0].line, last_line=marks[-1].line,
    )]
