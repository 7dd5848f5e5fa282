"""Job facts from the hyperparameters teams log: MLflow params, TensorBoard hparams, config files.

The names teams use (docs/history-sources.md has the same table):

==================  =========================================================================
fact                names (case-insensitive, ``-`` read as ``_``; a dotted or slashed name
                    matches on its last part, e.g. ``data.batch_size``, ``hparams/model``)
==================  =========================================================================
global batch        ``batch_size``, ``global_batch_size``, ``total_batch_size``,
                    ``effective_batch_size``, ``train_batch_size``, ``batchsize``, ``bs``
per-device batch    ``per_device_train_batch_size``, ``per_gpu_train_batch_size``,
                    ``batch_size_per_device``, ``batch_size_per_gpu``,
                    ``train_micro_batch_size_per_gpu``, ``micro_batch_size``
accumulation        ``gradient_accumulation_steps``, ``accumulate_grad_batches``,
                    ``grad_accum_steps``
epochs              ``epochs``, ``num_epochs``, ``num_train_epochs``, ``max_epochs``,
                    ``n_epochs``, ``train_epochs``
steps per epoch     ``steps_per_epoch``
network             ``network``, ``model``, ``arch``, ``architecture``, ``model_name``,
                    ``net``, ``backbone``, ``model_type``, ``model_name_or_path``
deployment          ``deployment`` (a key or ``"8x A100"``), else a GPU name (``gpu``,
                    ``gpu_name``, ``gpu_type``, ``gpu_model``, ``accelerator``,
                    ``device_name``) with a count (``num_gpus``, ``n_gpu``, ``n_gpus``,
                    ``gpus``, ``gpu_count``, ``world_size``, ``num_devices``, ``devices``)
==================  =========================================================================

Rules
-----
* Earlier names in a row win over later ones; a full-name match wins over a last-part match.
* Numbers may be strings (MLflow params are); a count is a whole number in range (1 ..
  :data:`~ingest.validate.MAX_BATCH_SIZE` for a batch), else the name is passed over and
  :func:`job_facts` notes it (``ignored``). A list of GPU ids counts its entries.
* A per-device batch is multiplied by the devices (the deployment's count) and the
  accumulation steps; without a device count it gives no batch (the caller asks for
  ``--batch-size`` or ``--deployment``). A global-batch name used with more than one device is
  kept, with a warning: PyTorch scripts often mean the per-process batch there.
* A GPU name of ``gpu``/``cuda``/``auto``/``cpu``/``tpu`` (Lightning's accelerator choice) or
  without a letter (device ids) is no name. A network is a short text (at most 64
  characters, not a number); the part after the last ``/`` is kept (``microsoft/resnet-50``
  -> ``resnet-50``), lower-cased.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from fleet.deployment import Deployment
from ingest.validate import MAX_BATCH_SIZE, MAX_EPOCH

GLOBAL_BATCH = ("batch_size", "global_batch_size", "total_batch_size", "effective_batch_size",
                "train_batch_size", "batchsize", "bs")
PER_DEVICE_BATCH = ("per_device_train_batch_size", "per_gpu_train_batch_size",
                    "batch_size_per_device", "batch_size_per_gpu",
                    "train_micro_batch_size_per_gpu", "micro_batch_size")
ACCUMULATION = ("gradient_accumulation_steps", "accumulate_grad_batches", "grad_accum_steps")
EPOCHS = ("epochs", "num_epochs", "num_train_epochs", "max_epochs", "n_epochs", "train_epochs")
STEPS_PER_EPOCH = ("steps_per_epoch",)
NETWORK = ("network", "model", "arch", "architecture", "model_name", "net", "backbone",
           "model_type", "model_name_or_path")
DEPLOYMENT = ("deployment",)
GPU_NAME = ("gpu", "gpu_name", "gpu_type", "gpu_model", "accelerator", "device_name")
GPU_COUNT = ("num_gpus", "n_gpu", "n_gpus", "gpus", "gpu_count", "world_size", "num_devices",
             "devices")
NOT_A_GPU_NAME = {"gpu", "gpus", "cuda", "auto", "cpu", "tpu", "mps", "none", "null", ""}
MAX_NETWORK_CHARS = 64
MAX_DEVICES = 1_000_000


@dataclass
class JobFacts:
    """What the hyperparameters say about the job; ``source`` names where each came from."""

    network: str | None = None
    batch_size: int | None = None
    epochs: float | None = None
    steps_per_epoch: int | None = None
    deployment: Deployment | None = None
    source: dict[str, str] = field(default_factory=dict)  # fact -> the name that gave it
    ignored: list[str] = field(default_factory=list)  # "name=value: why"
    warnings: list[str] = field(default_factory=list)


def _norm(name: str) -> str:
    return str(name).strip().lower().replace("-", "_")


def _lookup(params: Mapping[str, object], names: tuple[str, ...]) -> list[tuple[str, object]]:
    """(name as given, value) for each of ``names`` present, best match first."""
    full: dict[str, tuple[str, object]] = {}
    last: dict[str, tuple[str, object]] = {}
    for key, value in params.items():
        norm = _norm(key)
        full.setdefault(norm, (key, value))
        tail = norm.replace("/", ".").rsplit(".", 1)[-1]
        last.setdefault(tail, (key, value))
    found = [full[n] for n in names if n in full]
    found += [last[n] for n in names if n in last and last[n] not in found]
    return found


def _whole(value: object, low: int, high: float) -> int | None:
    """A whole number in [low, high] from an int, a float or a numeric string, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 24:
            return None
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    else:
        return None
    return number if low <= number <= high else None


def _count(value: object) -> int | None:
    """A device count: a whole number, or the length of a list of device ids."""
    if isinstance(value, list | tuple):
        return len(value) if 0 < len(value) <= MAX_DEVICES else None
    if isinstance(value, str) and value.strip().startswith("["):
        ids = [p for p in value.strip().strip("[]").split(",") if p.strip()]
        return len(ids) or None
    return _whole(value, 1, MAX_DEVICES)


def _first(params: Mapping[str, object], names: tuple[str, ...], read, facts: JobFacts,
           what: str) -> tuple[str, object] | None:
    for key, value in _lookup(params, names):
        got = read(value)
        if got is not None:
            return key, got
        facts.ignored.append(f"{key}={str(value)[:40]}: not a {what}")
    return None


def _network(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    text = value.strip().rstrip("/").rsplit("/", 1)[-1].strip().lower()
    if not text or len(text) > MAX_NETWORK_CHARS or _whole(text, -10**9, 10**9) is not None:
        return None
    if any(ord(c) < 32 or c == "\x7f" for c in text):
        return None
    return text


def _gpu_name(value: object) -> str | None:
    if not isinstance(value, str) or _norm(value) in NOT_A_GPU_NAME:
        return None
    text = " ".join(value.split())
    named = any(c.isalpha() for c in text)  # "4" or "0,1" are device ids, not a GPU model
    return text if named and len(text) <= 64 and text.isprintable() else None


def _deployment(params: Mapping[str, object], facts: JobFacts) -> Deployment | None:
    for key, value in _lookup(params, DEPLOYMENT):
        try:
            dep = Deployment.parse(str(value))
        except ValueError as exc:
            facts.ignored.append(f"{key}={str(value)[:40]}: {exc}")
            continue
        facts.source["deployment"] = key
        return dep
    name = _first(params, GPU_NAME, _gpu_name, facts, "GPU name")
    count = _first(params, GPU_COUNT, _count, facts, "device count")
    if name is None or count is None:
        return None
    facts.source["deployment"] = f"{name[0]} x {count[0]}"
    return Deployment(str(name[1]), int(count[1]))  # type: ignore[call-overload]


def gpu_name(params: Mapping[str, object]) -> str | None:
    """The GPU model ``params`` name (:data:`GPU_NAME`), else None."""
    for _, value in _lookup(params, GPU_NAME):
        name = _gpu_name(value)
        if name is not None:
            return name
    return None


def job_facts(params: Mapping[str, object], devices: int | None = None) -> JobFacts:
    """The facts in ``params`` (rules in the module doc). ``devices``: the accelerators the run
    used where known from elsewhere (system metrics, run metadata, ``--deployment``)."""
    facts = JobFacts()
    found = _first(params, NETWORK, _network, facts, "network name")
    if found:
        facts.source["network"], facts.network = found[0], str(found[1])
    facts.deployment = _deployment(params, facts)
    if devices is None and facts.deployment is not None:
        devices = facts.deployment.count
    if devices is None:
        count = _first(params, GPU_COUNT, _count, facts, "device count")
        devices = int(count[1]) if count else None  # type: ignore[call-overload]
    batch = _first(params, GLOBAL_BATCH, lambda v: _whole(v, 1, MAX_BATCH_SIZE), facts,
                   "batch size")
    per_device = _first(params, PER_DEVICE_BATCH, lambda v: _whole(v, 1, MAX_BATCH_SIZE), facts,
                        "batch size")
    accumulation = _first(params, ACCUMULATION, lambda v: _whole(v, 1, 10**6), facts,
                          "number of accumulation steps")
    steps = int(accumulation[1]) if accumulation else 1  # type: ignore[call-overload]
    if per_device is not None and devices is not None:
        total = int(per_device[1]) * devices * steps  # type: ignore[call-overload]
        if total <= MAX_BATCH_SIZE:
            facts.batch_size = total
            facts.source["batch_size"] = (f"{per_device[0]} {per_device[1]} x {devices} "
                                          f"devices x {steps} accumulation steps")
    elif batch is not None:
        facts.batch_size = int(batch[1])  # type: ignore[call-overload]
        facts.source["batch_size"] = str(batch[0])
        if devices and devices > 1:
            facts.warnings.append(
                f"batch size {facts.batch_size} from '{batch[0]}' taken as the global batch of "
                f"{devices} devices; if it is the per-device batch, pass --batch-size")
    elif per_device is not None:
        facts.ignored.append(f"{per_device[0]}={per_device[1]}: a per-device batch, but the "
                             "number of devices is unknown")
    epochs = _first(params, EPOCHS, lambda v: _whole(v, 1, MAX_EPOCH), facts, "number of epochs")
    if epochs:
        facts.source["epochs"], facts.epochs = epochs[0], float(epochs[1])  # type: ignore[arg-type]
    per_epoch = _first(params, STEPS_PER_EPOCH, lambda v: _whole(v, 1, 10**9), facts, "count")
    if per_epoch:
        facts.steps_per_epoch = int(per_epoch[1])  # type: ignore[call-overload]
    return facts


def flag_devices(deployment: str | None) -> int | None:
    """The devices a ``--deployment`` flag names (``"8x A100"``: 8), else None (no flag, or
    one that names no deployment)."""
    if not deployment:
        return None
    try:
        return Deployment.parse(deployment).count
    except ValueError:
        return None


def facts_meta(facts: JobFacts) -> dict[str, object]:
    """What a run's meta reports of its facts, where they hold something: ``facts_from``
    (fact -> the name that gave it), ``ignored_params`` (the first ten), ``warnings``,
    ``epochs_planned``."""
    meta: dict[str, object] = {}
    if facts.source:
        meta["facts_from"] = facts.source
    if facts.ignored:
        meta["ignored_params"] = facts.ignored[:10]
    if facts.warnings:
        meta["warnings"] = list(facts.warnings)
    if facts.epochs is not None:
        meta["epochs_planned"] = facts.epochs
    return meta


def flatten(tree: object, prefix: str = "", limit: int = 10_000,
            depth: int = 4) -> dict[str, object]:
    """A nested mapping (YAML/JSON config) as ``{"a.b": value}``; W&B's ``{"value": v, "desc":
    ...}`` wrappers unwrapped; at most ``limit`` entries and ``depth`` levels (hostile inputs)."""
    out: dict[str, object] = {}

    def walk(node: object, path: str, level: int) -> None:
        if len(out) >= limit:
            return
        if isinstance(node, Mapping):
            if "value" in node and set(node) <= {"value", "desc"}:
                walk(node["value"], path, level)
                return
            if level >= depth:
                return
            for key, value in list(node.items())[:limit]:
                walk(value, f"{path}.{key}" if path else str(key), level + 1)
        elif path:
            out[path] = node

    walk(tree, prefix, 0)
    return out
