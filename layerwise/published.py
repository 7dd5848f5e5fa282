"""Loader for the published layer benchmarks of Justus et al. (2018) (six GPUs, conv and dense).

The files are ``conv_<GPU>.csv.gz`` and ``dense_<GPU>.csv.gz`` plus ``gpus.csv`` (the paper's
GPU specifications); see ``shared/data/README.md``. The directory is taken from the argument,
else from ``$JOBCAST_PUBLISHED_DIR``, else from ``../shared/data/justus2018`` next to the
repository.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from layerwise.corpora.tables import shared_data_dir

ENV_VAR = "JOBCAST_PUBLISHED_DIR"
PUBLISHED_GPUS = ("V100", "P100", "GTX1080Ti", "M60", "K80", "K40")
PUBLISHED_LAYERS = ("conv", "dense")

# The paper's per-GPU test RMSE (ms) of its MLP, 80/10/10 split (Justus et al. 2018).
PAPER_RMSE_MS = {
    "conv": {"V100": 1.73, "P100": 3.32, "M60": 6.07, "K80": 7.84, "K40": 11.90, "GTX1080Ti": 2.55},
    "dense": {
        "V100": 0.048, "P100": 0.033, "M60": 0.031, "K80": 0.145, "K40": 0.167, "GTX1080Ti": 0.034,
    },
}


def default_data_dir() -> Path:
    """``$JOBCAST_PUBLISHED_DIR`` or the ``shared/data/justus2018`` folder beside the repository."""
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else shared_data_dir() / "justus2018"


def _resolve_dir(data_dir: str | Path | None) -> Path:
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    if not path.is_dir():
        raise FileNotFoundError(
            f"published data folder {path} not found; pass its path or set ${ENV_VAR}"
        )
    return path


def load_published(
    data_dir: str | Path | None = None,
    layers: Iterable[str] = PUBLISHED_LAYERS,
    gpus: Iterable[str] | None = None,
    nrows: int | None = None,
) -> pd.DataFrame:
    """All rows of the chosen layer types and GPUs in one frame with a ``layer`` column.

    ``nrows`` keeps the first rows of each file (for quick tests).
    """
    path = _resolve_dir(data_dir)
    frames = []
    for layer in layers:
        if layer not in PUBLISHED_LAYERS:
            raise ValueError(f"no published data for layer {layer!r}; have {PUBLISHED_LAYERS}")
        for gpu in gpus if gpus is not None else PUBLISHED_GPUS:
            file = path / f"{layer}_{gpu}.csv.gz"
            if not file.is_file():
                raise FileNotFoundError(f"{file}: missing published data file")
            frame = pd.read_csv(file, nrows=nrows)
            frame.insert(0, "layer", layer)
            frames.append(frame)
    if not frames:
        raise ValueError("no layers or GPUs selected")
    return pd.concat(frames, ignore_index=True)


def load_paper_gpus(data_dir: str | Path | None = None) -> pd.DataFrame:
    """The paper's GPU specifications (``gpus.csv``)."""
    return pd.read_csv(_resolve_dir(data_dir) / "gpus.csv")
