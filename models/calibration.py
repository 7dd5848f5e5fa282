"""Scale factors that calibrate layerwise forecasts with the runs actually observed.

A layerwise forecast sums predicted layer times; a real job also pays for data loading,
communication between devices, framework overhead and a different software stack. Those
costs are roughly proportional to the step time on a given piece of hardware, so the simple
correction is a scale factor ``actual / predicted`` learnt from observed runs:

* **network x hardware**: the geometric mean of the ratios of this network's runs on this
  hardware (``hardware`` = a deployment key, e.g. ``nvidia-v100-sxm2-16gb-x8``);
* **hardware**: for a network with no runs there, the geometric mean of the per-network
  factors of the other networks seen on that hardware (each network counts once).

With ``shrinkage=k > 0`` a network's factor is pulled towards its hardware's factor as if
``k`` extra runs had shown the hardware factor: ``log f = (sum log r_i + k log f_hw) / (n + k)``
(with no hardware factor, towards 1). ``k = 0`` (default) trusts the runs fully.
The interval of a calibrated forecast is the layerwise interval scaled by the same factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from models.dataset import progress_points


def network_key(network: str) -> str:
    """Case- and punctuation-insensitive network name ("ResNet-50" == "resnet50")."""
    return "".join(ch for ch in str(network).lower() if ch.isalnum())


@dataclass(frozen=True)
class Scale:
    """A calibration factor and where it came from."""

    factor: float
    level: str  # "network-hardware" or "hardware"
    runs: int  # observed runs behind it


class ScaleCalibrator(BaseEstimator):
    """Per network x hardware scale factors (hardware-level fallback) from observed runs.

    fit(X, y): ``X`` has columns ``network``, ``hardware`` and ``predicted`` (layerwise
    seconds of what was run), ``y`` the observed seconds of the same work. predict(X) returns
    the calibrated seconds (``predicted`` unchanged where nothing applies); ``scale_for``
    tells the factor, its level and the runs behind it.
    """

    def __init__(self, shrinkage: float = 0.0, fallback: bool = True):
        self.shrinkage = shrinkage
        self.fallback = fallback

    def fit(self, X: pd.DataFrame, y) -> ScaleCalibrator:
        if self.shrinkage < 0:
            raise ValueError(f"shrinkage must be >= 0, got {self.shrinkage}")
        missing = [c for c in ("network", "hardware", "predicted") if c not in X.columns]
        if missing:
            raise ValueError(f"calibration data lacks column(s) {', '.join(missing)}")
        pred = np.asarray(X["predicted"], dtype=float)
        actual = np.asarray(y, dtype=float)
        if len(pred) != len(actual):
            raise ValueError("calibration data: X and y differ in length")
        ok = np.isfinite(pred) & np.isfinite(actual) & (pred > 0) & (actual > 0)
        frame = pd.DataFrame(
            {
                "network": [network_key(n) for n in X["network"]],
                "hardware": X["hardware"].astype(str).to_numpy(),
                "log_ratio": np.log(np.where(ok, actual, 1.0) / np.where(ok, pred, 1.0)),
            }
        )[ok]
        per_pair = frame.groupby(["network", "hardware"], sort=True)["log_ratio"].agg(
            ["sum", "count", "mean"]
        )
        self.hardware_: dict[str, tuple[float, int]] = {}
        for hardware, group in per_pair.groupby(level="hardware"):
            self.hardware_[str(hardware)] = (float(group["mean"].mean()), int(group["count"].sum()))
        self.pairs_: dict[tuple[str, str], tuple[float, int]] = {}
        for (network, hardware), row in per_pair.iterrows():
            prior = self._hardware_log_factor(hardware, exclude=network, per_pair=per_pair)
            log_f = (row["sum"] + self.shrinkage * prior) / (row["count"] + self.shrinkage)
            self.pairs_[(str(network), str(hardware))] = (float(log_f), int(row["count"]))
        return self

    def _hardware_log_factor(self, hardware: str, exclude: str, per_pair: pd.DataFrame) -> float:
        """Mean log factor of the *other* networks on this hardware (0 when there are none)."""
        others = per_pair.xs(hardware, level="hardware")
        others = others[others.index != exclude]
        return float(others["mean"].mean()) if len(others) else 0.0

    def scale_for(self, network: str, hardware: str) -> Scale | None:
        """The factor for a network on a hardware, or None when no run applies."""
        pair = self.pairs_.get((network_key(network), str(hardware)))
        if pair is not None:
            return Scale(math.exp(pair[0]), "network-hardware", pair[1])
        if self.fallback and str(hardware) in self.hardware_:
            log_f, runs = self.hardware_[str(hardware)]
            return Scale(math.exp(log_f), "hardware", runs)
        return None

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        factors = [
            (s.factor if (s := self.scale_for(n, h)) is not None else 1.0)
            for n, h in zip(X["network"], X["hardware"], strict=True)
        ]
        return np.asarray(X["predicted"], dtype=float) * np.asarray(factors)

    # -- persistence (a JSON artifact of the served model) ----------------------------

    def to_dict(self) -> dict:
        return {
            "shrinkage": self.shrinkage,
            "fallback": self.fallback,
            "pairs": [
                {"network": n, "hardware": h, "log_factor": f, "runs": r}
                for (n, h), (f, r) in sorted(self.pairs_.items())
            ],
            "hardware": [
                {"hardware": h, "log_factor": f, "runs": r}
                for h, (f, r) in sorted(self.hardware_.items())
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> ScaleCalibrator:
        cal = cls(shrinkage=float(d.get("shrinkage", 0.0)), fallback=bool(d.get("fallback", True)))
        cal.pairs_ = {
            (p["network"], p["hardware"]): (float(p["log_factor"]), int(p["runs"]))
            for p in d.get("pairs", [])
        }
        cal.hardware_ = {
            h["hardware"]: (float(h["log_factor"]), int(h["runs"])) for h in d.get("hardware", [])
        }
        return cal

    @classmethod
    def empty(cls) -> ScaleCalibrator:
        return cls.from_dict({})


def observed_runs(store) -> pd.DataFrame:
    """One row per stored run with a train phase: its network, deployment, batch and totals."""
    points = progress_points(store)
    finals = points[(points["phase"] == "train") & points["final"]]
    cols = ["run_id", "source", "network", "deployment", "batch_size", "iterations", "seconds"]
    return finals[cols].reset_index(drop=True)
