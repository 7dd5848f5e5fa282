"""Rank deployments for one job by forecast time and by cost.

Rules
-----
* **Rows are what was asked**: one per device x GPU count x precision (``devices`` default:
  every GPU of the price table; ``counts`` default ``[1]``; ``precisions`` default
  ``["fp32"]``). The job's global batch is split over the GPUs (data parallel). A request
  names its hardware as a deployment key built from its parts (``deployment_key(device, n)``),
  never as text to be parsed again. Two spellings of one GPU (``A100``, ``a100``) are one row.
* **The store's deployments only when asked** (``include_history``): each stored train
  deployment of the network once per asked precision its history states, and once more,
  in a ranking of its own labelled ``unstated``, where its history states no precision.
  History at a precision that was not asked is named in a note, not ranked.
* **One precision per ranking**: a row is ranked among the rows of its precision only
  (``rank_time``, ``rank_cost`` count within it). The precision is the asked one as the
  framework runs it (the layerwise route's ``precision_as_run`` sentence is the row's note:
  e.g. TF32 convolutions for TensorFlow's fp32 on an A100). Where the forecaster answers an
  asked precision from history whose logs state no precision (end-to-end, or the level a
  hybrid answer is scaled to), the row keeps its place but is not ranked (no
  ``rank_time``/``rank_cost``; ``answer_precision: "unstated"``, ``precision_basis:
  "history states none"``) and a note says why.
* **Notes once**: the GPU a name resolved to (``gpu``), why each row's model answers (the
  forecaster's ``chosen`` clauses, in words, else the route's ``why``), its precision as run,
  memory verdict where it does not fit, its warnings, and every flag its route cannot use
  (``job_answer.unused_flags``: e.g. ``--framework`` on a history row; every row, history
  rows too, is asked with every flag) are shared notes
  (``notes``: ``[{"id", "text"}]``); a row lists the ids of its notes (``notes``).
* ``scaling_efficiency`` = time on one GPU / (N x time on N GPUs) of the same GPU,
  precision and route: the 1-GPU row where it is among the rows, else a 1-GPU forecast of
  the same job made for it (:func:`single_gpu_times`); 1 on one GPU; none where the 1-GPU
  answer comes from another route (different routes are not comparable).
* **A device names its count or takes ``--gpus``'s**: ``"8x A100"`` (or a key, as
  ``predict --deployment`` reads it) is that deployment only; a bare GPU is ranked at each
  count.
* ``fits`` and ``memory``: the per-GPU memory verdict of the row (:func:`memory_fit`; absent
  where it cannot say); a row that does not fit stays ranked, marked ``fits: false``, with a
  note naming the largest per-GPU batch that fits.
* A row the forecaster cannot answer keeps its place with ``error``; ``failed`` counts them
  (the CLI exits 1 when it is not 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fleet.deployment import Deployment, deployment_key, states_count
from fleet.errors import JobcastError
from fleet.precision import parse_precision
from jobcast.service.engine.forecast import Forecast, ForecastFailure
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.job_answer import unused_flags
from jobcast.service.engine.request import JobRequest
from jobcast.service.features.prices import PriceTable
from models.fitted import FittedModel
from models.variant import UNSTATED, variant_dict

# Training-set sizes assumed when the caller gives none (samples per epoch).
KNOWN_DATASETS = {"resnet20": ("CIFAR-10", 50_000), "resnet3-cifar10": ("CIFAR-10", 50_000)}
DEFAULT_DATASET = ("ImageNet-1k", 1_281_167)
# fp32 with TF32 off: the layerwise route prices it apart from fp32 (layerwise.as_run).
_STRICT_SPELLINGS = ("fp32-strict", "strict-fp32", "fp32-no-tf32")
UNSTATED_NOTE = ("not ranked: answered from history whose logs state no precision (the "
                 "forecaster takes it for the asked one); if those runs used another, e.g. "
                 "mixed precision, its time is not comparable with the ranked rows")


def dataset_for(network: str, dataset_size: int | None) -> tuple[str, int]:
    """(name, samples per epoch): ``given`` for a stated size, else the network's usual
    dataset; :class:`ValueError` for a size that is not positive."""
    if dataset_size is not None:
        if dataset_size <= 0:
            raise ValueError(f"dataset size must be positive, got {dataset_size}")
        return "given", dataset_size
    return KNOWN_DATASETS.get(network.lower(), DEFAULT_DATASET)


def canonical_precision(text: str) -> str:
    """A precision as one ranking names it: ``amp`` -> ``fp16``; ``fp32-strict`` (TF32 off)
    stays apart from ``fp32``; ValueError for an unknown spelling."""
    spelled = str(text).strip().lower()
    if spelled in _STRICT_SPELLINGS:
        return "fp32-strict"
    return parse_precision(spelled).value


@dataclass(frozen=True)
class Slot:
    """One row to forecast: a device x count x precision asked, or a stored deployment."""

    label: str  # as shown: "8 × V100", or the stored key
    gpus: int
    deployment: str  # the deployment key asked of the forecaster
    precision: str  # the ranking it belongs to: an asked precision, or "unstated"
    source: str  # "asked" | "history"
    accelerator: str  # the GPU as priced: as the caller named it, or the stored key's part
    device: str | None = None  # as the caller named it (asked rows)
    error: str = ""  # why no deployment can be named for it (then nothing is forecast)

    def request(self, common: Mapping[str, Any]) -> JobRequest:
        """The job on this slot; an ``unstated`` history slot states no precision (the
        history's own answers)."""
        stated: dict[str, Any] = ({} if self.precision == UNSTATED
                                  else {"precision": self.precision})
        return JobRequest(deployment=self.deployment, **stated, **common)


def _placements(device: str, counts: list[int]) -> list[tuple[str, int, str, str, str]]:
    """(label, GPUs, key, GPU as named, error) of one asked device: a device that names its
    count (``"8x A100"``, a key: as ``predict --deployment`` reads it) at that count, a bare
    GPU at each of ``counts``."""
    if states_count(device):
        try:
            d = Deployment.parse(device)
        except JobcastError as exc:
            return [(device, 1, "", device, f"deployment {device!r}: {exc}")]
        label = (f"{d.per_node} × {d.accelerator}" if d.nodes == 1
                 else f"{d.nodes} × {d.per_node} × {d.accelerator}")
        return [(label, d.count, d.key, d.accelerator, "")]
    out = []
    for n in counts:
        try:
            out.append((f"{n} × {device}", n, deployment_key(device, n), device, ""))
        except JobcastError as exc:
            out.append((f"{n} × {device}", n, "", device, f"GPU {device!r}: {exc}"))
    return out


def asked_slots(devices: Iterable[str], counts: list[int], precisions: list[str]) -> list[Slot]:
    """Every device x count x precision (a device naming its count: that count only),
    spellings of one GPU once (see the module rules)."""
    slots, seen = [], set()
    for precision in precisions:
        for device in devices:
            for label, n, key, named, error in _placements(device, counts):
                if key and (key, precision) in seen:
                    continue
                seen.add((key, precision))
                slots.append(Slot(label, n, key, precision, "asked", named, named, error))
    return slots


def history_slots(models: Iterable[FittedModel], network: str, precisions: list[str]
                  ) -> tuple[list[Slot], list[str]]:
    """The store's train deployments of ``network`` at each asked precision their history
    states, and at ``unstated`` where it states none; and notes naming history at
    precisions not asked."""
    held: dict[str, set[str]] = {}
    for m in models:
        if m.network == network.lower() and m.phase == "train":
            held.setdefault(m.deployment, set()).add(
                variant_dict(m.variant).get("precision", UNSTATED))
    slots, others = [], []
    for dep in sorted(held):
        try:
            parsed = Deployment.parse(dep)
            count, accelerator = parsed.count, parsed.accelerator
        except JobcastError:
            count, accelerator = 1, dep
        for precision in [*precisions, UNSTATED]:
            if precision in held[dep]:
                slots.append(Slot(dep, count, dep, precision, "history", accelerator))
        others += [f"{dep} at {p}" for p in sorted(held[dep] - {*precisions, UNSTATED})]
    notes = ([f"history not ranked (a precision not asked; ask it with --precision): "
              f"{', '.join(others)}"] if others else [])
    return slots, notes


def chosen_clauses(outcome: Forecast) -> tuple[str, ...]:
    """Why an answer answers, clause by clause: the forecaster's ``chosen``, else the
    route's own ``why``, else the route's name."""
    if outcome.chosen:
        return outcome.chosen
    return (outcome.why,) if outcome.why else (str(outcome.route),)


def provenance(by_id: Mapping[str, FittedModel], outcome: Forecast) -> dict[str, str]:
    """``chosen``, ``variant`` and ``answer_precision`` of one answer: the end-to-end model's
    variant key (``""`` when its logs state none) or ``precision=P`` of a layerwise answer,
    and that variant's precision (``unstated`` when the history does not say);
    ``by_id``: the forecaster's end-to-end models by id."""
    details = outcome.details
    chosen = "; ".join(chosen_clauses(outcome))
    model = _e2e_model(by_id, outcome)
    if model is not None:
        variant = model.variant
    elif isinstance(details.get("variant"), str):
        variant = details["variant"]
    elif details.get("precision"):
        variant = f"precision={details['precision']}"
    else:
        variant = ""
    precision = variant_dict(variant).get("precision", UNSTATED)
    return {"chosen": chosen, "variant": variant, "answer_precision": precision}


def _e2e_model(by_id: Mapping[str, FittedModel], outcome: Forecast) -> FittedModel | None:
    """The end-to-end model behind an answer (its ``parts``; else the answer's own model)."""
    return by_id.get(outcome.parts.end_to_end or outcome.model)


def resolved_gpu(by_id: Mapping[str, FittedModel], outcome: Forecast) -> str:
    """The GPU the answer is about: the layerwise route's catalog row, else the GPU of the
    history's deployment (its key where the catalog does not know it)."""
    if outcome.details.get("gpu"):
        return str(outcome.details["gpu"])
    model = _e2e_model(by_id, outcome)
    if model is None:
        return ""
    try:
        spec = Deployment.parse(model.deployment).identity.spec
    except JobcastError:
        spec = None
    return spec.name if spec is not None else model.deployment


def memory_fit(outcome: Forecast) -> tuple[dict, str] | None:
    """The row's memory verdict, as the forecaster found it (rule 6 of
    :mod:`jobcast.service.engine.forecaster`: per GPU, the global batch split over the GPUs, at the
    precision the answer trains at) as ``{"fits", "per_gpu_batch", "total_gib",
    "gpu_memory_gib", "max_batch_per_gpu"}`` with its one-line summary; None where it cannot
    say (a network without a shipped spec, an accelerator the catalog does not hold)."""
    found = outcome.details.get("memory")
    if not found or found.get("fits") is None:
        return None
    gib = 2.0 ** 30
    return ({"fits": found["fits"], "per_gpu_batch": found["batch_size"],
             "total_gib": round(found["total_bytes"] / gib, 2),
             "gpu_memory_gib": round(found["gpu_memory_bytes"] / gib, 2),
             "max_batch_per_gpu": found["max_batch"]}, outcome.details["summary"]["memory"])


class Notes:
    """Shared notes: each distinct text once, with an id from 1."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def add(self, texts: Iterable[str]) -> list[int]:
        """The ids of ``texts`` (blank ones dropped), each new text numbered on first sight."""
        out = []
        for text in texts:
            text = str(text).strip()
            if text:
                out.append(self.ids.setdefault(text, len(self.ids) + 1))
        return list(dict.fromkeys(out))

    def as_list(self) -> list[dict]:
        """``[{"id", "text"}]`` in numbering order."""
        return [{"id": i, "text": t} for t, i in self.ids.items()]


def _row(slot: Slot, outcome, by_id, prices: PriceTable, notes: Notes,
         framework: str = "auto") -> dict:
    """One JSON row: the slot, then the answer with its cost, memory verdict and notes, or
    ``error``."""
    gpu_name = slot.accelerator
    row = {"candidate": slot.label, "source": slot.source, "device": slot.device,
           "deployment": slot.deployment, "gpus": slot.gpus, "precision": slot.precision,
           "price_usd_per_gpu_hour": prices.price(gpu_name)}
    if not outcome.ok:
        return {**row, "error": outcome.error}
    cost = {k: prices.cost(getattr(outcome, k), gpu_name, slot.gpus)
            for k in ("seconds", "low", "high")}
    prov = provenance(by_id, outcome)
    del prov["chosen"]  # the row's notes hold it, clause by clause
    details = outcome.details
    # History whose logs state no precision behind the answer (end-to-end, or the level of
    # a hybrid): not comparable with answers at the asked precision; and the other way round.
    answer = prov["answer_precision"]
    basis = ("asked" if (slot.precision == UNSTATED) == (answer == UNSTATED)
             else f"history states {'none' if answer == UNSTATED else answer}")
    as_run = (details.get("precision_as_run") or {}).get("assumed")
    warnings = [str(w) for w in details.get("warnings", []) or []
                if not str(w).endswith("marked fits: false")]  # the row's memory note says it
    if as_run and not any(as_run in w for w in warnings):
        warnings.insert(0, f"precision as run: {as_run}")
    unranked = [] if basis == "asked" else [
        UNSTATED_NOTE if answer == UNSTATED else
        f"not ranked: the store's history answered at {answer}, not at an unstated precision"]
    memory = memory_fit(outcome)
    if memory is not None and not memory[0]["fits"]:
        warnings.append(f"memory: {memory[1]}")
    extrapolated = ["extrapolated: outside the batch sizes or steps its model was fitted on"
                    ] if outcome.extrapolated else []
    gpu = resolved_gpu(by_id, outcome)
    named = slot.device or slot.deployment
    resolved = [f"{named} resolved to {gpu}"] if gpu and gpu != named else []
    texts = [*resolved, *chosen_clauses(outcome), *unranked, *extrapolated, *warnings,
             *(unused_flags(outcome, replace(outcome.job, framework=framework))
               if outcome.job is not None else unused_flags(outcome))]
    out = {**row, "gpu": gpu, "route": str(outcome.route),
           "model": outcome.model, "seconds": outcome.seconds, "low": outcome.low,
           "high": outcome.high, "unit": outcome.unit, "extrapolated": outcome.extrapolated,
           **prov,
           "precision_basis": basis,
           "usd": cost["seconds"], "usd_low": cost["low"], "usd_high": cost["high"],
           **({"fits": memory[0]["fits"], "memory": memory[0]} if memory is not None else {}),
           "notes": notes.add(texts)}
    return out


Singles = dict[tuple[str, str, str], float]  # (GPU, precision, route) -> seconds on 1 GPU


def single_gpu_times(rows: list[dict], slots: list[Slot], forecast: Any) -> Singles:
    """The 1-GPU time of each answered row's GPU, precision and route: its own 1-GPU row,
    else (for an asked row on several GPUs) a 1-GPU forecast of the same job made for the
    purpose (``forecast(slot)``: an outcome), so every multi-GPU row has its reference."""
    singles: Singles = {(r["gpu"], r["precision"], r["route"]): r["seconds"] for r in rows
                        if "error" not in r and r["gpus"] == 1}
    for row, slot in zip(rows, slots, strict=True):
        key = (row.get("gpu", ""), row["precision"], row.get("route", ""))
        if "error" in row or row["gpus"] == 1 or slot.source != "asked" or key in singles:
            continue
        one = Slot(f"1 × {slot.accelerator}", 1, deployment_key(slot.accelerator, 1),
                   slot.precision, "asked", slot.accelerator, slot.accelerator)
        outcome = forecast(one)
        if outcome.ok and str(outcome.route) == key[2]:
            singles[key] = outcome.seconds
    return singles


def _rank(rows: list[dict], groups: list[str], singles: Singles) -> list[dict]:
    """Rows of each precision in turn: answered at that precision by time (with time and
    cost ranks within the precision), then those answered from history that states no
    precision (unranked), then failed; scaling efficiency against the 1-GPU time of the
    same GPU, precision and route (``singles``; 1 on one GPU)."""
    ordered = []
    for group in groups:
        mine = [r for r in rows if r["precision"] == group]
        answered = sorted((r for r in mine if "error" not in r), key=lambda r: r["seconds"])
        ok = [r for r in answered if r["precision_basis"] == "asked"]
        unranked = [r for r in answered if r["precision_basis"] != "asked"]
        for r in answered:
            single = singles.get((r["gpu"], r["precision"], r["route"]))
            if single is not None and r["seconds"] > 0:
                r["scaling_efficiency"] = single / (r["gpus"] * r["seconds"])
        for rank, r in enumerate(ok, start=1):
            r["rank_time"] = rank
        priced = sorted((r for r in ok if r["usd"] is not None), key=lambda r: r["usd"])
        for rank, r in enumerate(priced, start=1):
            r["rank_cost"] = rank
        ordered += ok + unranked + [r for r in mine if "error" in r]
    return ordered


def compare(
    forecaster: Forecaster,
    prices: PriceTable,
    network: str,
    batch_size: int,
    epochs: float,
    dataset_size: int | None = None,
    devices: list[str] | None = None,
    optimizer: str = "sgd",
    image_size: int | None = None,
    precision: str | list[str] = "fp32",
    counts: list[int] | None = None,
    framework: str = "auto",
    include_history: bool = False,
    data_parallel: str | None = None,
) -> dict:
    """Forecast the job on every asked row (and the store's deployments with
    ``include_history``); see the module rules for the rows, rankings and notes."""
    if batch_size <= 0 or epochs <= 0:
        raise ValueError("batch size and epochs must be positive")
    given_counts = counts is not None
    counts = sorted(set(counts or [1]))
    if any(n < 1 for n in counts):
        raise ValueError(f"GPU counts must be >= 1, got {counts}")
    asked = [precision] if isinstance(precision, str) else list(precision) or ["fp32"]
    precisions = list(dict.fromkeys(canonical_precision(p) for p in asked))
    dataset, size = dataset_for(network, dataset_size)
    common = dict(network=network, batch_size=batch_size, epochs=epochs, dataset_size=size)
    slots = asked_slots(devices if devices is not None else sorted(prices.usd_per_gpu_hour),
                        counts, precisions)
    notes, not_ranked = Notes(), list[str]()
    if include_history:
        found, not_ranked = history_slots(forecaster.models, network, precisions)
        slots += found
    by_id = {m.model_id: m for m in forecaster.models}
    layerwise = dict(optimizer=optimizer, image_size=image_size, framework=framework,
                     data_parallel=data_parallel)

    def forecast(slot: Slot) -> Any:
        req = slot.request({**common, **layerwise})  # a route that cannot use one says so
        return (ForecastFailure(req, slot.error) if slot.error
                else forecaster.forecast(req, refuse_unfit=False))

    rows = [_row(slot, forecast(slot), by_id, prices, notes, framework) for slot in slots]
    notes.add(not_ranked)
    counted = [d for d in devices or [] if states_count(d)]
    if given_counts and counted:
        notes.add([f"--gpus {','.join(map(str, counts))} applies to bare GPUs only: "
                   f"{', '.join(map(repr, counted))} name their own count"])
    groups = [*precisions, *([UNSTATED] if any(s.precision == UNSTATED for s in slots) else [])]
    ranked = _rank(rows, groups, single_gpu_times(rows, slots, forecast))
    return {
        "network": network,
        "batch_size": batch_size,
        "epochs": epochs,
        "dataset": dataset,
        "dataset_size": size,
        "prices": prices.source,
        "precisions": groups,
        "include_history": include_history,
        "candidates": ranked,
        "failed": sum("error" in r for r in ranked),
        "notes": notes.as_list(),
    }
