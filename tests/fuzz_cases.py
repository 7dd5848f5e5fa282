"""Fuzz cases of the log parsers and the ``--jobs`` CSV reader: real samples, mutations, checks.

Test support, one copy for the hypothesis tests (tests/ingest/test_fuzz_*.py) and the seeded
run (``benchmarks/fuzz_parsers.py``, results in docs/lab/fuzz.md and docs/history-sources.md).

Each case takes one real sample (tests/data; :data:`SAMPLES` the log formats,
:data:`HISTORY_B_SAMPLES` the PyTorch-era history formats of tests/data/frameworks), applies
1-4 hostile mutations (:func:`mutate`: huge and 5,000-digit numbers, NaN/inf/-0/1e308,
negative and scaled numbers, cut lines, a cut file, random bytes, invalid UTF-8,
duplicated/shuffled/deleted lines, a very long line) and runs it through the real ingest path
(:func:`run_log_case`: :func:`ingest.pipeline.parse_data` then
:func:`ingest.pipeline.write_parsed` into a real SQLite store, the run read back). Outcomes:

* ``crash``: any exception other than :class:`~ingest.events.ParseError` (must be 0),
  counting those the pipeline's safety net turns into a ``parser failed: ...`` rejection
  (``caught``): the user sees a clean rejection, but the parser has a bug;
* ``rejected``: a ParseError (``with line``: it names a line);
* ``accepted``: stored; ``nonsense``: stored with a value :func:`nonsense` refuses (must be 0).

:func:`run_jobs_case` reads a mutated jobs CSV with
:func:`jobcast.service.engine.request.read_jobs_rows` (what ``jobcast predict --jobs`` reads) and
validates each row: a crash is an exception other than ``JobRequestError``.
"""

from __future__ import annotations

import json
import math
import random
import re
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from paths import DATA, REPO

from ingest.events import ParseError
from ingest.parsers import registered
from ingest.pipeline import IngestOptions, parse_data, write_parsed
from ingest.store import Store, files, runs, segments
from ingest.validate import (
    MAX_BATCH_SIZE,
    MAX_ITERATIONS,
    MAX_SEGMENT_SECONDS,
    MAX_UNIX_TIME,
    MIN_UNIX_TIME,
)

_MLPERF = DATA / "mlperf"
SAFETY_NET = "parser failed:"  # the pipeline's rejection for any exception a parser raises
_KERAS_FLAGS = {"network": "tinycnn", "batch_size": 32, "deployment": "1x cpu"}


@dataclass(frozen=True)
class Sample:
    """A real log and the flags a user would pass with it (what its format lacks)."""

    path: Path
    flags: tuple[tuple[str, object], ...] = ()

    def overrides(self) -> IngestOptions:
        return IngestOptions(**dict(self.flags))


def sample_of(path: Path, **flags: object) -> Sample:
    """The sample of ``path`` with the flags a user would pass with it."""
    return Sample(path, tuple(sorted(flags.items())))


SAMPLES: dict[str, list[Sample]] = {
    "jsonl": [sample_of(DATA / "keras" / "fit_verbose1.jsonl"),
              sample_of(DATA / "keras" / "fit_verbose2.jsonl")],
    "keras": [sample_of(DATA / "keras" / "fit_verbose1.txt", **_KERAS_FLAGS),
              sample_of(DATA / "keras" / "fit_verbose2.txt", **_KERAS_FLAGS)],
    "mlperf-v0.5": [sample_of(_MLPERF / "v0.5/v0.5.0/nvidia/submission/results/dgx1_ngc18.11_mxnet"
                       "/resnet/result_0.txt")],
    "mlperf-v0.6": [sample_of(_MLPERF / "v0.6/NVIDIA/results/dgx1_ngc19.05_mxnet/resnet"
                              "/result_2.txt")],
    "mlperf-v0.7+": [
        sample_of(_MLPERF / "v0.7/NVIDIA/results/dgxa100_ngc20.06_mxnet/resnet/result_0.txt"),
        sample_of(_MLPERF / "v1.0/Google/results/tpu-v4-128-TF/resnet/result_0.txt"),
        sample_of(_MLPERF / "v3.1/Intel-HabanaLabs/results/HLS-Gaudi2-PT/resnet/result_0.txt"),
        sample_of(_MLPERF / "v4.0/tinycorp/results/tinybox_green/resnet/result_1.txt"),
    ],
    "caffe": [
        sample_of(DATA / "caffe" / "ducha_caffenet128_lsuv_bs128_lr002.log",
                  deployment="1x GTX 1080"),
        sample_of(DATA / "caffe" / "ethanhe42_resnet-20_logs_resnet-20__2018-10-19_01-43-18.log"),
    ],
    "tf_cnn": [
        sample_of(DATA / "tf_cnn" / "lambda_7742-8xA100_real_fp16_resnet50-448.txt"),
        sample_of(DATA / "lambda_sample" / "Gold_6230-GeForce_RTX_2080_Ti_trt_TF1_15.logs"
           / "syn-replicated-fp32-2gpus" / "resnet50-64" / "throughput" / "1"),
    ],
}

JOBS_CSV = (
    b"network,deployment,batch_size,iterations,phase,device,optimizer,epochs,dataset_size,"
    b"image_size,precision,framework,eval_every,eval_size,stack\n"
    b"resnet50,8x V100,256,1000,train,,sgd,,,,fp32,tensorflow,,,\n"
    b"resnet50,,64,,train,V100,adam,90,1281167,224,fp16,pytorch,1,50000,\n"
    b"vgg16,1x A100,32,500,test,,,,,,,,,,\n"
)

FRAMES = DATA / "frameworks"
CPU = "1x cpu"

HISTORY_B_SAMPLES: dict[str, list[Sample]] = {
    "torchvision": [
        sample_of(FRAMES / "torchvision_ref" / "detection_finetune.txt", deployment=CPU,
           network="maskrcnn", batch_size=2),
        sample_of(FRAMES / "torchvision_ref" / "habana_resnet50_8proc.txt", deployment="8x Gaudi"),
    ],
    "timm": [sample_of(FRAMES / "timm_train" / "general_backbone_train.txt", deployment=CPU)],
    "lightning": [sample_of(FRAMES / "lightning_bars" / "tqdm" / "train.log", deployment=CPU),
                  sample_of(FRAMES / "lightning_bars" / "rich" / "train.log", deployment=CPU)],
    "hf_trainer": [sample_of(FRAMES / "hf_trainer" / "trainer_state.json", deployment=CPU,
                      network="tinycnn")],
    "mmengine": [
        sample_of(FRAMES / "mmengine_run" / "20230605_200941" / "20230605_200941.log",
           deployment=CPU, network="rtmpose-s"),
        sample_of(FRAMES / "mmengine_run" / "scalars_only" / "vis_data" / "scalars.json",
           deployment="1x V100", network="resnet18"),
    ],
    "detectron2": [sample_of(FRAMES / "detectron2_out" / "output" / "metrics.json", deployment=CPU,
                      network="mask_rcnn_r50_fpn", batch_size=2)],
}
ALL_SAMPLES = {**SAMPLES, **HISTORY_B_SAMPLES}

# -- mutations -----------------------------------------------------------------------------

HOSTILE_NUMBERS: tuple[str, ...] = (
    "9" * 5000, "1" + "0" * 400, "-" + "9" * 400, "1e999", "-1e999", "1e308", "-1e308",
    "NaN", "nan", "inf", "-inf", "Infinity", "-Infinity", "-0", "-0.0", "0", "0.0", "-1",
    "-7", "2147483648", "9223372036854775808", "18446744073709551616", "1e-320", "4e9",
    "1e12", "99999999999", "3.5", "0x10", "1_000",
)
BAD_UTF8: tuple[bytes, ...] = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80",
                               b"\xe2\x82", b"\x80\x80")
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _pick_line(rnd: random.Random, lines: list[bytes]) -> int:
    """A line index; three times in four one that holds a number (where the values are)."""
    if rnd.random() < 0.75:
        for _ in range(20):
            i = rnd.randrange(len(lines))
            if any(48 <= c <= 57 for c in lines[i]):
                return i
    return rnd.randrange(len(lines))


def _numbers(rnd: random.Random, lines: list[bytes]) -> tuple[int, re.Match[bytes]] | None:
    for _ in range(10):
        i = _pick_line(rnd, lines)
        found = list(NUMBER.finditer(lines[i]))
        if found:
            return i, rnd.choice(found)
    return None


def _replace_number(rnd: random.Random, lines: list[bytes], new: bytes | None = None) -> None:
    hit = _numbers(rnd, lines)
    if hit is None:
        return
    i, m = hit
    value = new if new is not None else rnd.choice(HOSTILE_NUMBERS).encode()
    lines[i] = lines[i][: m.start()] + value + lines[i][m.end():]


def _negate(rnd: random.Random, lines: list[bytes]) -> None:
    hit = _numbers(rnd, lines)
    if hit is not None:
        i, m = hit
        lines[i] = lines[i][: m.start()] + b"-" + lines[i][m.start():]


def _scale(rnd: random.Random, lines: list[bytes]) -> None:
    hit = _numbers(rnd, lines)
    if hit is not None:
        i, m = hit
        zeros = b"0" * rnd.choice((3, 6, 9, 12, 20, 40))
        lines[i] = lines[i][: m.end()] + zeros + lines[i][m.end():]


def _cut_line(rnd: random.Random, lines: list[bytes]) -> None:
    i = _pick_line(rnd, lines)
    lines[i] = lines[i][: rnd.randrange(len(lines[i]) + 1)]


def _cut_file(rnd: random.Random, lines: list[bytes]) -> None:
    i = rnd.randrange(len(lines))
    lines[i] = lines[i][: rnd.randrange(len(lines[i]) + 1)]
    del lines[i + 1:]


def _random_bytes(rnd: random.Random, lines: list[bytes]) -> None:
    i = _pick_line(rnd, lines)
    at = rnd.randrange(len(lines[i]) + 1)
    junk = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 48)))
    lines[i] = lines[i][:at] + junk + lines[i][at:]


def _bad_utf8(rnd: random.Random, lines: list[bytes]) -> None:
    i = _pick_line(rnd, lines)
    at = rnd.randrange(len(lines[i]) + 1)
    lines[i] = lines[i][:at] + rnd.choice(BAD_UTF8) + lines[i][at:]


def _duplicate(rnd: random.Random, lines: list[bytes]) -> None:
    i = _pick_line(rnd, lines)
    block = lines[i: i + rnd.choice((1, 1, 2, 5, 20))]
    at = rnd.choice((i, rnd.randrange(len(lines) + 1)))
    lines[at:at] = block


def _shuffle(rnd: random.Random, lines: list[bytes]) -> None:
    i = _pick_line(rnd, lines)
    window = lines[i: i + rnd.randint(2, 12)]
    rnd.shuffle(window)
    lines[i: i + len(window)] = window


def _swap(rnd: random.Random, lines: list[bytes]) -> None:
    i, j = _pick_line(rnd, lines), _pick_line(rnd, lines)
    lines[i], lines[j] = lines[j], lines[i]


def _delete(rnd: random.Random, lines: list[bytes]) -> None:
    i = _pick_line(rnd, lines)
    del lines[i: i + rnd.choice((1, 1, 3, 10))]


def _long_line(rnd: random.Random, lines: list[bytes]) -> None:
    i = _pick_line(rnd, lines)
    lines[i] = lines[i] + rnd.choice((b"9", b"x", b" ", b"\xe2\x94\x81")) * rnd.choice(
        (5000, 30000))


MUTATIONS = {
    "number": _replace_number, "negate": _negate, "scale": _scale, "cut_line": _cut_line,
    "cut_file": _cut_file, "random_bytes": _random_bytes, "bad_utf8": _bad_utf8,
    "duplicate": _duplicate, "shuffle": _shuffle, "swap": _swap, "delete": _delete,
    "long_line": _long_line,
}
_WEIGHTS = {"number": 6, "negate": 2, "scale": 2, "cut_line": 1, "cut_file": 1,
            "random_bytes": 1, "bad_utf8": 1, "duplicate": 1, "shuffle": 1, "swap": 1,
            "delete": 1, "long_line": 0.5}


def mutate(rnd: random.Random, data: bytes, count: int | None = None) -> tuple[bytes, list[str]]:
    """``data`` with ``count`` (default 1-4) random mutations; returns it and their names."""
    lines = data.split(b"\n")
    names = []
    for _ in range(count if count is not None else rnd.randint(1, 4)):
        name = rnd.choices(list(_WEIGHTS), weights=list(_WEIGHTS.values()))[0]
        if not lines or lines == [b""]:
            break
        MUTATIONS[name](rnd, lines)
        names.append(name)
    return b"\n".join(lines), names


# -- what may be stored ----------------------------------------------------------------------


def _ok(value: object, low: float, high: float) -> bool:
    try:
        return isinstance(value, int | float) and math.isfinite(value) and low <= value <= high
    except OverflowError:
        return False


def nonsense(run: dict, segs: list[dict]) -> str | None:
    """What is physically impossible in a stored run (read back from the store), or None.

    Checked independently of :mod:`ingest.validate` (its bounds only): finite, positive
    batch, iterations and seconds, plausible start times, points inside their segment."""
    if not _ok(run["batch_size"], 1, MAX_BATCH_SIZE):
        return f"run batch_size {run['batch_size']!r}"
    if run["start_time"] is not None and not _ok(run["start_time"], MIN_UNIX_TIME, MAX_UNIX_TIME):
        return f"run start_time {run['start_time']!r}"
    for key in ("accelerators_per_node", "nodes"):
        if run[key] is not None and not _ok(run[key], 1, 10**7):
            return f"run {key} {run[key]!r}"
    if not segs:
        return "run without segments"
    for s in segs:
        if not _ok(s["iterations"], 1, MAX_ITERATIONS):
            return f"segment iterations {s['iterations']!r}"
        if not _ok(s["seconds"], 1e-12, MAX_SEGMENT_SECONDS):
            return f"segment seconds {s['seconds']!r}"
        if s["batch_size"] is not None and not _ok(s["batch_size"], 1, MAX_BATCH_SIZE):
            return f"segment batch_size {s['batch_size']!r}"
        if s["start_time"] is not None and not _ok(s["start_time"], MIN_UNIX_TIME, MAX_UNIX_TIME):
            return f"segment start_time {s['start_time']!r}"
        for key in ("epoch_start", "epoch_end", "iteration_start", "iteration_end"):
            if s[key] is not None and not _ok(s[key], 0, 1e18):
                return f"segment {key} {s[key]!r}"
        for it, sec in json.loads(s["points"]):
            if not (_ok(it, 0, s["iterations"] * 1.001) and _ok(sec, 0, s["seconds"] * 1.001)):
                return f"point ({it!r}, {sec!r}) outside ({s['iterations']}, {s['seconds']})"
    return None


def stored_nonsense(store: Store, content_hash: str) -> list[str]:
    """:func:`nonsense` for every run of the file with ``content_hash``, read back."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(runs).join(files, runs.c.file_id == files.c.id)
            .where(files.c.content_hash == content_hash)
        ).mappings().all()
        found = []
        for run in rows:
            segs = conn.execute(
                sa.select(segments).where(segments.c.run_id == run["id"])
            ).mappings().all()
            why = nonsense(dict(run), [dict(s) for s in segs])
            if why:
                found.append(why)
    return found


# -- running cases ---------------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str  # "crash", "rejected", "accepted", "nonsense"
    detail: str = ""
    line: bool = False  # a rejection that names a line
    caught: bool = False  # a crash the pipeline's safety net turned into a rejection


def _crash(exc: BaseException) -> str:
    """``Type: message (at file:line)``, the innermost frame inside this repository."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if REPO in path.parents and ".venv" not in path.parts:
            where = f" (at {path.relative_to(REPO)}:{frame.lineno})"
    return f"{type(exc).__name__}: {str(exc)[:200]}{where}"


def run_log_case(sample: Sample, data: bytes, store: Store, parsers: list | None = None
                 ) -> Outcome:
    """Parse, check and store ``data`` as if read from ``sample.path``; classify the result."""
    try:
        parsed = parse_data(str(sample.path), sample.path, data, sample.overrides(),
                            parsers or registered())
        write_parsed(store, parsed)  # "duplicate" when this content is stored already
    except ParseError as exc:
        if exc.reason.startswith(SAFETY_NET):  # a parser bug the pipeline turned into a rejection
            return Outcome("crash", "caught: " + _crash(exc.__context__ or exc), caught=True)
        return Outcome("rejected", str(exc)[:300], exc.line is not None)
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is here to find
        return Outcome("crash", _crash(exc))
    bad = stored_nonsense(store, parsed.content_hash)
    return Outcome("nonsense", "; ".join(bad)) if bad else Outcome("accepted")


def run_jobs_case(data: bytes, folder: Path) -> Outcome:
    """Read ``data`` as a ``--jobs`` CSV and validate each row; classify the result."""
    from jobcast.service.engine.request import JobRequestError, read_jobs_rows

    path = folder / "jobs.csv"
    path.write_bytes(data)
    try:
        rows = read_jobs_rows(path)
        bad = []
        for row in rows:
            if isinstance(row, JobRequestError):
                continue
            try:
                row.validate()
            except JobRequestError:
                continue
            numbers = [getattr(row, k) for k in ("batch_size", "iterations", "epochs",
                                                 "dataset_size", "eval_every", "eval_size",
                                                 "image_size")]
            if any(v is not None and not _ok(v, 0, math.inf) for v in numbers):
                bad.append(f"row {row.describe()}")
    except JobRequestError as exc:
        return Outcome("rejected", str(exc)[:300], bool(re.search(r":\d+:", str(exc))))
    except Exception as exc:  # noqa: BLE001
        return Outcome("crash", _crash(exc))
    return Outcome("nonsense", "; ".join(bad)) if bad else Outcome("accepted")


def fuzz(fmt: str, cases: int, seed: int, folder: Path) -> tuple[Counter, list[str]]:
    """Run ``cases`` mutated cases of one format; counts and the first crashes/nonsense."""
    rnd = random.Random(f"{seed}-{fmt}")
    counts: Counter = Counter()
    examples: list[str] = []
    if fmt == "jobs-csv":
        for _ in range(cases):
            data, names = mutate(rnd, JOBS_CSV)
            out = run_jobs_case(data, folder)
            counts[out.kind] += 1
            counts["with_line"] += out.kind == "rejected" and out.line
            if out.kind in ("crash", "nonsense") and len(examples) < 10:
                examples.append(f"{'+'.join(names)}: {out.detail}")
        return counts, examples
    store = Store(f"sqlite:///{folder / (fmt + '.db')}")
    parsers = registered()
    originals = [(s, s.path.read_bytes()) for s in ALL_SAMPLES[fmt]]
    for _ in range(cases):
        sample, original = rnd.choice(originals)
        data, names = mutate(rnd, original)
        out = run_log_case(sample, data, store, parsers)
        counts[out.kind] += 1
        counts["with_line"] += out.kind == "rejected" and out.line
        counts["caught"] += out.caught
        if out.kind in ("crash", "nonsense") and len(examples) < 10:
            examples.append(f"{sample.path.name} {'+'.join(names)}: {out.detail}")
    store.engine.dispose()
    return counts, examples


# -- what the tests assert of an outcome ------------------------------------------------------


def assert_sane(outcome: Outcome, sample: Sample) -> None:
    """A case's outcome is sane: stored, or rejected with the file's path and a reason."""
    assert outcome.kind in ("rejected", "accepted"), outcome.detail
    if outcome.kind == "rejected":
        assert outcome.detail.startswith(str(sample.path)), outcome.detail
        assert len(outcome.detail) > len(str(sample.path)) + 2  # a reason follows


def numbered_lines(data: bytes) -> list[int]:
    """Indexes of the lines of a sample that hold a number (where the values live)."""
    return [i for i, line in enumerate(data.split(b"\n")) if re.search(rb"\d", line)]


def stores_per_format(folder: Path, formats: list[str]) -> Iterator[dict]:
    """One real, file-backed SQLite store per log format under ``folder`` (as users have
    them), disposed of when the generator closes: the body of the fuzz modules' fixture."""
    made = {fmt: Store(f"sqlite:///{folder / (fmt + '.db')}") for fmt in formats}
    yield made
    for store in made.values():
        store.engine.dispose()
