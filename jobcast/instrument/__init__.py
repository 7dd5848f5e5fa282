"""Code that runs inside users' training scripts: phase tracking with two sinks.

* :mod:`.base`: the shared phase state machine (``PhaseTracker``) and the Keras callback
  base (``keras_callback_base()``); no Keras import until a callback class is built.
* :mod:`.jsonl`: JSON-lines files (``JsonlWriter``, ``JobcastLogger``; docs/jsonl-format.md).
* :mod:`.prometheus`: a Prometheus exporter (``PromExporter``, ``PromCallback``;
  docs/prometheus.md); :mod:`.trace`: OpenMetrics traces for backfill (``TraceRecorder``).

Imports nothing of the service, MLOps or CLI.
"""
