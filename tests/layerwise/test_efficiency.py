"""The roofline-efficiency predictor: extrapolation by construction, unseen GPUs, flags, I/O."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from layerwise.efficiency import EfficiencyPredictor, chip_of
from layerwise.roofline import PhysicsError, physics_frame
from layerwise.sources import SourceFormatError, detect_format, kind_rows, unsupported
from tests.paths import DATA

SLICES = DATA / "neusight"


def _training_rows() -> tuple[pd.DataFrame, pd.Series]:
    parts, times = [], []
    for name in ("conv_slice", "dense_slice"):
        r, t = kind_rows(pd.read_csv(DATA / "justus2018" / f"{name}.csv.gz"))
        parts.append(r)
        times.append(t)
    for name in ("conv", "linear", "elementwise", "ln", "softmax"):
        r, t = kind_rows(pd.read_csv(SLICES / f"{name}_slice.csv.gz"))
        keep = r.index.difference(unsupported(r))
        parts.append(r.loc[keep])
        times.append(t.loc[keep])
    rows = pd.concat(parts, ignore_index=True)
    return rows, pd.concat(times, ignore_index=True)


@pytest.fixture(scope="module")
def fitted() -> EfficiencyPredictor:
    rows, ms = _training_rows()
    return EfficiencyPredictor(max_iter=30, interval_refit_rows=2000).fit(rows, ms)


def _conv(batch: int, gpu: str, precision: str = "fp32") -> dict:
    return {"layer": "conv", "batchsize": batch, "matsize": 56, "kernelsize": 3,
            "channels_in": 128, "channels_out": 128, "strides": 1, "padding": "same",
            "use_bias": True, "activation": "relu", "optimizer": "none",
            "precision": precision, "framework": "tensorflow", "gpu": gpu}


def test_formats_are_told_by_their_columns():
    assert detect_format(["gpu", "batchsize", "kernelsize", "time_ms_median"]) == "justus"
    assert detect_format(["op", "gpu", "latency_ms", "batch", "h"]) == "neusight"
    assert detect_format(["layer", "batchsize", "matsize"]) == "bench"
    with pytest.raises(SourceFormatError, match="latency_ms"):
        detect_format(["gpu", "seconds"])


def test_neusight_rows_map_to_kinds():
    rows, ms = kind_rows(pd.read_csv(SLICES / "elementwise_slice.csv.gz"))
    ops = pd.read_csv(SLICES / "elementwise_slice.csv.gz")["op"]
    assert set(rows.loc[ops.eq("add"), "layer"]) == {"add"}
    assert set(rows.loc[ops.eq("gelu"), "activation"]) == {"tanh"}
    assert (rows["framework"] == "pytorch").all()
    assert (ms > 0).all()
    linear, _ = kind_rows(pd.read_csv(SLICES / "linear_slice.csv.gz"))
    raw = pd.read_csv(SLICES / "linear_slice.csv.gz")
    assert (linear["dim_input"].to_numpy() == raw["k"].to_numpy()).all()


def test_time_keeps_growing_past_the_largest_measured_batch(fitted):
    # the training rows stop at batch 64; the forecast must scale, not flatten
    rows = pd.DataFrame([_conv(b, "V100") for b in (64, 128, 256, 512, 1024)])
    out = fitted.predict(rows)
    ms = out["predicted_ms"].to_numpy()
    assert np.all(np.diff(ms) > 0)
    assert 1.6 < ms[-1] / ms[-2] < 2.4  # about linear in batch once the GPU is full
    assert bool(out["extrapolated"].iloc[-1])
    assert not bool(out["extrapolated"].iloc[0])


def test_a_gpu_known_only_from_its_spec_sheet_gets_a_forecast(fitted):
    rows = pd.DataFrame([_conv(32, g) for g in ("H100 SXM5", "L4", "B200", "V100")])
    out = fitted.predict(rows)
    assert np.isfinite(out["predicted_ms"]).all() and (out["predicted_ms"] > 0).all()
    assert list(out["seen_device"]) == [False, False, False, True]
    assert (out["low_ms"] <= out["predicted_ms"]).all()
    assert (out["predicted_ms"] <= out["high_ms"]).all()
    # a faster part is not forecast slower than the V100 on a compute-bound layer
    assert out["predicted_ms"].iloc[2] < out["predicted_ms"].iloc[3]


def test_half_precision_halves_the_bytes(fitted):
    fp32 = physics_frame(pd.DataFrame([_conv(32, "V100", "fp32")]))
    fp16 = physics_frame(pd.DataFrame([_conv(32, "V100", "fp16")]))
    assert fp16["bytes"].iloc[0] == pytest.approx(fp32["bytes"].iloc[0] / 2)
    assert fp16["peak_flops"].iloc[0] > 4 * fp32["peak_flops"].iloc[0]  # tensor cores


def test_kinds_without_own_timings_are_flagged_and_widened(fitted):
    pool = {"layer": "pool", "batchsize": 32, "matsize": 56, "kernelsize": 3,
            "channels_in": 64, "strides": 2, "padding": "same", "pool_type": "max",
            "optimizer": "none", "precision": "fp32", "gpu": "V100"}
    act = {"layer": "act", "batchsize": 32, "matsize": 56, "channels_in": 64,
           "activation": "relu", "optimizer": "none", "precision": "fp32", "gpu": "V100"}
    out = fitted.predict(pd.DataFrame([pool, act]))
    assert list(out["own_data"]) == [False, True]
    width = np.log(out["high_ms"] / out["low_ms"]).to_numpy()
    assert width[0] > width[1]


def test_save_and_load_predict_the_same(fitted, tmp_path):
    rows = pd.DataFrame([_conv(b, "T4") for b in (1, 16, 300)])
    fitted.save(tmp_path / "model")
    again = EfficiencyPredictor.load(tmp_path / "model")
    pd.testing.assert_frame_equal(fitted.predict(rows), again.predict(rows))


def test_bad_rows_say_which_and_why(fitted):
    with pytest.raises(PhysicsError, match="unknown GPU"):
        fitted.predict(pd.DataFrame([_conv(8, "Voodoo 5")]))
    bad = _conv(8, "V100")
    bad["precision"] = "fp8"
    with pytest.raises(PhysicsError, match="fp8"):
        fitted.predict(pd.DataFrame([bad]))


def test_chips_group_variants_of_one_gpu():
    assert chip_of("Tesla V100-PCIE-32GB") == chip_of("V100") == "v100"
    assert chip_of("NVIDIA A100-PCIE-40GB") == "a100"


def test_a_noisier_device_gets_a_wider_interval_of_its_own(monkeypatch):
    monkeypatch.setattr("layerwise.efficiency.CHIP_INTERVAL_ROWS", 20)  # small slices here
    rows, ms = _training_rows()
    rows = rows.reset_index(drop=True)
    ms = ms.reset_index(drop=True)
    noisy = rows["gpu"].astype(str).map(chip_of).eq(chip_of(str(rows["gpu"].iloc[0])))
    rng = np.random.default_rng(0)
    jittered = ms.where(~noisy, ms * np.exp(rng.normal(0.0, 0.8, len(ms))))
    with pytest.warns(FutureWarning, match="'calibrat(e_unseen|ion_rows)' is deprecated"):
        model = EfficiencyPredictor(max_iter=30, calibration_rows=2000,
                                    calibrate_unseen=False).fit(rows, jittered)
    gemm = model.families_["gemm"]
    assert gemm["unseen_interval"] is None  # the deprecated name still switches the refits off
    noisy_chip = chip_of(str(rows["gpu"].iloc[0]))
    quiet_chips = [c for c in gemm["seen_interval_by_chip"] if c != noisy_chip]
    assert noisy_chip in gemm["seen_interval_by_chip"] and quiet_chips
    one = pd.DataFrame([_conv(32, str(rows["gpu"].iloc[0]))])
    other_gpu = next(str(g) for g in rows["gpu"] if chip_of(str(g)) == quiet_chips[0])
    two = pd.DataFrame([_conv(32, other_gpu)])
    width = [float(np.log(p["high_ms"] / p["low_ms"]).iloc[0])
             for p in (model.predict(one), model.predict(two))]
    assert width[0] > 1.5 * width[1]
