"""Slurm jobs written in sacct's two JSON number shapes and as ``--parsable2`` text.

The templates are the real public samples in ``tests/data/slurm/`` (provenance in
tests/data/README.md): a job of ``sacct --json`` from Slurm 22.05.9 (bare numbers) and one
from 23.11.5 (``{"set", "infinite", "number"}``, states as lists). :func:`to_new_shape`
rewrites an old-shape job the way 23.11 prints it (the fields both samples hold, in the
23.11 sample's spelling); :func:`history` fills the old template with a recurring job's runs;
:func:`parsable2` prints the same jobs as ``sacct --parsable2`` with the columns jobcast reads.

Variants users met (issue 35): :func:`never_started` (a job cancelled while pending, its start
0 or Slurm's NO_VAL ``4294967294`` as 24.11 prints it; :func:`document` with ``release``
names the Slurm version), :func:`with_elapsed` (an elapsed time that contradicts Start/End),
:func:`deeply_nested` (JSON nested past any reader), and :func:`recurring_job_export` (one
job name run daily on 8 A100s: typical runs, one ~1.6x slower, one FAILED early).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "slurm"
OLD = DATA / "sacct-22.05.9.json"
NEW = DATA / "sacct-23.11.5.json"


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def number(value, infinite: bool = False) -> dict:
    """A number as Slurm 23.11 prints it."""
    return {"set": value is not None, "infinite": infinite,
            "number": 0 if value is None else value}


def to_new_shape(job: dict) -> dict:
    """An old-shape (< 23.11) job as 23.11 prints it."""
    new = copy.deepcopy(job)
    array = new["array"]
    array["task_id"] = number(array.get("task_id"))
    array["task"] = array.get("task") or ""
    new["priority"] = number(new.get("priority"))
    new["time"]["limit"] = number(new["time"].get("limit"))
    state = new["state"]["current"]
    new["state"]["current"] = state if isinstance(state, list) else [state]
    for name in ("exit_code", "derived_exit_code"):
        code = new.get(name) or {}
        status = code.get("status")
        new[name] = {"status": status if isinstance(status, list) else [status],
                     "return_code": number(code.get("return_code")),
                     "signal": {"id": number(None), "name": ""}}
    new["het"]["job_offset"] = number(new["het"].get("job_offset"))
    memory = new.get("required", {}).pop("memory", None)
    if "required" in new:
        new["required"]["memory_per_node"] = number(memory)
        new["required"]["memory_per_cpu"] = number(None)
    new["comment"] = {k: v or "" for k, v in new.get("comment", {}).items()}
    for side in ("allocated", "requested"):
        for tres in new["tres"].get(side, []):
            tres["name"] = tres["name"] or ""
    new.setdefault("submit_line", "")
    return new


NO_VAL = 4294967294  # Slurm's "no value" (0xfffffffe)


def document(jobs: list[dict], shape: str, release: str | None = None) -> str:
    """A whole ``sacct --json`` answer holding ``jobs`` (old-shape dicts), in ``shape``;
    ``release`` (``"24.11.1"``) names the Slurm version in its ``meta``."""
    if shape == "old":
        doc = _doc(OLD)
        doc["jobs"] = jobs
    else:
        doc = _doc(NEW)
        doc["jobs"] = [to_new_shape(j) for j in jobs]
    if release:
        major, minor, micro = release.split(".")
        doc["meta"].setdefault("slurm", {}).update(
            release=release, version={"major": major, "minor": minor, "micro": micro})
    return json.dumps(doc, indent=2)


def never_started(job: dict, start: int = NO_VAL, state: str = "CANCELLED") -> dict:
    """``job`` (old shape) cancelled while pending: start ``start`` (0 or NO_VAL), end at the
    cancel, no elapsed time, no nodes."""
    job["state"]["current"] = state
    job["time"].update(start=start, elapsed=0, end=job["time"]["submission"] + 300)
    job["nodes"] = "None assigned"
    return job


def with_elapsed(job: dict, elapsed: int) -> dict:
    """``job`` whose elapsed time says ``elapsed`` s whatever its Start and End say."""
    job["time"]["elapsed"] = elapsed
    return job


def deeply_nested(jobs: list[dict], shape: str, depth: int = 100_000) -> str:
    """:func:`document` of ``jobs`` with the first job's comment nested ``depth`` lists
    deep."""
    jobs[0]["comment"] = {"job": "@NEST@"}
    return document(jobs, shape).replace('"@NEST@"', "[" * depth + "]" * depth)


T0 = 1_760_000_000  # 2025-10-09T08:53:20Z
TYPICAL_S = (30000, 31000, 29500, 30500, 30200)


def recurring_job_export(path: Path | str, name: str = "resnet50-imagenet", *,
                         shape: str = "new", t0: int = T0, typical=TYPICAL_S,
                         slow_factor: float = 1.6, failed_s: int = 2000) -> Path:
    """Write a ``sacct --json`` export of a recurring job to ``path`` and return the path.

    One job name, one run a day on one node of 8 A100s (``gres/gpu:a100=8`` and
    ``gres/gpu=8``): the ``typical`` runs, one run ``slow_factor`` x their median (the 5th)
    and one FAILED run of ``failed_s`` real seconds (the 6th), 7 runs by default, in
    ``shape`` ("new": Slurm 23.11's numbers, "old": 22.05's). Submit, Start and End of each
    run are a day after the previous run's."""
    ordered = sorted(typical)
    median = (ordered[len(ordered) // 2] + ordered[(len(ordered) - 1) // 2]) / 2
    seconds = [*typical[:4], round(slow_factor * median), failed_s, *typical[4:]]
    states = ["COMPLETED"] * 5 + ["FAILED"] + ["COMPLETED"] * (len(seconds) - 6)
    runs = [{"start": t0 + i * 86400, "seconds": s, "state": st, "gpu_type": "a100"}
            for i, (s, st) in enumerate(zip(seconds, states, strict=True))]
    path = Path(path)
    path.write_text(document(history(name, runs), shape))
    return path


def history(name: str, runs: list[dict], *, first_id: int = 4242000) -> list[dict]:
    """Old-shape jobs of ``name``: each run a dict with ``start``, ``seconds``, and optionally
    ``state`` (COMPLETED), ``gpus`` (8), ``gpu_type`` (a100), ``nodes`` (1), ``task``,
    ``submit_line``."""
    template = _doc(OLD)["jobs"][0]
    out = []
    for i, run in enumerate(runs):
        job = copy.deepcopy(template)
        start, seconds = run["start"], run["seconds"]
        gpus, nodes = run.get("gpus", 8), run.get("nodes", 1)
        gpu_type = run.get("gpu_type", "a100")
        job.update(job_id=first_id + i, name=name, allocation_nodes=nodes,
                   nodes=",".join(f"gpu{n:03d}" for n in range(i, i + nodes)))
        if "submit_line" in run:  # 22.05 has no submit_line; later versions do
            job["submit_line"] = run["submit_line"]
        job["array"]["job_id"] = first_id if "task" in run else 0
        job["array"]["task_id"] = run.get("task")
        job["state"]["current"] = run.get("state", "COMPLETED")
        job["time"].update(submission=int(start) - 60, eligible=int(start) - 60,
                           start=int(start), end=int(start + seconds), elapsed=int(seconds))
        gres = [{"type": "gres", "name": f"gpu:{gpu_type}" if gpu_type else "gpu",
                 "id": 1002, "count": gpus}]
        if gpu_type:
            gres.append({"type": "gres", "name": "gpu", "id": 1001, "count": gpus})
        keep = [t for t in job["tres"]["allocated"] if t["type"] != "gres"]
        for t in keep:
            if t["type"] == "node":
                t["count"] = nodes
        job["tres"]["allocated"] = keep + (gres if gpus else [])
        out.append(job)
    return out


def _iso(t: int) -> str:
    """A time as sacct prints it: ``Unknown`` where unset (0 or NO_VAL)."""
    if t in (0, NO_VAL):
        return "Unknown"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parsable2(jobs: list[dict]) -> str:
    """The same (old-shape) jobs as ``sacct --parsable2`` with a batch step row each."""
    cols = ["JobID", "JobName", "State", "Submit", "Start", "End", "Elapsed", "AllocTRES",
            "NNodes", "NodeList", "Cluster", "Partition", "SubmitLine"]
    lines = ["|".join(cols)]
    for job in jobs:
        t = job["time"]
        tres = ",".join(f"{x['type'] if x['type'] != 'gres' else 'gres/' + x['name']}"
                        f"={x['count']}" for x in job["tres"]["allocated"]
                        if x["type"] in ("cpu", "node", "gres"))
        task = job["array"].get("task_id")
        ident = f"{job['array']['job_id']}_{task}" if task is not None else str(job["job_id"])
        hours, rest = divmod(t["elapsed"], 3600)
        elapsed = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
        row = [ident, job["name"], job["state"]["current"], _iso(t["submission"]),
               _iso(t["start"]), _iso(t["end"]), elapsed, tres,
               str(job["allocation_nodes"]), job["nodes"], job["cluster"], job["partition"],
               job.get("submit_line") or ""]
        lines.append("|".join(row))
        lines.append("|".join([f"{ident}.batch", "batch", job["state"]["current"], *row[3:]]))
    return "\n".join(lines) + "\n"
