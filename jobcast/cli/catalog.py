"""``jobcast gpus``, ``jobcast networks`` and ``jobcast info``: what jobcast knows and where its
data lives. The data come from :mod:`jobcast.service.features.known`; this module renders only.

Rules:

- ``gpus`` / ``networks`` without a query list everything; a query that matches nothing is
  an error (exit 1) that says how to list all. ``--json`` prints the entries as the service
  gives them (peaks per precision, params, FLOPs per sample, source).
- ``info`` reads, never creates: the data directory, the store and the MLflow tracking are
  shown with whether they exist (URLs without their password).
"""

from __future__ import annotations

import typer

from jobcast.cli.options import STORE, TRACKING_URI, json_option
from jobcast.cli.output import console, emit_json, fail, note


def register(app: typer.Typer) -> None:
    """Add ``gpus``, ``networks`` and ``info`` to ``app``."""
    app.command("gpus")(gpus_command)
    app.command("networks")(networks_command)
    app.command("info")(info_command)


def _tflops(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def gpus_command(
    query: str | None = typer.Argument(None, help="A GPU, family, alias or part of a name "
                                       "(e.g. A100, 'Tesla V100-SXM2-16GB', hopper, 4090)."),
    as_json: bool = json_option("Print the GPUs with their specs and sources as JSON."),
) -> None:
    """List the GPUs jobcast knows: names, aliases (as nvidia-smi prints them), memory and
    peak TFLOPS per precision (what a forecast uses), architecture."""
    from rich.table import Table
    from rich.text import Text

    from jobcast.service.features.known import find_gpus

    found = find_gpus(query)
    if not found:
        fail(f"no GPU in the catalog matches {query!r} (`jobcast gpus` lists them all)", 1)
    if as_json:
        emit_json(found)
        return
    table = Table(title=f"{len(found)} GPUs (peaks: dense TFLOPS, tensor cores where the "
                        "GPU has them)")
    for col in ("name", "aliases", "arch", "memory", "fp32", "tf32", "fp16", "bf16"):
        table.add_column(col, overflow="fold")
    for g in found:
        peaks = g["peak_tflops"]
        table.add_row(Text(g["name"]), Text(", ".join(g["aliases"])), Text(g["architecture"]),
                      f"{g['memory_gb']:g} GB", *(_tflops(peaks[p]) for p in
                                                  ("fp32", "tf32", "fp16", "bf16")))
    console.print(table)
    note("source", "fleet/data/gpu_catalog.csv (vendor datasheets and whitepapers per "
                   "architecture: fleet/data/README.md; --json names them per GPU)")


def networks_command(
    query: str | None = typer.Argument(None, help="A network name or part of one "
                                       "(e.g. resnet, inception3)."),
    as_json: bool = json_option("Print the networks with params, FLOPs and source as JSON."),
) -> None:
    """List the networks jobcast can forecast from layers without history: name, framework,
    aliases, parameters, forward FLOPs per sample at its image size, source of the spec."""
    from rich.table import Table
    from rich.text import Text

    from jobcast.service.features.known import find_networks

    found = find_networks(query)
    if not found:
        fail(f"no shipped network matches {query!r} (`jobcast networks` lists them all)", 1)
    if as_json:
        emit_json(found)
        return
    table = Table(title=f"{len(found)} networks (FLOPs: forward pass of one sample)")
    for col in ("name", "framework", "aliases", "image", "params", "GFLOPs", "source"):
        table.add_column(col, overflow="fold")
    for n in found:
        table.add_row(Text(n["name"]), n["framework"], Text(", ".join(n["aliases"])),
                      str(n["image_size"]), f"{n['params'] / 1e6:,.1f} M",
                      f"{n['flops_per_sample'] / 1e9:,.2f}", Text(n["source"]))
    console.print(table)


def _yes(value: bool | None) -> str:
    return {True: "exists", False: "not created yet", None: "not checked"}[value]


def info_command(
    store: str | None = STORE,
    tracking_uri: str | None = TRACKING_URI,
    as_json: bool = json_option("Print the version, data directory, store and tracking as "
                                "JSON."),
) -> None:
    """Show where jobcast keeps its data: the data directory ($JOBCAST_HOME, else
    $XDG_DATA_HOME/jobcast, else ~/.local/share/jobcast), the store and the MLflow tracking
    a command would use, whether they exist, and the store's counts. Creates nothing."""
    import os

    from jobcast.service.features.known import data_places
    from jobcast.service.features.stores import store_url

    places = data_places(store_url(store), tracking_uri or os.environ.get("MLFLOW_TRACKING_URI"))
    if as_json:
        emit_json(places)
        return
    note("jobcast", places["version"])
    note("data dir", f"{places['data_dir']} ({_yes(places['data_dir_exists'])}; "
                     "$JOBCAST_HOME moves it)")
    state = places["store_status"] or _yes(places["store_exists"])
    counts = places["counts"]
    if counts:
        state += f": {counts['runs']} runs from {counts['files']} files"
    note("store", f"{places['store']} ({state})")
    note("tracking", f"{places['tracking_uri']} ({_yes(places['tracking_exists'])})")
    if places["artifacts"]:
        note("artifacts", places["artifacts"])
