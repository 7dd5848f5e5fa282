"""What jobcast knows before any history: the GPU catalog, the shipped networks, and where
its data lives (``jobcast gpus``, ``jobcast networks``, ``jobcast info``).

Rules:

- A GPU query is first resolved as a forecast resolves it (:func:`fleet.catalog.gpu_members`:
  ``A100`` is every A100 row); a query that names no GPU is matched as a part of a name, an
  alias, a family or an architecture (case and punctuation free), so ``hopper`` or ``4090``
  list what they cover. No query: every row, in the catalog's order.
- A network is one shipped decomposed spec: the Keras zoo (``framework`` tensorflow,
  :mod:`layerwise.zoo`) and the torchvision specs (``framework`` pytorch,
  :mod:`layerwise.zoo.torch_zoo`); a query matches a part of its name or an alias.
  ``flops_per_sample`` is the forward pass of one sample at the spec's image size.
- Nothing here creates a file: ``data_places`` reads the store only when it exists (a SQLite
  file that is there, or a server that answers at this jobcast's revision), and URLs are
  shown without their password.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from fleet.catalog import CATALOG_PATH, GpuSpec, UnknownGpuError, gpu_members, load_catalog
from fleet.credentials import hide_password
from fleet.names import lookup_key
from fleet.precision import Precision
from ingest.home import ARTIFACTS_DIR, data_home, default_tracking_uri, sqlite_path

SOURCES_README = CATALOG_PATH.parent / "README.md"


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


@lru_cache(maxsize=1)
def _gpu_sources() -> dict[str, str]:
    """Architecture -> the documents its rows come from (fleet/data/README.md, "Sources")."""
    found: dict[str, str] = {}
    if not SOURCES_README.is_file():
        return found
    current = ""
    for line in SOURCES_README.read_text(encoding="utf-8").splitlines():
        head = re.match(r"- \*\*(\w+)\*\*: (.*)", line)
        if head:
            current = head.group(1)
            found[current] = head.group(2).strip()
        elif current and line.startswith("  ") and line.strip():
            found[current] += " " + line.strip()
        else:
            current = ""
    return found


def gpu_entry(spec: GpuSpec) -> dict[str, Any]:
    """One GPU as ``jobcast gpus --json`` shows it (peaks: dense TFLOPS per precision as a
    forecast uses them; memory in GB, bandwidth in GB/s)."""
    origin = _gpu_sources().get(spec.architecture)
    return {
        "name": spec.name,
        "aliases": list(spec.aliases),
        "family": spec.family or None,
        "architecture": spec.architecture,
        "compute_capability": spec.compute_capability,
        "segment": spec.segment,
        "form_factor": spec.form_factor or None,
        "memory_gb": spec.memory_gb,
        "memory_type": spec.memory_type,
        "bandwidth_gbs": spec.bandwidth_gbs,
        "peak_tflops": {p.value: spec.peak_tflops(p) for p in
                        (Precision.FP32, Precision.TF32, Precision.FP16, Precision.BF16)},
        "tensor_cores": spec.has_tensor_cores(),
        "tdp_w": spec.tdp_w,
        "release_year": spec.release_year,
        "source": "fleet/data/gpu_catalog.csv" + (f" ({origin})" if origin else ""),
    }


def find_gpus(query: str | None = None) -> list[dict[str, Any]]:
    """The catalog's GPUs that ``query`` names or matches (module rules), as entries."""
    specs = load_catalog()
    if query and query.strip():
        try:
            specs = gpu_members(query)
        except UnknownGpuError:
            wanted = lookup_key(query) or _norm(query)
            specs = tuple(s for s in specs if any(
                wanted in lookup_key(text) or wanted in _norm(text)
                for text in (s.name, *s.aliases, s.family, s.architecture) if text))
    return [gpu_entry(s) for s in specs]


def _network_entry(spec: Any, framework: str, aliases: list[str], task: str) -> dict:
    totals = spec.totals
    return {
        "name": spec.name,
        "framework": framework,
        "aliases": aliases,
        "task": task,
        "image_size": spec.image_size,
        "params": int(totals.get("params", 0)),
        "flops_per_sample": float(totals.get("flops", 0.0)),
        "layers": int(totals.get("rows", len(spec.layers))),
        "source": spec.source,
    }


def find_networks(query: str | None = None) -> list[dict[str, Any]]:
    """The shipped networks whose name or an alias contains ``query`` (case and punctuation
    free), Keras zoo first, then torchvision, each sorted by name."""
    from layerwise import zoo
    from layerwise.zoo import torch_zoo

    wanted = _norm(query) if query else ""
    keras_aliases: dict[str, list[str]] = {}
    for alias, name in zoo.aliases().items():
        keras_aliases.setdefault(name, []).append(alias)
    out = []
    for name in zoo.known_networks():
        names = [_norm(name), *keras_aliases.get(name, [])]
        if not wanted or any(wanted in n for n in names):
            out.append(_network_entry(zoo.load(name), "tensorflow",
                                      keras_aliases.get(name, []), "classification"))
    for name in torch_zoo.known_networks():
        if not wanted or wanted in _norm(name):
            entry = torch_zoo.entry(name)
            out.append(_network_entry(torch_zoo.load(name), "pytorch", [],
                                      entry.task if entry is not None else "classification"))
    return out


def jobcast_version() -> str:
    """The installed jobcast's version (``unknown`` when it is run from a bare checkout)."""
    from importlib import metadata

    try:
        return metadata.version("jobcast")
    except metadata.PackageNotFoundError:
        return "unknown"


def data_places(store_url: str, tracking_uri: str | None) -> dict[str, Any]:
    """The data directory, the store and the MLflow tracking a command would use, whether
    each exists, and the store's counts where it can be read (module rules). ``tracking_uri``
    ``None``: the default beside the store."""
    home = data_home()
    tracking = tracking_uri or default_tracking_uri(store_url)
    out: dict[str, Any] = {
        "version": jobcast_version(), "data_dir": str(home), "data_dir_exists": home.is_dir(),
        "store": hide_password(store_url), "store_exists": None, "store_status": None,
        "counts": None,
        "tracking_uri": hide_password(tracking), "tracking_exists": None,
        "artifacts": None,
    }
    track_file = sqlite_path(tracking)
    if track_file is not None:
        out["tracking_exists"] = track_file.exists()
        out["artifacts"] = str(track_file.resolve().parent / ARTIFACTS_DIR)
    store_file = sqlite_path(store_url)
    if store_file is not None and not store_file.exists():
        out["store_exists"] = False
        return out
    out.update(_store_state(store_url))
    return out


def _store_state(url: str) -> dict[str, Any]:
    """Whether the store at ``url`` answers, its schema status and, when current, counts."""
    from ingest.migrations import state
    from ingest.store import Store, make_engine

    try:
        engine = make_engine(url)
        try:
            status = state(engine).status
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - unreachable server, unreadable file, other revision
        reason = getattr(exc, "orig", None) or exc
        return {"store_exists": None, "store_status": "cannot read: " + " ".join(
            hide_password(str(reason)).split())}
    if status != "current":
        return {"store_exists": status != "empty", "store_status": status}
    return {"store_exists": True, "store_status": status, "counts": Store(url).counts()}
