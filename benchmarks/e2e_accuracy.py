r"""End-to-end accuracy asked as a user asks, on runs the forecaster did not see (issue 22).

Protocol (the same path as ``jobcast predict --jobs``: ``Forecaster(store).forecast`` of a
``JobRequest`` built from a CSV-like row):

* **History** = each system's first ``--history`` result files (``result_N`` order within a
  round; start time across rounds); every later, distinct run of the system is forecast
  (byte-identical files re-filed in later rounds are one run: the store keeps one copy).
* Protocols: ``per-round`` (a system is a submission of one round: one history store per
  round) and ``across-rounds`` (a system is the submitter's system name over all rounds: one
  history store, later rounds forecast from earlier ones).
* The history store is what a user would have: its files ingested and ``jobcast fit``
  (``jobcast.service.fitting.fit_store_all``: models, run summaries and the selector fitted
  on the history's own backtest). ``prior: off`` judges candidates by that backtest alone;
  ``prior: on`` combines it with the shipped prior, which was fitted on the ResNet corpus
  itself (in-sample for the prior: reported apart); ``prior: held-out`` combines it with a
  prior fitted on the reference backtest (``--prior-rows``, ``benchmarks/selector_prior.py``)
  without the held-out data: per round, without that round's runs; across rounds, without
  the systems of the half being forecast (two halves by system name). ``held-out`` is the
  honest figure of what the shipped design does on data it did not see.
* **Asked as a user asks**: network, the deployment as the system description names the
  GPUs (``"8x NVIDIA A100-SXM4-80GB"``, ``"2x8 ..."`` for nodes), global batch size, the
  run's training iterations, the target phase, and the system's name (``named``) or not
  (``anon``). Never the stack, the variant or anything else read from the held-out run.
* Targets: ``train`` (the run's training seconds, ``--phase train``) and ``job`` (MLPerf's
  ``run_start`` -> ``run_stop``, the default whole-job forecast). Each is asked as of the
  held-out run's start (``Forecaster.forecast(now=...)``), so the history's age is what the
  user had then, not the years since.
* **Naive rule**: the system's mean seconds per training iteration of its history times
  the run's iterations (for ``job``: wall seconds per training iteration).

    .venv/bin/jobcast ingest /work/corpora/mlperf --store sqlite:////tmp/corpus.db
    nice .venv/bin/python benchmarks/e2e_accuracy.py --corpus-store sqlite:////tmp/corpus.db \
        [--protocol per-round,across-rounds] [--prior off,on] [--out docs/e2e-accuracy.md]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.service.backtest import fit_selector
from jobcast.service.fitting import fit_store_all
from jobcast.service.forecaster import Forecaster
from jobcast.service.request import JobRequest
from models.selector import RELATION_FIELDS, BacktestSelector

ROUND = r"/(v\d+\.\d+)/"


def corpus_runs(url: str) -> pd.DataFrame:
    """One row per stored run: source, system, deployment as named, batch, totals, wall."""
    engine = sa.create_engine(url)
    runs = pd.read_sql(
        "select r.id, f.source, r.network, r.deployment, r.accelerator, "
        "r.accelerators_per_node as per_node, r.nodes, r.batch_size, r.start_time, r.meta "
        "from runs r join files f on r.file_id = f.id", engine)
    segs = pd.read_sql("select run_id, phase, iterations, seconds from segments", engine)
    tot = segs.groupby(["run_id", "phase"])[["iterations", "seconds"]].sum().unstack(fill_value=0)
    tot.columns = [f"{a}_{b}" for a, b in tot.columns]
    runs = runs.join(tot, on="id")
    meta = runs.pop("meta").map(json.loads)
    runs["system"] = meta.map(lambda m: " ".join(str(m.get("system") or "").split()))
    runs["wall"] = meta.map(lambda m: (m["run_stop"] - m["run_start"])
                            if m.get("run_stop") and m.get("run_start") else np.nan)
    runs["round"] = runs["source"].str.extract(ROUND, expand=False).fillna("")
    runs["n"] = runs["source"].str.extract(r"result_(\d+)", expand=False).astype(float)
    return runs[(runs["system"] != "") & (runs.get("iterations_train", 0) > 0)]


def deployment_text(r: pd.Series) -> str:
    per, nodes = int(r["per_node"] or 1), int(r["nodes"] or 1)
    name = r["accelerator"] or r["deployment"]
    return f"{nodes}x{per} {name}" if nodes > 1 else f"{per}x {name}"


def split(runs: pd.DataFrame, protocol: str, history: int):
    runs = runs.copy()
    if protocol == "per-round":
        runs["sys"], runs["order"] = runs["round"] + "|" + runs["system"], runs["n"]
    else:
        runs["sys"], runs["order"] = runs["system"], runs["start_time"].fillna(0)
    runs = runs.sort_values(["sys", "order", "source"])
    runs["rank"] = runs.groupby("sys").cumcount()
    runs = runs[runs.groupby("sys")["id"].transform("size") > history]
    return runs[runs["rank"] < history], runs[runs["rank"] >= history]


def history_store(path: Path, sources: list[str]) -> tuple[Store, float]:
    store = Store(f"sqlite:///{path}")
    started = time.perf_counter()
    ingest_paths(store, sources, workers=2)
    fit_store_all(store)
    return store, time.perf_counter() - started


def forecast_rows(fc: Forecaster, test: pd.DataFrame, hist: pd.DataFrame) -> list[dict]:
    per_it = hist.assign(rate=hist["seconds_train"] / hist["iterations_train"],
                         wrate=hist["wall"] / hist["iterations_train"])
    rate = per_it.groupby("sys")[["rate", "wrate"]].mean()
    rows = []
    for _, r in test.iterrows():
        base = {"network": r["network"], "deployment": deployment_text(r),
                "batch_size": int(r["batch_size"]),
                "iterations": int(round(r["iterations_train"]))}
        for target, actual, naive in (
                ("train", r["seconds_train"], rate.at[r["sys"], "rate"] * r["iterations_train"]),
                ("job", r["wall"], rate.at[r["sys"], "wrate"] * r["iterations_train"])):
            if not (actual > 0 and np.isfinite(naive)):
                continue
            for ask, system in (("named", r["system"]), ("anon", None)):
                out = fc.forecast(JobRequest.from_mapping({**base, "phase": target,
                                                           "system": system}),
                                  now=r["start_time"] if r["start_time"] > 0 else None)
                row = {"system": r["sys"], "round": r["round"], "target": target, "ask": ask,
                       "actual": actual, "naive": naive, "source": r["source"]}
                if out.ok:
                    row |= {"forecast": out.seconds, "low": out.low, "high": out.high,
                            "candidate": out.details.get("candidate", str(out.route))}
                else:
                    row |= {"forecast": np.nan, "error": out.error}
                rows.append(row)
    return rows


def half(system: str) -> int:
    """The half a system falls in (a stable hash of its name)."""
    return int(hashlib.sha1(system.encode()).hexdigest(), 16) % 2


def held_out_prior(rows: pd.DataFrame, keep) -> BacktestSelector:
    """A prior fitted on the reference backtest rows ``keep`` selects."""
    return fit_selector(rows[keep(rows)])


def evaluate(runs: pd.DataFrame, protocol: str, history: int, prior: str, work: Path,
             prior_rows: pd.DataFrame | None) -> pd.DataFrame:
    hist, test = split(runs, protocol, history)
    groups = sorted(hist["round"].unique()) if protocol == "per-round" else ["all"]
    rows = []
    for g in groups:
        h = hist if g == "all" else hist[hist["round"] == g]
        t = test if g == "all" else test[test["round"] == g]
        db = work / f"{protocol}-{g}.db"
        if db.exists():
            store, took = Store(f"sqlite:///{db}"), 0.0
        else:
            store, took = history_store(db, list(h["source"]))
        print(f"  {protocol} {g}: {len(h)} history runs, {len(t)} held out (fit {took:.0f} s)",
              flush=True)
        if prior != "held-out":
            rows += forecast_rows(Forecaster(store, prior=prior == "on"), t, h)
            continue
        if prior_rows is None:
            raise SystemExit("--prior held-out needs --prior-rows")
        if protocol == "per-round":
            sel = held_out_prior(prior_rows, lambda r, g=g: r["round"] != g)
            rows += forecast_rows(Forecaster(store, prior=sel), t, h)
            continue
        for k in (0, 1):
            sel = held_out_prior(prior_rows, lambda r, k=k: r["target_system"].map(half) != k)
            part = t[t["system"].map(half) == k]
            rows += forecast_rows(Forecaster(store, prior=sel), part, h)
    return pd.DataFrame(rows)


def reference_rows(path: Path, store_url: str) -> pd.DataFrame:
    """Backtest rows of ``benchmarks/selector_prior.py`` with each target's round."""
    rows = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for col in RELATION_FIELDS:
        rows[col] = rows[col].fillna("").astype(str)
    sources = pd.read_sql("select r.id, f.source from runs r join files f on r.file_id = f.id",
                          sa.create_engine(store_url)).set_index("id")["source"]
    rows["round"] = rows["target_run"].map(sources).str.extract(ROUND, expand=False).fillna("")
    return rows


def score(table: pd.DataFrame) -> pd.DataFrame:
    table = table.assign(ape=100 * (table["forecast"] - table["actual"]).abs() / table["actual"],
                         naive_ape=100 * (table["naive"] - table["actual"]).abs()
                         / table["actual"],
                         covered=(table["low"] <= table["actual"])
                         & (table["actual"] <= table["high"]))
    out = table.groupby(["target", "ask"]).agg(
        runs=("ape", "size"), answered=("ape", "count"), mape=("ape", "mean"),
        median=("ape", "median"), worst=("ape", "max"), naive_mape=("naive_ape", "mean"),
        naive_median=("naive_ape", "median"), coverage=("covered", "mean"))
    out["ratio_to_naive"] = out["mape"] / out["naive_mape"]
    out["coverage"] *= 100
    return out.reset_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-store", required=True)
    ap.add_argument("--protocol", default="per-round,across-rounds")
    ap.add_argument("--prior", default="off,on", help="off, on, held-out (comma-separated)")
    ap.add_argument("--prior-rows", type=Path, default=None,
                    help="reference backtest rows (benchmarks/selector_prior.py --rows)")
    ap.add_argument("--prior-store", default=None,
                    help="the store those rows were backtested on (for their rounds)")
    ap.add_argument("--history", type=int, default=2)
    ap.add_argument("--rounds", default="", help="only these rounds, e.g. v0.7,v1.0")
    ap.add_argument("--work", type=Path, default=None, help="keep the history stores here")
    ap.add_argument("--csv", type=Path, default=None, help="write every forecast here")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    runs = corpus_runs(args.corpus_store)
    if args.rounds:
        runs = runs[runs["round"].isin(args.rounds.split(","))]
    prior_rows = (reference_rows(args.prior_rows, args.prior_store)
                  if args.prior_rows and args.prior_store else None)
    lines, frames = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for protocol in args.protocol.split(","):
            for prior in args.prior.split(","):
                started = time.perf_counter()
                table = evaluate(runs, protocol, args.history, prior, work, prior_rows)
                table["protocol"], table["prior"] = protocol, prior
                frames.append(table)
                res = score(table)
                lines += [f"### {protocol}, prior {prior} ({time.perf_counter() - started:.0f} s)",
                          "", res.to_markdown(index=False, floatfmt=".2f"), "",
                          "chosen candidates: " + ", ".join(
                              f"{k} {v}" for k, v in table["candidate"].value_counts().items()),
                          ""]
                print("\n".join(lines[-5:]), flush=True)
    if args.csv:
        pd.concat(frames).to_csv(args.csv, index=False)
    if args.out:
        args.out.write_text("# End-to-end accuracy, asked as a user asks (generated by "
                            "benchmarks/e2e_accuracy.py)\n\n" + (__doc__ or "") + "\n"
                            + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
