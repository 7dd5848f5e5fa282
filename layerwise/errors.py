"""The ``layerwise`` room's base error (rules: :mod:`fleet.errors`)."""

from __future__ import annotations

from typing import ClassVar

from fleet.errors import JobcastError


class LayerwiseError(JobcastError):
    """A layer, network spec, trace, campaign file or layer price could not be made."""

    kind: ClassVar[str] = "layerwise"


class DeviceError(LayerwiseError, ValueError):
    """A device that cannot be described: a spelling other than ``cpu``/``gpu``/``gpu:N``, a
    GPU the local TensorFlow does not see, a CPU other than this machine's, a GPU name the
    catalog does not know (the message names it)."""

    kind: ClassVar[str] = "device"


class ForecastInputError(LayerwiseError, ValueError):
    """A layerwise forecast argument out of its range (``call_overhead``, ``input_grad``,
    ``epochs`` without ``dataset_size``, a precision the predictor was not trained for)."""

    kind: ClassVar[str] = "forecast_input"


class TrainingDataError(LayerwiseError, ValueError):
    """Rows a layer predictor cannot be trained on: no usable row, a missing time column, too
    few rows of a layer type, validation rows without a type the training rows have."""

    kind: ClassVar[str] = "training_data"


class SavedPredictorError(LayerwiseError, ValueError):
    """A saved predictor or composition file that cannot be read (names the file and why)."""

    kind: ClassVar[str] = "saved_predictor"


class UnknownLayerKindError(LayerwiseError, ValueError):
    """A layer type name no registered kind has (the message lists the known ones)."""

    kind: ClassVar[str] = "unknown_layer_kind"
