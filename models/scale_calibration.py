"""Scale calibration: factors that scale layerwise forecasts to the runs actually observed.

A layerwise forecast sums predicted layer times; a real job also pays for data loading,
communication between devices, framework overhead and a different software stack. Those
costs are roughly proportional to the step time on a given deployment, so the simple
correction is a scale factor ``actual / predicted`` learnt from observed runs:

* **network x deployment**: the geometric mean of the ratios of this network's runs on this
  deployment (a deployment key, e.g. ``nvidia-v100-sxm2-16gb-x8``);
* **deployment**: for a network with no runs there, the geometric mean of the per-network
  factors of the other networks seen on that deployment (each network counts once).

With ``shrinkage=k > 0`` a network's factor is pulled towards its deployment's factor as if
``k`` extra runs had shown the deployment factor:
``log f = (sum log r_i + k log f_dep) / (n + k)`` (with no deployment factor, towards 1).
``k = 0`` (default) trusts the runs fully. The interval of a calibrated forecast is the
layerwise interval scaled by the same factor.

Names kept for compatibility: the level values ``"network-hardware"`` and ``"hardware"`` (they
are JSON values and part of model ids) and the ``hardware`` keys of :meth:`to_dict` (the served
model's artifact). The ``X`` column was ``hardware`` before it was ``deployment``; it is still
accepted, with a :class:`DeprecationWarning` (this module was ``models.calibration``, which
still re-exports it).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from fleet.deprecation import renamed_property
from models.dataset import progress_points


def network_key(network: str) -> str:
    """Case- and punctuation-insensitive network name ("ResNet-50" == "resnet50")."""
    return "".join(ch for ch in str(network).lower() if ch.isalnum())


@dataclass(frozen=True)
class Scale:
    """A calibration factor and where it came from."""

    factor: float
    level: str  # "network-hardware" (network x deployment) or "hardware" (deployment only)
    runs: int  # observed runs behind it


def _deployments(X: pd.DataFrame) -> pd.Series:
    """The ``deployment`` column of ``X``; the old name ``hardware`` is read with a warning."""
    if "deployment" in X.columns or "hardware" not in X.columns:
        return X["deployment"]
    warnings.warn("the ScaleCalibrator column 'hardware' is deprecated; name it 'deployment'",
                  DeprecationWarning, stacklevel=3)
    return X["hardware"]


class ScaleCalibrator(BaseEstimator):
    """Per network x deployment scale factors (deployment-level fallback) from observed runs.

    fit(X, y): ``X`` has columns ``network``, ``deployment`` (a deployment key; formerly
    ``hardware``) and ``predicted`` (layerwise seconds of what was run), ``y`` the observed
    seconds of the same work. predict(X) returns the calibrated seconds (``predicted``
    unchanged where nothing applies); ``scale_for`` tells the factor, its level and the runs
    behind it. Fitted attributes: ``pairs_`` ((network key, deployment) -> (log factor,
    runs)) and ``deployments_`` (deployment -> (log factor, runs)).
    """

    def __init__(self, shrinkage: float = 0.0, fallback: bool = True):
        self.shrinkage = shrinkage
        self.fallback = fallback

    def fit(self, X: pd.DataFrame, y) -> ScaleCalibrator:
        """Learn the factors from observed runs (``X``, ``y`` as in the class doc); rows whose
        predicted or observed seconds are not finite and positive are ignored."""
        if self.shrinkage < 0:
            raise ValueError(f"shrinkage must be >= 0, got {self.shrinkage}")
        missing = [c for c in ("network", "predicted") if c not in X.columns]
        if "deployment" not in X.columns and "hardware" not in X.columns:
            missing.insert(1, "deployment")
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
                "deployment": _deployments(X).astype(str).to_numpy(),
                "log_ratio": np.log(np.where(ok, actual, 1.0) / np.where(ok, pred, 1.0)),
            }
        )[ok]
        per_pair = frame.groupby(["network", "deployment"], sort=True)["log_ratio"].agg(
            ["sum", "count", "mean"]
        )
        self.deployments_: dict[str, tuple[float, int]] = {}
        for deployment, group in per_pair.groupby(level="deployment"):
            self.deployments_[str(deployment)] = (float(group["mean"].mean()),
                                                  int(group["count"].sum()))
        self.pairs_: dict[tuple[str, str], tuple[float, int]] = {}
        for (network, deployment), row in per_pair.iterrows():
            prior = self._deployment_log_factor(deployment, exclude=network, per_pair=per_pair)
            log_f = (row["sum"] + self.shrinkage * prior) / (row["count"] + self.shrinkage)
            self.pairs_[(str(network), str(deployment))] = (float(log_f), int(row["count"]))
        return self

    hardware_ = renamed_property("ScaleCalibrator", "hardware_", "deployments_", writable=False)

    def _deployment_log_factor(self, deployment: str, exclude: str,
                               per_pair: pd.DataFrame) -> float:
        """Mean log factor of the *other* networks on this deployment (0 when there are none)."""
        others = per_pair.xs(deployment, level="deployment")
        others = others[others.index != exclude]
        return float(others["mean"].mean()) if len(others) else 0.0

    def scale_for(self, network: str, deployment: str) -> Scale | None:
        """The factor for a network on a deployment key, or None when no run applies."""
        pair = self.pairs_.get((network_key(network), str(deployment)))
        if pair is not None:
            return Scale(math.exp(pair[0]), "network-hardware", pair[1])
        if self.fallback and str(deployment) in self.deployments_:
            log_f, runs = self.deployments_[str(deployment)]
            return Scale(math.exp(log_f), "hardware", runs)
        return None

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """The calibrated seconds of each row of ``X`` (``network``, ``deployment``,
        ``predicted``): ``predicted`` times its factor, unchanged where none applies."""
        factors = [
            (s.factor if (s := self.scale_for(n, d)) is not None else 1.0)
            for n, d in zip(X["network"], _deployments(X), strict=True)
        ]
        return np.asarray(X["predicted"], dtype=float) * np.asarray(factors)

    # -- persistence (a JSON artifact of the served model) ----------------------------

    def to_dict(self) -> dict:
        """The JSON form (the served model's artifact; its keys still say ``hardware``)."""
        return {
            "shrinkage": self.shrinkage,
            "fallback": self.fallback,
            "pairs": [
                {"network": n, "hardware": h, "log_factor": f, "runs": r}
                for (n, h), (f, r) in sorted(self.pairs_.items())
            ],
            "hardware": [
                {"hardware": h, "log_factor": f, "runs": r}
                for h, (f, r) in sorted(self.deployments_.items())
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> ScaleCalibrator:
        """The calibrator saved by :meth:`to_dict`."""
        cal = cls(shrinkage=float(d.get("shrinkage", 0.0)), fallback=bool(d.get("fallback", True)))
        cal.pairs_ = {
            (p["network"], p["hardware"]): (float(p["log_factor"]), int(p["runs"]))
            for p in d.get("pairs", [])
        }
        cal.deployments_ = {
            h["hardware"]: (float(h["log_factor"]), int(h["runs"])) for h in d.get("hardware", [])
        }
        return cal

    @classmethod
    def empty(cls) -> ScaleCalibrator:
        """A calibrator that knows no factor (every forecast unchanged)."""
        return cls.from_dict({})


def observed_runs(store) -> pd.DataFrame:
    """One row per stored run with a train phase: its network, deployment, batch and totals."""
    points = progress_points(store)
    finals = points[(points["phase"] == "train") & points["final"]]
    cols = ["run_id", "source", "network", "deployment", "batch_size", "iterations", "seconds"]
    return finals[cols].reset_index(drop=True)
