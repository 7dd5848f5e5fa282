"""MLflow: tracking of fits, the pyfunc forecaster, the registry and its champion alias."""
