"""What is built on the forecasting engine: compare, prices, live ETA, "is this job
slow", what is known, the report's data, and the doors the CLI, REST and notebooks share
(ingest, stores, layer benchmark and predictors, cluster history). Nothing in
:mod:`jobcast.service.engine` imports from here (docs/architecture.md)."""
