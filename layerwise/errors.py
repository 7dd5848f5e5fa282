"""The ``layerwise`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class LayerwiseError(JobcastError):
    """A layer, network spec, trace, campaign file or layer price could not be made."""

    kind: ClassVar[str] = "layerwise"
