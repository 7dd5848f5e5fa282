"""MLPerf CNN benchmarks: what each one trains, on which data, and how to read its logged
sample counts and epoch numbers.

One table, :data:`BENCHMARKS`, says per benchmark what was trained (the network name a run
is stored under), its data set and that set's train and eval sizes.

Sources: the sizes are those the logs themselves state in ``train_samples``/``eval_samples``
where a submitter logs images (ImageNet 1,281,167 / 50,000 in 1,660 ResNet corpus files; COCO
117,266 / 5,000 in NVIDIA's SSD v0.7-v1.1 logs, 118,287 in Google's, all train2017 images
against those with annotations; OpenImages 1,170,301 / 24,781 in Google's v2.0 RetinaNet logs;
KiTS19 168 / 42 cases in every UNet3D log), and they agree with the MLPerf references:
mlcommons/training ``single_stage_detector/README.md`` (the MLPerf subset of OpenImages v6:
264 classes, 1,170,301 train and 24,781 validation images, ResNeXt50_32x4d backbone, 800x800
input), its earlier ``single_stage_detector/ssd/README.md`` (SSD with a ResNet-34 backbone,
300x300 input, COCO 2017), and mlcommons/training_policies ``training_rules.adoc`` (UNet3D:
KiTS19, ``data_train_samples`` fixed to the reference, epoch cap ``CEILING(10000*168 /
samples_per_epoch)``; the deprecated-benchmarks table: ResNet-50 v1.5 to v4.0, Mask R-CNN to
v3.1, UNet3D to v4.0, "SSD (RetinaNet)" on "A subset of OpenImages").

Rules
-----
* Network names say what was trained (:func:`network_for`). The name a log gives
  (``submission_benchmark``, the v0.5 benchmark token, else the benchmark folder) is read
  lower-case through :data:`ALIASES`. MLPerf's single-stage detector is logged ``ssd`` in
  every round, but it was SSD with a ResNet-34 backbone on COCO (300 px) up to v1.1 and
  RetinaNet with a ResNeXt-50 backbone on OpenImages (800 px) from v2.0: the round of the
  folder layout (``vX.Y``) decides; without one, the data set the logged ``train_samples``
  reads as (samples or batches, rules below) decides, then a v0.5/v0.6 log generation (SSD);
  else the name stays ``ssd``. Names of other benchmarks are kept, lower-case.
* Sample counts (:func:`read_count`), for a benchmark whose data set holds ``D`` samples, a
  logged count ``c``, batch ``B`` (the global batch for train; the eval batch for evals) and
  ``n`` accelerators, with :data:`TOLERANCE` (5 %) for filtered or padded sets:

  - ``c`` is samples when ``D(1-t) <= c <= ceil(D(1+t)/B) * B`` (the set, possibly padded to
    whole batches): ``ceil(c/B)`` iterations;
  - else a batch count when ``floor(D(1-t)/B) <= c <= ceil(D(1+t)/B)``: ``c`` iterations
    (RetinaNet v2.0+: 4572 with B 256; Mask R-CNN is not one: NVIDIA's logs its whole
    schedule's ``len(data_loader)``, e.g. 40000);
  - else samples per accelerator when ``c * n`` passes the samples test: ``ceil(c*n/B)``
    iterations (Ailiverse's Composer logs, 160000 x 8 ResNet images);
  - else the count is no reading of the set: ``D`` is used, ``ceil(D/B)`` iterations.

  So an epoch never has fewer iterations than the data set allows (at least
  ``floor(D(1-t)/B)``). For a benchmark not in the table a count at most ``B/8`` is a batch
  count (an epoch shorter than an eighth of one batch is not physical); others are samples.
  No count logged: ``D`` (``*_samples_assumed``); unknown benchmark: the caller's error.
* Epochs counted in samples (:func:`samples_per_epoch_unit`): UNet3D logs of v3.1 on number
  blocks and evals in samples (``first_epoch_num`` 168, ``epoch_count`` 3360 = 20 epochs of
  168). A run of a benchmark with an epoch cap whose train spans add up to more than the cap
  and whose block counts and first epochs are all multiples of the samples per epoch ``S``
  (``samples_per_epoch`` where logged, else ``ceil(train_samples/B) * B``, the rules'
  definition) is counted in samples: numbers and counts are divided by ``S``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ingest.parsers.mlperf.repairs import Repairs
from ingest.parsers.mlperf.spans import Span

TOLERANCE = 0.05  # filtered (COCO 117,266 of 118,287) or padded sets (ResNet eval 65,536)
SMALL_SHARE = 8  # an unknown benchmark's count <= batch / 8 is a batch count


@dataclass(frozen=True)
class Benchmark:
    """One MLPerf benchmark as trained in a range of rounds."""

    key: str  # the name MLPerf logs (submission_benchmark)
    network: str  # the name a run is stored under: what was trained
    model: str  # in words
    dataset: str
    train_samples: int
    eval_samples: int
    rounds: tuple[str, str]  # first and last round (inclusive) with this model
    epoch_cap_samples: int | None = None  # rules' non-convergence cap, in samples


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("resnet", "resnet50", "ResNet-50 v1.5", "ImageNet (ILSVRC 2012)",
              1_281_167, 50_000, ("v0.5", "v4.0")),
    Benchmark("ssd", "ssd-resnet34", "SSD, ResNet-34 backbone, 300x300", "COCO 2017",
              117_266, 5_000, ("v0.5", "v1.1")),
    Benchmark("ssd", "retinanet-resnext50", "RetinaNet, ResNeXt-50 32x4d backbone, 800x800",
              "OpenImages v6 MLPerf subset", 1_170_301, 24_781, ("v2.0", "v5.1")),
    Benchmark("maskrcnn", "maskrcnn-resnet50-fpn", "Mask R-CNN, ResNet-50 FPN backbone",
              "COCO 2017", 117_266, 5_000, ("v0.5", "v3.1")),
    Benchmark("unet3d", "unet3d", "3D U-Net", "KiTS19 (cases)", 168, 42, ("v1.0", "v4.0"),
              epoch_cap_samples=10_000 * 168),
)

ALIASES: dict[str, str] = {
    "resnet": "resnet", "image_classification": "resnet",
    "ssd": "ssd", "single_stage_detector": "ssd",
    "maskrcnn": "maskrcnn", "mask_rcnn": "maskrcnn", "mask-rcnn": "maskrcnn",
    "object_detection": "maskrcnn",
    "unet3d": "unet3d", "unet_3d": "unet3d", "3d-unet": "unet3d", "3d_unet": "unet3d",
    "image_segmentation": "unet3d",
}
_RESNET = re.compile(r"resnet(?:[-_ ]?50)?(?:[-_ ]?v1\.?5)?")
_VERSION = re.compile(r"v?(\d+)\.(\d+)")
_BY_NETWORK = {b.network: b for b in BENCHMARKS}


def _round(version: str | None) -> tuple[int, int] | None:
    m = _VERSION.match(version) if version else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def _in_rounds(bench: Benchmark, rnd: tuple[int, int]) -> bool:
    first, last = (_round(v) for v in bench.rounds)
    return first is not None and last is not None and first <= rnd <= last


def network_for(name: str | None, version: str | None, generation: str | None,
                train_logged: int | None, batch: int) -> tuple[str | None, Benchmark | None]:
    """The stored network name and the table row of a run (rules above); the row is None
    for a benchmark the table does not hold (its name is kept, lower-case)."""
    if not name:
        return None, None
    low = name.strip().lower()
    if low in _BY_NETWORK:
        return low, _BY_NETWORK[low]
    if low == "retinanet":
        return "retinanet-resnext50", _BY_NETWORK["retinanet-resnext50"]
    key = "resnet" if _RESNET.fullmatch(low) else ALIASES.get(low)
    rows = [b for b in BENCHMARKS if b.key == key]
    if not rows:
        return low, None
    if len(rows) == 1:
        return rows[0].network, rows[0]
    rnd = _round(version)
    if rnd is not None:
        for bench in rows:
            if _in_rounds(bench, rnd):
                return bench.network, bench
    if train_logged is not None:
        for bench in rows:
            if read_count(train_logged, bench.train_samples, batch, None).how in (
                    "samples", "batches"):
                return bench.network, bench
    if generation in ("v0.5", "v0.6"):
        return rows[0].network, rows[0]
    return low, None


@dataclass(frozen=True)
class Count:
    """A logged sample count as read: samples and iterations per epoch (or per eval)."""

    samples: int
    steps: int
    how: str  # samples | batches | per_accelerator | dataset | assumed


def read_count(logged: int | None, size: int | None, batch: int,
               accelerators: int | None) -> Count:
    """Read ``logged`` against a data set of ``size`` samples (rules above); ``logged`` None
    needs ``size``."""
    if logged is None:
        if size is None:
            raise ValueError("neither a logged count nor a data-set size")
        return Count(size, math.ceil(size / batch), "assumed")
    if size is None:
        if logged * SMALL_SHARE <= batch:
            return Count(logged * batch, logged, "batches")
        return Count(logged, math.ceil(logged / batch), "samples")
    low = size * (1 - TOLERANCE)
    high_steps = math.ceil(size * (1 + TOLERANCE) / batch)
    if low <= logged <= high_steps * batch:
        return Count(logged, math.ceil(logged / batch), "samples")
    if batch > 1 and math.floor(low / batch) <= logged <= high_steps:
        return Count(size, logged, "batches")
    if accelerators and accelerators > 1 and low <= logged * accelerators <= high_steps * batch:
        total = logged * accelerators
        return Count(total, math.ceil(total / batch), "per_accelerator")
    return Count(size, math.ceil(size / batch), "dataset")


def count_note(what: str, logged: int, count: Count, batch: int, accelerators: int | None,
               bench: Benchmark | None) -> tuple[str, str] | None:
    """(repair kind, sentence) for a count not read as plain samples; None otherwise."""
    size = bench.train_samples if bench and what == "train_samples" else (
        bench.eval_samples if bench else None)
    per = "per epoch" if what == "train_samples" else "per eval"
    where = f"{bench.dataset} ({size:,})" if bench and size else "the data set"
    if count.how == "batches":
        return "samples_as_batches", (
            f"{what} {logged} with a batch of {batch} is a batch count ({logged} x {batch} = "
            f"{logged * batch:,} ~ {where}): {count.steps} iterations {per}")
    if count.how == "per_accelerator":
        return "samples_per_accelerator", (
            f"{what} {logged} is per accelerator ({logged} x {accelerators} = "
            f"{count.samples:,} ~ {where}): {count.steps} iterations {per}")
    if count.how == "dataset":
        return "dataset_size_used", (
            f"{what} {logged} is no count of {where} (not its samples, its batches of "
            f"{batch} or its samples per accelerator): {count.samples:,} used, "
            f"{count.steps} iterations {per}")
    return None


def samples_per_epoch_unit(bench: Benchmark | None, counts: list[float],
                           firsts: list[float | None], logged_spe: int | None,
                           train_samples: int, batch: int) -> int | None:
    """``S`` when the run's epochs are counted in samples (rules above), else None.

    ``counts`` are the train spans' epoch counts, ``firsts`` their first epochs as logged."""
    if bench is None or bench.epoch_cap_samples is None or not counts:
        return None
    unit = logged_spe or math.ceil(train_samples / batch) * batch
    if unit <= 1:
        return None
    cap = math.ceil(bench.epoch_cap_samples / unit)
    if sum(counts) <= cap:
        return None
    if all(c % unit == 0 for c in counts) and all(
            f is None or f % unit == 0 for f in firsts):
        return unit
    return None


def rescale_epochs(spans: list[Span], evals: list[Span], unit: int,
                   fix: Repairs) -> tuple[list[Span], list[Span]]:
    """Train and test spans with epoch numbers and counts logged in samples divided by the
    samples per epoch ``unit`` (see :func:`samples_per_epoch_unit`); noted once."""
    def scaled(span: Span) -> Span:
        first = span.epoch_start / unit if span.epoch_start is not None else None
        epochs = span.epochs / unit if span.phase == "train" else span.epochs
        last = (first + epochs - 1 if span.phase == "train" else first) if first is not None \
            else None
        return replace(span, epochs=epochs, epoch_start=first, epoch_end=last)

    first = spans[0]
    fix.add("epochs_in_samples", first.start_line,
            f"epochs logged in samples (first block from {first.epoch_start:g}, "
            f"{first.epochs:g} 'epochs'; {sum(s.epochs for s in spans):g} in all): divided "
            f"by {unit} samples per epoch")
    return [scaled(s) for s in spans], [scaled(s) for s in evals]
