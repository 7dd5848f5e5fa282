"""The memory estimate against batches public data shows running: the warning band (issue 36).

    .venv/bin/python benchmarks/memory_band.py [--json out.json]

Every known-to-run (network, per-GPU batch, GPU, precision, image side) of ``../shared/data``
(PROFET, Lambda, torchvision_bench) and issue 36's Quadro P2000 runs
(:func:`layerwise.memory_band.known_batches`) is estimated
(:func:`layerwise.memory_band.band_rows`);
the ratio estimate / GPU memory is summarised per source. The largest ratio, rounded up to the
next tenth, is :data:`layerwise.memory_band.WARN_BAND`. Results: docs/memory.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from layerwise.memory_band import WARN_BAND, band_rows, known_batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = band_rows(known_batches())
    out: dict[str, dict] = {}
    for source in sorted({r.run.source for r in rows}) + ["all"]:
        ratios = [r.ratio for r in rows if source in ("all", r.run.source)]
        out[source] = {"runs": len(ratios), "median": round(statistics.median(ratios), 3),
                       "max": round(max(ratios), 3), "over_1": sum(x > 1 for x in ratios),
                       "over_band": sum(x > WARN_BAND for x in ratios)}
        print(f"{source:>18}: {out[source]}")
    top = max(rows, key=lambda r: r.ratio)
    print(f"largest: {top.run} estimate {top.estimate_gib:.1f} GiB / {top.memory_gib:.0f} GiB "
          f"= {top.ratio:.3f}; WARN_BAND = {WARN_BAND}")
    if args.json:
        args.json.write_text(json.dumps({"band": WARN_BAND, "by_source": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
