"""The ``jobcast`` command line: commands, shared options, output, views, report, demo.

Nothing else in the project imports this package; it sits on top of ``jobcast.service``,
``jobcast.mlops``, ``models``, ``layerwise`` and ``ingest``.
"""
