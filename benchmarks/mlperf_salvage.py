"""MLPerf salvage and parse speed: what a corpus of result logs yields, and how fast it parses.

Two parts, on one corpus (default ``../shared/data/logs/mlperf``; the held-out one is
``/work/corpora/mlperf``):

* **Outcomes** of every file a folder ingest would try (:func:`ingest.pipeline.discover`),
  through the pipeline's own parse-and-check (:func:`ingest.pipeline.parse_data`, no store):
  usable files (stored, or byte-identical to a stored one: a duplicate of an added file),
  runs and files repaired by kind (``meta["repairs"]``), files rejected by reason (numbers
  written ``N``).
* **Parse speed** of the MLPerf result files (``result_*.txt``): bytes already in memory and
  contexts (system descriptions) built beforehand, the timed part is decode, split into
  lines and ``parser.parse(lines, ctx)``, as the pipeline does. The current parser and the
  one at a git revision (``--old-rev``, default ``HEAD``; its modules are read with ``git
  show``) run interleaved in this process, alternating which goes first, ``--repeats`` times;
  medians of wall and CPU (process) seconds, MB/s and the new/old ratio are reported. CPU
  seconds are the steadier figure on a shared machine.

  With ``--results-only`` the outcomes cover the ``result_*.txt`` files only (the
  ``/work/corpora/mlperf-other`` corpus also holds READMEs, configs and code) and are also
  given per round and benchmark folder (``by_benchmark``: files, stored, runs, runs repaired
  by kind, rejected by reason, network names).

    .venv/bin/python benchmarks/mlperf_salvage.py [CORPUS] [--repeats 5] [--old-rev HEAD]
        [--no-old] [--results-only] [--json FILE]
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

from lib import REPO as ROOT
from lib import SHARED

from ingest.events import ParseError
from ingest.parsers import ParseOverrides, registered
from ingest.parsers import mlperf as new_parser
from ingest.pipeline import discover, parse_data

DEFAULT_CORPUS = SHARED / "logs" / "mlperf"
PACKAGE = "ingest/parsers/mlperf"
_RESULT = re.compile(r"result_.*\.txt")


def _group(corpus: Path, path: Path) -> str:
    """``<round>/<benchmark>`` of a result file in the mlcommons layout (the first ``vX.Y``
    folder under the corpus, the log's folder), else ``"-"``."""
    parts = path.relative_to(corpus).parts if path.is_relative_to(corpus) else path.parts
    rnd = next((p for p in parts if re.fullmatch(r"v\d+\.\d+(?:\.\d+)?", p)), "-")
    return f"{rnd}/{path.parent.name}"


def _blank() -> dict[str, object]:
    return {"files": 0, "stored": 0, "duplicates_of_stored": 0, "runs": 0,
            "runs_repaired_by_kind": Counter(), "rejected_by_reason": Counter(),
            "networks": Counter()}


def outcomes(corpus: Path, results_only: bool = False) -> dict[str, object]:
    """Usable / repaired / rejected counts of a folder ingest of ``corpus`` (rules above);
    with ``results_only``, of its ``result_*.txt`` files only (a corpus that also holds
    READMEs, configs and code), and per round and benchmark folder (``by_benchmark``)."""
    found, skipped, _ = discover([str(corpus)])
    if results_only:
        skipped = skipped + [s for s, p in found if not _RESULT.fullmatch(p.name)]
        found = [(s, p) for s, p in found if _RESULT.fullmatch(p.name)]
    parsers = registered()
    added: set[str] = set()
    usable = duplicates = 0
    rejected: Counter[str] = Counter()
    run_repairs: Counter[str] = Counter()
    file_repairs: Counter[str] = Counter()
    repaired_files = runs = 0
    groups: dict[str, dict[str, object]] = {}
    for source, path in found:
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        group = groups.setdefault(_group(corpus, path), _blank())
        group["files"] += 1  # type: ignore[operator]
        try:
            parsed = parse_data(source, path, data, ParseOverrides(), parsers, digest)
        except ParseError as exc:
            reason = re.sub(r"\d+(?:\.\d+)?", "N", exc.reason)
            rejected[reason] += 1
            group["rejected_by_reason"][reason] += 1  # type: ignore[index]
            continue
        usable += 1
        group["stored"] += 1  # type: ignore[operator]
        if digest in added:
            duplicates += 1
            group["duplicates_of_stored"] += 1  # type: ignore[operator]
            continue
        added.add(digest)
        kinds: set[str] = set()
        for run in parsed.runs:
            runs += 1
            group["runs"] += 1  # type: ignore[operator]
            group["networks"][run.network] += 1  # type: ignore[index]
            run_kinds = {rep["kind"] for rep in run.meta.get("repairs") or []}
            for kind in run_kinds:
                run_repairs[kind] += 1
                group["runs_repaired_by_kind"][kind] += 1  # type: ignore[index]
            kinds |= run_kinds
        repaired_files += bool(kinds)
        file_repairs.update(kinds)
    total = len(found)
    return {
        "corpus": str(corpus), "files": total, "side_files_skipped": len(skipped),
        "usable": usable, "usable_share": usable / total if total else None,
        "added": usable - duplicates, "duplicates_of_added": duplicates, "runs": runs,
        "files_repaired": repaired_files, "files_repaired_by_kind": dict(file_repairs),
        "run_repairs_by_kind": dict(run_repairs), "rejected": sum(rejected.values()),
        "rejected_by_reason": dict(rejected.most_common()),
        "by_benchmark": {k: {n: dict(v) if isinstance(v, Counter) else v
                             for n, v in g.items()} for k, g in sorted(groups.items())},
    }


def old_parser(rev: str) -> ModuleType:
    """The MLPerf parser package at git revision ``rev``, imported as ``mlperf_at_rev``."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:{PACKAGE}"],
                           check=True, capture_output=True, text=True).stdout.split()
    holder = Path(tempfile.mkdtemp(prefix="mlperf_old_"))
    atexit.register(shutil.rmtree, holder, True)
    where = holder / "mlperf_at_rev"
    where.mkdir()
    for name in names:
        if not name.endswith(".py"):
            continue
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{PACKAGE}/{name}"],
                              check=True, capture_output=True, text=True).stdout
        (where / name).write_text(text.replace("ingest.parsers.mlperf.", "mlperf_at_rev."))
    sys.path.insert(0, str(where.parent))
    return importlib.import_module("mlperf_at_rev")


def _pass(parser: ModuleType, files: list[tuple[bytes, object]]) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    failed = 0
    for data, ctx in files:
        lines = data.decode("utf-8", errors="replace").splitlines()
        try:
            parser.parse(lines, ctx)
        except ParseError:
            failed += 1
    return time.perf_counter() - wall, time.process_time() - cpu, failed


def speed(corpus: Path, repeats: int, old: ModuleType | None) -> dict[str, object]:
    """Parse MB/s of the result files, new (and old) interleaved (rules above)."""
    paths = sorted(corpus.rglob("result_*.txt"))
    files = []
    for path in paths:
        try:
            ctx = new_parser.context(path, str(path), ParseOverrides())
        except ParseError:
            continue
        files.append((path.read_bytes(), ctx))
    size = sum(len(d) for d, _ in files)
    variants: dict[str, ModuleType] = {"new": new_parser}
    if old is not None:
        variants["old"] = old
    times: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in variants}
    failed: dict[str, int] = {}
    for rep in range(repeats):
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in order:
            wall, cpu, failed[name] = _pass(variants[name], files)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
    out: dict[str, object] = {"files": len(files), "mb": size / 1e6, "repeats": repeats}
    for name, t in times.items():
        out[name] = {
            "wall_s_median": statistics.median(t["wall"]),
            "cpu_s_median": statistics.median(t["cpu"]),
            "mb_per_s_wall": size / 1e6 / statistics.median(t["wall"]),
            "mb_per_s_cpu": size / 1e6 / statistics.median(t["cpu"]),
            "wall_s": t["wall"], "cpu_s": t["cpu"], "files_failed": failed[name],
        }
    if old is not None:
        out["speedup_wall"] = statistics.median(times["old"]["wall"]) / statistics.median(
            times["new"]["wall"])
        out["speedup_cpu"] = statistics.median(times["old"]["cpu"]) / statistics.median(
            times["new"]["cpu"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", default=str(DEFAULT_CORPUS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--old-rev", default="HEAD", help="git revision of the parser to compare")
    ap.add_argument("--no-old", action="store_true", help="time the current parser only")
    ap.add_argument("--no-outcomes", action="store_true")
    ap.add_argument("--results-only", action="store_true",
                    help="outcomes of the result_*.txt files only, per round and benchmark "
                         "(a corpus that also holds READMEs, configs and code)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    corpus = Path(args.corpus)
    result: dict[str, object] = {}
    if not args.no_outcomes:
        result["outcomes"] = outcomes(corpus, args.results_only)
        print(json.dumps(result["outcomes"], indent=2))
    old = None if args.no_old else old_parser(args.old_rev)
    result["speed"] = speed(corpus, args.repeats, old)
    sp = result["speed"]
    for name in ("new", "old"):
        if name in sp:  # type: ignore[operator]
            v = sp[name]  # type: ignore[index]
            print(f"{name}: {sp['mb']:.0f} MB in {sp['files']} files, median "  # type: ignore[index]
                  f"{v['wall_s_median']:.2f} s wall ({v['mb_per_s_wall']:.1f} MB/s), "
                  f"{v['cpu_s_median']:.2f} s CPU ({v['mb_per_s_cpu']:.1f} MB/s); "
                  f"{v['files_failed']} files raised ParseError")
    if "speedup_cpu" in sp:  # type: ignore[operator]
        print(f"new/old speed: {sp['speedup_wall']:.1f}x wall, "  # type: ignore[index]
              f"{sp['speedup_cpu']:.1f}x CPU")  # type: ignore[index]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
