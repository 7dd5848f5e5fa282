"""Fuzz every log parser and the ``--jobs`` CSV reader with mutations of real samples.

A seeded run of the cases of ``tests/fuzz_cases.py`` (the hypothesis tests in
tests/ingest/test_fuzz_*.py draw from the same samples, mutations and checks): per format,
``--cases`` cases, each a real sample (tests/data) with 1-4 hostile mutations run through the
real ingest path into a real SQLite store. Counted per format: crashes (must be 0; a parser
exception the pipeline's safety net caught counts, ``caught``), rejections (and how many name
a line), runs stored, and runs stored with nonsense (must be 0); exit status 1 if any crash
or nonsense.

``--set logs`` (default): the log formats and the ``jobs-csv`` reader (results: docs/lab/fuzz.md);
``--set history-b``: the PyTorch-era history formats of tests/data/frameworks (torchvision,
timm, Lightning, Hugging Face, MMEngine, Detectron2; docs/history-sources.md).

Seeded: the same ``--seed`` gives the same cases.

    .venv/bin/python benchmarks/fuzz_parsers.py [--cases 2000] [--seed 13] [--only caffe]
        [--set logs|history-b] [--no-range-checks]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import lib  # noqa: F401  (sys.path: the repository, tests/)
from fuzz_cases import HISTORY_B_SAMPLES, SAMPLES, fuzz

SETS = {"logs": [*SAMPLES, "jobs-csv"], "history-b": list(HISTORY_B_SAMPLES)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000, help="cases per format")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--only", action="append", help="format(s) to run (default: the set's)")
    ap.add_argument("--set", choices=SETS, default="logs", help="which samples (default: logs)")
    ap.add_argument("--no-range-checks", action="store_true",
                    help="switch ingest.validate.validate_run off (to see what it prevents)")
    args = ap.parse_args()
    if args.no_range_checks:
        import ingest.validate

        ingest.validate.validate_run = lambda run, index: None
    formats = args.only or SETS[args.set]
    print(f"seed {args.seed}, {args.cases} cases per format"
          + (", range checks OFF" if args.no_range_checks else ""))
    print(f"{'format':<14}{'cases':>7}{'crashes':>9}{'(caught)':>9}{'rejected':>10}{'(line)':>8}"
          f"{'accepted':>10}{'nonsense':>10}{'s':>7}")
    total: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in formats:
            t0 = time.perf_counter()
            counts, examples = fuzz(fmt, args.cases, args.seed, Path(tmp))
            total.update(counts)
            print(f"{fmt:<14}{args.cases:>7}{counts['crash']:>9}{counts['caught']:>9}"
                  f"{counts['rejected']:>10}"
                  f"{counts['with_line']:>8}{counts['accepted']:>10}{counts['nonsense']:>10}"
                  f"{time.perf_counter() - t0:>7.0f}", flush=True)
            for example in examples:
                print("    ", example[:400])
    n = args.cases * len(formats)
    print(f"{'all':<14}{n:>7}{total['crash']:>9}{total['caught']:>9}{total['rejected']:>10}"
          f"{total['with_line']:>8}"
          f"{total['accepted']:>10}{total['nonsense']:>10}")
    sys.exit(1 if total["crash"] or total["nonsense"] else 0)


if __name__ == "__main__":
    main()
