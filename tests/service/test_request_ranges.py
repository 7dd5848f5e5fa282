"""Job requests at the edge: every number finite and in range, unknown columns named, rows
and fields in every error, CSV files that are not UTF-8 or not CSV refused with file:line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from jobcast.service.engine.request import (
    LIMITS,
    JobRequest,
    JobRequestError,
    read_jobs_rows,
    requests_from_rows,
)

GOOD = {"network": "resnet50", "deployment": "nvidia-a100-sxm4-40gb-x8", "batch_size": 256,
        "iterations": 1000, "phase": "train"}


@pytest.mark.parametrize(("field", "value"), [
    ("iterations", 1e30), ("iterations", 0), ("iterations", -5), ("iterations", 10**400),
    ("batch_size", 2_000_000_000), ("batch_size", 0), ("epochs", 0), ("epochs", 1e7),
    ("dataset_size", 1e11), ("eval_every", -1.0), ("eval_size", 0), ("image_size", 4),
    ("image_size", 100_000), ("iterations", math.inf), ("eval_every", math.inf),
    ("iterations", 10**5000), ("iterations", "9" * 5000),
], ids=lambda v: v if isinstance(v, str) and len(v) < 20 else type(v).__name__)
def test_numbers_out_of_range_name_the_field(field, value):
    with pytest.raises(JobRequestError) as err:
        JobRequest.from_mapping({**GOOD, field: value}, where="jobs.csv:7")
    assert err.value.field == field
    assert str(err.value).startswith(f"jobs.csv:7: {field} must be")


def test_bounds_hold_at_their_ends_and_come_from_one_table():
    for field, limit in LIMITS.items():
        low = limit.low if not limit.open_low else limit.low + 0.5
        for value in (low, limit.high):
            req = JobRequest.from_mapping({**GOOD, field: value})
            assert getattr(req, field) == value
    with pytest.raises(JobRequestError, match="iterations"):
        JobRequest.from_mapping({**GOOD, "epochs": 1e6, "dataset_size": 1e10,
                                 "batch_size": 1}).validate()


def test_types_text_and_booleans():
    for value in (True, "true", [1], {"a": 1}):
        with pytest.raises(JobRequestError, match="batch_size must be a number") as err:
            JobRequest.from_mapping({**GOOD, "batch_size": value})
        assert err.value.field == "batch_size"
    with pytest.raises(JobRequestError, match="control characters"):
        JobRequest.from_mapping({**GOOD, "network": "res\x00net"})
    with pytest.raises(JobRequestError, match="characters long"):
        JobRequest.from_mapping({**GOOD, "stack": "x" * 10_000})
    with pytest.raises(JobRequestError, match="network must be text"):
        JobRequest.from_mapping({**GOOD, "network": ["resnet50"]})


def test_served_rows_name_row_and_field_and_refuse_unknown_columns():
    out = requests_from_rows([GOOD, {**GOOD, "colour": "red"}, {**GOOD, "iterations": 1e30},
                              "not a row", {**GOOD, "network": "../models/x.keras"}])
    assert isinstance(out[0], JobRequest)
    assert [(e.row, e.field) for e in out[1:]] == [
        (1, "colour"), (2, "iterations"), (3, None), (4, "network")]
    assert "unknown column(s) 'colour'" in str(out[1])
    assert out[2].as_dict() == {"error": str(out[2]), "row": 2, "field": "iterations"}
    with pytest.raises(JobRequestError):  # plain mappings ignore unknown keys unless strict
        JobRequest.from_mapping({**GOOD, "colour": "red"}, strict=True)
    assert JobRequest.from_mapping({**GOOD, "colour": "red"}).network == "resnet50"


def test_csv_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_bytes(b"network,deployment,batch_size,iterations,phase\n"
                     b"resnet50,x,256,100,train\nres\xffnet,x,1,1,train\n")
    with pytest.raises(JobRequestError, match=r"jobs\.csv:3: not UTF-8 \(byte 0xff at column 4\)"):
        read_jobs_rows(path)
    path.write_bytes(b"\xef\xbb\xbf" + b"network,batch_size\nvgg16,32\n")  # a BOM is fine
    assert read_jobs_rows(path)[0].network == "vgg16"


def test_csv_rows_report_their_own_line(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("network,batch_size,iterations\nvgg16,32,10\n\nvgg16,32,1e999\n"
                    "vgg16,32,10,extra\n")
    ok, inf, extra = read_jobs_rows(path)
    assert ok.iterations == 10
    assert str(inf).startswith(f"{path}:4: iterations must be finite")
    assert str(extra).startswith(f"{path}:5: 1 value(s) more than")
    path.write_text('network,batch_size\nvgg16,32\n"' + "x" * 200_000 + '",1\n')
    with pytest.raises(JobRequestError, match=r"jobs\.csv:3: not a readable CSV row"):
        read_jobs_rows(path)


def test_cli_non_utf8_jobs_file_is_one_line_without_traceback(tmp_path):
    jobs = tmp_path / "jobs.csv"
    jobs.write_bytes(b"network,deployment,batch_size,iterations,phase\n\xff\xfe,x,1,1,train\n")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "jobcast", "predict", "--jobs", str(jobs), "--store",
         f"sqlite:///{tmp_path / 'jobcast.db'}", "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "jobs.csv:2: not UTF-8" in lines[0], lines
    if proc.stdout.strip():  # --json: the error object on stdout too
        assert "jobs.csv:2: not UTF-8" in json.loads(proc.stdout)["error"]["message"]


def test_evaluations_past_the_step_bound_are_a_request_error_not_a_bug():
    from jobcast.service.engine.forecaster import Forecaster

    req = JobRequest(network="resnet50", device="V100", batch_size=1, epochs=100,
                     dataset_size=1000, eval_every=1, eval_size=1e10)
    with pytest.raises(JobRequestError, match="evaluation iterations") as err:
        req.validate()
    assert err.value.field == "eval_every"
    out = Forecaster(None).forecast(req)
    assert not out.ok and out.problem.kind == "request" and out.problem.field == "eval_every"
