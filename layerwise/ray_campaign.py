"""Layer microbenchmark campaigns on Ray: Ray tasks time the rows, this process writes them.

Rules
-----
* The campaign is :func:`layerwise.bench.campaign_configs` (same configurations, same
  ``config_id`` s, same CSV as :func:`layerwise.bench.run_campaign`), so a file started locally
  can be finished on Ray and the other way round. ``config_id`` s already in the file are
  skipped; a partial last line left by a kill is dropped first.
* The configurations still to time are cut into chunks of ``configs_per_task``; each chunk is
  one Ray task that reserves one GPU (``num_gpus=1``, ``device`` gpu) or one CPU slot
  (``num_cpus=1``, ``device`` cpu), plus ``accelerator_type`` when given. A task runs
  :func:`layerwise.bench.bench_row` on each configuration with the requested backend and
  returns the records with its worker's device columns (``detect(device)``) and hostname. On a
  GPU the task times the GPU Ray gave it (the only one it sees: ``gpu:0``).
* The driver is the only writer: it takes chunks as they finish (``ray.wait``) and appends
  each record (device columns + ``run_id`` added) as one flushed CSV line, so a killed driver
  leaves whole lines and a rerun resumes. A ``config_id`` is written at most once: records of
  ids already written, or not in the task's chunk, are dropped (and counted).
* A task whose worker dies (crash, OOM killer, pre-emption, ``SIGKILL``) is retried by Ray
  ``max_retries`` times; a chunk that still fails is split into one task per configuration,
  and a configuration whose own task still fails becomes a failed row saying why. Every
  attempt is counted by a small Ray actor (the attempt ledger), so ``retried_tasks`` counts
  tasks Ray really ran more than once. A task that *raises* (not a crash: a missing framework,
  no such device) stops the campaign with that error; rows written so far stay.
* Ray: the Ray this process already runs is used as it is (and left running); otherwise
  ``address`` joins that cluster (whose workers need jobcast and the backend's framework; a
  backend registered outside :mod:`layerwise.backends` is found in a worker by importing its
  module, :attr:`~layerwise.backends.Backend.home`, which the workers must be able to import),
  else a local Ray is started with ``num_cpus``. Ray started or joined here is shut down at
  the end. Nothing to time means Ray is not started at all.
* ``ray`` is imported inside the functions only: this module imports without it, and
  :class:`RayMissing` says how to install it.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.ray_session import RayMissing, connect, import_ray, task_failure
from layerwise.backends import (
    TimingPlan,
    check_precision,
    ensure_backend,
    get_backend,
    require_module,
)
from layerwise.bench import (
    DEFAULT_PRECISIONS,
    CampaignError,
    CampaignResult,
    bench_row,
    campaign_configs,
    failed_record,
    format_row,
    parse_precisions,
    prepare_campaign_file,
)
from layerwise.layers import FeatureSpace
from layerwise.local_device import parse_device

__all__ = ["CONFIGS_PER_TASK", "MAX_RETRIES", "RayCampaignResult", "RayMissing", "bench_chunk",
           "run_ray_campaign"]

CONFIGS_PER_TASK = 16
MAX_RETRIES = 3
ChunkFn = Callable[[list[dict], str, TimingPlan, str], list[dict]]
Progress = Callable[[int, int, "dict | None"], None]




@dataclass
class RayCampaignResult(CampaignResult):
    """:class:`~layerwise.bench.CampaignResult` plus what the Ray run did."""

    tasks: int = 0  # tasks submitted (chunks and, after a chunk failed, single configurations)
    retried_tasks: int = 0  # tasks Ray ran more than once (their worker died)
    failed_tasks: int = 0  # tasks that still failed after max_retries retries
    dropped_duplicates: int = 0  # records not written: config_id already written / not asked
    hosts: dict = field(default_factory=dict)  # hostname -> rows timed there


def bench_chunk(rows: list[dict], device: str, plan: TimingPlan, backend: str) -> list[dict]:
    """The default task body: one :func:`~layerwise.bench.bench_row` record per row."""
    return [bench_row(row, device, plan, backend) for row in rows]


class _AttemptLedger:
    """Ray actor counting the attempts of each task key (a retry is a second attempt)."""

    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}

    def begin(self, key: str) -> int:
        self.attempts[key] = self.attempts.get(key, 0) + 1
        return self.attempts[key]

    def counts(self) -> dict[str, int]:
        return dict(self.attempts)


def _run_chunk(task: ChunkFn, key: str, ledger: Any, rows: list[dict], device: str,
               plan: TimingPlan, backend: str, home: str = "") -> dict:
    """The Ray task: note the attempt, get the backend (importing ``home``, the module that
    defines it, where the worker has not registered it), describe the device, time the
    chunk."""
    import ray

    try:
        attempt = ray.get(ledger.begin.remote(key))
    except Exception:  # noqa: BLE001 - a lost ledger only loses the retry count
        attempt = 0
    hw = ensure_backend(backend, home).detect(device)
    records = task(rows, device, plan, backend)
    return {"records": records, "device": hw, "host": socket.gethostname(),
            "pid": os.getpid(), "attempt": attempt}


def run_ray_campaign(
    out: str | Path,
    layers: Sequence[str],
    samples: int,
    *,
    seed: int = 0,
    space: str | FeatureSpace = "paper",
    device: str = "cpu",
    plan: TimingPlan | None = None,
    backend: str = "tensorflow",
    precisions: Sequence[str] = DEFAULT_PRECISIONS,
    address: str | None = None,
    num_cpus: int | None = None,
    accelerator_type: str | None = None,
    configs_per_task: int = CONFIGS_PER_TASK,
    max_retries: int = MAX_RETRIES,
    max_seconds: float | None = None,
    progress: Progress | None = None,
    task: ChunkFn = bench_chunk,
) -> RayCampaignResult:
    """Run (or resume) a campaign of ``samples`` configurations on Ray, appending to ``out``.

    ``progress(done, total, row)`` is called once with ``row=None`` before the first new row,
    then after every written row (the row carries ``host``). ``max_seconds`` stops submitting
    and cancels running tasks (rerun to resume). ``task`` is the task body (tests pass one that
    kills its worker).
    """
    if configs_per_task < 1:
        raise CampaignError("configs_per_task must be at least 1")
    if max_retries < 0:
        raise CampaignError("max_retries must be 0 or more")
    started = time.perf_counter()
    plan = plan or TimingPlan()
    engine = get_backend(backend)
    if address is None:
        require_module(engine)  # a cluster's workers, not this driver, need the framework
    precisions = tuple(check_precision(engine, p) for p in parse_precisions(precisions))
    kind, _ = parse_device(device)
    task_device = "cpu" if kind == "cpu" else "gpu:0"
    path = Path(out)
    done = prepare_campaign_file(path)
    configs = list(campaign_configs(layers, samples, seed, space, precisions, engine.name))
    todo = [row for row in configs if row["config_id"] not in done]
    result = RayCampaignResult(out=str(path), requested=samples,
                               skipped_existing=len(configs) - len(todo))
    if progress:
        progress(result.skipped_existing, len(configs), None)
    if todo:
        ray = import_ray("Ray campaigns")
        joined = connect(ray, address, num_cpus)
        try:
            slots = _slots(ray, kind, accelerator_type)
            writer = _Writer(path, result, plan, engine.name, task_device, progress,
                             len(configs), done)
            _drive(ray, writer, todo, task, slots, kind=kind, plan=plan,
                   accelerator_type=accelerator_type, configs_per_task=configs_per_task,
                   max_retries=max_retries, deadline=None if max_seconds is None
                   else started + max_seconds)
        finally:
            if joined:
                ray.shutdown()
    result.seconds = time.perf_counter() - started
    return result


def _drive(ray: Any, writer: _Writer, todo: list[dict], task: ChunkFn, slots: int, *,
           kind: str, plan: TimingPlan, accelerator_type: str | None, configs_per_task: int,
           max_retries: int, deadline: float | None) -> None:
    """Submit chunks (at most two per slot in flight), write results as they arrive."""
    resources: dict[str, Any] = {"num_gpus": 1} if kind == "gpu" else {"num_cpus": 1}
    if accelerator_type:
        resources["accelerator_type"] = accelerator_type
    remote = ray.remote(_run_chunk).options(max_retries=max_retries, retry_exceptions=False,
                                            **resources)
    ledger = ray.remote(_AttemptLedger).options(num_cpus=0).remote()
    queue: deque[tuple[str, list[dict]]] = deque(
        (f"c{n}", todo[i:i + configs_per_task])
        for n, i in enumerate(range(0, len(todo), configs_per_task)))
    pending: dict[Any, tuple[str, list[dict]]] = {}
    result = writer.result
    try:
        while queue or pending:
            if deadline is not None and time.perf_counter() > deadline:
                result.stopped_early = True
                break
            while queue and len(pending) < 2 * slots:
                key, rows = queue.popleft()
                ref = remote.remote(task, key, ledger, rows, writer.task_device, plan,
                                    writer.backend, get_backend(writer.backend).home)
                pending[ref] = (key, rows)
                result.tasks += 1
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                key, rows = pending.pop(ref)
                try:
                    payload = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    raise RuntimeError(f"benchmark task {key} raised {task_failure(exc)}") from None
                except ray.exceptions.RayError as exc:  # the worker died max_retries + 1 times
                    result.failed_tasks += 1
                    if len(rows) > 1:  # find the configuration that kills it: one task each
                        queue.extendleft(reversed([(f"{key}.{i}", [row])
                                                   for i, row in enumerate(rows)]))
                        continue
                    writer.failed(rows[0], f"worker died {max_retries + 1} time(s) timing this "
                                  f"configuration: {task_failure(exc)}")
                    continue
                writer.take(rows, payload)
    finally:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        try:
            counts = ray.get(ledger.counts.remote(), timeout=30)
            result.retried_tasks = sum(1 for n in counts.values() if n > 1)
        except Exception:  # noqa: BLE001 - the ledger itself died; retries stay uncounted
            logging.getLogger(__name__).warning("attempt ledger lost: retries not counted")
        with contextlib.suppress(Exception):
            ray.kill(ledger)


class _Writer:
    """The single writer: appends each record once, as a flushed CSV line."""

    def __init__(self, path: Path, result: RayCampaignResult, plan: TimingPlan, backend: str,
                 task_device: str, progress: Progress | None, total: int,
                 done: set[str]) -> None:
        self.path, self.result, self.plan, self.backend = path, result, plan, backend
        self.task_device, self.progress, self.total = task_device, progress, total
        self.written: set[str] = set(done)
        self.hw: dict = {}
        self.run_id = uuid.uuid4().hex[:12]

    def take(self, rows: list[dict], payload: dict) -> None:
        """Write a finished chunk's records; a configuration with no record is a failed row."""
        hw, host = payload["device"], str(payload["host"])
        self.hw = self.hw or dict(hw)
        self.result.device = self.result.device or dict(hw)
        asked = {row["config_id"]: row for row in rows}
        for record in payload["records"]:
            if record.get("config_id") not in asked:
                self.result.dropped_duplicates += 1
                continue
            asked.pop(record["config_id"])
            self._write(dict(record), hw, host)
        for row in asked.values():
            self._write(failed_record(row, self.plan, "the task returned no record for this "
                                      "configuration", self.backend), hw, host)

    def failed(self, row: dict, error: str) -> None:
        """Write the failed row of a configuration no task could time."""
        self._write(failed_record(row, self.plan, error, self.backend),
                    self.hw or {"device": self.task_device}, "")

    def _write(self, record: dict, hw: dict, host: str) -> None:
        if record["config_id"] in self.written:
            self.result.dropped_duplicates += 1
            return
        record.update(hw, run_id=self.run_id)
        with open(self.path, "a", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerow(format_row(record))
            handle.flush()
        self.written.add(record["config_id"])
        result = self.result
        result.written += 1
        result.ok += record["status"] == "ok"
        result.failed += record["status"] == "failed"
        if host:
            result.hosts[host] = result.hosts.get(host, 0) + 1
        if self.progress:
            record["host"] = host
            self.progress(result.skipped_existing + result.written, self.total, record)






def _slots(ray: Any, kind: str, accelerator_type: str | None) -> int:
    """Tasks the cluster can run at once; a clear error where none could ever start."""
    resources = ray.cluster_resources()
    slots = int(resources.get("GPU" if kind == "gpu" else "CPU", 0))
    if slots < 1:
        raise CampaignError(f"the Ray cluster has no {kind.upper()} (resources: "
                            f"{', '.join(sorted(resources)) or 'none'}); use --device cpu"
                            if kind == "gpu" else "the Ray cluster has no CPU")
    if accelerator_type and f"accelerator_type:{accelerator_type}" not in resources:
        known = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
        raise CampaignError(f"no Ray node has accelerator type {accelerator_type!r} "
                            f"(known: {', '.join(known) or 'none'})")
    return slots

