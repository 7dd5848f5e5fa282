"""A new log format is one module and one registration (issue 26, the "where do I add" row).

This test module *is* the format: ``FORMAT``, ``sniff`` and ``parse`` below make a toy CSV
log (``toy_step,seconds,...``: one progress mark a row). :func:`ingest.parsers.register`
puts it first in the detection order while a test runs; nothing else in the library names
it. Its files end in ``.csv``, which a folder ingest hands to a parser whose ``sniff`` says
yes. It then flows through every door a built-in format does: ``ingest_paths`` in this
process and in a pool of parsing processes (which learn the parent's registry and import
this module by name: pytest put its folder on ``sys.path``, and the pool's processes get the
parent's path), ``jobcast ingest --json``, the fit, a forecast from history and ``compare``.
Ray's tasks parse it too: ``tests/ingest/test_ray_ingest.py`` (where a local Ray runs).

No timing is hard-coded: each expectation is derived from the rows the test writes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleet.deployment import Deployment
from ingest import parallel
from ingest.events import ParseContext, ParsedRun, ParseError, Segment
from ingest.parsers import names, register, unregister
from ingest.pipeline import ingest_paths
from ingest.store import Store

FORMAT = "toy-csv"
LABEL = "toy CSV"
HEADER = "toy_step,seconds,network,deployment,batch_size,system,start"

# --- the format (all of it) -----------------------------------------------------------------


def sniff(head: list[str]) -> bool:
    """A toy log starts with its header line."""
    return bool(head) and head[0].strip() == HEADER


def parse(lines: list[str], ctx: ParseContext) -> list[ParsedRun]:
    """One run: a train segment from the first to the last mark, each row a progress point
    (steps, seconds since the start). A row that is not numbers is a :class:`ParseError` at
    its line."""
    marks: list[tuple[float, float]] = []
    first: list[str] = []
    for number, line in enumerate(lines[1:], start=2):
        cells = line.strip().split(",")
        if cells == [""]:
            continue
        if len(cells) != 7:
            raise ParseError(f"{len(cells)} cells, not 7", line=number)
        try:
            marks.append((float(cells[0]), float(cells[1])))
        except ValueError:
            raise ParseError(f"step and seconds must be numbers, not {cells[:2]}",
                             line=number) from None
        first = first or cells
    if not marks:
        return []
    _, _, network, deployment, batch, system, start = first
    steps, seconds = marks[-1]
    segment = Segment("train", steps, seconds, batch_size=int(batch), start_time=float(start),
                      line=len(lines), points=tuple(marks[:-1]))
    return [ParsedRun(format=FORMAT, network=network, deployment=Deployment.parse(deployment),
                      stack="ToyTorch 1.0", batch_size=int(batch), start_time=float(start),
                      segments=[segment], first_line=2, last_line=len(lines),
                      meta={"system": system, "parsed_in": os.getpid()})]


# --- the tests ------------------------------------------------------------------------------

ME = __name__  # "test_toy_log_format": pytest imports this file by its name
DAY = 86400.0
RATE = {"lab/toy-a": 0.25, "lab/toy-b": 0.125}  # seconds per step, per system
DEPLOYMENT = "8x V100"


@pytest.fixture
def toy_format():
    """The toy format, registered first while one test runs."""
    register(ME, first=True)
    yield
    unregister(ME)


def _write_log(path: Path, system: str, start: float, steps: int = 1000) -> Path:
    """Ten marks of a ``RATE[system]`` run (plus 4 s of start-up) of ``steps`` steps."""
    rows = [HEADER]
    for i in range(1, 11):
        step = steps * i // 10
        rows.append(f"{step},{4.0 + RATE[system] * step},resnet50,{DEPLOYMENT},256,{system},"
                    f"{start}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")
    return path


def toy_tree(root: Path) -> list[Path]:
    """Three runs per system in ``.csv`` files, a bad one, and a CSV table that is no log."""
    logs = [_write_log(root / system.split("/")[1] / f"run{i}.csv", system, 1.6e9 + i * DAY)
            for system in RATE for i in range(3)]
    (root / "bad.csv").write_text(f"{HEADER}\n100,soon,resnet50,{DEPLOYMENT},256,x,1.6e9\n")
    (root / "table.csv").write_text("epoch,loss\n1,0.5\n")  # a metric table: skipped
    return logs


def test_registration_is_first_and_undone(toy_format):
    assert names()[0] == ME
    unregister(ME)
    assert ME not in names()
    register(ME, first=True)  # for the fixture's unregister
    with pytest.raises(ValueError, match="already registered"):
        register(ME)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_folder_of_toy_logs_is_ingested(tmp_path, toy_format, monkeypatch, workers):
    """Every toy log is stored, in this process and in a pool of two (whose processes parse
    them: the stored pid is theirs); the bad file is rejected at its line, the table skipped."""
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # a pool even for this small tree
    logs = toy_tree(tmp_path / "logs")
    store = Store(f"sqlite:///{tmp_path / 'toy.db'}")
    report = ingest_paths(store, [str(tmp_path / "logs")], workers=workers)
    assert sorted(s for s, _ in report.added) == sorted(str(p) for p in logs)
    [bad] = report.rejected
    assert (bad.source, bad.line) == (str(tmp_path / "logs" / "bad.csv"), 2)
    assert report.skipped == [str(tmp_path / "logs" / "table.csv")]
    runs = store.runs()
    assert {r.format for r in runs} == {FORMAT} and len(runs) == len(logs)
    assert {r.stack for r in runs} == {"ToyTorch 1.0"}
    parsed_in = {r.meta["parsed_in"] for r in runs}
    if workers == 1:
        assert parsed_in == {os.getpid()}
    else:  # parsed by the pool's processes, which learned the registry from this one
        assert os.getpid() not in parsed_in
    assert [r.reason for r in store.rejections()] == [bad.reason]


def test_toy_logs_reach_the_cli_fit_forecast_and_compare(tmp_path, toy_format):
    """``jobcast ingest --json`` stores them; the fit and a forecast from the system's own
    history answer from them; ``compare --history`` shows the stored deployment."""
    from jobcast.cli.app import app
    from jobcast.service.engine.fitting import fit_store_all
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest
    from jobcast.service.features.compare import compare
    from jobcast.service.features.prices import load_prices

    logs = toy_tree(tmp_path / "logs")
    url = f"sqlite:///{tmp_path / 'toy.db'}"
    out = CliRunner().invoke(app, ["ingest", str(tmp_path / "logs"), "--store", url,
                                   "--workers", "1", "--json"])
    assert out.exit_code == 1, out.output  # the bad file is rejected, the rest stored
    payload = json.loads(out.stdout)
    assert payload["stored"] == len(logs) and payload["store"]["runs"] == len(logs)
    assert [r["line"] for r in payload["rejected"]] == [2]

    store = Store(url)
    outcome = fit_store_all(store, backtest=False)
    assert outcome.report.models
    forecaster = Forecaster(store)
    for system, rate in RATE.items():
        ask = JobRequest.from_mapping({"network": "resnet50", "deployment": DEPLOYMENT,
                                       "batch_size": 256, "iterations": 2000, "phase": "train",
                                       "system": system})
        answer = forecaster.forecast(ask)
        truth = 4.0 + rate * 2000
        assert answer.ok and str(answer.route) == "rate", answer
        assert str(answer.details["candidate"]).startswith("own"), answer.details
        assert abs(answer.seconds - truth) / truth < 0.05

    table = compare(forecaster, load_prices(), "resnet50", batch_size=256, epochs=1,
                    devices=[], include_history=True)
    history = [r for r in table["candidates"] if r["source"] == "history"]
    assert history and all("error" not in r for r in history), table["candidates"]
    assert {r["route"] for r in history} == {"rate"}
    assert {r["deployment"] for r in history} == {Deployment.parse(DEPLOYMENT).key}
