"""Ingest at a cluster's scale (issue 35, cause 5).

``--deployment D --override``: each run that names other GPUs keeps a warning citing the
line that names them; the file is searched once per GPU name
(:class:`ingest.pipeline.NamedLines`), not once per run, and the lines cited are those a
search of the whole file per run finds. Parsing pauses the cycle collector
(:func:`ingest.pipeline.gc_paused`) and leaves it as it found it."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from slurm_shapes import document, history

from fleet.deployment import normalise_deployment
from ingest.parsers import context_for, registered, slurm
from ingest.pipeline import (
    IngestOptions,
    NamedLines,
    apply_overrides,
    gc_paused,
    parse_data,
)

T0 = 1_714_000_000
OVERRIDE = IngestOptions(deployment="1x A100", override=True)
FLAG = normalise_deployment("1x A100")


def _jobs() -> list[dict]:
    """40 jobs on A100s and V100s (8 each); some submit lines name the catalog's GPU."""
    runs = []
    for i in range(40):
        run = {"start": T0 + 600 * i, "seconds": 1800, "gpu_type": "a100" if i % 2 else "v100"}
        if i % 7 == 3:
            run["submit_line"] = "sbatch --constraint='A100 SXM4 40GB' train.sh"
        runs.append(run)
    return history("nightly", runs)


def _per_run_scan(run, lines: list[str]) -> int | None:
    """The line a search of the whole file for this run alone finds (inside the run first)."""
    needle = run.deployment.accelerator.strip().lower() if run.deployment else ""
    if needle:
        lo, hi = max(1, run.first_line or 1), min(len(lines), run.last_line or len(lines))
        for number in [*range(lo, hi + 1), *range(1, len(lines) + 1)]:
            if needle in lines[number - 1].lower():
                return number
    return run.first_line


def test_one_pass_per_gpu_name_cites_the_lines_a_per_run_search_would(tmp_path):
    path = tmp_path / "sacct.json"
    path.write_text(document(_jobs(), "new"))
    lines = path.read_text().splitlines()
    ctx = context_for(path, str(path), slurm, OVERRIDE)
    runs = slurm.parse(lines, ctx)
    expected = [_per_run_scan(run, lines) for run in runs]
    named = NamedLines(lines)
    for index, run in enumerate(runs):
        apply_overrides(run, OVERRIDE, index, named, ctx)
    assert named.scans == 2  # A100 SXM4 40GB and Tesla V100 SXM2 16GB: once each
    assert len(set(expected)) > 2  # some inside their job, the others the file's first
    for run, line in zip(runs, expected, strict=True):
        assert run.stored_key() == FLAG
        assert any(f"(line {line})" in w for w in run.meta["warnings"]), run.meta["warnings"]


def test_the_ingest_path_stores_every_run_under_the_flag(tmp_path):
    path = tmp_path / "sacct.json"
    path.write_text(document(_jobs(), "old"))
    parsed = parse_data(str(path), Path(path), path.read_bytes(), OVERRIDE, registered())
    assert len(parsed.runs) == 40
    assert {r.stored_key() for r in parsed.runs} == {FLAG}
    assert all("by --override" in r.meta["warnings"][-1] for r in parsed.runs)


def test_parsing_pauses_the_cycle_collector_and_restores_it():
    seen = []

    @gc_paused
    def parse(fail: bool) -> None:
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("a bad file")

    assert gc.isenabled()
    parse(False)
    with pytest.raises(ValueError, match="a bad file"):
        parse(True)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        parse(False)
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
    assert getattr(parse_data, "__wrapped__", None) is not None  # the parse path is paused
