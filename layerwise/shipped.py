"""Loading predictors, and the shipped one: roofline efficiency plus the per-type specialist.

Rules:

* :func:`load_predictor` reads either saved format: roofline efficiency (``efficiency.json``)
  or per-layer-type (``predictor.json``). An efficiency folder with a ``specialist/``
  sub-folder (a per-type predictor) loads as an :class:`EfficiencyPlusSpecialist`.
* :class:`EfficiencyPlusSpecialist`: the per-type gradient-boosted trees answer the rows they were
  built for and win on — single-layer TensorFlow fp32 conv/dense rows on a GPU among their
  training devices (Justus split: 4.5–5.8 % conv MAPE against the efficiency model's 13–15 %);
  the efficiency model answers every other row. ``model`` says which answered.
* Network forecasts use ``network_model`` (the efficiency model alone, handed to
  :func:`layerwise.pricing.price_network` by ``pricing_model()``), so a whole network is
  priced the same way on every GPU and the fitted composition applies.
* ``HybridPredictor`` is the deprecated name of :class:`EfficiencyPlusSpecialist` (issue 26:
  "hybrid" names the forecast route that mixes history and layers); it still imports, with a
  :class:`DeprecationWarning`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleet.deprecation import renamed_attributes
from fleet.precision import Precision, parse_precision
from layerwise.efficiency import EfficiencyPredictor
from layerwise.features import hardware_frame, hardware_signatures, signature_columns
from layerwise.predictor import LayerPredictor
from layerwise.pricing.model import COMPOSED, SHIPPED_DIR, PricingModel, fitted_model

SPECIALIST_DIR = "specialist"


class EfficiencyPlusSpecialist:
    """The efficiency model, with a per-type specialist for its home rows (module rules)."""

    pricing = COMPOSED  # networks priced by the efficiency model alone (module rules)

    def __init__(self, efficiency: EfficiencyPredictor, specialist: LayerPredictor):
        self.efficiency = efficiency
        self.specialist = specialist
        self.composition_ = getattr(efficiency, "composition_", None)
        self.framework_compositions_ = getattr(efficiency, "framework_compositions_", {})
        self.families_ = efficiency.families_

    @property
    def network_model(self) -> EfficiencyPredictor:
        """The model that prices whole networks: the efficiency model alone."""
        return self.efficiency

    def pricing_model(self) -> PricingModel:
        """The model a network is priced with: the efficiency model's arrays and this
        predictor's compositions (:mod:`layerwise.pricing.model`)."""
        return fitted_model(self.efficiency.arrays(), self.composition_,
                            self.framework_compositions_)

    @property
    def known_layers(self) -> set[str]:
        """Kinds it prices: the efficiency model's."""
        return self.efficiency.known_layers

    def _home(self, rows: pd.DataFrame) -> np.ndarray:
        """Rows the specialist answers (see module rules)."""
        layer = rows["layer"].astype(str)
        home = layer.isin(sorted(self.specialist.known_layers)).to_numpy().copy()
        fw = rows["framework"].astype(str).str.lower() if "framework" in rows.columns else None
        if fw is not None:
            home &= fw.isin(["tensorflow", "", "nan"]).to_numpy()
        if "precision" in rows.columns:
            home &= np.array([parse_precision(p) is Precision.FP32 for p in rows["precision"]])
        if not home.any():
            return home
        try:
            hw = hardware_frame(rows.loc[home])
            sig = hardware_signatures(pd.DataFrame(signature_columns(hw), index=hw.index))
        except ValueError:
            return np.zeros(len(rows), dtype=bool)
        known = np.zeros(int(home.sum()), dtype=bool)
        for lm in self.specialist.layers_.values():
            if len(lm.signatures):
                known |= (sig[:, None, :] == lm.signatures[None, :, :]).all(axis=2).any(axis=1)
        home[np.flatnonzero(home)] = known
        return home

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Rows priced by the specialist on its home rows, by the efficiency model
        elsewhere; ``model`` says which."""
        out = self.efficiency.predict(rows)
        out["model"] = "efficiency"
        home = self._home(rows)
        if home.any():
            part = rows.loc[home].copy()
            part["precision"] = 32
            spec = self.specialist.predict(part)
            for col in ("predicted_ms", "low_ms", "high_ms"):
                out.loc[part.index, col] = spec[col].to_numpy(float)
            out.loc[part.index, "model"] = "per-type-gbt"
        return out


def load_predictor(directory: str | Path) -> Any:
    """A saved predictor of either format (see the module rules)."""
    path = Path(directory)
    if (path / "efficiency.json").is_file():
        efficiency = EfficiencyPredictor.load(path)
        if (path / SPECIALIST_DIR / "predictor.json").is_file():
            return EfficiencyPlusSpecialist(efficiency,
                                            LayerPredictor.load(path / SPECIALIST_DIR))
        return efficiency
    if (path / "predictor.json").is_file():
        return LayerPredictor.load(path)
    raise FileNotFoundError(f"{path}: not a saved layer predictor (no efficiency.json or "
                            "predictor.json)")


@lru_cache(maxsize=1)
def default_predictor() -> Any:
    """The predictor shipped with jobcast (``layerwise/data/default_predictor``)."""
    if not (SHIPPED_DIR / "efficiency.json").is_file() and \
            not (SHIPPED_DIR / "predictor.json").is_file():
        raise FileNotFoundError(
            f"the default layer predictor is missing from {SHIPPED_DIR}; "
            "reinstall jobcast or build it with `python -m layerwise.corpora.build_default`"
        )
    return load_predictor(SHIPPED_DIR)


# ``HybridPredictor``: the deprecated name, for one release (fleet/deprecation.py)
__getattr__ = renamed_attributes(__name__, {"HybridPredictor": "EfficiencyPlusSpecialist"})
