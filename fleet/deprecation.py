"""Deprecated names: an old name keeps working for one release and says what replaced it.

Rules (issue 26):

* A renamed module attribute is served by the module's ``__getattr__`` built with
  :func:`renamed_attributes`, never by a plain ``Old = New`` assignment: reading the old name
  returns what the new one holds *now* and raises a :class:`DeprecationWarning` that names the
  new one (``stacklevel`` points at the reader's line).
* The library itself reads only new names, so a user never sees the warning for jobcast's own
  code; the tests of each alias read the old name on purpose.
* Renamed estimator parameters follow scikit-learn's pattern instead
  (``layerwise/deprecated.py``); renamed CLI flags are hidden options
  (``jobcast.cli.options.deprecated_alias``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated and ``new`` replaces it (one sentence, both spelled out)."""
    warnings.warn(f"{old} is deprecated and will be removed in a later release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def renamed_attributes(module: str, renames: Mapping[str, str | tuple[str, Callable[[], Any]]]
                       ) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``renames``: old name -> the new attribute's name in the
    same module, or -> ``(what the warning calls the new one, a function giving its value)``
    for a value computed on each read (a live view). Other names raise ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name not in renames:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target = renames[name]
        if isinstance(target, str):
            warn_renamed(f"{module}.{name}", f"{module}.{target}")
            return getattr(sys.modules[module], target)
        label, value = target
        warn_renamed(f"{module}.{name}", label)
        return value()

    return __getattr__


def renamed_property(owner: str, old: str, new: str, *, writable: bool = True) -> property:
    """A class attribute ``old`` that reads (and, when ``writable`` and the instance allows,
    sets) ``new`` and warns each time; ``owner`` is the class's name as the warning spells
    it."""

    def get(self: Any) -> Any:
        warn_renamed(f"{owner}.{old}", f"{owner}.{new}")
        return getattr(self, new)

    def put(self: Any, value: Any) -> None:
        warn_renamed(f"{owner}.{old}", f"{owner}.{new}")
        setattr(self, new, value)

    return property(get, put if writable else None,
                    doc=f"Deprecated alias of ``{new}`` (one release); warns.")
