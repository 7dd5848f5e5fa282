"""Whole-network PyTorch targets: ``torchvision_bench`` (shared) and this project's H100 steps.

Every reader returns one row per target with the columns of :data:`TARGET_COLUMNS`: suite,
gpu (catalog name), network (torchvision builder name), precision (a request of
:mod:`layerwise.as_run`), batch_per_gpu, step_ms, chip, framework, fw_version (what the
framework version makes of ``fp32``), optimizer (``none`` = forward, loss and backward
without an optimizer step). Rules:

* ``torchvision_bench`` (``../shared/data/torchvision_bench``): fp32 from ``steps.csv.gz``
  (median of 50 steps, one GPU); fp16 from the raw ``*_1_gpus__half_model_train_benchmark.csv``
  files (the same median of each column), as request ``fp16-pure`` (``model.half()``). The
  A100 ran in NGC 20.10 (PyTorch 1.7: TF32 on for convolutions and matmuls by default); the
  others PyTorch 1.4 (no TF32 hardware anyway).
* H100 suites of ``layerwise/data/measured``: ``tvbench`` (the same definition, PyTorch
  2.11), ``train`` (SGD-momentum step, ``cudnn.benchmark``; mode ``fp32`` is PyTorch's default,
  ``amp-*`` are autocast), and the first session's ``train-nobench`` (its ``fp32`` ran with
  TF32 off: request ``fp32-strict``; ``cudnn.benchmark`` off). ``detection`` rows are kept
  apart (:func:`measured_detection`) for checks, never for fitting.
* Both H100 sessions built ``inception_v3`` and ``googlenet`` with ``aux_logits=False``
  (``benchmarks/gpu_networks.py``; ``benchmarks/gpu_session2.py``, retired, last at
  5e21865): their rows carry
  ``aux_heads`` False, so the auxiliary classifiers the zoo's training-mode specs hold are not
  priced (:func:`layerwise.corpora.network_fit.as_measured`; issue 36, 2026-12-03).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from layerwise.efficiency_arrays import chip_of

MEASURED = Path(__file__).resolve().parents[1] / "data" / "measured"
AS_RUN_FILE = MEASURED / "h100-sxm5_torch2.11_2026-11-25_networks-as-run.csv"
FIRST_FILE = MEASURED / "h100-sxm5_torch2.11_2026-11-23_networks.csv"
TARGET_COLUMNS = ("suite", "gpu", "network", "precision", "batch_per_gpu", "step_ms", "chip",
                  "framework", "fw_version", "optimizer")
TVBENCH_VERSIONS = {"A100 SXM4 40GB": "1.7"}  # NGC 20.10; the other machines: PyTorch 1.4
HALF_GLOB = "*/*_1_gpus__half_model_train_benchmark.csv"
MODES = {"fp32": "fp32", "tf32": "tf32", "amp-fp16": "fp16", "amp-bf16": "bf16",
         "fp32-strict": "fp32-strict", "fp16-pure": "fp16-pure"}
FIRST_NAMES = {"inception3": "inception_v3"}
NO_AUX = ("inception_v3", "googlenet")  # built with aux_logits=False in both H100 sessions


def _gpu(name: str) -> str:
    from fleet.catalog import resolve_gpu

    return resolve_gpu(str(name)).name


def _finish(frame: pd.DataFrame) -> pd.DataFrame:
    frame["chip"] = frame["gpu"].map(chip_of)
    frame["batch_per_gpu"] = frame["batch_per_gpu"].astype(int)
    frame["step_ms"] = frame["step_ms"].astype(float)
    return frame.loc[:, list(TARGET_COLUMNS)].reset_index(drop=True)


def tvbench_targets(root: Path) -> pd.DataFrame:
    """The shared ``torchvision_bench`` steps on one GPU, fp32 and fp16-pure (module rules)."""
    root = Path(root)
    steps = pd.read_csv(root / "steps.csv.gz")
    fp32 = steps[(steps["n_gpus"] == 1) & (steps["precision"] == "fp32")]
    rows = [{"gpu": r.gpu, "network": r.network, "precision": "fp32",
             "batch_per_gpu": r.batch_per_gpu, "step_ms": 1000.0 * r.step_seconds}
            for r in fp32.itertuples()]
    for path in sorted((root / "raw" / "results").glob(HALF_GLOB)):
        gpu = path.name.split("_1_gpus__")[0]
        table = pd.read_csv(path)
        for network in table.columns:
            values = pd.to_numeric(table[network], errors="coerce").dropna()
            if len(values):
                rows.append({"gpu": gpu, "network": network, "precision": "fp16-pure",
                             "batch_per_gpu": 12, "step_ms": statistics.median(values)})
    out = pd.DataFrame(rows)
    out["gpu"] = out["gpu"].map(_gpu)
    out["suite"] = "tvbench"
    out["framework"] = "pytorch"
    out["fw_version"] = out["gpu"].map(TVBENCH_VERSIONS).fillna("1.4")
    out["optimizer"] = "none"
    return _finish(out)


def measured_targets(path: Path = AS_RUN_FILE, suites: tuple[str, ...] = ("tvbench", "train")
                     ) -> pd.DataFrame:
    """The second H100 session's rows of ``suites`` (status ok), as targets."""
    table = pd.read_csv(path)
    table = table[(table["status"] == "ok") & table["suite"].isin(suites)]
    out = pd.DataFrame({
        "suite": table["suite"], "gpu": table["gpu"].map(_gpu), "network": table["network"],
        "precision": table["mode"].map(MODES), "batch_per_gpu": table["batch_size"],
        "step_ms": table["step_ms"], "framework": "pytorch",
        "fw_version": table["sw_torch"].astype(str), "optimizer": table["optimizer"]})
    return _without_aux(_finish(out))


def measured_detection(path: Path = AS_RUN_FILE) -> pd.DataFrame:
    """The detection training steps (checks only)."""
    return measured_targets(path, suites=("detection",))


def first_session_targets(path: Path = FIRST_FILE) -> pd.DataFrame:
    """The first H100 session's 84 steps (``cudnn.benchmark`` off; its fp32 had TF32 off)."""
    table = pd.read_csv(path)
    out = pd.DataFrame({
        "suite": "train-nobench", "gpu": table["gpu"].map(_gpu),
        "network": table["network"].map(lambda n: FIRST_NAMES.get(n, n)),
        "precision": table["precision"].map({"fp32": "fp32-strict"}).fillna(table["precision"]),
        "batch_per_gpu": table["batch_size"], "step_ms": table["step_ms"],
        "framework": "pytorch", "fw_version": table["sw_torch"].astype(str),
        "optimizer": "momentum"})
    return _without_aux(_finish(out))


def _without_aux(frame: pd.DataFrame) -> pd.DataFrame:
    """``aux_heads``: False for the networks the H100 sessions built without them."""
    frame["aux_heads"] = ~frame["network"].isin(NO_AUX)
    return frame


def pytorch_targets(shared: Path) -> pd.DataFrame:
    """Every PyTorch whole-network target for fitting the PyTorch composition."""
    return pd.concat([tvbench_targets(Path(shared) / "torchvision_bench"), measured_targets(),
                      first_session_targets()], ignore_index=True)
