"""MLflow: tracking of fits, the pyfunc forecaster, the registry and its champion alias.

MLflow's usage telemetry is off before any module here imports MLflow
(:func:`fleet.telemetry.no_telemetry`)."""

from fleet.telemetry import no_telemetry

no_telemetry()
