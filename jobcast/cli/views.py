"""JSON payloads and rich tables for the commands' output.

Rule: data (names, paths, model ids, variants, reasons) goes into tables and text as
:class:`~rich.text.Text`, never as Rich markup: ``[red]x`` or ``a[/b]`` prints as written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from jobcast.service.engine.forecast import percent_text

if TYPE_CHECKING:  # the tables load when one is drawn; the store with a command that has one
    from rich.console import Group
    from rich.table import Table

    from jobcast.service.features.stores import Store


def cell(value: object, style: str = "") -> Text:
    """``value`` as table text, never read as markup (``None`` prints as ``None``)."""
    return Text(str(value), style=style)


def runs_payload(store: Store, network: str | None = None, deployment: str | None = None) -> list:
    """Runs with their segments: the stable JSON of ``jobcast runs --json``."""
    from jobcast.service.features.stores import run_clocks

    stored = store.runs(network, deployment)
    clocks = run_clocks(store, stored)
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
                "system": _system(r.meta),
                "stack": r.stack,  # the software stack (e.g. "tensorflow 2.15")
                "framework": r.stack,  # its old key, kept one release
                "batch_size": r.batch_size,
                "start_time": r.start_time,
                # the user's clock: run start to stop (a scheduler's record), and how it ended
                "wall_seconds": clocks[r.id][0],
                "state": clocks[r.id][1],
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


def _system(meta: dict) -> str | None:
    """The run's system as ``predict --system`` takes it (None: unknown or not text)."""
    system = meta.get("system")
    return " ".join(system.split()) or None if isinstance(system, str) else None


def runs_table(payload: list) -> Table:
    """``jobcast runs`` as a table, from :func:`runs_payload`."""
    from rich.table import Table
    table = Table(title=f"{len(payload)} runs")
    for col in ("network", "system", "deployment", "batch", "wall s", "state", "train s",
                "train it", "test s", "source"):
        table.add_column(col, overflow="fold")
    for r in payload:
        train = [p for p in r["phases"] if p["phase"] == "train"]
        test = [p for p in r["phases"] if p["phase"] == "test"]
        table.add_row(
            cell(r["network"]),
            cell(r.get("system") or "-"),
            cell(r["deployment"]),
            str(r["batch_size"]),
            "-" if r.get("wall_seconds") is None else f"{r['wall_seconds']:,.0f}",
            cell(r.get("state") or "-"),
            f"{sum(p['seconds'] for p in train):,.0f}",
            f"{sum(p['iterations'] for p in train):,.0f}",
            f"{sum(p['seconds'] for p in test):,.0f}",
            cell(r["source"]),
        )
    return table


def runs_empty_hint(url: str, network: str | None = None,
                    deployment: str | None = None) -> list[str]:
    """What ``jobcast runs`` says when it finds no run: where it looked (password hidden),
    where the demo's data is and how to add runs."""
    from pathlib import Path

    from jobcast.cli.store import shown

    which = " ".join(f"{k} {v}" for k, v in (("of network", network), ("on", deployment)) if v)
    lines = [f"0 runs{' ' + which if which else ''} in {shown(url)}"]
    if which:
        return lines + ["`jobcast runs` without filters lists every run of this store"]
    demo = Path("demo-out") / "jobcast.db"
    where = f"sqlite:///{demo.resolve()}" if demo.is_file() else "sqlite:///demo-out/jobcast.db"
    return lines + [
        f"the demo's runs: `jobcast runs --store {where}` (`make demo` or `jobcast demo` "
        "writes demo-out/jobcast.db in the folder it runs in)",
        "add your own: `jobcast ingest LOGS...` (files or folders; `--store` to pick the "
        "store, `jobcast info` shows where the default one lives)",
    ]


def models_payload(models) -> list:
    """Fitted end-to-end models: the JSON of ``jobcast fit --json`` (one entry a model)."""
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
    """``jobcast fit`` as a table, from :func:`models_payload`."""
    from rich.table import Table
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


UNITS = (("ms", 1e-3), ("s", 1.0), ("min", 60.0), ("h", 3600.0), ("days", 86400.0))


def unit_for(seconds: float) -> tuple[str, float]:
    """The unit a duration reads best in: ms below 1 s, s below 2 min, min below 2 h, h
    below 2 days, else days."""
    if seconds < 1:
        return UNITS[0]
    if seconds < 120:
        return UNITS[1]
    if seconds < 7200:
        return UNITS[2]
    return UNITS[3] if seconds < 172800 else UNITS[4]


def _number(value: float) -> str:
    """Whole above 100 (thousands separated), one decimal from 1, else two significant
    figures: ``1,250``, ``38.5``, ``0.84``."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def human_seconds(seconds: float) -> str:
    """A duration in the unit it reads best in (:func:`unit_for`)."""
    name, size = unit_for(seconds)
    return f"{_number(seconds / size)} {name}"


def human_span(seconds: float, low: float, high: float) -> str:
    """``38.5 min (36.4–42.8 min)``: the value and its interval in one unit, the value's."""
    name, size = unit_for(seconds)
    return (f"{_number(seconds / size)} {name} "
            f"({_number(low / size)}–{_number(high / size)} {name})")


def _resolved_line(result: dict) -> str:
    """``resnet50 on 8 x A100 SXM4 40GB (asked "A100"), batch 256, fp32 as TF32 ...``."""
    s, job = result["summary"], result["job"]
    gpu = f"{s['devices']} x {s['gpu']}" if (s.get("devices") or 1) > 1 else str(s["gpu"])
    asked = f' (asked "{s["asked_as"]}")' if s.get("asked_as") not in (None, "", s["gpu"]) \
        else ""
    prec = s.get("precision") or {}
    if prec.get("assumed"):
        precision = f"{prec.get('asked')}: {prec['assumed']}"
    elif prec.get("history"):
        precision = (f"as its history ran ({prec['history']})" if not prec.get("asked")
                     else f"{prec['asked']} (history: {prec['history']})")
    else:
        precision = str(prec.get("asked") or "unstated")
    length = (f"{job['epochs']:g} epochs of {job['dataset_size']:,} samples"
              if job.get("epochs") is not None and job.get("dataset_size")
              else f"{job['iterations']:,} steps" if job.get("iterations") is not None else "")
    what = {"job": "whole job", "train": "training phase", "test": "evaluation phase"}
    size = (f"batch {job['batch_size']}" if job.get("batch_size") is not None
            else "batch as its history ran")
    length = length or "as long as its history's runs"
    return (f"{job['network']} on {gpu}{asked}, {size}, {length}, "
            f"{what.get(s['phase'], s['phase'])}; precision {precision}")


def forecast_text(result: dict) -> Text:
    """The forecast of ``jobcast predict``: what it resolved to; per step, per epoch and for
    the whole job, each with its 90 % interval in one unit; the phases and their sources;
    the route and why; warnings."""
    s = result["summary"]
    text = Text(_resolved_line(result))
    rows = [("per step", s.get("step")), ("per epoch", s.get("epoch")),
            ("whole job" if s["phase"] == "job" else f"{s['phase']} phase", s["job"])]
    for label, span in rows:
        if span:
            text.append(f"\n  {label:<16} "
                        f"{human_span(span['seconds'], span['low'], span['high'])}")
    text.append("\n  (90 % intervals; per epoch: the job over its epochs, evaluation included)"
                if s.get("epoch") and s["phase"] == "job" else "\n  (90 % intervals)")
    names = {"train": "training", "test": "evaluation", "gaps": "gaps"}
    for part in result.get("breakdown", []):
        if part["phase"] not in names or (part["seconds"] <= 0 and part["phase"] == "gaps"):
            continue
        value = human_seconds(part["seconds"]) if part["seconds"] > 0 else "none"
        text.append(f"\n  {names[part['phase']]:<16} {value:<10} from {part['source']}")
    init = (result.get("phases") or {}).get("init")
    if isinstance(init, int | float):
        text.append(f"\n  start-up before the run (not in the total): {human_seconds(init)}")
    err = s.get("expected_error_percent")
    text.append(f"\nroute: {s['route']} ({s.get('candidate') or '-'}), model {result['model']}"
                + (f", backtest mean error {percent_text(err)} %" if isinstance(err, int | float)
                   else "")
                + f"\nwhy: {s['why']}")
    if s.get("memory"):
        text.append(f"\nmemory: {s['memory']}")
    scaling = result.get("scaling")
    if isinstance(scaling, dict) and scaling.get("strategy"):
        text.append(f"\ndata parallel: {scaling['strategy']} ({scaling.get('mechanism', '')}; "
                    f"{scaling.get('chosen', '')})")
    for assumed in result.get("assumptions", []):
        text.append(f"\nassumed: {assumed}")
    warnings = list(result.get("warnings", []))
    if result.get("extrapolated"):
        warnings.insert(0, "outside the fitted batch-size or iteration range")
    for warning in warnings:
        text.append("\n").append("warning:", "yellow").append(f" {warning}")
    return text


def forecasts_table(results: list) -> Table:
    """One row per job: what was asked, the whole answer with its 90 % interval in one unit,
    and the route (with the candidate that answered)."""
    from rich.table import Table
    table = Table(title="forecasts (90 % interval)")
    for col in ("network", "deployment", "batch", "length", "time", "route"):
        table.add_column(col, overflow="fold")
    for r in results:
        job = r["job"]
        common: list[Text | str] = [
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
            table.add_row(*common, cell("error", "red"), cell(r["error"]))
            continue
        flag = " (extrapolated)" if r.get("extrapolated") else ""
        kind = r.get("candidate")
        table.add_row(*common, human_span(r["seconds"], r["low"], r["high"]),
                      cell(r["route"] + (f" ({kind})" if kind else "") + flag))
    return table


def _money(value) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _fits_cell(memory: dict) -> Text:
    """``yes 3.9/16`` or ``NO 22.9/16`` (GiB per GPU / GPU memory), ``?`` where not estimated."""
    if not memory:
        return cell("?")
    used = f"{memory['total_gib']:.1f}/{memory['gpu_memory_gib']:.0f}"
    return cell(f"yes {used}") if memory["fits"] else cell(f"NO {used}", "red")


def _cost_text(r: dict) -> str:
    if r["usd"] is None:
        return "no price"
    whole = "${:,.0f}".format
    return f"{_money(r['usd'])} ({whole(r['usd_low'])}–{whole(r['usd_high'])})"


def _compare_rows(table: Table, rows: list, fits: bool) -> None:
    """The rows of one precision's ranking (answered by time, then failed ones); an
    unranked row shows ``-`` and says why in its notes."""
    for r in rows:
        where = cell(r["candidate"] + (" (history)" if r.get("source") == "history" else ""))
        if "error" in r:
            table.add_row("-", "-", where, cell("failed", "red"), "", "", "",
                          *([""] if fits else []), cell("see below", "red"))
            continue
        eff = r.get("scaling_efficiency")
        table.add_row(
            str(r.get("rank_time", "-")), str(r.get("rank_cost", "-")), where, cell(r["route"]),
            human_span(r["seconds"], r["low"], r["high"]), _cost_text(r),
            f"{eff:.0%}" if eff is not None else "",
            *([_fits_cell(r.get("memory") or {})] if fits else []),
            cell(",".join(str(i) for i in r.get("notes", []))),
        )


def compare_table(result: dict) -> Group:
    """``jobcast compare``: a heading, one table per precision (ranks, rows, route, time and
    cost each with its 90 % interval in one unit, scaling efficiency, whether it fits in GPU
    memory, note ids: the GPU each name resolved to is one), then every shared note once and
    each failed row's reason."""
    from rich.console import Group
    from rich.table import Table
    heading = cell(
        f"{result['network']}, global batch {result['batch_size']}, {result['epochs']:g} epochs "
        f"of {result['dataset_size']:,} samples ({result['dataset']}); prices: "
        f"{result['prices']}")
    parts: list = [heading]
    fits = any("memory" in r for r in result["candidates"])
    for precision in result.get("precisions") or sorted({r["precision"]
                                                         for r in result["candidates"]}):
        rows = [r for r in result["candidates"] if r.get("precision") == precision]
        title = (f"precision {precision} (as the framework runs it), ranked by time"
                 if precision != "unstated" else
                 "history that states no precision (--include-history): ranked on its own")
        table = Table(title=cell(title))
        for col in ("rank", "$ rank", "GPUs", "route", "time (90 % interval)",
                    "cost (90 % interval)", "scaling", *(["fits (GiB)"] if fits else []),
                    "notes"):
            table.add_column(col, overflow="fold", no_wrap=col != "notes")
        _compare_rows(table, rows, fits)
        parts.append(table)
    notes = result.get("notes") or []
    if notes:
        parts.append(Text("notes:"))
        parts += [cell(f"[{n['id']}] {n['text']}") for n in notes]
    failed = [r for r in result["candidates"] if "error" in r]
    if failed:
        parts.append(Text("failed:", style="red"))
        parts += [cell(f"{r['candidate']} ({r['precision']}): {r['error']}") for r in failed]
    return Group(*parts)
