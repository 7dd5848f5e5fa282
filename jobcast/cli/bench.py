"""``jobcast bench``: run (or resume) a layer microbenchmark campaign on this machine."""

from __future__ import annotations

from pathlib import Path

import typer

from jobcast.cli.options import json_option
from jobcast.cli.output import console, emit_json, fail, progress_bar


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app``."""
    app.command("bench")(bench)


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
             "become failed rows)."),
    max_minutes: float | None = typer.Option(
        None, "--max-minutes", min=0.0, help="Stop after this long (rerun to resume)."),
    as_json: bool = json_option("Print a JSON summary."),
) -> None:
    """Benchmark random layer configurations; appends rows as it goes and resumes after a kill."""

    try:
        from layerwise.bench import CampaignFileError, TimingPlan, parse_layers, run_campaign
        from layerwise.hardware import parse_device
        from layerwise.layers import get_space

        names = parse_layers(layers)
        kind, _ = parse_device(device)
        space_name = get_space(space or ("cpu" if kind == "cpu" else "paper")).name
    except ValueError as exc:
        fail(str(exc))
    try:
        plan = TimingPlan(warmup=warmup, reps=reps, runs=runs, target_rep_ms=target_ms,
                          grad_input=grad_input, backward=backward)
    except ValueError as exc:
        fail(str(exc))
    with progress_bar("bench", disable=as_json) as advance:

        def report(done: int, total: int, row: dict | None) -> None:
            item = "" if row is None else f"{row['layer']} {row['status']}"
            advance(done, total, item)

        try:
            result = run_campaign(
                out, names, samples, seed=seed, space=space_name, device=device, plan=plan,
                max_seconds=None if max_minutes is None else 60.0 * max_minutes,
                progress=report, isolate=isolate,
            )
        except (CampaignFileError, ValueError, OSError, RuntimeError) as exc:
            fail(str(exc))
    summary = result.as_dict()
    summary.update(layers=names, seed=seed, space=space_name, total_rows=(
        result.skipped_existing + result.written))
    if as_json:
        emit_json(summary)
        return
    console.print(
        f"{result.written} new row(s) ({result.ok} ok, {result.failed} failed), "
        f"{result.skipped_existing} already in {out}; {result.seconds:.0f} s on "
        f"{result.device.get('gpu', device)}"
        + (" — stopped early, rerun to resume" if result.stopped_early else "")
    )
