"""``jobcast bench``: run (or resume) a layer microbenchmark campaign, here or on Ray.

Rules: ``--backend auto`` is TensorFlow where it is installed, else PyTorch; ``--ray`` (or
``--ray-address``) times the rows in Ray tasks (one GPU, or one CPU slot, each) while this
process writes the one CSV; either way a rerun with the same arguments skips every
configuration already in ``--out``. Bad values are one-line errors (exit 2).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import typer

from jobcast.cli.options import json_option
from jobcast.cli.output import emit_json, fail, note, progress_bar


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app``."""
    app.command("bench")(bench)


def resolve_backend(name: str, installed: bool = True) -> str:
    """``auto`` -> tensorflow when installed, else torch; other names checked (ValueError).

    ``installed``: the framework must be importable here (not so for a Ray cluster's driver).
    """
    from layerwise.backends import get_backend, require_module

    if name.strip().lower() == "auto":
        name = "tensorflow" if importlib.util.find_spec("tensorflow") else "torch"
    engine = get_backend(name)
    if installed:
        require_module(engine)
    return engine.name


def bench(
    out: Path = typer.Option(..., "--out", help="CSV to append rows to (resumed if it exists)."),
    layers: str = typer.Option(
        "conv,dense", "--layers",
        help="Comma-separated layer types: conv,dense,dwconv,pool,bn,act,add (or 'all')."),
    samples: int = typer.Option(100, "--samples", min=1, help="Configurations in the campaign."),
    device: str = typer.Option("cpu", "--device", help="cpu, gpu or gpu:N."),
    seed: int = typer.Option(0, "--seed", help="Campaign seed (configuration i is fixed by it)."),
    space: str = typer.Option(
        "", "--space", help="Feature space: paper or cpu (default: cpu on a CPU, paper on a GPU)."),
    backend: str = typer.Option(
        "auto", "--backend",
        help="Timing backend: tensorflow (tf) or torch (pytorch); auto: tensorflow if installed."),
    precisions: str = typer.Option(
        "fp32", "--precisions", help="Precisions to time each shape at, e.g. fp32,tf32,fp16,bf16."),
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
    use_ray: bool = typer.Option(
        False, "--ray", help="Time in Ray tasks (local Ray unless --ray-address); one writer."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to join (implies --ray), e.g. ray://host:10001."),
    accelerator_type: str | None = typer.Option(
        None, "--accelerator-type", help="With --ray: run tasks only on nodes with this "
                                         "accelerator type (e.g. H100)."),
    max_minutes: float | None = typer.Option(
        None, "--max-minutes", min=0.0, help="Stop after this long (rerun to resume)."),
    as_json: bool = json_option("Print a JSON summary."),
) -> None:
    """Benchmark random layer configurations; appends rows as it goes and resumes after a kill."""

    use_ray = use_ray or ray_address is not None
    try:
        from layerwise.bench import (
            CampaignFileError,
            TimingPlan,
            parse_layers,
            parse_precisions,
            run_campaign,
        )
        from layerwise.hardware import parse_device
        from layerwise.layers import get_space

        names = parse_layers(layers)
        kind, _ = parse_device(device)
        space_name = get_space(space or ("cpu" if kind == "cpu" else "paper")).name
        engine = resolve_backend(backend, installed=ray_address is None)
        wanted = parse_precisions(precisions)
        plan = TimingPlan(warmup=warmup, reps=reps, runs=runs, target_rep_ms=target_ms,
                          grad_input=grad_input, backward=backward)
    except ValueError as exc:
        fail(str(exc))
    if accelerator_type and not use_ray:
        fail("--accelerator-type needs --ray (or --ray-address)")
    max_seconds = None if max_minutes is None else 60.0 * max_minutes
    with progress_bar("bench", disable=as_json) as advance:

        def report(done: int, total: int, row: dict | None) -> None:
            item = "" if row is None else f"{row['layer']} {row['status']}"
            if row is not None and row.get("host"):
                item += f" @{row['host']}"
            advance(done, total, item)

        try:
            if use_ray:
                from fleet.ray_session import RayMissing
                from layerwise.ray_campaign import run_ray_campaign

                try:
                    result = run_ray_campaign(
                        out, names, samples, seed=seed, space=space_name, device=device,
                        plan=plan, backend=engine, precisions=wanted, address=ray_address,
                        accelerator_type=accelerator_type, max_seconds=max_seconds,
                        progress=report)
                except (RayMissing, ConnectionError) as exc:
                    fail(str(exc))
            else:
                result = run_campaign(
                    out, names, samples, seed=seed, space=space_name, device=device, plan=plan,
                    max_seconds=max_seconds, progress=report, isolate=isolate, backend=engine,
                    precisions=wanted)
        except (CampaignFileError, ValueError, OSError, RuntimeError) as exc:
            fail(str(exc))
    summary = result.as_dict()
    summary.update(layers=names, seed=seed, space=space_name, backend=engine,
                   precisions=list(wanted), ray=use_ray,
                   total_rows=result.skipped_existing + result.written)
    if as_json:
        emit_json(summary)
        return
    retried = f", {summary['retried_tasks']} task(s) retried" if use_ray else ""
    note(
        "", f"{result.written} new row(s) ({result.ok} ok, {result.failed} failed), "
        f"{result.skipped_existing} already in {out}; {result.seconds:.0f} s on "
        f"{result.device.get('gpu', device)} with {engine}{retried}"
        + (" — stopped early, rerun to resume" if result.stopped_early else "")
    )
