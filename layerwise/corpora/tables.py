"""The shared reference layer tables as kind rows: Justus et al. (2018) and NeuSight.

Both are read from ``<shared>/data`` (``$JOBCAST_SHARED_DATA``, else the ``shared/data``
folder beside the repository); rows come out through :func:`layerwise.sources.kind_rows`
(so a row is in the kind layout with ``framework``, ``gpu`` and ``precision``), with the
measured time in ms as a second value. A missing folder raises ``FileNotFoundError`` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from layerwise.sources import kind_rows

ENV_VAR = "JOBCAST_SHARED_DATA"
MEASURED_DIR = Path(__file__).resolve().parents[1] / "data" / "measured"
NEUSIGHT_FILES = ("conv", "linear", "elementwise", "ln", "softmax")


def shared_data_dir() -> Path:
    """``$JOBCAST_SHARED_DATA`` or the first ``shared/data`` folder above this file."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return here.parents[3] / "shared" / "data"


def _need(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path}: reference data not found (set ${ENV_VAR})")
    return path


def load_justus(layers: Iterable[str] = ("conv", "dense"), gpus: Iterable[str] | None = None,
                root: Path | None = None, max_rows: int = 0,
                seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """Justus rows of ``layers`` (conv, dense) on ``gpus`` (default: all six); with
    ``max_rows`` a random subsample of that many (``default_rng(seed)``, table order kept)."""
    folder = _need((root or shared_data_dir()) / "justus2018")
    rows, times = [], []
    for layer in layers:
        for path in sorted(folder.glob(f"{layer}_*.csv.gz")):
            gpu = path.name[len(layer) + 1:-len(".csv.gz")]
            if gpus is not None and gpu not in set(gpus):
                continue
            r, t = kind_rows(pd.read_csv(path), "justus")
            r.index = [f"{path.name}:{i + 2}" for i in range(len(r))]
            t.index = r.index
            rows.append(r)
            times.append(t)
    if not rows:
        raise FileNotFoundError(f"{folder}: no {'/'.join(layers)} files")
    j_rows, j_ms = pd.concat(rows), pd.concat(times)
    if max_rows and len(j_rows) > max_rows:
        pick = np.sort(np.random.default_rng(seed).choice(len(j_rows), max_rows, replace=False))
        j_rows, j_ms = j_rows.iloc[pick], j_ms.iloc[pick]
    return j_rows, j_ms


def load_neusight(files: Iterable[str] = NEUSIGHT_FILES,
                  root: Path | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """NeuSight rows of the given files (conv, linear, elementwise, ln, softmax)."""
    folder = _need((root or shared_data_dir()) / "neusight")
    rows, times = [], []
    for name in files:
        path = _need(folder / f"{name}.csv.gz")
        r, t = kind_rows(pd.read_csv(path), "neusight")
        r.index = [f"{path.name}:{i + 2}" for i in range(len(r))]
        t.index = r.index
        keep = r["layer"].astype(str).str.strip().ne("")
        rows.append(r.loc[keep])
        times.append(t.loc[keep])
    return pd.concat(rows), pd.concat(times)


def load_measured(folder: Path = MEASURED_DIR, exclude_gpus: Iterable[str] = ()
                  ) -> tuple[pd.DataFrame, pd.Series]:
    """This project's own bench rows (``layerwise/data/measured/*.csv.gz``, status ok only).

    Rows of ``exclude_gpus`` (catalog names, e.g. ``H100 SXM5``) are left out.
    """
    rows, times = [], []
    skip = set(exclude_gpus)
    for path in sorted(Path(folder).glob("*.csv.gz")):
        table = pd.read_csv(path)
        table = table.loc[table["status"].astype(str).eq("ok")
                          & ~table["gpu"].astype(str).isin(skip)]
        r, t = kind_rows(table, "bench")
        r.index = [f"{path.name}:{i + 2}" for i in table.index]
        t.index = r.index
        rows.append(r)
        times.append(t)
    if not rows:
        return pd.DataFrame(), pd.Series(dtype=float)
    return pd.concat(rows), pd.concat(times)
