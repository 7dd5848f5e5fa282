"""A system's deployment from the store's history: ``predict --system S`` without
``--deployment`` or ``--device``.

Rules:

- A system is matched as ``jobcast runs`` shows it (``meta["system"]``, whitespace folded),
  case-insensitively.
- The system's runs of the requested network decide when there are any, else all its runs:
  one deployment among them is the answer; several are an error that lists them (pick one
  with ``--deployment``); a system the store does not know is an error that lists the
  systems it knows (at most ten).
"""

from __future__ import annotations

from ingest.store import Store
from models.variant import BrokenMeta, run_system


class SystemDeploymentError(ValueError):
    """The store cannot name one deployment for the system; the message says why."""


def _system(meta: dict) -> str:
    try:
        return run_system(meta)
    except BrokenMeta:
        return ""


def system_deployment(store: Store, system: str, network: str | None = None) -> str:
    """The one deployment the store's history of ``system`` names (module rules)."""
    wanted = " ".join(system.split()).lower()
    runs = store.runs()
    own = [r for r in runs if _system(r.meta).lower() == wanted]
    if not own:
        known = sorted({s for s in (_system(r.meta) for r in runs) if s})
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10
                                         else "")
        raise SystemDeploymentError(
            f"no run of system {system!r} in the store, so its deployment is unknown: give "
            f"--deployment (or --device)" + (f"; systems in the store: {shown}" if known
                                             else "; the store holds no system's runs"))
    if network:
        of_network = [r for r in own if r.network.lower() == network.lower()]
        own = of_network or own
    deployments = sorted({r.deployment for r in own})
    if len(deployments) > 1:
        raise SystemDeploymentError(
            f"system {system!r} ran on {len(deployments)} deployments: "
            f"{', '.join(deployments)}; pick one with --deployment")
    return deployments[0]
