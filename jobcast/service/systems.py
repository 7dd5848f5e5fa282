"""A system's deployment from the store's history: ``predict --system S`` without
``--deployment`` or ``--device``.

Rules:

- The forecaster asks it of every request that names a system and no deployment or
  device (:func:`history_deployment`, its run summaries); the answer says so.
- A system is matched as ``jobcast runs`` shows it (``meta["system"]``, whitespace folded),
  case-insensitively.
- The system's runs of the requested network decide when there are any, else all its runs:
  one deployment among them is the answer; several are an error that lists them (pick one
  with ``--deployment``); a system the store does not know is an error that lists the
  systems it knows (at most ten).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from jobcast.service.errors import ServiceError
from models.variant import BrokenMeta, run_system

if TYPE_CHECKING:
    from ingest.store import Store


class SystemDeploymentError(ServiceError, ValueError):
    """The store cannot name one deployment for the system; the message says why."""

    kind: ClassVar[str] = "system"


def _system(meta: dict) -> str:
    try:
        return run_system(meta)
    except BrokenMeta:
        return ""


def system_deployment(store: Store, system: str, network: str | None = None) -> str:
    """The one deployment the store's history of ``system`` names (module rules)."""
    return deployment_named(((_system(r.meta), r.network, r.deployment) for r in store.runs()),
                            system, network)[0]


def history_deployment(history: Any, system: str, network: str | None = None
                       ) -> tuple[str, str]:
    """(deployment, the system as its history spells it): :func:`system_deployment` from the
    run summaries (``models.history``: ``system``, ``network``, ``deployment``), as the
    forecaster holds them (None: it holds none)."""
    rows = (zip(history["system"], history["network"], history["deployment"], strict=True)
            if history is not None and len(history) else ())
    return deployment_named(rows, system, network)


def deployment_named(runs: Iterable[tuple[str, str, str]], system: str,
                     network: str | None = None) -> tuple[str, str]:
    """(the one deployment of ``system`` among (system, network, deployment) triples, the
    system as they spell it) (module rules); :class:`SystemDeploymentError` says why there
    is none."""
    wanted = " ".join(system.split()).lower()
    runs = [(str(s or ""), str(n), str(d)) for s, n, d in runs]
    own = [r for r in runs if " ".join(r[0].split()).lower() == wanted]
    if not own:
        known = sorted({r[0] for r in runs if r[0]})
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10
                                         else "")
        raise SystemDeploymentError(
            f"no run of system {system!r} in the store, so its deployment is unknown: give "
            f"--deployment (or --device)" + (f"; systems in the store: {shown}" if known
                                             else "; the store holds no system's runs"))
    if network:
        of_network = [r for r in own if r[1].lower() == network.lower()]
        own = of_network or own
    deployments = sorted({r[2] for r in own})
    if len(deployments) > 1:
        raise SystemDeploymentError(
            f"system {system!r} ran on {len(deployments)} deployments: "
            f"{', '.join(deployments)}; pick one with --deployment")
    return deployments[0], own[0][0]
