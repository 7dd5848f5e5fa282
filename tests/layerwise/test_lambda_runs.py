"""Lambda tf_cnn_benchmarks corpus reader: exact values, bad files as problems, the full corpus."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from paths import DATA

from layerwise.corpora.lambda_runs import (
    COLUMNS,
    parse_config,
    parse_log,
    read_lambda,
    summarise,
)

SAMPLE = DATA / "lambda_sample"
SYSTEM = "Gold_6230-GeForce_RTX_2080_Ti_trt_TF1_15.logs"
FP32_1 = f"{SYSTEM}/syn-replicated-fp32-1gpus/resnet50-64/throughput/1"
FP16_1 = f"{SYSTEM}/syn-replicated-fp16-1gpus/resnet50-128/throughput/1"
FP32_2 = f"{SYSTEM}/syn-replicated-fp32-2gpus/resnet50-64/throughput/1"


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    """A writable copy of the bundled sample."""
    root = tmp_path / "lambda"
    shutil.copytree(SAMPLE, root)
    return root


def _row(frame, file: str) -> dict:
    rows = frame[frame["file"] == file]
    assert len(rows) == 1, file
    return rows.iloc[0].to_dict()


def test_sample_parses_to_the_known_values():
    frame, problems = read_lambda(SAMPLE)
    assert problems == []
    assert list(frame.columns) == list(COLUMNS)
    assert len(frame) == 3
    r = _row(frame, FP32_1)
    assert r["system"] == SYSTEM and r["gpu"] == "GeForce RTX 2080 Ti"
    assert r["tf_version"] == "1.15.3"
    assert (r["gpu_count"], r["precision"], r["data"], r["mode"]) == (1, "fp32", "syn", "training")
    assert (r["network"], r["global_batch"], r["batch_per_gpu"]) == ("resnet50", 64, 64)
    assert r["rep"] == 1
    assert not (r["xla"] or r["xla_in_name"] or r["nvlink"] or r["distortions"] or r["loss_nan"])
    assert r["variable_update"] == "replicated"
    assert r["images_per_sec"] == 292.85
    assert r["step_seconds"] == pytest.approx(64 / 292.85, rel=1e-12)
    assert r["step_images_per_sec_median"] == 293.8  # median of the 11 running-mean lines
    assert (r["header_global_batch"], r["header_batch_per_gpu"], r["header_devices"]) == (64, 64, 1)

    h = _row(frame, FP16_1)
    assert (h["precision"], h["batch_per_gpu"], h["global_batch"]) == ("fp16", 128, 128)
    assert h["images_per_sec"] == 597.08 and h["step_images_per_sec_median"] == 599.8

    # the directory's 64 is per GPU: the header says 128 global, 64 per device on 2 GPUs
    two = _row(frame, FP32_2)
    assert (two["gpu_count"], two["batch_per_gpu"], two["global_batch"]) == (2, 64, 128)
    assert two["images_per_sec"] == 530.29
    assert two["step_seconds"] == pytest.approx(128 / 530.29, rel=1e-12)
    assert two["step_images_per_sec_median"] == 538.5


def test_truncated_zero_and_nan_totals_give_problems_not_rows(corpus: Path):
    text = (corpus / FP32_1).read_text()
    (corpus / FP32_1).write_text(text[: text.index("60\timages/sec")])  # killed mid-run
    (corpus / FP16_1).write_text(text.replace("total images/sec: 292.85", "total images/sec: 0.00"))
    (corpus / FP32_2).write_text(text.replace("total images/sec: 292.85", "total images/sec: nan"))
    frame, problems = read_lambda(corpus)
    assert frame.empty and list(frame.columns) == list(COLUMNS)
    assert len(problems) == 3
    assert problems[0].startswith(f"{FP16_1}: ") and "'0.00'" in problems[0]
    assert problems[1].startswith(f"{FP32_1}: ") and "total images/sec" in problems[1]
    assert problems[2].startswith(f"{FP32_2}: ") and "'nan'" in problems[2]
    assert summarise(frame).empty


def test_bad_directory_names_and_missing_metadata_are_problems(corpus: Path):
    odd = corpus / SYSTEM / "syn-mirrored-fp32-1gpus" / "resnet50-64" / "throughput"
    odd.mkdir(parents=True)
    shutil.copy(corpus / FP32_1, odd / "1")
    (corpus / SYSTEM / "metadata").unlink()
    frame, problems = read_lambda(corpus)
    assert len(frame) == 3 and frame["gpu"].isna().all() and frame["tf_version"].isna().all()
    assert f"{SYSTEM}: no metadata (gpu and tf_version unknown)" in problems
    assert any(p.startswith(f"{SYSTEM}/syn-mirrored-fp32-1gpus/") for p in problems)


def test_header_wins_over_the_directory_and_disagreement_is_reported(corpus: Path):
    wrong = corpus / SYSTEM / "syn-replicated-fp32-1gpus" / "resnet50-32" / "throughput"
    wrong.mkdir(parents=True)
    shutil.copy(corpus / FP32_1, wrong / "1")  # header says 64 per device
    frame, problems = read_lambda(corpus)
    rel = f"{SYSTEM}/syn-replicated-fp32-1gpus/resnet50-32/throughput/1"
    assert _row(frame, rel)["batch_per_gpu"] == 64
    assert problems == [f"{rel}: header 64 per device != directory batch 32"]


def test_xla_follows_the_log_and_name_disagreement_is_one_problem(corpus: Path):
    path = corpus / FP32_1
    text = path.read_text()
    assert "Done warm up" in text
    path.write_text(text.replace("Done warm up", "Compiled cluster using XLA!\nDone warm up"))
    frame, problems = read_lambda(corpus)
    assert _row(frame, FP32_1)["xla"] and not _row(frame, FP32_2)["xla"]
    assert not frame["xla_in_name"].any()
    assert problems == [f"{SYSTEM}: not named XLA but 1 of 3 logs show XLA compilation "
                        "(xla follows the logs)"]


def test_summarise_takes_the_median_over_repetitions(corpus: Path):
    text = (corpus / FP32_1).read_text()
    for rep, total in ((2, "300.00"), (3, "100.00")):
        (corpus / FP32_1).with_name(str(rep)).write_text(
            text.replace("total images/sec: 292.85", f"total images/sec: {total}"))
    frame, problems = read_lambda(corpus)
    assert problems == [] and len(frame) == 5
    summary = summarise(frame)
    assert len(summary) == 3
    r = summary[(summary["precision"] == "fp32") & (summary["gpu_count"] == 1)].iloc[0]
    assert r["reps"] == 3 and r["images_per_sec"] == 292.85
    assert r["step_seconds"] == pytest.approx(64 / 292.85)


def test_parse_config_and_log_rules():
    assert parse_config("real-replicated-fp16-1gpus-distortions-inference") == {
        "data": "real", "variable_update": "replicated", "precision": "fp16", "gpu_count": 1,
        "mode": "inference", "distortions": True,
    }
    assert parse_config("syn-parameter_server-fp32-8gpus")["variable_update"] == "parameter_server"
    for bad in ("syn-replicated-fp32-0gpus", "syn-replicated-bf16-1gpus",
                "syn-replicated-fp32-1gpus-inference-inference", "syn-replicated-fp32-1gpus-x"):
        assert parse_config(bad) is None, bad
    log = parse_log(b"1\timages/sec: 10.0 +/- 0.0 (jitter = 0.0)\tnan 1\n"
                    b"10\timages/sec: 30.0 +/- 0.0 (jitter = 0.0)\t7.0 2\n"
                    b"total images/sec: inf\n")
    assert log["images_per_sec"] is None and log["total"] == "inf"
    assert log["step_median"] == 20.0 and log["loss_nan"] and log["global_batch"] is None


@pytest.fixture(scope="module")
def full(request) -> tuple:
    shared = request.getfixturevalue("shared_data") / "lambda"
    if not shared.is_dir():
        pytest.skip(f"{shared} not present")
    return read_lambda(shared)


def test_full_corpus_counts_and_quirks(full):
    frame, problems = full
    assert len(frame) == 2188
    assert frame.groupby("gpu").size().to_dict() == {
        "GeForce GTX 1080 Ti": 72, "GeForce RTX 2080 Ti": 1200, "Quadro RTX 8000": 864,
        "Tesla V100-SXM2-16GB": 4, "Tesla V100-SXM3-32GB": 48,
    }
    assert sorted(problems) == [
        "Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt2_TF1_15.logs: named XLA but 48 of 144 "
        "logs show no XLA compilation (xla follows the logs)",
        "Gold_6230-GeForce_RTX_2080_Ti_NVLink_XLA_trt_TF2_2.logs: name says TF 2.2 but "
        "metadata says TF 1.15.3 (tf_version follows metadata)",
    ]
    for col in ("images_per_sec", "step_seconds", "step_images_per_sec_median"):
        assert frame[col].map(math.isfinite).all() and (frame[col] > 0).all(), col
    assert (frame["global_batch"] == frame["batch_per_gpu"] * frame["gpu_count"]).all()
    assert (frame["header_devices"] == frame["gpu_count"]).all()
    assert int(frame["loss_nan"].sum()) == 205
    one = frame[(frame["gpu_count"] == 1) & (frame["data"] == "syn")
                & (frame["mode"] == "training") & (frame["variable_update"] == "replicated")]
    assert one.groupby(["gpu", "precision"]).size().to_dict() == {
        (gpu, p): n
        for gpu, n in (("GeForce GTX 1080 Ti", 6), ("GeForce RTX 2080 Ti", 72),
                       ("Quadro RTX 8000", 48), ("Tesla V100-SXM3-32GB", 6))
        for p in ("fp16", "fp32")
    }


def test_full_corpus_keeps_precision_apart(full):
    """Tensor cores: fp16 ResNet-50 training on one RTX 2080 Ti is much faster than fp32."""
    frame = full[0]
    rn = frame[(frame["gpu"] == "GeForce RTX 2080 Ti") & (frame["gpu_count"] == 1)
               & (frame["network"] == "resnet50") & (frame["data"] == "syn")
               & (frame["mode"] == "training")]
    ips = rn.pivot_table(index="system", columns="precision", values="images_per_sec")
    assert len(ips) == 12
    assert (ips["fp16"] > 1.5 * ips["fp32"]).all(), ips
