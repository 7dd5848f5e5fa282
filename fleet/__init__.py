"""What a job runs on: GPU names, the GPU catalog and deployments.

A leaf package: it imports nothing else of the project, and ``ingest``, ``layerwise``,
``models`` and ``jobcast`` all take their hardware vocabulary from here.
"""
