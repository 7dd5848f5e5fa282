"""Latency of a layerwise forecast of a known network at a batch size never asked before.

* ``cli``: wall time of ``jobcast predict --network N --device D --batch-size B
  --iterations 100 --json`` in a fresh process (imports, store, predictor load, zoo spec,
  pricing), B new each time, on an empty store (made at the schema's head first: a store
  without history, which the CLI recognises without opening it, ``ingest.store_probe``), with
  the bytecode of jobcast's modules cached as an installed package has it
  (``PYTHONPYCACHEPREFIX`` in a temporary folder: nothing is written into the checkout);
  ``cli, no bytecode cache``: the same, compiling jobcast's modules from source in every
  process, as this checkout runs under ``PYTHONDONTWRITEBYTECODE=1``; both interleaved run by
  run with the same command on ``--baseline-ref`` (a ``git archive`` of that commit in a
  temporary folder, same interpreter and packages, its own empty store made by its own code,
  bytecode cached);
* ``layerwise only, fresh process``: ``layerwise.quick.forecast_fast`` of the same request in
  a fresh ``python -c`` (what the layerwise part costs without the forecaster around it);
* ``served``: ``Forecaster.forecast`` in this process (what a served model does per request),
  B new each time, after one warm-up: over the empty store opened the normal way, and
  (interleaved) without a store (the CLI's path when the store holds no history);
* ``forecast_network``: the layerwise call alone in this process, array path and (interleaved)
  the DataFrame path it replaces;
* ``machine reference``: a fresh ``python -c "import numpy"`` (interleaved), no jobcast code:
  how fast this machine starts a process, so tables from different machines compare (added
  2026-12-01, when the same commit's CLI measured 318 ms on one machine and 628 ms on another).

Medians and p90 are reported (the machine drifts between processes); one ``-X importtime``
run of the CLI says where its time goes.

    .venv/bin/python benchmarks/layerwise_latency.py [--reps 9] [--baseline-ref HEAD] \
        [--out docs/lab/layerwise-latency.md]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from lib import REPO as ROOT

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
ITERATIONS = 100  # the CLI asks for a job length (steps) since the whole job became its answer
CPU: dict[str, list[float]] = defaultdict(list)  # CPU seconds (user + sys) of each child


def _child_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


HEAVY = ("pandas", "sklearn", "scipy", "sqlalchemy", "numpy", "typer", "pydantic",
         "typer._adapters", "rich.console", "jobcast.cli.mlops", "jobcast.cli.stack",
         "jobcast.cli.app", "ingest.store_probe", "jobcast.service.engine.forecaster",
         "layerwise.quick")


def cli_once(tree: Path, batch: int, store: str, network: str, device: str,
             cache: Path | None) -> float:
    """Wall seconds of one ``jobcast predict``; ``cache``: the bytecode cache folder (None:
    compile jobcast's modules from source, nothing written)."""
    env = {**ENV, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"PYTHONPYCACHEPREFIX": str(cache)} if cache else
               {"PYTHONDONTWRITEBYTECODE": "1"})
    start, cpu = time.perf_counter(), _child_cpu()
    done = subprocess.run(
        [sys.executable, "-m", "jobcast", "predict", "--network", network, "--device", device,
         "--batch-size", str(batch), "--iterations", str(ITERATIONS), "--store", store, "--json"],
        capture_output=True, text=True, env=env, cwd=tree)
    wall = time.perf_counter() - start
    CPU[f"{tree}:{cache is not None}"].append(_child_cpu() - cpu)
    if done.returncode != 0:
        raise SystemExit(f"jobcast predict failed in {tree}: {done.stderr[-2000:]}")
    json.loads(done.stdout)
    return wall


def make_store(tree: Path, url: str) -> None:
    """An empty store at ``url``, made by ``tree``'s own code (its schema)."""
    code = f"from ingest.store import Store\nStore({url!r})\n"
    subprocess.run([sys.executable, "-c", code], check=True, env={**ENV, "PYTHONPATH": str(tree)},
                   cwd=tree, capture_output=True)


def layerwise_once(batch: int, network: str, device: str, cache: Path) -> float:
    code = ("from layerwise.quick import forecast_fast\n"
            f"assert forecast_fast({network!r}, device={device!r}, batch_size={batch}, "
            "optimizer='sgd')['batch_seconds'] > 0\n")
    env = {**{k: v for k, v in ENV.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "PYTHONPYCACHEPREFIX": str(cache)}
    start, cpu = time.perf_counter(), _child_cpu()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    CPU["fresh"].append(_child_cpu() - cpu)
    if done.returncode != 0:
        raise SystemExit(f"layerwise forecast failed: {done.stderr[-2000:]}")
    return wall


def reference_once() -> float:
    """Wall seconds of a fresh ``python -c "import numpy"`` (the machine reference)."""
    start, cpu = time.perf_counter(), _child_cpu()
    subprocess.run([sys.executable, "-c", "import numpy"], check=True, env=ENV,
                   capture_output=True)
    wall = time.perf_counter() - start
    CPU["reference"].append(_child_cpu() - cpu)
    return wall


def baseline_tree(ref: str, into: Path) -> Path:
    """The repository at ``ref`` (``git archive``) under ``into``."""
    archive = into / "baseline.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), ref], cwd=ROOT,
                   check=True)
    tree = into / "baseline"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def heavy_imports(network: str, device: str, store: str, cache: Path
                  ) -> list[tuple[str, float, str]]:
    """(package, cumulative import ms, the first module outside it whose import pulled it in)
    for the packages of :data:`HEAVY` in one ``-X importtime`` run of the CLI."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "jobcast", "predict", "--network", network,
         "--device", device, "--batch-size", "64", "--iterations", str(ITERATIONS), "--store",
         store, "--json"],
        capture_output=True, text=True, cwd=ROOT,
        env={**{k: v for k, v in ENV.items() if k != "PYTHONDONTWRITEBYTECODE"},
             "PYTHONPYCACHEPREFIX": str(cache)})
    entries = []  # (depth, name, cumulative ms), children before their parent
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _, cumulative, name = line.split("|")
            depth = (len(name) - len(name.lstrip()) - 1) // 2
            entries.append((depth, name.strip(), int(cumulative) / 1000.0))
    out = []
    for i, (depth, name, ms) in enumerate(entries):
        if name not in HEAVY:
            continue
        parent, level = "(top level)", depth
        for d, n, _ in entries[i + 1:]:  # ancestors follow their children, one level up each
            if d < level:
                level = d
                if n != name and not n.startswith(name + "."):
                    parent = n
                    break
        out.append((name, ms, parent))
    return out


NOTES = """
How the layerwise part got fast (issue 23):

* The shipped trees are evaluated from their numpy arrays (`layerwise.forest`: exported from
  scikit-learn once at build time, equal to scikit-learn's evaluation to float32 rounding of the
  leaves, `tests/layerwise/test_forest_arrays.py`); all trees of a forecast in one walk.
* `layerwise.efficiency_arrays` prices row dicts with numpy alone (physics, features, trees,
  intervals); `EfficiencyPredictor.predict` on a DataFrame goes through it (same numbers).
* `layerwise.quick.forecast_fast` is `forecast_network`'s roofline-efficiency path on row
  dicts (`forecast_network` calls it first; `tests/layerwise/test_quick.py` checks every shipped
  network against the DataFrame path), and derives a zoo network at a new batch size from two
  earlier decompositions when every batch-dependent value is exactly proportional to the batch.
* The layer kinds import pandas for annotations only, so the layerwise path imports no
  pandas, scikit-learn or scipy: `layerwise only, fresh process` above.

* A forecast of a known network imports neither scikit-learn nor SciPy
  (`tests/test_import_budget.py`, a module-set check): the selector's judging half
  (`models.relation.SelectorCells`, the shipped prior) is plain Python, the estimators that
  need scikit-learn or SciPy (`models.selector.BacktestSelector`, the hybrid's
  `jobcast.service.engine.batch_shape`, `models.phase_model`, `models.whole_job`, `models.scaling`,
  `models.scale_calibration`, `layerwise.compose`) are imported inside the functions that fit them
  or read a fitted one from history.

How `jobcast predict` of a known network lost pandas and SQLAlchemy (issue 23): they were
about 0.28 s of its 0.72 s (the table before this change), loaded because the forecaster
opened the store and read its run summaries as a DataFrame even when the store held nothing.

* `ingest.store_probe.holds_no_history` asks a SQLite store with the standard library's
  `sqlite3`, read-only (`mode=ro`: no file is created or changed), whether it holds any run,
  fitted model or fit artifact at the code's schema revision; a default store not created yet
  holds none. Whatever it is not sure of (PostgreSQL, in memory, another revision, a locked or
  foreign file, any row) takes the normal path, with its errors.
* Where the store holds none, `jobcast predict` gives the forecaster no store, and a
  forecaster without history does not build the history routes
  (`jobcast.service.engine.forecaster.HISTORY_ROUTES`: they would propose and miss nothing), so the
  forecast loads neither pandas nor SQLAlchemy (`tests/test_import_budget.py`, module sets).
  Answers, JSON and messages are the empty store's (`tests/service/test_no_history.py`: twelve
  requests, failures among them; checked once by hand against commit `9db09e0` too: the
  output, exit code and data directory of thirteen `jobcast predict` commands are the same).
* The service modules import pandas, the store and the fitting modules inside the functions
  that read history (`candidates.to_job` takes `None` for "no runs behind it"; the end-to-end
  route holds no DataFrame until it has a model); `jobcast.cli.views` imports Rich's tables
  when it draws one; `jobcast.cli.mlops` reads serve's option defaults from
  `jobcast.mlops.limits` and imports the server (asyncio) only in `serve`.
* Served: the memory verdict read the network's zoo spec from its JSON twice per request;
  `layerwise.memory.network_layers` now keeps it per network and framework for the process
  (about 10 -> 6.5 ms per warm forecast on this machine).

What is left (the import table): typer with pydantic (typer 0.29 coerces every option through
a pydantic `TypeAdapter`), numpy (the layerwise pricing needs it) and the first layerwise
forecast of a process (the shipped trees and the zoo spec; `served` is the warm figure).

Reading the table: the 0.5 s target is the wall of `jobcast predict` on a quiet machine. On a
shared, loaded one (the load average above) the wall stretches with the other work; the CPU
column and the interleaved runs of `--baseline-ref` (same machine, same minutes) are the fair
comparison. Machines differ too: on 2026-11-26 this benchmark's machine ran the CLI in 318 ms
and imported numpy in 35 ms; on 2026-12-01 (a slower, also 2-core machine; numpy 77 ms in
the import table) commit `ba81ae0`, which differs from that one by two rules of pricing, took
628 ms. Compare tables through the machine reference row, not across them.
"""


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.2f}" for x in avg)


def stats(values: list[float]) -> str:
    ms = np.asarray(values) * 1000.0
    return f"{np.median(ms):.1f} | {np.quantile(ms, 0.9):.1f} | {len(ms)}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--network", default="resnet50")
    ap.add_argument("--device", default="V100")
    ap.add_argument("--baseline-ref", default="HEAD",
                    help="commit whose CLI runs interleaved with this tree's ('' = none)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "lab" / "layerwise-latency.md"))
    args = ap.parse_args()
    import layerwise.quick as quick

    from ingest.store import Store
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest
    from layerwise.forecast import forecast_network

    load_start = os.getloadavg()
    rng = np.random.default_rng(0)
    # batch sizes that fit in the GPU's memory (a larger one is refused, not priced)
    batches = rng.permutation(np.arange(17, 171))[: 9 * args.reps + 4].tolist()
    times: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/store.db"
        base = baseline_tree(args.baseline_ref, Path(tmp)) if args.baseline_ref else None
        if base is not None:  # a store of its own: the schema may have moved since
            make_store(base, f"sqlite:///{tmp}/base.db")
        fc, bare = Forecaster(Store(store)), Forecaster(None)
        req = dict(network=args.network, device=args.device, iterations=ITERATIONS)
        assert fc.forecast(JobRequest(batch_size=batches.pop(), **req)).ok
        assert bare.forecast(JobRequest(batch_size=batches.pop(), **req)).ok
        fast = quick.forecast_fast
        cache = Path(tmp) / "pycache"
        trees = [(ROOT, store)] + ([(base, f"sqlite:///{tmp}/base.db")] if base else [])
        for tree, url in trees:  # fill the bytecode cache (untimed)
            cli_once(tree, 17 + len(url) % 50, url, args.network, args.device, cache)
        layerwise_once(171, args.network, args.device, cache)
        CPU.clear()  # the warm-up runs
        for _ in range(args.reps):
            times["cli"].append(cli_once(ROOT, batches.pop(), store, args.network, args.device,
                                         cache))
            times["cli_src"].append(cli_once(ROOT, batches.pop(), store, args.network,
                                             args.device, None))
            if base is not None:
                times["cli_base"].append(cli_once(base, batches.pop(),
                                                  f"sqlite:///{tmp}/base.db", args.network,
                                                  args.device, cache))
            times["fresh"].append(layerwise_once(batches.pop(), args.network, args.device,
                                                 cache))
            times["reference"].append(reference_once())
            start = time.perf_counter()
            out = fc.forecast(JobRequest(batch_size=batches.pop(), **req))
            times["served"].append(time.perf_counter() - start)
            assert out.ok, out
            start = time.perf_counter()
            out = bare.forecast(JobRequest(batch_size=batches.pop(), **req))
            times["bare"].append(time.perf_counter() - start)
            assert out.ok, out
            for name, on in (("array", True), ("frame", False)):
                quick.forecast_fast = fast if on else (lambda *a, **k: None)
                start = time.perf_counter()
                forecast_network(args.network, device=args.device, batch_size=batches.pop(),
                                 optimizer="sgd")
                times[name].append(time.perf_counter() - start)
            quick.forecast_fast = fast
        heavy = heavy_imports(args.network, args.device, store, cache)
    cpu = {"cli": CPU[f"{ROOT}:True"], "cli_src": CPU[f"{ROOT}:False"],
           "cli_base": CPU[f"{base}:True"], "fresh": CPU["fresh"],
           "reference": CPU["reference"]}
    rows = [("cli: `jobcast predict` (fresh process, wall)", "cli"),
            ("cli, no bytecode cache (interleaved)", "cli_src"),
            (f"cli at `{args.baseline_ref}` (interleaved)", "cli_base"),
            ("layerwise only, fresh process (`forecast_fast`)", "fresh"),
            ("served: `Forecaster.forecast` in process (empty store)", "served"),
            ("served without a store (the CLI's path here; interleaved)", "bare"),
            ("`forecast_network`, array path", "array"),
            ("`forecast_network`, DataFrame path (interleaved)", "frame"),
            ('machine reference: `python -c "import numpy"` (fresh process, interleaved)',
             "reference")]
    doc = ["# Layerwise forecast latency (known network, new batch size)\n\n",
           f"Command: `.venv/bin/python benchmarks/layerwise_latency.py --reps {args.reps}` "
           f"({args.network} on {args.device}, training step, a new batch size every call; "
           "2 CPU cores shared with other work; load average over 1/5/15 min "
           f"{_load(load_start)} at the start, {_load(os.getloadavg())} at the end).\n\n",
           "| variant | median ms | p90 ms | n | CPU ms (median) |\n|---|---|---|---|---|\n"]
    doc += [f"| {label} | {stats(times[key])} | "
            + (f"{np.median(cpu[key]) * 1000:.1f}" if cpu.get(key) else "") + " |\n"
            for label, key in rows if times[key]]
    doc.append("\nCPU ms: user + system CPU time of the fresh process, which the other work "
               "on the machine moves less than the wall; the in-process rows are the wall "
               "time of a warm process.\n")
    doc.append("\nWhere one `jobcast predict` spends its imports (`-X importtime`: cumulative ms "
               "of each package's first import, and the module that pulled it in):\n\n"
               "| package | ms | imported by |\n|---|---|---|\n")
    doc += [f"| {name} | {ms:.0f} | {parent} |\n" for name, ms, parent in heavy]
    doc.append(NOTES)
    Path(args.out).write_text("".join(doc))
    print("".join(doc))


if __name__ == "__main__":
    main()
