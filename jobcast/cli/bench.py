"""``jobcast bench``: run (or resume) a layer microbenchmark campaign, here or on Ray.

Rules (:mod:`jobcast.service.features.benching` holds them): ``--backend auto`` is TensorFlow where
it is installed, else PyTorch; ``--ray`` (or ``--ray-address``) times the rows in Ray tasks (one
GPU, or one CPU slot, each) while this process writes the one CSV; either way a rerun with the
same arguments skips every configuration already in ``--out``. Bad values are one-line errors
(exit 2). ``--precision`` repeats (a comma list is accepted too). Deprecated spellings, kept
hidden for one release with a warning on stderr: ``--device`` (now ``--local-device``) and
``--precisions`` (now ``--precision``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from fleet.deprecation import renamed_attributes
from jobcast.cli.options import (
    RAY_ADDRESS,
    deprecated_alias,
    json_option,
    precision_option,
    ray_option,
)
from jobcast.cli.output import emit_json, fail, note, progress_bar


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app``."""
    app.command("bench")(bench)


def _resolve_backend() -> Any:
    from jobcast.service.features.benching import resolve_backend

    return resolve_backend


# ``resolve_backend`` moved to the service door (the same rule): deprecated here, one release.
__getattr__ = renamed_attributes(__name__, {
    "resolve_backend": ("jobcast.service.features.benching.resolve_backend", _resolve_backend)})


def bench(
    out: Path = typer.Option(..., "--out", help="CSV to append rows to (resumed if it exists)."),
    layers: str = typer.Option(
        "conv,dense", "--layers",
        help="Comma-separated layer types: conv,dense,dwconv,pool,bn,act,add (or 'all')."),
    samples: int = typer.Option(100, "--samples", min=1, help="Configurations in the campaign."),
    local_device: str | None = typer.Option(
        None, "--local-device", help="Device here to time on: cpu, gpu or gpu:N (default cpu)."),
    device_old: str | None = typer.Option(None, "--device", hidden=True),
    seed: int = typer.Option(0, "--seed", help="Campaign seed (configuration i is fixed by it)."),
    space: str = typer.Option(
        "", "--space", help="Feature space: paper or cpu (default: cpu on a CPU, paper on a GPU)."),
    backend: str = typer.Option(
        "auto", "--backend",
        help="Timing backend: tensorflow (tf) or torch (pytorch); auto: tensorflow if installed."),
    precision: list[str] | None = precision_option(
        repeat=True, what="Each shape is timed at each (default fp32; a comma list works too)."),
    precisions_old: str | None = typer.Option(None, "--precisions", hidden=True),
    reps: int = typer.Option(5, "--reps", min=1, help="Timed repetitions per configuration."),
    runs: int = typer.Option(
        0, "--runs", min=0, help="Calls per repetition (0: as many as fit in --target-ms)."),
    target_ms: float = typer.Option(25.0, "--target-ms", min=0.0,
                                    help="Aimed duration of one repetition when --runs is 0."),
    warmup: int = typer.Option(5, "--warmup", min=1, help="Untimed calls before timing."),
    grad_input: bool = typer.Option(
        True, "--grad-input/--no-grad-input",
        help="Training steps also differentiate the layer input (as inside a network)."),
    backward: str = typer.Option(
        "upstream", "--backward",
        help="Training-step backward: 'upstream' (from a random output gradient, as inside a "
             "network) or 'mse' (an MSE loss, as Justus et al.)."),
    isolate: bool = typer.Option(
        True, "--isolate/--in-process",
        help="Time in a child process restarted after a native crash (crashing configurations "
             "become failed rows). Ray tasks are always separate processes."),
    use_ray: bool = ray_option("Time"),
    ray_address: str | None = RAY_ADDRESS,
    accelerator_type: str | None = typer.Option(
        None, "--accelerator-type", help="With --ray: run tasks only on nodes with this "
                                         "accelerator type (e.g. H100)."),
    max_minutes: float | None = typer.Option(
        None, "--max-minutes", min=0.0, help="Stop after this long (rerun to resume)."),
    as_json: bool = json_option("Print a JSON summary."),
) -> None:
    """Benchmark random layer configurations; appends rows as it goes and resumes after a kill."""
    from fleet.errors import JobcastError
    from jobcast.service.features.benching import BenchRequest, plan_bench, run_bench

    device = deprecated_alias(local_device, device_old, "--device", "--local-device",
                              default="cpu")
    wanted = deprecated_alias(precision or None, [precisions_old] if precisions_old else None,
                              "--precisions", "--precision", default=["fp32"])
    req = BenchRequest(
        out=out, layers=layers, samples=samples, device=device, seed=seed, space=space,
        backend=backend, precisions=wanted, reps=reps, runs=runs, target_ms=target_ms,
        warmup=warmup, grad_input=grad_input, backward=backward, isolate=isolate,
        use_ray=use_ray, ray_address=ray_address, accelerator_type=accelerator_type,
        max_minutes=max_minutes)
    try:
        plan = plan_bench(req)
    except JobcastError as exc:
        fail(exc)
    with progress_bar("bench", disable=as_json) as advance:

        def report(done: int, total: int, row: dict | None) -> None:
            item = "" if row is None else f"{row['layer']} {row['status']}"
            if row is not None and row.get("host"):
                item += f" @{row['host']}"
            advance(done, total, item)

        try:
            result = run_bench(plan, progress=report)
        except JobcastError as exc:
            fail(exc)
    summary = result.as_dict()
    if as_json:
        emit_json(summary)
        return
    done = result.campaign
    retried = f", {summary['retried_tasks']} task(s) retried" if req.on_ray else ""
    note(
        "", f"{done.written} new row(s) ({done.ok} ok, {done.failed} failed), "
        f"{done.skipped_existing} already in {out}; {done.seconds:.0f} s on "
        f"{done.device.get('gpu', device)} with {plan.backend}{retried}"
        + (" — stopped early, rerun to resume" if done.stopped_early else "")
    )
