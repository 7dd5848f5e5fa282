"""PyTorch Lightning console output (the progress bars a ``Trainer.fit`` prints), with the
``hparams.yaml`` its ``CSVLogger``/``TensorBoardLogger`` writes.

What is read
------------
Each line is split at carriage returns and newlines and ANSI cursor codes are removed, then:

* **TQDM bars** (``TQDMProgressBar``, Lightning's classic default): ``Epoch e: p%|...| n/T
  [E<R, r it/s, v_num=V, ...]``. The train bar has ``smoothing=0``, so ``r`` is ``n / t``
  with ``t`` the seconds since the epoch began, and ``E`` is ``t`` floored to whole
  seconds: ``t`` is taken as the middle of where both say it lies
  (:func:`elapsed`). ``Validation DataLoader k: ... n/T`` bars give the validation batches.
* **Rich bars** (``RichProgressBar``, the default when ``rich`` is installed): ``Epoch
  e/L ━━━ n/T H:MM:SS • H:MM:SS r it/s``; only completed bars reach a captured file, and
  ``r`` is Rich's own speed estimate, so these give each printed epoch's total only
  (``meta["timing"]`` says so).
* ``Initializing distributed: GLOBAL_RANK: g, MEMBER: m/W`` (W processes), ``GPU available:``.
* ``hparams.yaml`` (context): beside the log, or in ``lightning_logs/version_V/`` (or
  ``<name>/version_V/``) below the log's folder, the version named by the bar's ``v_num``
  where there are several: ``batch_size`` (or ``train_batch_size``/``batch``) per process,
  and the model name (``model``, ``arch``, ``model_name``, ``network``, ``backbone``).

Segments
--------
* One ``train`` segment per epoch whose bar reaches ``T``: iterations ``T``, seconds at the
  first record showing ``n = T``; a point per record that advances ``n``. Epochs stored
  1-based (``e + 1``).
* Validation inside an epoch: the train bar stands still while it runs; the first train
  record after a validation bar, at the same ``n``, closes a ``test`` segment (its seconds
  the time the bar stood still, so epoch-end callbacks run before that record count too;
  iterations the validation bar's last ``n``). That time is taken out of the train segment.
* An epoch number that goes back (a new ``fit``) starts a new run; an epoch whose bar never
  reaches ``T`` is dropped (``meta["truncated"]``).
* Warm-up: the steps up to the first record of the run
  (:func:`~ingest.parsers.history_common.split_warmup`).
* Facts: global batch = hparams batch size x W (W = 1 without the distributed line); no GPU
  name (``--deployment``); network from the hparams.

Errors: ParseError (with the line) for an epoch bar record whose numbers do not read, a
count past its total, and a file with no complete epoch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import ParseOverrides, with_overrides
from ingest.parsers.history_common import (
    Facts,
    HistoryContext,
    build_run,
    clock_seconds,
    curve_points,
    facts,
    history_context,
    name_value,
    number,
    positive_int,
    read_yaml,
    split_warmup,
    whole,
)

FORMAT = "lightning"
LABEL = "PyTorch Lightning"
FRAMEWORK = "PyTorch Lightning"
BATCH_KEYS = ("batch_size", "train_batch_size", "batch")
MODEL_KEYS = ("model", "arch", "model_name", "network", "backbone")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TQDM = re.compile(r"^(Epoch (\d+)|Validation(?: DataLoader \d+)?|Sanity Checking(?: DataLoader "
                   r"\d+)?|Testing(?: DataLoader \d+)?|Predicting(?: DataLoader \d+)?):"
                   r"\s*(?:\d+%)?\|[^|]*\|\s*(\d+)/(\d+|\?) \[([\d:]+)<[\d:?]+,\s*"
                   r"(?:([\d.]+)it/s|\?it/s|([\d.]+)s/it)(.*)\]\s*$")
_RICH = re.compile(r"^(Epoch (\d+)/(?:\d+|\?)|Validation|Sanity Checking|Testing|Predicting)"
                   r"\s.*?\s(\d+)/(\d+|\?)\s+(\d+:\d\d:\d\d)\s+•\s+\S+\s*(?:([\d.]+)it/s)?")
_EPOCH_LIKE = re.compile(r"^Epoch \d+(?::|/\d+\s)")
_V_NUM = re.compile(r"v_num[=:]\s*(\d+)")
_MEMBER = re.compile(r"Initializing distributed: GLOBAL_RANK: \d+, MEMBER: \d+/(\d+)")
RATE_HALF_STEP = 0.005  # rates print with two decimals


def fragments(line: str) -> list[str]:
    """The records of one captured line (split at CR and LF, cursor codes removed)."""
    return [t for t in (_ANSI.sub("", p).strip() for p in re.split(r"[\r\n]", line)) if t]


def sniff(head: list[str]) -> bool:
    """True if the head holds a Lightning epoch bar record (TQDM or Rich)."""
    for line in head:
        for text in fragments(line):
            m = _TQDM.match(text) or _RICH.match(text)
            if m and m.group(2) is not None:
                return True
    return False


def elapsed(count: int, whole_s: int, rate: float | None) -> float:
    """Seconds since the bar began: within [whole_s, whole_s + 1) and, with a rate of two
    decimals, within count / (rate +- 0.005); the middle of where both hold (the rate's own
    estimate where they disagree, the middle of the second without a rate)."""
    low, high = float(whole_s), whole_s + 1.0
    if rate is None or rate <= 0 or count <= 0:
        return low + 0.5
    r_low = count / (rate + RATE_HALF_STEP)
    r_high = count / (rate - RATE_HALF_STEP) if rate > RATE_HALF_STEP else float("inf")
    lo, hi = max(low, r_low), min(high, r_high)
    return (lo + hi) / 2 if lo <= hi else count / rate


def _versions(folder: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    try:
        for pattern in ("hparams.yaml", "version_*/hparams.yaml", "*/version_*/hparams.yaml",
                        "*/lightning_logs/version_*/hparams.yaml"):
            for path in sorted(folder.glob(pattern))[:64]:
                m = re.fullmatch(r"version_(\d+)", path.parent.name)
                found.setdefault(int(m.group(1)) if m else -1, path)
    except OSError:
        pass
    return found


def _hparams_facts(hparams: dict) -> dict[str, object]:
    out: dict[str, object] = {}
    batch = next((positive_int(hparams.get(k)) for k in BATCH_KEYS
                  if positive_int(hparams.get(k))), None)
    if batch:
        out["per_process_batch"] = batch
    model = next((name_value(hparams.get(k)) for k in MODEL_KEYS if name_value(hparams.get(k))),
                 None)
    if model:
        out["network"] = model
    return out


def context(path: Path, source: str, overrides: ParseOverrides) -> HistoryContext:
    """``hparams.yaml`` beside the log or in a version folder below it (module doc)."""
    ctx = with_overrides(ParseContext(), source, overrides)
    by_version: dict[int, dict[str, object]] = {}
    files: dict[int, str] = {}
    for version, hp_path in _versions(path.parent).items():
        hparams = read_yaml(hp_path)
        if hparams is not None:
            by_version[version], files[version] = _hparams_facts(hparams), str(hp_path)
    return history_context(ctx, {"hparams_by_version": by_version, "hparams_files": files},
                           files.values())


@dataclass
class _Epoch:
    epoch: int
    total: int | None
    marks: list[tuple[float, float]] = field(default_factory=list)
    paused: float = 0.0
    last: tuple[int, float] | None = None  # (n, t) of the last train record
    end: tuple[int, float, int] | None = None  # (n, t less pauses, line) at n = total
    tests: list[tuple[int, float, int]] = field(default_factory=list)


@dataclass
class _Run:
    first_line: int
    last_line: int = 0
    epochs: list[_Epoch] = field(default_factory=list)
    val_count: int | None = None
    rich: bool = False
    version: int | None = None


def _rate(m: re.Match[str], number_: int) -> float | None:
    if m.group(6):
        return number(m.group(6), "rate", number_)
    if m.lastindex and m.lastindex >= 7 and m.group(7):
        per = number(m.group(7), "seconds per step", number_)
        return 1.0 / per if per > 0 else None
    return None


def _epoch_record(run: _Run, epoch: int, count: int, total: int | None, t: float,
                  number_: int) -> None:
    if total is not None and count > total:
        raise ParseError(f"bar count {count} past its total {total}", line=number_)
    current = run.epochs[-1] if run.epochs else None
    if current is None or current.epoch != epoch or (current.last and count < current.last[0]):
        current = _Epoch(epoch, total)
        run.epochs.append(current)
        run.val_count = None
    if current.last is not None and run.val_count is not None and count == current.last[0]:
        pause = max(0.0, t - current.last[1])
        current.tests.append((run.val_count, pause, number_))
        current.paused += pause
    elif (current.last is None or count > current.last[0]) and count > 0:
        current.marks.append((float(count), t - current.paused))
        if total is not None and count == total and current.end is None:
            current.end = (count, t - current.paused, number_)
    current.last = (count, t)
    run.val_count = None


def _record(text: str, run: _Run | None, runs: list[_Run], number_: int) -> _Run | None:
    m = _TQDM.match(text)
    rich = m is None
    m = m or _RICH.match(text)
    if m is None:
        if _EPOCH_LIKE.match(text) and ("|" in text or "•" in text) and "it/s" in text:
            raise ParseError(f"epoch bar record that does not read (cut?): {text[:80]!r}",
                             line=number_)
        return run
    count = whole(m.group(3), "bar count", number_)
    total = None if m.group(4) == "?" else whole(m.group(4), "bar total", number_)
    whole_s = clock_seconds(m.group(5), "elapsed", number_)
    rate = number(m.group(6), "rate", number_) if rich and m.group(6) else (
        None if rich else _rate(m, number_))
    if m.group(2) is None:  # a validation / sanity / test bar
        if run is not None and m.group(1).startswith("Validation"):
            run.val_count = count
        return run
    epoch = whole(m.group(2), "epoch", number_)
    if count == 0:  # a bar (re)drawn before its first step: no progress
        return run
    if run is None or (run.epochs and epoch < run.epochs[-1].epoch):
        run = _Run(first_line=number_, rich=rich)
        runs.append(run)
    version = _V_NUM.search(text)
    if version and run.version is None:
        run.version = whole(version.group(1), "v_num", number_)
    _epoch_record(run, epoch, count, total, elapsed(count, whole_s, rate), number_)
    run.last_line = number_
    return run


def _segments(run: _Run, meta: dict[str, object]) -> list[Segment]:
    out: list[Segment] = []
    for ep in run.epochs:
        if ep.end is None and ep.total is None and ep.marks:
            ep.end = (int(ep.marks[-1][0]), ep.marks[-1][1], run.last_line)
            meta["unknown_total"] = True
        if ep.end is None or ep.end[1] <= 0:
            meta["truncated"] = True
            continue
        steps, seconds, line = ep.end
        epoch = float(ep.epoch + 1)
        out.append(Segment("train", float(steps), seconds, epoch_start=epoch, epoch_end=epoch,
                           line=line, points=curve_points(ep.marks, steps, seconds)))
        for count, pause, test_line in ep.tests:
            if count > 0 and pause > 0:
                out.append(Segment("test", float(count), pause, epoch_start=epoch,
                                   epoch_end=epoch, line=test_line))
    return out


def _to_parsed(run: _Run, ctx: ParseContext, world: int, gpu_used: bool | None
               ) -> ParsedRun | None:
    meta: dict[str, object] = {
        "timing": ("Rich bar totals (elapsed whole seconds and Rich's speed estimate)"
                   if run.rich else "TQDM bar: elapsed whole seconds and n / rate"),
        "bar": "rich" if run.rich else "tqdm",
    }
    segments = _segments(run, meta)
    if not any(s.phase == "train" for s in segments):
        return None
    segments, warmup = split_warmup(segments, "the steps up to the bar's first record")
    meta.update(warmup)
    config = ctx.config if isinstance(ctx, HistoryContext) else {}
    by_version: dict = config.get("hparams_by_version") or {}  # type: ignore[assignment]
    files: dict = config.get("hparams_files") or {}  # type: ignore[assignment]
    chosen: dict = {}
    if isinstance(by_version, dict) and by_version:
        key = run.version if run.version in by_version else (
            next(iter(by_version)) if len(by_version) == 1 else None)
        chosen = by_version.get(key, {}) if key is not None else {}
        if chosen:
            meta["hparams_file"] = files.get(key)
        elif len(by_version) > 1:
            meta["hparams"] = "several version folders and no v_num to choose one"
    per_process = positive_int(chosen.get("per_process_batch"))
    network = name_value(chosen.get("network"))
    meta["processes"] = world
    if gpu_used is not None:
        meta["gpu_used"] = gpu_used
    found = facts(Facts(network=network, batch_size=per_process * world if per_process
                        else None), ctx, meta)
    if per_process:
        meta["batch_per_process"] = per_process
        taken = meta.get("from_config")
        meta["from_config"] = [*(taken if isinstance(taken, list) else []), "batch_size"]
    return build_run(FORMAT, FRAMEWORK, found, segments, meta, run.first_line, run.last_line)


def parse(lines: Iterable[str], ctx: ParseContext) -> list[ParsedRun]:
    """Parse Lightning console output (see module doc)."""
    runs: list[_Run] = []
    run: _Run | None = None
    world, gpu_used = 1, None
    for number_, raw in enumerate(lines, start=1):
        for text in fragments(raw):
            if text.startswith("Initializing distributed"):
                m = _MEMBER.search(text)
                if m:
                    world = max(1, whole(m.group(1), "process count", number_))
                continue
            if text.startswith("GPU available:"):
                gpu_used = "used: True" in text
                continue
            run = _record(text, run, runs, number_)
    parsed = [p for p in (_to_parsed(r, ctx, world, gpu_used) for r in runs) if p is not None]
    if not parsed:
        raise ParseError("no epoch bar that reaches its total: no complete training epoch")
    return parsed
