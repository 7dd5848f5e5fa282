"""PyTorch-era training history: Lightning and the Hugging Face Trainer trained here for real,
torchvision references, timm, MMEngine and Detectron2 from public logs (provenance:
tests/data/frameworks/PROVENANCE.md).

* What a real run measured itself (tests/framework_runs.py: steps and seconds at the hooks)
  equals what jobcast stored from the files the library wrote: iterations exactly, train
  seconds within 1 %; warm-up reported; re-ingest adds nothing.
* A forecast of a longer run of the same job from that history (the service's
  ``Forecaster``, end-to-end, citing the stored runs) lies within a factor 2 of the stored
  runs' own seconds per step (history_checks.history_bound: it reads the store only, so the
  machine's load cannot move it; a freshly timed longer run drifted 5x from its history on
  CI, so no fresh timing is asserted).
* The public excerpts parse to the structure their lines show; a run lacking a fact names the
  flag that supplies it.
* ``jobcast ingest`` of one folder mixing every format: per-format counts and the rejections
  with their reasons.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from framework_runs import hf_run, lightning_run
from history_checks import history_bound
from paths import DATA
from typer.testing import CliRunner

from ingest.parsers import registered
from ingest.pipeline import IngestOptions, discover, ingest_paths, parse_file
from ingest.store import Store, files

FRAMES = DATA / "frameworks"
CPU = "1x cpu"
SYSTEM_L, SYSTEM_H = "tiny-lightning", "tiny-hf"


def _parse(path: Path, **flags):
    return parse_file(str(path), path, IngestOptions(**flags), registered())


def _totals(run, phase: str) -> tuple[float, float]:
    segs = [s for s in run.segments if s.phase == phase]
    return sum(s.iterations for s in segs), sum(s.seconds for s in segs)


# -- real Lightning and Hugging Face runs -----------------------------------------------------


@pytest.fixture(scope="module")
def lightning(tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning")
    runs = {"a": lightning_run(root / "a", epochs=2, steps=12),
            "b": lightning_run(root / "b", epochs=1, steps=18)}
    store = Store(f"sqlite:///{root / 'store.db'}")
    report = ingest_paths(store, [str(root / "a"), str(root / "b")],
                          IngestOptions(deployment=CPU, network="tinycnn", system=SYSTEM_L))
    return root, runs, store, report


@pytest.fixture(scope="module")
def huggingface(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    runs = {"a": hf_run(root / "a", max_steps=40), "b": hf_run(root / "b", max_steps=30)}
    store = Store(f"sqlite:///{root / 'store.db'}")
    report = ingest_paths(store, [str(root / "a"), str(root / "b")],
                          IngestOptions(deployment=CPU, network="tinycnn", system=SYSTEM_H))
    return root, runs, store, report


def test_lightning_stores_what_the_run_measured(lightning):
    root, runs, store, report = lightning
    assert report.ok and report.stored == 2, report.rejected
    assert all(Path(s).name in ("hparams.yaml", "metrics.csv") for s in report.skipped)
    for name, measured in runs.items():
        parsed = _parse(root / name / "train.log", deployment=CPU, network="tinycnn")
        [run] = parsed.runs
        steps, seconds = _totals(run, "train")
        assert steps == measured.train_steps
        # within 1 %, or a scheduler time slice on a loaded machine (the run's hooks and the
        # bar read the clock a few calls apart)
        assert seconds == pytest.approx(measured.train_seconds, rel=0.01, abs=0.02)
        assert run.batch_size == 16 and run.meta["hparams_file"].endswith("hparams.yaml")
        assert run.meta["warmup_steps"] >= 1 and run.meta["warmup_seconds"] > 0
        tests = [s for s in run.segments if s.phase == "test"]
        assert [t.iterations for t in tests] == [n for n, _ in measured.validations]
        for seg, (_, secs) in zip(tests, measured.validations, strict=True):
            # the bar stands still from its last train refresh to its validation-end refresh;
            # the run's own hooks bracket the same pass a few callbacks apart
            assert seg.seconds == pytest.approx(secs, rel=0.15, abs=0.05)


def test_huggingface_stores_what_the_run_measured(huggingface):
    root, runs, store, report = huggingface
    assert report.ok and report.stored == 2, report.rejected
    skipped = {Path(s).name for s in report.skipped}
    assert {"trainer_state.json", "training_args.bin", "model.safetensors"} <= skipped
    for name, measured in runs.items():
        [run] = _parse(root / name / "trainer_state.json", deployment=CPU,
                       network="tinycnn").runs
        steps, seconds = _totals(run, "train")
        assert steps == measured.train_steps
        # train_runtime (train + test segments) is the run's own begin-to-end within 1 %; the
        # train part alone depends on where an evaluation starts (the Trainer's eval_runtime
        # leaves out its loader's set-up, the run's hooks cannot)
        assert seconds + _totals(run, "test")[1] == pytest.approx(measured.wall_seconds,
                                                                  rel=0.01)
        assert seconds == pytest.approx(measured.train_seconds, rel=0.05)
        assert run.batch_size == 16
        assert "not separable" in run.meta["warmup"]
        assert len([s for s in run.segments if s.phase == "test"]) == len(measured.validations)


def test_reingest_adds_nothing(lightning, huggingface):
    for root, _, store, _ in (lightning, huggingface):
        before = store.counts()
        again = ingest_paths(store, [str(root / "a"), str(root / "b")],
                             IngestOptions(deployment=CPU, network="tinycnn"))
        assert again.stored == 0 and len(again.duplicates) == 2
        assert store.counts() == before


@pytest.mark.parametrize("which", ["lightning", "huggingface"])
def test_forecast_of_a_longer_run_from_this_history(which, request):
    from jobcast.service.engine.forecaster import Forecaster
    from jobcast.service.engine.request import JobRequest
    from models.e2e import fit_store_report

    root, runs, store, _ = request.getfixturevalue(which)
    fit_store_report(store)
    steps = 60
    system = SYSTEM_L if which == "lightning" else SYSTEM_H
    forecast = Forecaster(store).forecast(JobRequest(
        network="tinycnn", deployment=CPU, batch_size=16, iterations=steps, phase="train",
        system=system)).to_dict()
    assert forecast["route"] == "rate", forecast
    assert forecast["unit"] == "s" and forecast["low"] <= forecast["seconds"] <= forecast["high"]
    assert forecast["model"] and "tinycnn" in forecast["model"]
    cited = json.dumps(forecast)
    assert "run" in cited  # the answer says which history it comes from
    low, high = history_bound(store, "tinycnn")
    assert low <= forecast["seconds"] / steps <= high, (low, high, forecast)


# -- public excerpts --------------------------------------------------------------------------


EXCERPTS = [
    # path, flags, format, runs, (train steps, test steps)
    ("torchvision_ref/detection_finetune.txt", {"network": "maskrcnn", "batch_size": 2},
     "torchvision", (60, 0)),
    ("torchvision_ref/habana_resnet50_8proc.txt", {}, "torchvision", (30, 0)),
    ("timm_train/general_backbone_train.txt", {}, "timm", (66, 60)),
    ("mmengine_run/20230605_200941/20230605_200941.log", {"network": "rtmpose-s"}, "mmengine",
     (126, 12)),
    ("mmengine_run/scalars_only/vis_data/scalars.json", {"network": "resnet18"}, "mmengine",
     None),
    ("detectron2_out/output/metrics.json", {"network": "mask_rcnn_r50_fpn", "batch_size": 2},
     "detectron2", (300, 0)),
    ("lightning_bars/tqdm/train.log", {}, "lightning", (16, 4)),
    ("lightning_bars/rich/train.log", {}, "lightning", (8, 0)),
    ("hf_trainer/trainer_state.json", {"network": "tinycnn"}, "hf_trainer", (20, 4)),
]


@pytest.mark.parametrize("rel,flags,fmt,steps", EXCERPTS, ids=[e[0] for e in EXCERPTS])
def test_excerpts_parse_to_what_their_lines_show(rel, flags, fmt, steps):
    parsed = _parse(FRAMES / rel, deployment=CPU, **flags)
    assert parsed.fmt == fmt
    [run] = parsed.runs
    if steps is not None:
        assert (_totals(run, "train")[0], _totals(run, "test")[0]) == steps
    assert all(s.seconds > 0 and s.iterations >= 1 for s in run.segments)
    assert "warmup" in run.meta


def test_excerpt_facts_from_the_logs_themselves():
    [habana] = _parse(FRAMES / "torchvision_ref/habana_resnet50_8proc.txt", deployment=CPU).runs
    assert (habana.network, habana.batch_size) == ("resnet50", 256 * 8)
    assert habana.meta["world_size"] == 8 and habana.meta["epochs_planned"] == 30
    [timm] = _parse(FRAMES / "timm_train/general_backbone_train.txt", deployment=CPU).runs
    assert (timm.network, timm.batch_size) == ("resnet50", 16)  # 1.663 s x 9.62 samples/s
    assert timm.meta["warmup_steps"] == 1 and timm.meta["warmup_seconds"] == pytest.approx(1.663)
    [mm] = _parse(FRAMES / "mmengine_run/20230605_200941/20230605_200941.log",
                  deployment=CPU, network="rtmpose-s").runs
    assert mm.batch_size == 32 and mm.meta["clock_resolution_s"] == 1.0


@pytest.mark.parametrize("rel,flag", [
    ("timm_train/general_backbone_train.txt", "--deployment"),
    ("detectron2_out/output/metrics.json", "--network"),
    ("torchvision_ref/detection_finetune.txt", "--network"),
    ("mmengine_run/scalars_only/vis_data/scalars.json", "--network"),
])
def test_a_missing_fact_names_its_flag(rel, flag):
    from ingest.events import ParseError

    with pytest.raises(ParseError, match=flag) as err:
        _parse(FRAMES / rel)
    assert err.value.source and err.value.line is not None


def test_side_files_of_the_run_folders_are_skipped():
    found, skipped, _ = discover([str(FRAMES)])
    found = {Path(f).relative_to(FRAMES).as_posix() for f, _ in found}
    skipped = {Path(s).relative_to(FRAMES).as_posix() for s in skipped}
    assert {"hf_trainer/checkpoint-10/trainer_state.json",
            "mmengine_run/20230605_200941/vis_data/scalars.json",
            "mmengine_run/20230605_200941/vis_data/20230605_200941.json",
            "lightning_bars/tqdm/version_0/hparams.yaml",
            "lightning_bars/tqdm/version_0/metrics.csv"} <= skipped
    assert {"hf_trainer/trainer_state.json", "mmengine_run/scalars_only/vis_data/scalars.json",
            "detectron2_out/output/metrics.json"} <= found
    assert not any(name.endswith((".py", ".md")) for name in found)


# -- one folder, every format -----------------------------------------------------------------


def test_ingest_of_a_folder_mixing_every_format(lightning, huggingface, tmp_path):
    from jobcast.cli.app import app

    mixed = tmp_path / "mixed"
    shutil.copytree(FRAMES, mixed / "public", ignore=shutil.ignore_patterns("*.py", "*.md"))
    shutil.copytree(DATA / "keras", mixed / "keras", ignore=shutil.ignore_patterns("*.py"))
    shutil.copytree(lightning[0] / "a", mixed / "lightning_run")
    shutil.copytree(huggingface[0] / "a", mixed / "hf_run")
    if (DATA / "history").is_dir():  # TensorBoard / W&B / MLflow samples, where present
        shutil.copytree(DATA / "history", mixed / "history_a",
                        ignore=shutil.ignore_patterns("*.md"))
    url = f"sqlite:///{tmp_path / 'mixed.db'}"
    result = CliRunner().invoke(app, ["ingest", str(mixed), "--deployment", CPU, "--store", url,
                                      "--workers", "1", "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1  # some runs lack a network: rejected, the others stored
    reasons = {Path(r["source"]).name: r["reason"] for r in report["rejected"]}
    assert reasons and all("pass --" in why or "no " in why for why in reasons.values())
    assert "--network" in reasons["metrics.json"]
    with Store(url).engine.connect() as conn:
        counts = dict(conn.execute(sa.select(files.c.format, sa.func.count())
                                   .group_by(files.c.format)).all())
    # stored where the files name the network; rejected naming --network where they do not
    assert {"torchvision", "timm", "lightning", "jsonl"} <= set(counts)
    assert counts["lightning"] >= 3  # the real run's log, the TQDM and the Rich samples
    for name in ("trainer_state.json", "fit_verbose1.txt", "20230605_200941.log"):
        assert "--network" in reasons[name], reasons[name]
    again = CliRunner().invoke(app, ["ingest", str(mixed), "--deployment", CPU, "--store", url,
                                     "--workers", "1", "--json"])
    assert json.loads(again.stdout)["added"] == []
