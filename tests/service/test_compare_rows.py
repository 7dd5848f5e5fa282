"""``compare`` ranks exactly what was asked: devices x counts x precisions, one ranking per
precision, shared notes once, failed rows kept with their reason (issue 28)."""

from __future__ import annotations

import pytest

from jobcast.service.engine.forecaster import Forecaster
from jobcast.service.features.compare import compare
from jobcast.service.features.prices import load_prices

DEVICES = ["V100", "T4", "Banana"]


@pytest.fixture(scope="module")
def result() -> dict:
    return compare(Forecaster(models=[]), load_prices(None), "resnet50", batch_size=256,
                   epochs=1, devices=[*DEVICES, "t4"], counts=[1, 4],
                   precision=["fp32", "amp"])


def test_rows_are_devices_by_counts_by_precisions(result):
    rows = result["candidates"]
    assert result["precisions"] == ["fp32", "fp16"]  # amp is fp16
    asked = {(r["device"], r["gpus"], r["precision"]) for r in rows}
    assert len(rows) == len(asked) == 3 * 2 * 2  # "t4" is T4: one row, not two
    assert {d for d, _, _ in asked} == set(DEVICES)
    assert {r["source"] for r in rows} == {"asked"}


def test_each_precision_is_ranked_on_its_own(result):
    for precision in result["precisions"]:
        mine = [r for r in result["candidates"] if r["precision"] == precision]
        ok = [r for r in mine if "error" not in r]
        assert [r["rank_time"] for r in ok] == list(range(1, len(ok) + 1))
        assert [r["seconds"] for r in ok] == sorted(r["seconds"] for r in ok)
        assert all(r["answer_precision"] == precision for r in ok)
    order = [r["precision"] for r in result["candidates"]]
    assert order == sorted(order, key=result["precisions"].index)  # grouped, asked order


def test_a_failing_device_keeps_its_rows_and_is_counted(result):
    failed = [r for r in result["candidates"] if "error" in r]
    assert {r["device"] for r in failed} == {"Banana"} and result["failed"] == len(failed) == 4
    assert all("Banana".lower() in r["error"].lower() and "catalog" in r["error"]
               for r in failed)
    assert sum("error" not in r for r in result["candidates"]) == 8


def test_notes_are_shared_and_referenced(result):
    notes = {n["id"]: n["text"] for n in result["notes"]}
    assert list(notes) == list(range(1, len(notes) + 1))
    assert len(set(notes.values())) == len(notes)  # each text once
    ok = [r for r in result["candidates"] if "error" not in r]
    used = [i for r in ok for i in r["notes"]]
    assert set(used) == set(notes) and all(r["notes"] for r in ok)
    assert len(used) > len(notes)  # several rows point at one note
    assert not any("chosen" in r for r in ok)  # the reason is in the notes, not each row



def test_precisions_are_named_one_way_and_bad_ones_refused():
    from jobcast.service.features.compare import canonical_precision

    assert [canonical_precision(p) for p in ("AMP", "fp32", "strict-fp32", "bfloat16")] == [
        "fp16", "fp32", "fp32-strict", "bf16"]
    with pytest.raises(ValueError, match="unknown precision"):
        compare(Forecaster(models=[]), load_prices(None), "resnet50", 64, 1, devices=["T4"],
                precision=["fp8"])


def test_each_row_says_whether_it_fits_per_gpu(result):
    ok = [r for r in result["candidates"] if "error" not in r]
    notes = {n["id"]: n["text"] for n in result["notes"]}
    for r in ok:
        memory = r["memory"]
        assert r["fits"] == memory["fits"] == (memory["total_gib"] <= memory["gpu_memory_gib"])
        assert memory["per_gpu_batch"] == -(-256 // r["gpus"])  # the global batch split
        said = [notes[i] for i in r["notes"] if notes[i].startswith("memory:")]
        assert bool(said) == (not r["fits"]), r  # a row that does not fit says by how much
        assert all("largest batch that fits" in text for text in said)
    by_count = {}
    for r in ok:
        by_count.setdefault((r["device"], r["precision"]), {})[r["gpus"]] = r["memory"]
    for counts in by_count.values():  # more GPUs share the batch: less memory each
        assert counts[4]["total_gib"] < counts[1]["total_gib"]
    assert not any("memory" in r for r in result["candidates"] if "error" in r)
