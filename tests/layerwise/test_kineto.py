"""PyTorch profiler traces as layer rows (layerwise.kineto), from real traces of ResNet-18
training steps profiled here on the CPU (tests/kineto_steps.py, which
benchmarks/kineto_capture.py uses too: ResNet-18 in plain torch, as torchvision builds it;
torchvision itself does not import beside the CPU torch).

* Each forward layer op of a step becomes a row of its kind with the shapes the trace records
  (ResNet-18: 20 convolutions, 20 batch norms, 17 ReLUs, 8 residual adds, 2 pools, 1 linear);
  training rows add the op's backward; rows are in the bench layout ``kind_rows`` reads.
* ``jobcast layerwise train`` fits on the rows of three input sizes and ``jobcast layerwise
  predict`` answers for the held-out fourth (finite, positive; the accuracy figures beside the
  naive rule are benchmarks/kineto_layer_predictor.py's, in docs/history-sources.md).
* A GPU trace names its GPU by ``deviceProperties`` (when a real one is bundled); bad files are
  a TraceError naming the file.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from paths import DATA
from typer.testing import CliRunner

from layerwise.kineto import TraceError, layer_row, load_trace, trace_rows
from layerwise.sources import detect_format, kind_rows

GPU_TRACES = sorted((DATA / "frameworks" / "kineto").glob("*.json.gz"))


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[Path]:
    import torch
    from kineto_steps import capture

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("traces")
    done = [capture(out, "cpu", batch, image, steps=1, warmup=1, compress=False)
            for batch, image in ((2, 32), (4, 32), (2, 48), (4, 48))]
    return [Path(d["trace"]) for d in done]


def test_every_layer_of_a_resnet18_step_becomes_a_row(traces):
    result = trace_rows(traces[:1])
    rows = result.rows
    forward = rows[rows["optimizer"] == "none"]
    assert result.occurrences == 68  # 20 conv + 20 bn + 17 relu + 8 add + 2 pool + 1 linear
    kinds = Counter(forward["layer"])
    assert set(kinds) == {"conv", "bn", "act", "add", "pool", "dense"}
    assert forward["occurrences"].sum() == 68
    conv = forward[forward["layer"] == "conv"]
    stem = conv[conv["kernelsize"] == 7].iloc[0]
    assert (stem["matsize"], stem["strides"], stem["padding"], stem["channels_out"]) == \
        (32, 2, "same", 64)
    shortcut = conv[conv["kernelsize"] == 1]
    assert set(shortcut["padding"]) == {"valid"} and len(shortcut) == 3
    assert (forward["time_ms_median"] > 0).all()
    assert detect_format(rows.columns) == "bench"
    kind_rows(rows)  # the bench layout reads as it is
    assert set(rows["precision"]) == {"fp32"} and set(rows["framework"]) == {"pytorch"}
    assert rows["gpu"].iloc[0].startswith("cpu-") and "hw_peak_tflops" in rows


def test_training_rows_add_the_backward(traces):
    rows = trace_rows(traces[:1]).rows
    key = ["layer", "batchsize", "matsize", "kernelsize", "channels_in", "channels_out",
           "strides"]
    fwd = rows[rows["optimizer"] == "none"].set_index(key)["time_ms_median"]
    train = rows[rows["optimizer"] == "sgd"].set_index(key)["time_ms_median"]
    joined = pd.concat([fwd.rename("f"), train.rename("t")], axis=1, join="inner").dropna()
    assert len(joined) >= 10
    assert (joined["t"] > joined["f"]).mean() > 0.9  # forward + backward > forward


def test_layer_predictor_trains_on_trace_rows_and_predicts_held_out(traces, tmp_path):
    from jobcast.cli.app import app

    rows = pd.concat([trace_rows([t]).rows.assign(trace=t.name) for t in traces])
    counts = rows[rows["trace"] != traces[-1].name]["layer"].value_counts()
    rows = rows[rows["layer"].isin(counts[counts >= 20].index)]  # the predictor's minimum
    held = rows["trace"] == traces[-1].name
    rows[~held].to_csv(tmp_path / "train.csv", index=False)
    rows[held].to_csv(tmp_path / "heldout.csv", index=False)
    runner = CliRunner()
    trained = runner.invoke(app, ["layerwise", "train", "--data", str(tmp_path / "train.csv"),
                                  "--out", str(tmp_path / "model"), "--models", "gbt,linear",
                                  "--gbt-iter", "30", "--threads", "1", "--json"])
    assert trained.exit_code == 0, trained.output
    table = json.loads(trained.stdout)["validation"]
    assert {"conv", "bn", "act"} <= {r["layer"] for r in table}
    predicted = runner.invoke(app, ["layerwise", "predict", "--model", str(tmp_path / "model"),
                                    "--data", str(tmp_path / "heldout.csv"),
                                    "--out", str(tmp_path / "pred.csv"), "--json"])
    assert predicted.exit_code == 0, predicted.output
    pred = pd.read_csv(tmp_path / "pred.csv")
    assert len(pred) == held.sum() and (pred["predicted_ms"] > 0).all()
    assert (pred["low_ms"] <= pred["predicted_ms"]).all()


@pytest.mark.skipif(not GPU_TRACES, reason="no bundled GPU trace")
def test_a_gpu_trace_names_its_gpu_and_times_kernels():
    doc = load_trace(GPU_TRACES[0])
    named = doc["deviceProperties"][0]["name"]
    result = trace_rows(GPU_TRACES[:1])
    assert "H100" in named and "H100" in result.device  # the catalog's name of that GPU
    rows = result.rows
    assert (rows["hw_kind"] == "gpu").all() and (rows["time_ms_median"] > 0).all()
    assert result.occurrences == 68


def test_bad_traces_are_refused_naming_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="bad.json: not JSON"):
        trace_rows([bad])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op",
                                                  "name": "aten::mul", "ts": 0, "dur": 1}]}))
    with pytest.raises(TraceError, match="no layer op"):
        trace_rows([empty])
    with pytest.raises(TraceError, match="not a Kineto trace"):
        (tmp_path / "list.json").write_text("[]")
        trace_rows([tmp_path / "list.json"])


def test_shapes_no_kind_expresses_are_skipped():
    class Op:
        def __init__(self, name, dims, concrete=None):
            self.name = name
            self.args = {"Input Dims": dims, "Concrete Inputs": concrete or []}

    assert layer_row(Op("aten::conv2d", [[1, 3, 32, 24], [8, 3, 3, 3]])) is None  # not square
    assert layer_row(Op("aten::conv2d", [[1, 3, 32, 32], [8, 3, 3, 3]],
                        ["", "", "", "[1, 1]", "[5, 5]", "[1, 1]", "1"])) is None  # padding 5
    dilated = ["", "", "", "[1, 1]", "[2, 2]", "[2, 2]", "1"]
    assert layer_row(Op("aten::conv2d", [[1, 3, 32, 32], [8, 3, 3, 3]], dilated)) is None
    grouped = layer_row(Op("aten::conv2d", [[1, 8, 16, 16], [8, 1, 3, 3]],
                           ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "8"]))
    assert grouped["layer"] == "dwconv" and grouped["padding"] == "same"
