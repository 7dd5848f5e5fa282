"""Rank deployments for one job by forecast time and by cost.

Candidates are every deployment the network has history on (end-to-end route) and every
GPU of the price table (layerwise route), or the devices the caller names, at each GPU count
of ``counts`` (default 1): the job's global batch is split over the GPUs (data parallel).
``scaling_efficiency`` = time on one GPU / (N x time on N GPUs) of the same device, when the
1-GPU row is among the candidates.

Every answered row says why its model answers (``chosen``: the end-to-end route's choice
reason, else why the hybrid or layerwise route took over) and the variant of the history or
model behind it: ``variant`` is the end-to-end model's variant key (``"precision=fp16"``,
``""`` when its logs state none) or ``precision=P`` for a layerwise answer; ``precision`` is
that variant's precision, ``"unstated"`` when the history does not say.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleet.deployment import Deployment
from jobcast.service.forecast import Forecast
from jobcast.service.forecaster import Forecaster
from jobcast.service.prices import PriceTable
from jobcast.service.request import JobRequest
from models.fitted import FittedModel
from models.variant import UNSTATED, variant_dict

# Training-set sizes assumed when the caller gives none (samples per epoch).
KNOWN_DATASETS = {"resnet20": ("CIFAR-10", 50_000), "resnet3-cifar10": ("CIFAR-10", 50_000)}
DEFAULT_DATASET = ("ImageNet-1k", 1_281_167)


def dataset_for(network: str, dataset_size: int | None) -> tuple[str, int]:
    if dataset_size is not None:
        if dataset_size <= 0:
            raise ValueError(f"dataset size must be positive, got {dataset_size}")
        return "given", dataset_size
    return KNOWN_DATASETS.get(network.lower(), DEFAULT_DATASET)


def provenance(by_id: Mapping[str, FittedModel], outcome: Forecast) -> dict[str, str]:
    """``chosen``, ``variant`` and ``precision`` of one answer (see the module rules);
    ``by_id``: the forecaster's end-to-end models by id."""
    details = outcome.details
    chosen = (details.get("chosen") or details.get("why_hybrid")
              or details.get("why_layerwise") or str(outcome.route))
    e2e_id = (details.get("models") or {}).get("end_to_end") or outcome.model
    # The id itself, else its part before "+" ("<model>+layerwise/…", "<model>+scaled/…").
    model = by_id.get(e2e_id) or by_id.get(e2e_id.split("+", 1)[0])
    if model is not None:
        variant = model.variant
    elif isinstance(details.get("variant"), str):
        variant = details["variant"]
    elif details.get("precision"):
        variant = f"precision={details['precision']}"
    else:
        variant = ""
    precision = variant_dict(variant).get("precision", UNSTATED)
    return {"chosen": str(chosen), "variant": variant, "precision": precision}


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
    precision: str = "fp32",
    counts: list[int] | None = None,
    framework: str = "tensorflow",
) -> dict:
    """Forecast the job on every candidate; rows sorted by time, each with its cost rank."""
    if batch_size <= 0 or epochs <= 0:
        raise ValueError("batch size and epochs must be positive")
    dataset, size = dataset_for(network, dataset_size)
    common = dict(network=network, batch_size=batch_size, epochs=epochs, dataset_size=size)
    requests: list[tuple[str, int, JobRequest]] = []
    deployments = sorted(
        {
            m.deployment
            for m in forecaster.models
            if m.network == network.lower() and m.phase == "train"
        }
    )
    for dep in deployments:
        parsed = Deployment.parse(dep)
        requests.append((parsed.accelerator, parsed.count, JobRequest(deployment=dep, **common)))
    counts = sorted(set(counts or [1]))
    if any(n < 1 for n in counts):
        raise ValueError(f"GPU counts must be >= 1, got {counts}")
    for device in devices if devices is not None else sorted(prices.usd_per_gpu_hour):
        for n in counts:
            where = {"device": device} if n == 1 else {"deployment": f"{n}x {device}"}
            requests.append((device, n, JobRequest(optimizer=optimizer, image_size=image_size,
                                                   precision=precision, framework=framework,
                                                   **where, **common)))
    by_id = {m.model_id: m for m in forecaster.models}
    rows = []
    for gpu, count, req in requests:
        outcome = forecaster.forecast(req)
        row = {
            "candidate": req.deployment or f"{req.device} x1",
            "gpus": count,
            "price_usd_per_gpu_hour": prices.price(gpu),
        }
        if not outcome.ok:
            rows.append({**row, "error": outcome.error})
            continue
        cost = {k: prices.cost(getattr(outcome, k), gpu, count) for k in ("seconds", "low", "high")}
        rows.append(
            {
                **row,
                "route": str(outcome.route),
                "model": outcome.model,
                "seconds": outcome.seconds,
                "low": outcome.low,
                "high": outcome.high,
                "unit": outcome.unit,
                "extrapolated": outcome.extrapolated,
                **provenance(by_id, outcome),
                "usd": cost["seconds"],
                "usd_low": cost["low"],
                "usd_high": cost["high"],
            }
        )
    single = {r["candidate"][: -len(" x1")]: r["seconds"] for r in rows
              if "error" not in r and r["candidate"].endswith(" x1")}
    for r in rows:
        device = r["candidate"].split("x ", 1)[-1] if r["gpus"] > 1 else None
        if "error" not in r and device in single:
            r["scaling_efficiency"] = single[device] / (r["gpus"] * r["seconds"])
    ok = sorted((r for r in rows if "error" not in r), key=lambda r: r["seconds"])
    for rank, r in enumerate(ok, start=1):
        r["rank_time"] = rank
    priced = sorted((r for r in ok if r["usd"] is not None), key=lambda r: r["usd"])
    for rank, r in enumerate(priced, start=1):
        r["rank_cost"] = rank
    return {
        "network": network,
        "batch_size": batch_size,
        "epochs": epochs,
        "dataset": dataset,
        "dataset_size": size,
        "prices": prices.source,
        "candidates": ok + [r for r in rows if "error" in r],
    }
