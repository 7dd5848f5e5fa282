"""A site's own GPU type names (Slurm GRES types, node labels) -> the fleet catalog's GPUs.

Schedulers name GPUs as their admins chose: ``gres/gpu:a100_80``, ``gpu:rtx30``,
``gpu:l40s``. :func:`resolve_site_gpu` turns such a type into a catalog GPU.

Rules
-----
* Order: the site's alias file first (an admin's word wins), then the catalog
  (:func:`fleet.catalog.resolve_gpu`: every name, alias and family, so ``a100``, ``a40``,
  ``l40s``, ``rtx_3090``, ``h100_80gb``, ``a100-sxm4-80gb`` resolve), then a memory size
  written the scheduler's way: a model, ``_`` or ``-``, and a number of GB (``a100_80``,
  ``v100-32``, ``a100_80g``) is that model with that memory (``A100 80GB``: the A100 SXM4
  80GB, the family's first 80 GB row).
* A type that no rule resolves but that begins several catalog GPUs' names (``rtx30``: RTX
  3050 ... 3090 Ti) is **ambiguous**: :class:`fleet.catalog.UnknownGpuError` says so and names
  some of them; two GPUs are never guessed between. Any other unknown type is an
  :class:`~fleet.catalog.UnknownGpuError` with the catalog's suggestions. :func:`how_to_map`
  says how to map either in the alias file.
* The alias file (:func:`alias_file`): ``$JOBCAST_GPU_ALIASES`` where set, else
  ``gpu_aliases.txt`` in the data directory the caller names (ingest names jobcast's data
  directory, :func:`ingest.home.data_home`); no such file: no site aliases. UTF-8 text, one
  ``alias = catalog GPU name`` per line; ``#`` starts a comment; blank lines are skipped. An
  alias is compared as the catalog compares names (:func:`fleet.names.lookup_key`: case,
  blanks, ``_`` and ``-`` do not matter). The target must be a name the catalog resolves.
* A bad line (no ``=``, an empty side, a target the catalog does not know, one alias given two
  targets) raises :class:`SiteAliasError` with ``file:line: reason``; the file is read once
  per version (path, size and modification time).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from fleet.catalog import GpuSpec, UnknownGpuError, load_catalog, resolve_gpu
from fleet.errors import FleetError
from fleet.names import lookup_key

ALIASES_ENV = "JOBCAST_GPU_ALIASES"
ALIAS_FILE = "gpu_aliases.txt"
MAX_NAMED = 6  # GPUs an ambiguity message names
_MEMORY_SUFFIX = re.compile(r"(?P<model>.*\d[a-z]*)[_-](?P<gb>\d{1,3})(?:g|gb)?", re.IGNORECASE)


class SiteAliasError(FleetError, ValueError):
    """The site's GPU alias file has a bad line (``file:line: reason``)."""

    kind: ClassVar[str] = "gpu_aliases"

    def __init__(self, message: str, file: object = None, line: int | None = None):
        super().__init__(message)
        self.file = None if file is None else str(file)
        self.line = line


def alias_file(data_dir: Path | None = None) -> Path | None:
    """The site's alias file: ``$JOBCAST_GPU_ALIASES``, else ``gpu_aliases.txt`` in
    ``data_dir`` where that file exists; None when there is none."""
    named = os.environ.get(ALIASES_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    if data_dir is not None and (Path(data_dir) / ALIAS_FILE).is_file():
        return Path(data_dir) / ALIAS_FILE
    return None


def load_aliases(path: Path) -> dict[str, str]:
    """``lookup key of an alias -> catalog name`` from the alias file ``path`` (module rules);
    :class:`SiteAliasError` on a bad line or an unreadable file."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise SiteAliasError(f"{path}: cannot read the GPU alias file ({ALIASES_ENV}): "
                             f"{exc.strerror or exc}", path) from None
    return dict(_read_aliases(str(path), stat.st_size, stat.st_mtime_ns))


@lru_cache(maxsize=8)
def _read_aliases(path: str, _size: int, _mtime: int) -> tuple[tuple[str, str], ...]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SiteAliasError(f"{path}: cannot read the GPU alias file: {exc}", path) from None
    found: dict[str, tuple[str, str, int]] = {}  # key -> (alias, target, line)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        alias, sep, target = (part.strip() for part in line.partition("="))
        where = f"{path}:{number}"
        if not sep or not alias or not target:
            raise SiteAliasError(f"{where}: want 'alias = catalog GPU name', got {line!r}",
                                 path, number)
        try:
            name = resolve_gpu(target).name
        except UnknownGpuError as exc:
            raise SiteAliasError(f"{where}: {alias!r} maps to {exc}", path, number) from None
        key = lookup_key(alias)
        if not key:
            raise SiteAliasError(f"{where}: alias {alias!r} has no letter or digit", path, number)
        old = found.get(key)
        if old is not None and old[1] != name:
            raise SiteAliasError(f"{where}: {alias!r} maps to {name}, but line {old[2]} maps "
                                 f"{old[0]!r} to {old[1]}", path, number)
        found[key] = (alias, name, number)
    return tuple((key, name) for key, (_, name, _) in found.items())


def resolve_site_gpu(name: str, data_dir: Path | None = None) -> GpuSpec:
    """The catalog GPU a site's type ``name`` denotes (module rules); raises
    :class:`~fleet.catalog.UnknownGpuError` (also for an ambiguous type) or
    :class:`SiteAliasError` (a bad alias file)."""
    path = alias_file(data_dir)
    if path is not None:
        target = load_aliases(path).get(lookup_key(name))
        if target is not None:
            return resolve_gpu(target)
    try:
        return resolve_gpu(name)
    except UnknownGpuError as unknown:
        m = _MEMORY_SUFFIX.fullmatch(name.strip())
        if m:
            try:
                return resolve_gpu(f"{m['model']} {m['gb']}GB")
            except UnknownGpuError:
                pass
        sharing = _names_beginning(name)
        if len(sharing) > 1:
            shown = ", ".join(sharing[:MAX_NAMED]) + (" ..." if len(sharing) > MAX_NAMED else "")
            raise UnknownGpuError(name, [], f"ambiguous: it begins the names of {len(sharing)} "
                                  f"catalog GPUs ({shown})") from None
        raise unknown from None


def _names_beginning(name: str) -> list[str]:
    """Catalog GPUs one of whose spellings begins with ``name`` (lookup keys; a name with a
    digit only: ``rtx30``, not ``rtx``), in file order."""
    key = lookup_key(name)
    if not re.search(r"\d", key):
        return []
    return [spec.name for spec in load_catalog()
            if any(lookup_key(label).startswith(key) for label in (spec.name, *spec.aliases))]


def how_to_map(name: str, data_dir: Path | None = None) -> str:
    """How to map the site type ``name`` to a catalog GPU (the alias file's place and line)."""
    path = alias_file(data_dir)
    where = (str(path) if path is not None else
             f"${ALIASES_ENV} or {Path(data_dir) / ALIAS_FILE if data_dir else ALIAS_FILE}")
    return f"map it with a line '{name} = <catalog GPU name>' in {where} (`jobcast gpus` " \
           "lists the names)"
