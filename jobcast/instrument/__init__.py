"""Code that runs inside users' training scripts: phase tracking with two sinks (JSON-lines
files and a Prometheus exporter). Imports nothing of the service, MLOps or CLI."""
