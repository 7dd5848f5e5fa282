"""What a job runs on: GPU names, the GPU catalog, training precision and deployments.

A leaf package: it imports nothing else of the project, and ``ingest``, ``layerwise``,
``models`` and ``jobcast`` all take their hardware vocabulary from here (``names``,
``catalog``, ``precision``, ``deployment``).
"""
