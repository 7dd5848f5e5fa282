"""GPU-hour prices: a small user-editable CSV (``gpu,usd_per_gpu_hour,source``).

The bundled table holds approximate public-cloud list prices, for illustration; pass your own
with ``--prices FILE`` or ``$JOBCAST_PRICES``. GPU names go through the GPU catalog, so
"V100", "Tesla V100-SXM2-16GB" and the catalog's own name all match one row.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fleet.catalog import UnknownGpuError, resolve_gpu
from jobcast.service.errors import ServiceError

BUNDLED = Path(__file__).parent / "data" / "prices.csv"


class PriceTableError(ServiceError, ValueError):
    """A price table that cannot be read as written; ``file`` and ``line`` say where (the
    message says it too)."""

    kind: ClassVar[str] = "prices"

    def __init__(self, message: str, *, file: str | Path | None = None,
                 line: int | None = None):
        super().__init__(message)
        self.file = None if file is None else str(file)
        self.line = line


@dataclass(frozen=True)
class PriceTable:
    """Prices per GPU-hour by catalog GPU name, and where they came from."""

    usd_per_gpu_hour: dict[str, float]  # catalog GPU name -> price
    source: str

    def price(self, gpu: str) -> float | None:
        """Price per GPU-hour of a GPU (any spelling the catalog resolves), else None."""
        try:
            name = resolve_gpu(gpu).name
        except (UnknownGpuError, KeyError, ValueError):
            return None
        return self.usd_per_gpu_hour.get(name)

    def cost(self, seconds: float, gpu: str, count: int = 1) -> float | None:
        """USD for ``seconds`` on ``count`` GPUs named ``gpu``; None without a price."""
        price = self.price(gpu)
        return None if price is None else seconds / 3600 * count * price


def load_prices(path: str | Path | None = None) -> PriceTable:
    """Read a price table; errors name the file and line."""
    path = Path(path or os.environ.get("JOBCAST_PRICES") or BUNDLED)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PriceTableError(f"cannot read price table {path}: {exc.strerror or exc}",
                              file=path) from None
    rows = csv.DictReader(text.splitlines())
    if not rows.fieldnames or not {"gpu", "usd_per_gpu_hour"} <= set(rows.fieldnames):
        raise PriceTableError(f"{path}:1: need columns gpu,usd_per_gpu_hour", file=path,
                              line=1)
    prices: dict[str, float] = {}
    for line, row in enumerate(rows, start=2):
        try:
            value = float(row["usd_per_gpu_hour"])
        except (TypeError, ValueError):
            raise PriceTableError(
                f"{path}:{line}: usd_per_gpu_hour must be a number, got "
                f"{row['usd_per_gpu_hour']!r}", file=path, line=line) from None
        if not math.isfinite(value) or value < 0:
            raise PriceTableError(f"{path}:{line}: price must be >= 0, got {value}", file=path,
                                  line=line)
        try:
            name = resolve_gpu(row["gpu"]).name
        except (UnknownGpuError, KeyError, ValueError) as exc:
            raise PriceTableError(f"{path}:{line}: {exc}", file=path, line=line) from None
        prices[name] = value
    return PriceTable(prices, str(path))
