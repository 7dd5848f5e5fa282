"""How much better than "the system's mean seconds per iteration" can any rule read off a
system's own history do? MLPerf ResNet, per round, history = each submission's ``result_0``
and ``result_1``, training time of its later results (docs/e2e-accuracy.md).

Rules: the naive mean rate; a warm-up-aware rate (the first segment's mean seconds plus the
steady rate of the rest); the affine fit through the two runs' totals; and an oracle that
picks, per held-out run, the better of the naive and the warm-up-aware rule (a bound no
forecast that must choose in advance can beat).

    .venv/bin/python benchmarks/e2e_floor.py --corpus-store sqlite:////tmp/resnet.db
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import sqlalchemy as sa

ROUNDS = ("v0.7", "v1.0", "v1.1", "v2.0", "v2.1", "v3.0", "v3.1", "v4.0")


def load(url: str) -> pd.DataFrame:
    eng = sa.create_engine(url)
    runs = pd.read_sql("select r.id, f.source, r.meta from runs r join files f "
                       "on r.file_id = f.id", eng)
    segs = pd.read_sql("select run_id, seq, iterations, seconds from segments "
                       "where phase = 'train' order by run_id, seq", eng)
    by_run = segs.groupby("run_id")
    first = by_run.head(1).set_index("run_id")[["iterations", "seconds"]]
    runs = runs.join(by_run[["iterations", "seconds"]].sum(), on="id")
    runs = runs.join(first.add_suffix("_first"), on="id").dropna(subset=["iterations"])
    runs["system"] = runs.pop("meta").map(lambda m: json.loads(m).get("system") or "")
    runs["round"] = runs["source"].str.extract(r"/(v\d+\.\d+)/", expand=False)
    runs["n"] = runs["source"].str.extract(r"result_(\d+)", expand=False).astype(float)
    return runs[(runs["system"] != "") & runs["round"].isin(ROUNDS)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus-store", required=True)
    runs = load(ap.parse_args().corpus_store)
    runs["sys"] = runs["round"] + "|" + runs["system"]
    runs = runs.sort_values(["sys", "n"])
    runs["rank"] = runs.groupby("sys").cumcount()
    runs = runs[runs.groupby("sys")["id"].transform("size") > 2]
    h, t = runs[runs["rank"] < 2], runs[runs["rank"] >= 2].copy()
    rate = (h["seconds"] / h["iterations"]).groupby(h["sys"]).mean()
    steady = ((h["seconds"] - h["seconds_first"]) / (h["iterations"] - h["iterations_first"])
              ).groupby(h["sys"]).mean()
    first_s = h["seconds_first"].groupby(h["sys"]).mean()
    first_i = h["iterations_first"].groupby(h["sys"]).mean()
    fits = {s: np.polyfit(g["iterations"], g["seconds"], 1) if g["iterations"].nunique() > 1
            else (float((g["seconds"] / g["iterations"]).mean()), 0.0)
            for s, g in h.groupby("sys")}
    t["naive"] = t["sys"].map(rate) * t["iterations"]
    t["warm-up aware"] = (t["sys"].map(first_s)
                          + (t["iterations"] - t["sys"].map(first_i)) * t["sys"].map(steady))
    t["affine"] = [fits[s][0] * i + fits[s][1] for s, i in
                   zip(t["sys"], t["iterations"], strict=True)]
    ape = {c: 100 * (t[c] - t["seconds"]).abs() / t["seconds"]
           for c in ("naive", "warm-up aware", "affine")}
    ape["oracle (best of naive, warm-up aware)"] = np.minimum(ape["naive"], ape["warm-up aware"])
    table = pd.DataFrame({k: {"MAPE %": v.mean(), "median %": v.median()} for k, v in ape.items()})
    print(f"{len(t)} held-out runs of {t['sys'].nunique()} submissions")
    print(table.T.to_markdown(floatfmt=".3f"))
    top = ape["naive"].sort_values(ascending=False)
    print(f"top 2 % of runs carry {top.head(len(top) // 50).sum() / top.sum():.0%} of the naive "
          "rule's error")


if __name__ == "__main__":
    main()
