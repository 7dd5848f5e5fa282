"""Prometheus traces versus logs of the same jobs; ETA error over a live job's life.

    .venv/bin/python benchmarks/prometheus_agreement.py [--out benchmarks/results/...json]

Real tiny Keras jobs on this machine's CPU, each instrumented with BOTH the JSON-lines logger
and the Prometheus exporter, scraped live by a real Prometheus server (``tests/prom_server.py``
starts it; Debian ``prometheus`` is installed if missing). Then:

1. Stored data: each job and phase's total steps and seconds, from Prometheus and from the
   log (the two callbacks read the clock separately, so microseconds to milliseconds apart).
2. Forecasts: leave-one-job-out. For each job, models are fitted from the other jobs'
   Prometheus traces and, separately, from their logs; both forecast the held-out job's
   train and validation time. Reported: each source's error against the job's actual time
   and how far the two forecasts are apart.
3. ETA over a live job's life: one more job, longer, scraped live; ``jobcast.service.features.eta``
(models
   fitted from the Prometheus history) is asked every second; the error of its predicted
   finish, as a share of the job's duration, by progress, and how often the 90 % interval
   held the actual finish.

Timing on a shared 2-core CPU is noisy (docs: NOTES); the comparison between the two sources
is not, because both observe the same runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import lib  # noqa: F401  (first: sys.path holds the repository and tests/)
from lib import REPO as ROOT
from prom_server import (
    PromServer,
    ensure_prometheus,
    free_port,
    run_keras_jobs,
    start_keras_jobs,
)

from ingest.pipeline import ingest_paths
from ingest.prometheus import PrometheusClient, PrometheusError, ingest_prometheus
from ingest.store import Store
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest
from jobcast.service.features.eta import estimate_eta, fetch_job
from models.e2e import fit_store

BINS = [(0.0, 0.1), (0.1, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 0.9), (0.9, 1.0)]


def phase_totals(store: Store) -> dict[tuple[str, str], tuple[float, float]]:
    ids = {r.id: (r.meta.get("job_id") or r.meta.get("run_id")) for r in store.runs()}
    out: dict[tuple[str, str], list[float]] = {}
    for seg in store.segments():
        t = out.setdefault((ids[seg["run_id"]], seg["phase"]), [0.0, 0.0])
        t[0] += seg["iterations"]
        t[1] += seg["seconds"]
    return {k: (v[0], v[1]) for k, v in out.items()}


def copy_store(src: Store, dst: Store, strip_points: bool) -> Store:
    """Copy every run of ``src`` into ``dst``; ``strip_points`` keeps segment totals only."""
    from ingest.events import ParsedRun, Segment

    segs: dict[int, list[dict]] = {}
    for seg in src.segments():
        segs.setdefault(seg["run_id"], []).append(seg)
    for run in src.runs():
        parsed = ParsedRun(
            format=run.format, network=run.network, framework=run.framework,
            batch_size=run.batch_size, start_time=run.start_time,
            meta={**run.meta, "deployment_key": run.deployment},
            segments=[Segment(phase=g["phase"], iterations=g["iterations"],
                              seconds=g["seconds"], batch_size=g["batch_size"],
                              start_time=g["start_time"],
                              points=() if strip_points else tuple(map(tuple, g["points"])))
                      for g in segs.get(run.id, [])])
        dst.add_file(content_hash=f"{run.content_hash}-{strip_points}", source=run.source,
                     fmt=run.format, size=0, parsed=[parsed])
    return dst


def forecast(store: Store, batch: int, steps: float, phase: str) -> float | None:
    req = JobRequest(network="tinycnn", deployment="1x cpu", batch_size=batch,
                     iterations=int(steps), phase=phase)
    out = Forecaster(store).forecast(req)
    return out.seconds if out.ok else None


def eta_errors(client, job_id: str, forecaster, start: float, end: float,
               instants: int = 19) -> list[dict]:
    """Replay: ``jobcast eta`` as it would have answered at evenly spaced past instants."""
    rows = []
    for k in range(1, instants + 1):
        now = start + (end - start) * k / (instants + 1)
        try:
            trace = fetch_job(client, job_id, now=now)
        except PrometheusError:
            continue  # not scraped yet at that instant
        eta = estimate_eta(trace, forecaster, now=now)
        if eta["status"] != "running":
            continue
        rows.append({"job": job_id, "now": now, "fraction": eta["phases"]["train"]["fraction"],
                     "error_share": (eta["finish_time"] - end) / (end - start),
                     "inside": eta["finish_low"] <= end <= eta["finish_high"]})
    return rows


def by_progress(rows: list[dict], title: str) -> list[dict]:
    print(f"\n{title}\n")
    print("| train progress | estimates | median abs error (% of duration) | max | "
          "interval held |")
    print("|---|---|---|---|---|")
    out = []
    for lo, hi in BINS:
        sel = [e for e in rows if lo <= e["fraction"] < hi or (hi == 1.0 and e["fraction"] == 1)]
        if not sel:
            continue
        errs = [abs(e["error_share"]) for e in sel]
        row = {"from": lo, "to": hi, "n": len(sel), "median_abs": statistics.median(errs),
               "max_abs": max(errs), "inside": sum(e["inside"] for e in sel) / len(sel)}
        out.append(row)
        print(f"| {lo:.0%}-{hi:.0%} | {len(sel)} | {100 * row['median_abs']:.1f} | "
              f"{100 * row['max_abs']:.1f} | {100 * row['inside']:.0f} % |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="16,24,32,48,64")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--train", type=int, default=6144)
    ap.add_argument("--valid", type=int, default=1536)
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--scrape", default="1s", help="Prometheus scrape interval")
    ap.add_argument("--live-batch", type=int, default=32)
    ap.add_argument("--live-epochs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/prometheus_agreement"
                                                       ".json")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    keras_kw = {"train": args.train, "valid": args.valid, "image": args.image}
    prom, _ = ensure_prometheus()
    work = Path(tempfile.mkdtemp(prefix="jobcast-prom-bench-"))
    port = free_port()
    results: dict = {"config": {**vars(args), "out": str(args.out)}, "machine": "shared 2-core CPU"}
    with PromServer(prom, work / "prom", targets=[f"127.0.0.1:{port}"],
                    scrape_interval=args.scrape) as srv:
        began = time.time()
        summary = run_keras_jobs(work / "history", batches, epochs=args.epochs,
                                 serve_port=port, interval=1.0, timeout=1800, **keras_kw)
        jobs = summary["jobs"]
        time.sleep(2)
        client = PrometheusClient(srv.url, timeout=30)
        prom_store = Store(f"sqlite:///{work / 'prom.db'}")
        report = ingest_prometheus(prom_store, client, began - 5, time.time())
        log_store = Store(f"sqlite:///{work / 'logs.db'}")
        ingest_paths(log_store, [j["jsonl"] for j in jobs])
        print(f"ingested {len(report.added)} jobs from Prometheus "
              f"({report.samples} samples, {report.requests} requests), "
              f"{len(jobs)} logs")

        # 1. stored data
        p_tot, l_tot = phase_totals(prom_store), phase_totals(log_store)
        diffs = []
        for key, (iters, secs) in sorted(p_tot.items()):
            li, ls = l_tot[key]
            diffs.append({"job": key[0], "phase": key[1], "steps_prom": iters, "steps_log": li,
                          "seconds_prom": secs, "seconds_log": ls,
                          "rel_diff": (secs - ls) / ls})
        results["stored"] = diffs
        print("\n## Stored phase totals, Prometheus vs log\n")
        print("| job | phase | steps (prom / log) | seconds prom | seconds log | diff |")
        print("|---|---|---|---|---|---|")
        for d in diffs:
            print(f"| {d['job']} | {d['phase']} | {d['steps_prom']:.0f} / {d['steps_log']:.0f} "
                  f"| {d['seconds_prom']:.3f} | {d['seconds_log']:.3f} | "
                  f"{100 * d['rel_diff']:+.2f} % |")

        # 2. leave-one-job-out forecasts from each source (all points, and totals only)
        truth = dict(l_tot)
        rows = []
        replay = []
        for job in jobs:
            jid = job["job_id"]
            fold_p = Store(f"sqlite:///{work / f'p-{jid}.db'}")
            ingest_prometheus(fold_p, client, began - 5, time.time(),
                              matchers=[("job_id", "!=", jid)])
            fold_l = Store(f"sqlite:///{work / f'l-{jid}.db'}")
            ingest_paths(fold_l, [j["jsonl"] for j in jobs if j["job_id"] != jid])
            tot_p = copy_store(fold_p, Store(f"sqlite:///{work / f'tp-{jid}.db'}"), True)
            tot_l = copy_store(fold_l, Store(f"sqlite:///{work / f'tl-{jid}.db'}"), True)
            for st in (fold_p, fold_l, tot_p, tot_l):
                fit_store(st)
            for phase in ("train", "test"):
                steps, actual = truth[(jid, phase)]
                got = [forecast(st, job["batch_size"], steps, phase)
                       for st in (fold_p, fold_l, tot_p, tot_l)]
                if None in got:
                    continue
                fp, fl, tp, tl = got
                rows.append({"job": jid, "phase": phase, "batch": job["batch_size"],
                             "actual": actual, "prom": fp, "log": fl,
                             "err_prom": (fp - actual) / actual, "err_log": (fl - actual) / actual,
                             "prom_vs_log": (fp - fl) / fl, "totals_prom_vs_log": (tp - tl) / tl})
            replay += eta_errors(client, jid, Forecaster(fold_p), job["start"], job["job_end"])
        results["leave_one_out"] = rows
        print("\n## Leave-one-job-out forecasts: models from Prometheus vs from logs\n")
        print("| job | phase | actual s | from prom | from logs | err prom | err logs "
              "| prom vs logs | same, totals only |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['job']} | {r['phase']} | {r['actual']:.2f} | {r['prom']:.2f} | "
                  f"{r['log']:.2f} | {100 * r['err_prom']:+.1f} % | {100 * r['err_log']:+.1f} % "
                  f"| {100 * r['prom_vs_log']:+.2f} % | {100 * r['totals_prom_vs_log']:+.2f} % |")
        summary_rows = {}
        for phase in ("train", "test"):
            sel = [r for r in rows if r["phase"] == phase]
            if sel:
                summary_rows[phase] = {
                    "mape_prom": statistics.mean(abs(r["err_prom"]) for r in sel),
                    "mape_log": statistics.mean(abs(r["err_log"]) for r in sel),
                    "median_abs_prom_vs_log": statistics.median(abs(r["prom_vs_log"])
                                                                for r in sel),
                    "max_abs_prom_vs_log": max(abs(r["prom_vs_log"]) for r in sel),
                    "max_abs_totals_prom_vs_log": max(abs(r["totals_prom_vs_log"])
                                                      for r in sel),
                }
        results["leave_one_out_summary"] = summary_rows
        print()
        for phase, sm in summary_rows.items():
            print(f"{phase}: MAPE from prom {100 * sm['mape_prom']:.1f} %, from logs "
                  f"{100 * sm['mape_log']:.1f} %; forecasts apart by "
                  f"{100 * sm['median_abs_prom_vs_log']:.2f} % (median), "
                  f"{100 * sm['max_abs_prom_vs_log']:.2f} % at most; fitted on segment totals "
                  f"only: {100 * sm['max_abs_totals_prom_vs_log']:.2f} % at most")
        results["replay"] = {"estimates": replay,
                             "by_progress": by_progress(replay, "## ETA replayed over each "
                                                        "history job's life (leave-one-out "
                                                        "models)")}

        # 3. ETA over a live job's life (models from all of the Prometheus history)
        fit_store(prom_store)
        forecaster = Forecaster(prom_store)
        child = start_keras_jobs(work / "live", [args.live_batch], epochs=args.live_epochs,
                                 serve_port=port, job_prefix="live", interval=1.0, **keras_kw)
        live_id = f"live-1-bs{args.live_batch}"
        estimates = []
        while child.poll() is None:
            time.sleep(1.0)
            try:
                trace = fetch_job(client, live_id)
            except PrometheusError:
                continue
            now = time.time()
            eta = estimate_eta(trace, forecaster, now=now)
            if eta["status"] == "running":
                estimates.append({"now": now, "fraction": eta["phases"]["train"]["fraction"],
                                  "finish": eta["finish_time"], "low": eta["finish_low"],
                                  "high": eta["finish_high"], "route": eta["route"]})
        if child.returncode != 0:
            raise SystemExit(f"live job failed: {child.stderr.read()[-2000:]}")
        live = json.loads((work / "live" / "summary.json").read_text())["jobs"][0]
        end, start = live["job_end"], live["start"]
        duration = end - start
        for e in estimates:
            e["error_share"] = (e["finish"] - end) / duration
            e["inside"] = e["low"] <= end <= e["high"]
            e["time_share"] = (e["now"] - start) / duration
        results["live"] = {"job": live_id, "duration_s": duration, "estimates": estimates}
        binned = by_progress(estimates, f"## ETA over a live job's life ({live_id}, "
                             f"{duration:.1f} s, {len(estimates)} estimates, scrape "
                             f"{args.scrape})")
        results["live"]["by_progress"] = binned
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
