"""JSON payloads and rich tables for the commands' output.

Rule: data (names, paths, model ids, variants, reasons) goes into tables and text as
:class:`~rich.text.Text`, never as Rich markup: ``[red]x`` or ``a[/b]`` prints as written.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ingest.store import Store


def cell(value: object, style: str = "") -> Text:
    """``value`` as table text, never read as markup (``None`` prints as ``None``)."""
    return Text(str(value), style=style)


def runs_payload(store: Store, network: str | None = None, deployment: str | None = None) -> list:
    """Runs with their segments: the stable JSON of ``jobcast runs --json``."""
    stored = store.runs(network, deployment)
    by_run: dict[int, list[dict]] = {}
    for seg in store.segments([r.id for r in stored]):
        by_run.setdefault(seg["run_id"], []).append(seg)
    out = []
    for r in stored:
        out.append(
            {
                "id": r.id,
                "source": r.source,
                "content_hash": r.content_hash,
                "format": r.format,
                "run_index": r.run_index,
                "network": r.network,
                "deployment": r.deployment,
                "framework": r.framework,
                "batch_size": r.batch_size,
                "start_time": r.start_time,
                # what the parser repaired and warned about, the system and variant keys
                "warnings": list(r.meta.get("warnings", [])),
                "meta": r.meta,
                "phases": [
                    {
                        "phase": s["phase"],
                        "iterations": s["iterations"],
                        "seconds": s["seconds"],
                        "batch_size": s["batch_size"],
                        "start_time": s["start_time"],
                        "epoch_start": s["epoch_start"],
                        "epoch_end": s["epoch_end"],
                        "iteration_start": s["iteration_start"],
                        "iteration_end": s["iteration_end"],
                        "points": len(s["points"]),
                    }
                    for s in by_run.get(r.id, [])
                ],
            }
        )
    return out


def runs_table(payload: list) -> Table:
    table = Table(title=f"{len(payload)} runs")
    for col in ("network", "deployment", "batch", "train s", "train it", "test s", "source"):
        table.add_column(col, overflow="fold")
    for r in payload:
        train = [p for p in r["phases"] if p["phase"] == "train"]
        test = [p for p in r["phases"] if p["phase"] == "test"]
        table.add_row(
            cell(r["network"]),
            cell(r["deployment"]),
            str(r["batch_size"]),
            f"{sum(p['seconds'] for p in train):,.0f}",
            f"{sum(p['iterations'] for p in train):,.0f}",
            f"{sum(p['seconds'] for p in test):,.0f}",
            cell(r["source"]),
        )
    return table


def models_payload(models) -> list:
    out = []
    for m in models:
        e = m.estimator
        out.append(
            {
                "model": m.model_id,
                "network": m.network,
                "deployment": m.deployment,
                "phase": m.phase,
                "stack": m.stack,
                "variant": m.variant,
                "system": m.system,
                "basis": m.basis,
                "systems": m.systems,
                "thin": m.thin,
                "evidence": m.evidence(),
                "interval_source": e.interval_source_,
                "form": e.form_,
                "coefficients": dict(zip(e.terms_, map(float, e.coef_), strict=True)),
                "cv_mape": e.cv_mape_,
                "cv_kind": e.cv_kind_,
                "cv_by_form": e.cv_,
                "interval_half_width": e.half_width_,
                "runs": e.n_runs_,
                "points": e.n_points_,
                "batch_range": list(e.batch_range_),
                "iteration_range": list(e.iteration_range_),
            }
        )
    return out


def models_table(payload: list) -> Table:
    table = Table(
        title=f"{len(payload)} end-to-end models (CV MAPE: error on held-out runs' totals)"
    )
    for col in ("network", "deployment", "phase", "stack", "form", "runs", "CV MAPE %", "±90 %"):
        table.add_column(col, overflow="fold")
    for m in payload:
        cv = "n/a" if m["cv_mape"] is None else f"{m['cv_mape']:.2f}"
        table.add_row(
            cell(m["network"]),
            cell(m["deployment"]),
            cell(m["phase"]),
            cell((m["stack"] or "-") + (f" [{m['variant']}]" if m.get("variant") else "")
                 + (f" @{m['system']}" if m.get("system") else "")
                 + (" (thin)" if m.get("thin") else "")),
            cell(m["form"]),
            str(m["runs"]),
            f"{cv} ({m['cv_kind']})",
            f"{100 * m['interval_half_width']:.1f} %",
        )
    return table


def human_seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def forecast_text(result: dict) -> Text:
    """The forecast of ``jobcast predict``: one line, then ``chosen:`` and warnings, if any."""
    text = Text(
        f"{human_seconds(result['seconds'])} ({result['seconds']:,.1f} s), "
        f"90 % interval {result['low']:,.1f}–{result['high']:,.1f} s "
        f"[{result['route']}: {result['model']}]"
    )
    if result.get("chosen"):
        text.append(f"\nchosen: {result['chosen']}")
    phases = result.get("phases")
    if isinstance(phases, dict) and phases:
        shown = ", ".join(f"{k} {human_seconds(v)}" for k, v in phases.items()
                          if isinstance(v, int | float))
        text.append(f"\nphases: {shown}")
    warnings = list(result.get("warnings", []))
    if result.get("extrapolated"):
        warnings.insert(0, "outside the fitted batch-size or iteration range")
    for warning in warnings:
        text.append("\n").append("warning:", "yellow").append(f" {warning}")
    return text


def forecasts_table(results: list) -> Table:
    table = Table(title="forecasts (seconds, 90 % interval)")
    for col in ("network", "deployment", "batch", "length", "seconds", "low", "high", "route"):
        table.add_column(col, overflow="fold")
    for r in results:
        job = r["job"]
        common = [
            cell(job.get("network")),
            cell(job.get("deployment") or job.get("device") or "-"),
            str(job.get("batch_size")),
            f"{job['iterations']:,}"
            if job.get("iterations") is not None
            else f"{job['epochs']:g} epochs"
            if job.get("epochs") is not None
            else "-",
        ]
        if "error" in r:
            table.add_row(*common, cell("error", "red"), "", "", cell(r["error"]))
            continue
        flag = " (extrapolated)" if r.get("extrapolated") else ""
        table.add_row(
            *common,
            f"{r['seconds']:,.1f}",
            f"{r['low']:,.1f}",
            f"{r['high']:,.1f}",
            cell(r["route"] + flag),
        )
    return table


def _money(value) -> str:
    return "-" if value is None else f"${value:,.2f}"


def compare_table(result: dict) -> Table:
    """One row per candidate: ranks, route, the precision of the model used, time, cost and
    why that model answers (``chosen``)."""
    table = Table(title=cell(
        f"{result['network']}, batch {result['batch_size']}, {result['epochs']} epochs of "
        f"{result['dataset_size']:,} samples ({result['dataset']}); prices: {result['prices']}"
    ))
    for col in ("time rank", "cost rank", "candidate", "route", "precision", "time",
                "90 % interval", "cost", "chosen"):
        table.add_column(col, overflow="fold")
    for r in result["candidates"]:
        if "error" in r:
            table.add_row("-", "-", cell(r["candidate"]), cell("error", "red"), "", "", "",
                          "", cell(r["error"]))
            continue
        flag = " (extrapolated)" if r["extrapolated"] else ""
        table.add_row(
            str(r["rank_time"]),
            str(r.get("rank_cost", "-")),
            cell(r["candidate"]),
            cell(r["route"] + flag),
            cell(r.get("precision", "-")),
            human_seconds(r["seconds"]),
            f"{human_seconds(r['low'])} – {human_seconds(r['high'])}",
            f"{_money(r['usd'])} ({_money(r['usd_low'])} – {_money(r['usd_high'])})"
            if r["usd"] is not None
            else "no price",
            cell(r.get("chosen", "-")),
        )
    return table
