r"""Whole-job forecasts of MLPerf Training CNN runs scored against the wall clock (issue 35).

Protocol (must-show 1 of issue 35):

* **Corpora**: MLPerf Training result repositories (``mlcommons/training_results_vX.Y``),
  exported from the bare mirrors into ``--corpora/<round>/<submitter>/results/<system>/
  <benchmark>/result_N.txt`` with ``<submitter>/systems/<system>.json`` beside them (the layout
  jobcast's MLPerf parser reads). Benchmarks: ``resnet``, ``ssd`` (RetinaNet from v2.0 on; the
  folder is ``retinanet`` in v5.0), ``unet3d``, ``maskrcnn``; only ``result_N.txt`` files.
* **Truth is the user's clock, read by this benchmark's own reader**, never jobcast's parse:
  the ``:::MLLOG {json}`` lines, truth = ``run_stop.time_ms - run_start.time_ms``. Rank
  duplicates (the same record twice) count once; a file without both records, with several
  distinct ``run_start``/``run_stop`` records or a non-positive span is not scored (its reason
  is counted). Byte-identical files (a log re-filed in a later round) are one run: the first
  in round, benchmark, system and ``result_N`` order is kept.
* **Training iterations** (what the user plans; the definition of the retired
  ``benchmarks/e2e_accuracy.py`` of issue 22: the run's train iterations = epochs trained x
  iterations per epoch), read here from the raw records: epochs = the distinct ``epoch_num`` of the
  ``epoch_stop`` records, else the sum of ``epoch_count`` over the closed blocks
  (``block_stop``; counts logged in samples, as UNet3D's from v3.1, are divided by
  ``samples_per_epoch``); iterations per epoch = ``ceil(D / global_batch_size)`` with ``D``
  the benchmark's training set as the MLPerf rules fix it (:data:`TRAIN_SET`).
* **History** = each system's first two result files (``result_N`` order; a system is one
  submission folder of one round); every later distinct run of the system is asked. One
  history store per round (all benchmarks' history of that round), built as a user builds
  it: the product's ingest (``ingest.pipeline.ingest_paths``) of the history files, then
  ``jobcast.service.engine.fitting.fit_store_all`` (models, run summaries, selector).
* **Asked as a user asks** (``Forecaster(store).forecast(JobRequest)``, as of the held-out
  run's ``run_start``): network (:data:`NETWORK`), the deployment as the system description
  names the GPUs (``"8x NVIDIA H100-SXM5-80GB"``, ``"2x8 ..."`` for nodes), global batch
  size, training iterations, ``phase job``, and the system ``<submitter>/<system>``
  (``named``) or no system (``anon``). Nothing else read from the held-out run.
  ``--accelerator-note drop`` asks without the name's trailing parenthesised note (a side
  run: it tells a GPU name the store keeps under another spelling from an error of rate).
* **Naive rule** on the same runs: the system's mean whole-run seconds per training
  iteration over its history runs (truth and iterations from this reader) times the asked
  run's iterations.
* Scores per benchmark and ask: runs, answered, MAPE and median APE of jobcast and of the
  naive rule (on the answered runs), their ratio, the share of truths inside jobcast's 90 %
  interval ``[low, high]``, and the answers whose point lies outside their own interval.

    nice .venv/bin/python benchmarks/e2e_wallclock.py --rounds v4.0,v4.1,v5.0 \
        --benchmarks resnet,ssd,unet3d [--limit-systems N] --out docs/lab/e2e-wallclock.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import lib  # noqa: F401  (sys.path: the repository, tests/)
import numpy as np
import pandas as pd
import sqlalchemy as sa

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from ingest.pipeline import ingest_paths
from ingest.store import Store
from jobcast.service.engine.fitting import fit_store_all
from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.engine.request import JobRequest

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


MIRRORS = Path("/work/.mirror")
FOLDERS = {"resnet": "resnet", "ssd": "ssd", "retinanet": "ssd", "unet3d": "unet3d",
           "maskrcnn": "maskrcnn"}  # result folder -> benchmark
# Training set sizes the MLPerf rules fix (training_policies, the reference READMEs):
# ImageNet 2012, the MLPerf OpenImages subset (RetinaNet), KiTS19 cases, COCO 2017.
TRAIN_SET = {"resnet": 1_281_167, "ssd": 1_170_301, "unet3d": 168, "maskrcnn": 117_266}
# What was trained, named as jobcast names networks (``ssd`` is RetinaNet from v2.0 on).
NETWORK = {"resnet": "resnet50", "ssd": "retinanet-resnext50", "unet3d": "unet3d",
           "maskrcnn": "maskrcnn-resnet50-fpn"}
HISTORY = 2
RESULT = re.compile(r"^(?P<sub>[^/]+)/results/(?P<sys>[^/]+)/(?P<folder>[^/]+)/"
                    r"result_(?P<n>\d+)\.txt$")
WANTED = {"run_start", "run_stop", "global_batch_size", "samples_per_epoch", "epoch_stop",
          "block_start", "block_stop"}


# -- corpora -----------------------------------------------------------------------------

def round_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", name))


def export_round(mirror: Path, rnd: str, dest: Path) -> int:
    """Write the CNN result files and their systems' descriptions of one round as plain
    files (the layout kept); a finished export (its marker) is kept. Returns files."""
    marker = dest / rnd / ".exported"
    if marker.exists():
        return int(marker.read_text())
    git = ["git", "-C", str(mirror)]
    names = subprocess.run([*git, "ls-tree", "-r", "--name-only", "HEAD"], check=True,
                           capture_output=True, text=True).stdout.splitlines()
    found = [(p, m) for p in names if (m := RESULT.match(p)) and m["folder"] in FOLDERS]
    systems = {f"{m['sub']}/systems/{m['sys']}.json" for _, m in found} & set(names)
    wanted = [p for p, _ in found] + sorted(systems)
    batch = subprocess.run([*git, "cat-file", "--batch"], check=True, capture_output=True,
                           input="".join(f"HEAD:{p}\n" for p in wanted).encode()).stdout
    pos = 0
    for path in wanted:
        header_end = batch.index(b"\n", pos)
        header = batch[pos:header_end].split()
        if header[-1] == b"missing":  # a name git cannot look up as written: not exported
            pos = header_end + 1
            continue
        size = int(header[2])
        out = dest / rnd / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(batch[header_end + 1:header_end + 1 + size])
        pos = header_end + 2 + size
    marker.write_text(str(len(wanted)))
    return len(wanted)


# -- the own reader ------------------------------------------------------------------------

class Unscored(Exception):
    """A file this reader cannot score; the message is the reason (counted)."""


@dataclass
class RawRun:
    start_ms: int
    stop_ms: int
    batch: int
    epochs: float
    status: str

    @property
    def seconds(self) -> float:
        return (self.stop_ms - self.start_ms) / 1000.0


def records(text: str) -> list[dict]:
    """The wanted ``:::MLLOG`` records (rank duplicates once; undecodable lines skipped)."""
    seen, out = set(), []
    for line in text.splitlines():
        at = line.find(":::MLLOG")
        if at < 0 or not any(f'"{k}"' in line for k in WANTED):
            continue
        try:
            rec = json.loads(line[at + len(":::MLLOG"):])
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict) or rec.get("key") not in WANTED:
            continue
        ident = json.dumps([rec.get("key"), rec.get("time_ms"), rec.get("value"),
                            rec.get("metadata", {}).get("epoch_num"),
                            rec.get("metadata", {}).get("first_epoch_num")], default=str)
        if ident not in seen:
            seen.add(ident)
            out.append(rec)
    return out


def one_time(recs: list[dict], key: str) -> int:
    times = {r.get("time_ms") for r in recs if r["key"] == key}
    if not times:
        raise Unscored(f"no {key} record")
    if len(times) > 1:
        raise Unscored(f"several {key} records")
    (t,) = times
    if not isinstance(t, (int, float)) or not math.isfinite(t):
        raise Unscored(f"{key} without a time")
    return int(t)


def epochs_trained(recs: list[dict]) -> float:
    """Epochs trained (module rules): closed epochs, else closed blocks' epoch counts."""
    meta = [(r["key"], r.get("metadata") or {}, r.get("value")) for r in recs]
    closed = {m.get("epoch_num", v) for k, m, v in meta if k == "epoch_stop"}
    closed.discard(None)
    if closed:
        return float(len(closed))
    counts = {m.get("first_epoch_num"): m.get("epoch_count") for k, m, _ in meta
              if k == "block_start"}
    blocks = {}
    for k, m, _ in meta:
        if k == "block_stop" and m.get("first_epoch_num") is not None:
            first = m["first_epoch_num"]
            blocks[first] = m.get("epoch_count", counts.get(first))
    if not blocks:
        raise Unscored("no closed epoch or block")
    if any(not isinstance(c, (int, float)) or c <= 0 for c in blocks.values()):
        raise Unscored("a closed block without its epoch_count")
    logged = [r.get("value") for r in recs if r["key"] == "samples_per_epoch"]
    unit = logged[0] if logged and isinstance(logged[0], (int, float)) and logged[0] > 1 else 0
    if unit and all(f % unit == 0 and c % unit == 0 for f, c in blocks.items()):
        return sum(blocks.values()) / unit
    return float(sum(blocks.values()))


def read_log(path: Path) -> RawRun:
    recs = records(path.read_text(encoding="utf-8", errors="replace"))  # records are ASCII
    if not recs:
        raise Unscored("no :::MLLOG records")
    start, stop = one_time(recs, "run_start"), one_time(recs, "run_stop")
    if stop <= start:
        raise Unscored("run_stop not after run_start")
    recs = recs[:next(i for i, r in enumerate(recs) if r["key"] == "run_stop")]  # the run's
    batches = {r.get("value") for r in recs if r["key"] == "global_batch_size"}
    if len(batches) != 1:
        raise Unscored("no global_batch_size" if not batches else "several global_batch_size")
    (batch,) = batches
    if not isinstance(batch, int) or batch < 1:
        raise Unscored("global_batch_size not a positive whole number")
    status = next((str((r.get("metadata") or {}).get("status")) for r in recs
                   if r["key"] == "run_stop"), "")
    return RawRun(start, stop, batch, epochs_trained(recs), status)


def deployment_of(system_json: Path, drop_note: bool = False) -> str:
    """The GPUs as the system description names them: ``"8x NAME"``, ``"2x8 NAME"``;
    ``drop_note``: without a trailing parenthesised note (``"NVIDIA Blackwell GPU
    (B200-SXM-180GB)"`` -> ``"NVIDIA Blackwell GPU"``, as jobcast's ingest stores it)."""
    if not system_json.is_file():
        raise Unscored("no system description")
    try:
        desc = json.loads(system_json.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Unscored("system description not JSON") from None
    norm = {str(k).strip().lower().replace(" ", "_"): v for k, v in desc.items()}
    name = str(norm.get("accelerator_model_name") or "").strip()
    if drop_note:
        name = re.sub(r"\s*\([^)]*\)\s*$", "", name)
    try:
        per, nodes = int(norm.get("accelerators_per_node")), int(norm.get("number_of_nodes"))
    except (TypeError, ValueError):
        raise Unscored("system description lacks accelerator counts") from None
    if not name or per < 1 or nodes < 1:
        raise Unscored("system description lacks the accelerator")
    return f"{per}x {name}" if nodes == 1 else f"{nodes}x{per} {name}"


def catalog(corpora: Path, rounds: list[str], benches: list[str],
            drop_note: bool = False) -> pd.DataFrame:
    """One row per result file: where, what, the own reader's facts or why not."""
    rows = []
    for rnd in rounds:
        base = corpora / rnd
        for path in sorted(base.glob("*/results/*/*/result_*.txt")):
            m = RESULT.match(path.relative_to(base).as_posix())
            if not m or FOLDERS.get(m["folder"]) not in benches:
                continue
            bench = FOLDERS[m["folder"]]
            row = {"round": rnd, "bench": bench, "system": f"{m['sub']}/{m['sys']}",
                   "n": int(m["n"]), "source": str(path),
                   "sha": hashlib.sha1(path.read_bytes()).hexdigest(), "reason": ""}
            try:
                row["deployment"] = deployment_of(
                    base / m["sub"] / "systems" / f"{m['sys']}.json", drop_note)
                raw = read_log(path)
                row |= asdict(raw) | {"truth": raw.seconds}
                row["iterations"] = int(raw.epochs * math.ceil(TRAIN_SET[bench] / raw.batch))
            except Unscored as exc:
                row["reason"] = str(exc)
            rows.append(row)
    table = pd.DataFrame(rows)
    table["rkey"] = table["round"].map(round_key)
    return table.sort_values(["rkey", "bench", "system", "n"]).drop(columns="rkey")


def split(files: pd.DataFrame, limit: int | None) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """(history, held-out, byte-identical files dropped) after the dedupe and the limit of
    systems per round and benchmark (evenly spaced by name)."""
    unique = files.drop_duplicates("sha", keep="first")
    dropped = len(files) - len(unique)
    keep = []
    for _, g in unique.groupby(["round", "bench"], sort=False):
        names = sorted(g["system"].unique())
        if limit and len(names) > limit:
            step = (len(names) - 1) / max(limit - 1, 1)
            names = [names[round(i * step)] for i in range(limit)]
        keep.append(g[g["system"].isin(names)])
    chosen = pd.concat(keep) if keep else unique.iloc[:0]
    rank = chosen.groupby(["round", "bench", "system"]).cumcount()
    return chosen[rank < HISTORY], chosen[rank >= HISTORY], dropped


# -- forecasting ---------------------------------------------------------------------------

def history_store(db: Path, sources: list[str]) -> tuple[Store, dict, int, float]:
    """The store a user would have: the history files ingested, then ``jobcast fit``. A bug
    the fit's backtest met stops the benchmark (the product is mid-edit: rerun later)."""
    started = time.perf_counter()
    store = Store(f"sqlite:///{db}")
    report = ingest_paths(store, sources, workers=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # its bugs are checked below
        fitted = fit_store_all(store)
    bugs = fitted.backtest.bugs
    if bugs:
        raise SystemExit(f"jobcast's fit met {len(bugs)} bugs, e.g. {bugs[0].message[:200]}; "
                         "scores would not be the product's: fix or rerun later")
    reasons = Counter(str(getattr(r, "reason", r))[:80] for r in report.rejected)
    return store, dict(reasons), len(fitted.report.models), time.perf_counter() - started


def naive_rates(hist: pd.DataFrame) -> pd.Series:
    ok = hist[(hist["reason"] == "") & (hist["iterations"] > 0)]
    return (ok["truth"] / ok["iterations"]).groupby([ok["bench"], ok["system"]]).mean()


def ask(fc: Forecaster, run: pd.Series, system: str | None) -> dict:
    req = JobRequest.from_mapping({
        "network": NETWORK[run["bench"]], "deployment": run["deployment"],
        "batch_size": int(run["batch"]), "iterations": int(run["iterations"]),
        "phase": "job", "system": system})
    out = fc.forecast(req, now=run["start_ms"] / 1000.0)
    if not out.ok:
        return {"forecast": np.nan, "error": str(out.error)[:160]}
    return {"forecast": out.seconds, "low": out.low, "high": out.high,
            "candidate": out.details.get("candidate", str(getattr(out, "route", "")))}


def forecast_round(fc: Forecaster, test: pd.DataFrame, rates: pd.Series) -> list[dict]:
    rows = []
    for (bench, system), g in test.groupby(["bench", "system"], sort=False):
        started = time.perf_counter()
        rate = rates.get((bench, system), np.nan)
        for _, run in g.iterrows():
            base = {"round": run["round"], "bench": bench, "system": system,
                    "source": run["source"], "truth": run["truth"],
                    "iterations": run["iterations"], "naive": rate * run["iterations"]}
            for label, name in (("named", system), ("anon", None)):
                rows.append(base | {"ask": label} | ask(fc, run, name))
        print(f"    {bench:7s} {system}: {len(g)} runs ({time.perf_counter() - started:.1f} s)",
              flush=True)
    return rows


def agreement(store_url: str, hist: pd.DataFrame) -> dict[str, int]:
    """How jobcast's parse of the history files compares with this reader (a check of the
    two readers, never used as truth)."""
    try:
        theirs = corpus_runs(store_url).set_index("source")
    except Exception as exc:  # noqa: BLE001 - a diagnostic only; the score does not need it
        return {f"not compared: {type(exc).__name__}": len(hist)}
    out: Counter[str] = Counter()
    for _, r in hist[hist["reason"] == ""].iterrows():
        if r["source"] not in theirs.index:
            out["not stored by jobcast"] += 1
            continue
        t = theirs.loc[[r["source"]]].iloc[0]
        out["wall agrees" if abs(t["wall"] - r["truth"]) <= 1.0 else "wall differs"] += 1
        same = abs(t.get("iterations_train", np.nan) - r["iterations"]) <= 0.005 * r["iterations"]
        out["iterations agree" if same else "iterations differ"] += 1
    return dict(out)


# -- scores --------------------------------------------------------------------------------

def score(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    t = table.assign(
        ape=100 * (table["forecast"] - table["truth"]).abs() / table["truth"],
        naive_ape=100 * (table["naive"] - table["truth"]).abs() / table["truth"],
        covered=(table["low"] <= table["truth"]) & (table["truth"] <= table["high"]),
        outside=(table["forecast"] < table["low"]) | (table["forecast"] > table["high"]))
    t["naive_ape_answered"] = t["naive_ape"].where(t["ape"].notna())
    out = t.groupby(by).agg(
        runs=("truth", "size"), answered=("ape", "count"), mape=("ape", "mean"),
        median=("ape", "median"), naive_mape=("naive_ape_answered", "mean"),
        naive_median=("naive_ape_answered", "median"), in_interval=("covered", "sum"),
        point_outside=("outside", "sum"))
    out["ratio"] = out["mape"] / out["naive_mape"]
    out["in_interval"] = 100 * out["in_interval"] / out["answered"].where(out["answered"] > 0)
    return out.reset_index()


def counts_text(series: pd.Series) -> str:
    return ", ".join(f"{k}: {v}" for k, v in series.value_counts().items()) or "none"


def report(table: pd.DataFrame, files: pd.DataFrame, notes: list[str]) -> list[str]:
    lines = ["## Scores per benchmark and ask", "",
             score(table, ["bench", "ask"]).to_markdown(index=False, floatfmt=".2f"), "",
             "## Per round", "",
             score(table, ["round", "bench", "ask"]).to_markdown(index=False, floatfmt=".2f"),
             "", "## Which candidate answered", ""]
    for (bench, label), g in table.groupby(["bench", "ask"]):
        lines.append(f"- {bench}, {label}: {counts_text(g['candidate'].dropna())}")
    lines += ["", "## Unanswered (jobcast's reason up to its first ';')", ""]
    for (bench, label), g in table[table["forecast"].isna()].groupby(["bench", "ask"]):
        why = g["error"].str.split(";").str[0].value_counts()
        lines.append(f"- {bench}, {label}: {len(g)} runs: " + "; ".join(
            f"{v} x {k!r}" for k, v in why.head(12).items())
            + (f"; {len(why) - 12} more reasons" if len(why) > 12 else ""))
    bad = files[files["reason"] != ""]
    lines += ["", "## Files this reader did not score (by reason)", "",
              f"{len(bad)} of {len(files)} result files: " + counts_text(bad["reason"]), "",
              *notes]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", default="v4.0,v4.1,v5.0")
    ap.add_argument("--benchmarks", default="resnet,ssd,unet3d")
    ap.add_argument("--limit-systems", type=int, default=None,
                    help="at most N systems per round and benchmark (evenly spaced by name)")
    ap.add_argument("--accelerator-note", choices=("keep", "drop"), default="keep",
                    help="ask with the description's accelerator name as is (keep) or "
                         "without its trailing parenthesised note (drop)")
    ap.add_argument("--corpora", type=Path, default=Path("/tmp/corpora"))
    ap.add_argument("--mirrors", type=Path, default=MIRRORS)
    ap.add_argument("--work", type=Path, default=None, help="keep the history stores here")
    ap.add_argument("--csv", type=Path, default=None, help="write every forecast here")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    started = time.perf_counter()
    rounds, benches = args.rounds.split(","), args.benchmarks.split(",")
    for rnd in rounds:
        mirror = args.mirrors / f"mlcommons+training_results_{rnd}" / "repo"
        if (args.corpora / rnd).is_dir() and not mirror.is_dir():
            continue  # plain files already there (e.g. ../shared/data/logs/mlperf)
        print(f"export {rnd}: {export_round(mirror, rnd, args.corpora)} files", flush=True)
    files = catalog(args.corpora, rounds, benches, args.accelerator_note == "drop")
    hist, test, dropped = split(files, args.limit_systems)
    test = test[test["reason"] == ""]
    rates, rows, notes = naive_rates(hist), [], [f"- byte-identical files dropped: {dropped}"]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for rnd in rounds:
            h, t = hist[hist["round"] == rnd], test[test["round"] == rnd]
            if t.empty:
                continue
            db = work / f"{rnd}.db"
            db.unlink(missing_ok=True)
            store, rejected, models, took = history_store(db, list(h["source"]))
            print(f"  {rnd}: {len(h)} history files, {len(t)} held-out runs, "
                  f"{h['system'].nunique()} systems (ingest + fit {took:.0f} s)", flush=True)
            notes += [f"- {rnd}: ingest + fit of {len(h)} history files {took:.0f} s "
                      f"({models} models); "
                      f"rejected by jobcast's ingest: {rejected or 'none'}; jobcast's parse "
                      f"vs this reader on history: {agreement(f'sqlite:///{db}', h)}"]
            rows += forecast_round(Forecaster(store), t, rates)
    table = pd.DataFrame(rows)
    if args.csv:
        table.to_csv(args.csv, index=False)
    notes.append(f"- wall time of the whole benchmark: {time.perf_counter() - started:.0f} s")
    lines = report(table, files, notes)
    print("\n".join(lines), flush=True)
    if args.out:
        write_doc(args.out, lines)


KEPT = "<!-- written by hand below: kept when the benchmark rewrites this file -->"


def write_doc(out: Path, lines: list[str]) -> None:
    """The generated report; the hand-written part of an existing file (from :data:`KEPT`
    on) is kept."""
    old = out.read_text() if out.exists() else ""
    kept = old[old.index(KEPT):] if KEPT in old else ""
    cmd = "nice .venv/bin/python benchmarks/e2e_wallclock.py " + " ".join(sys.argv[1:])
    out.write_text("# Whole-job forecasts against the wall clock (generated by "
                   "benchmarks/e2e_wallclock.py)\n\n" + (__doc__ or "")
                   + f"\nCommand:\n\n    {cmd}\n\n" + "\n".join(lines) + "\n"
                   + ("\n" + kept if kept else ""))


if __name__ == "__main__":
    main()
