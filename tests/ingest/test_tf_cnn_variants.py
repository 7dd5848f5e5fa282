"""tf_cnn_benchmarks variants: precision, compiler, data and system from the log and the
Lambda layout; side files skipped; disagreements rejected; inference kept apart."""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from paths import DATA, SHARED_DATA

from ingest.events import ParseContext
from ingest.parsers import ParseOverrides, registered, side_file, tf_cnn
from ingest.pipeline import discover, ingest_paths, parse_file
from ingest.store import Store

SAMPLE = DATA / "lambda_sample" / "Gold_6230-GeForce_RTX_2080_Ti_trt_TF1_15.logs"
FP32_LOG = SAMPLE / "syn-replicated-fp32-1gpus" / "resnet50-64" / "throughput" / "1"
A100_LOG = DATA / "tf_cnn" / "lambda_7742-8xA100_real_fp16_resnet50-448.txt"
XLA_LINE = ("2020-07-02 11:56:30.000000: I tensorflow/compiler/jit/xla_compilation_cache.cc:238]"
            " Compiled cluster using XLA!  This line is logged at most once for the lifetime of"
            " the process.")


def place(root: Path, text: str, system: str = "Gold_6230-GeForce_RTX_2080_Ti_trt_TF1_15",
          config: str = "syn-replicated-fp32-1gpus", network: str = "resnet50-64",
          rep: str = "1") -> Path:
    """Write ``text`` as a log of the Lambda layout under ``root/logs`` (with the sample
    metadata)."""
    folder = root / "logs" / f"{system}.logs"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLE / "metadata", folder / "metadata")
    log = folder / config / network / "throughput" / rep
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)
    return log


def parse(path: Path, overrides: ParseOverrides | None = None):
    return parse_file(str(path), path, overrides or ParseOverrides(), registered())


def with_xla(text: str) -> str:
    """The log with TensorFlow's XLA compilation line before its warm-up ends."""
    return text.replace("Done warm up\n", f"{XLA_LINE}\nDone warm up\n", 1)


def test_layout_gives_variant_system_and_clock_resolution():
    (run,) = parse(FP32_LOG).runs
    assert run.meta["variant"] == {"compiler": "none", "data": "synthetic", "precision": "fp32"}
    assert run.meta["system"] == "Gold_6230-GeForce_RTX_2080_Ti_trt_TF1_15"
    assert run.meta["clock_resolution_s"] == 1.0  # Lambda stamps whole unix seconds
    assert run.meta["mode"] == "training" and run.segments[0].phase == "train"
    fp16 = SAMPLE / "syn-replicated-fp16-1gpus" / "resnet50-128" / "throughput" / "1"
    (half,) = parse(fp16).runs
    assert half.meta["variant"]["precision"] == "fp16"


def test_log_content_without_layout():
    text = A100_LOG.read_text()
    (plain,) = tf_cnn.parse(text.splitlines(), ParseContext())
    assert plain.meta["variant"] == {"compiler": "none", "data": "real"}  # TF 2.3, no XLA line
    assert "system" not in plain.meta
    lines = text.replace("Mode:", "Precision:   fp16\nMode:", 1).splitlines()
    (run,) = tf_cnn.parse(lines, ParseContext())
    assert run.meta["variant"]["precision"] == "fp16"
    flagged = ["python tf_cnn_benchmarks.py --model=resnet50 --use_fp16 --xla=True", *lines]
    (run,) = tf_cnn.parse(flagged, ParseContext())
    assert run.meta["variant"]["compiler"] == "xla"
    (run,) = tf_cnn.parse(with_xla(text).splitlines(), ParseContext())
    assert run.meta["variant"]["compiler"] == "xla"


def test_xla_from_the_folder_name_and_the_log(tmp_path):
    log = place(tmp_path, with_xla(FP32_LOG.read_text()), system="Gold_6230-RTX_XLA_trt_TF1_15")
    (run,) = parse(log).runs
    assert run.meta["variant"]["compiler"] == "xla"
    assert run.meta["system"] == "Gold_6230-RTX_XLA_trt_TF1_15"


def test_folder_says_xla_but_the_log_ran_without(tmp_path):
    place(tmp_path, FP32_LOG.read_text(), system="Gold_6230-RTX_XLA_trt_TF1_15")
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    report = ingest_paths(store, [str(tmp_path / "logs")])
    # salvaged: stored as the log's evidence (no XLA compilation), with a repair note
    assert not report.rejected and len(report.added) == 1
    (run,) = store.runs()
    assert run.meta["variant"]["compiler"] == "none"
    assert [r["kind"] for r in run.meta["repairs"]] == ["variant_unconfirmed"]
    assert "XLA" in run.meta["warnings"][0] and "--tag" in run.meta["warnings"][0]
    tagged_store = Store(f"sqlite:///{tmp_path / 't.db'}")
    tagged = ingest_paths(tagged_store, [str(tmp_path / "logs")],
                          ParseOverrides(tags=(("compiler", "xla"),)))
    assert not tagged.rejected and len(tagged.added) == 1
    assert tagged_store.runs()[0].meta["variant"]["compiler"] == "xla"


@pytest.mark.parametrize(("config", "fact"), [
    ("real-replicated-fp32-1gpus", "data"),  # the log says imagenet (synthetic)
    ("syn-parameter_server-fp32-1gpus", "variables"),
    ("syn-replicated-fp32-2gpus", "devices"),
    ("syn-replicated-fp32-1gpus-inference", "mode"),
])
def test_log_and_folder_disagree(tmp_path, config, fact):
    log = place(tmp_path, FP32_LOG.read_text(), config=config)
    report = ingest_paths(Store(f"sqlite:///{tmp_path / 's.db'}"), [str(tmp_path / "logs")])
    [err] = report.rejected
    assert err.source == str(log)
    assert f"the log says {fact}" in err.reason and config in err.reason
    assert err.line is not None and err.line > 1  # the header line that says it
    assert report.added == []


def test_batch_folder_disagreement(tmp_path):
    place(tmp_path, FP32_LOG.read_text(), network="resnet50-128")
    [err] = ingest_paths(Store(f"sqlite:///{tmp_path / 's.db'}"), [str(tmp_path / "logs")]).rejected
    assert "batch_per_device 64" in err.reason and "resnet50-128" in err.reason


def test_inference_runs_are_test_phase(tmp_path):
    text = FP32_LOG.read_text().replace("Mode:        training", "Mode:        forward only")
    log = place(tmp_path, text, config="syn-replicated-fp32-1gpus-inference")
    (run,) = parse(log).runs
    assert run.meta["mode"] == "inference"
    assert [s.phase for s in run.segments] == ["test"]


def test_distortions_and_parameter_server_are_variants(tmp_path):
    text = FP32_LOG.read_text().replace("imagenet (synthetic)", "imagenet")
    (run,) = parse(place(tmp_path, text, config="real-replicated-fp32-1gpus-distortions")).runs
    assert run.meta["variant"]["distortions"] == "on" and run.meta["variant"]["data"] == "real"
    text = FP32_LOG.read_text().replace("replicated", "parameter_server")
    (run,) = parse(place(tmp_path, text, config="syn-parameter_server-fp32-1gpus", rep="2")).runs
    assert run.meta["variant"]["variables"] == "parameter_server"


def test_gpu_from_metadata_is_a_repair(tmp_path):
    gpu_lines = re.compile(r"name: |Compute Capability|physical GPU")
    text = "\n".join(line for line in FP32_LOG.read_text().splitlines()
                     if not gpu_lines.search(line)) + "\n"
    (run,) = parse(place(tmp_path, text)).runs
    assert run.deployment is not None and run.deployment.accelerator == "GeForce RTX 2080 Ti"
    [repair] = run.meta["repairs"]
    assert repair["kind"] == "accelerator_from_system" and "metadata" in repair["detail"]
    assert run.meta["warnings"]


def test_side_files_are_skipped_not_rejected(tmp_path):
    log = place(tmp_path, FP32_LOG.read_text())
    thermal = log.parent.parent / "thermal" / "1"
    thermal.parent.mkdir()
    thermal.write_text("1593288199, 1399.6, 61, 60,\n1593288201, 1399.6, 59, 58,\n")
    assert side_file(thermal) and side_file(log.parents[3] / "metadata") and not side_file(log)
    found, skipped, _ = discover([str(tmp_path / "logs")])
    assert [p for _, p in found] == [log]
    assert set(skipped) == {str(thermal), str(log.parents[3] / "metadata")}
    report = ingest_paths(Store(f"sqlite:///{tmp_path / 's.db'}"), [str(tmp_path / "logs")])
    assert not report.rejected and len(report.added) == 1


def _precision_mixes(root: Path) -> tuple[int, list]:
    """Parse every log under ``root``; the (network, deployment, stack, variant) groups that
    hold runs of more than one folder precision."""
    folder_precision: dict[tuple, set[str]] = defaultdict(set)
    parsers, runs = registered(), 0
    found, _, _ = discover([str(root)], parsers)
    for source, path in found:
        try:
            parsed = parse_file(source, path, ParseOverrides(), parsers)
        except ValueError:  # rejected files are not stored: they cannot mix
            continue
        layout = tf_cnn.lambda_layout(path)
        for run in parsed.runs:
            runs += 1
            key = (run.network, run.deployment.key, run.stack,
                   tuple(sorted(run.meta.get("variant", {}).items())))
            folder_precision[key].add(layout["precision"] if layout else "?")
    return runs, [k for k, v in folder_precision.items() if len(v) > 1]


def test_no_group_mixes_precisions_in_the_bundled_tree():
    runs, mixed = _precision_mixes(DATA / "lambda_sample")
    assert runs == 3 and mixed == []


@pytest.mark.skipif(not (SHARED_DATA / "lambda").is_dir(), reason="shared data absent")
def test_no_group_mixes_precisions_in_the_shared_lambda_tree():
    runs, mixed = _precision_mixes(SHARED_DATA / "lambda")
    assert runs > 2000 and mixed == []
