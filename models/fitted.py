"""A fitted end-to-end phase model with its key, evidence and prior (stored as one record).

A record is read back with its estimator as a :class:`models.phase_curve.PhaseCurve` (the
forecasting half: no scikit-learn or SciPy); a fit makes a
:class:`models.phase_model.PhaseTimeModel`, which is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from models.phase_curve import PhaseCurve


@dataclass
class FittedModel:
    model_id: str
    network: str
    deployment: str
    phase: str
    stack: str
    last_run_time: float  # newest run start seen, to pick the current stack
    estimator: PhaseCurve
    sources: list[str]
    variant: str = ""  # canonical "k=v,k=v" key, "" for none
    system: str = ""  # "" for the pooled model of the key
    basis: str = "own"  # "own" history, or "pooled-scaled" (a thin system on the pooled shape)
    systems: dict[str, int] = field(default_factory=dict)  # system -> runs behind this model
    prior: dict = field(default_factory=dict)  # the pooled prior's spreads (models.hierarchy)

    @property
    def thin(self) -> bool:
        """Whether its estimator saw too few runs or points (``thin_``); its interval then
        comes from the pooled prior (:mod:`models.hierarchy`)."""
        return bool(self.estimator.thin_)

    def evidence(self) -> dict:
        """The history behind the model: runs, points and the CV error in %."""
        return self.estimator.evidence()

    def to_record(self) -> dict:
        """The model as a JSON-able record (what the store of fitted models keeps)."""
        return {
            "model_id": self.model_id,
            "network": self.network,
            "deployment": self.deployment,
            "phase": self.phase,
            "stack": self.stack,
            "params": {
                **self.estimator.to_dict(),
                "last_run_time": self.last_run_time,
                "sources": self.sources,
                "variant": self.variant,
                "system": self.system,
                "basis": self.basis,
                "systems": self.systems,
                "prior": self.prior,
            },
        }

    @classmethod
    def from_record(cls, rec: dict) -> FittedModel:
        """The model saved by :meth:`to_record` (its estimator a :class:`PhaseCurve`)."""
        from models.phase_curve import PhaseCurve
        p = rec["params"]
        return cls(
            model_id=rec["model_id"],
            network=rec["network"],
            deployment=rec["deployment"],
            phase=rec["phase"],
            stack=rec["stack"],
            last_run_time=p.get("last_run_time") or 0.0,
            estimator=PhaseCurve.from_dict(p),
            sources=p.get("sources", []),
            variant=p.get("variant", ""),
            system=p.get("system", ""),
            basis=p.get("basis", "own"),
            systems=dict(p.get("systems", {})),
            prior=dict(p.get("prior", {})),
        )
