"""The store's tables (SQLAlchemy Core): one definition, read by :mod:`ingest.store` and
checked against the migrations (``ingest/migrations/versions``: a new table or column is a new
revision there too).

* ``files``: each ingested file once (its SHA-256); ``runs``: a file's runs (``meta`` JSON);
  ``segments``: a run's phases; ``models``: fitted phase models; ``rejections`` (0002): files
  an ingest refused and why; ``artifacts`` (0003): what a fit leaves besides the models.
* ``whole_jobs`` (0005): one row per stored whole-job run (a scheduler's record,
  :mod:`ingest.whole_job`), the job's key indexed, so one recurring job's history is read
  without decoding any run's JSON (:mod:`ingest.job_index` writes and reads it).
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

files = sa.Table(
    "files",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("format", sa.String(32), nullable=False),
    sa.Column("size_bytes", sa.Integer, nullable=False),
    sa.Column("ingested_at", sa.Float, nullable=False),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("file_id", sa.Integer, sa.ForeignKey("files.id"), nullable=False, index=True),
    sa.Column("run_index", sa.Integer, nullable=False),
    sa.Column("network", sa.String(128), nullable=False, index=True),
    sa.Column("deployment", sa.String(128), nullable=False, index=True),
    sa.Column("accelerator", sa.String(128)),
    sa.Column("accelerators_per_node", sa.Integer),
    sa.Column("nodes", sa.Integer),
    sa.Column("framework", sa.String(256)),
    sa.Column("batch_size", sa.Integer, nullable=False),
    sa.Column("start_time", sa.Float),
    sa.Column("meta", sa.Text, nullable=False, default="{}"),
    sa.UniqueConstraint("file_id", "run_index"),
)

segments = sa.Table(
    "segments",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("phase", sa.String(8), nullable=False),
    sa.Column("iterations", sa.Float, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
    sa.Column("batch_size", sa.Integer),
    sa.Column("start_time", sa.Float),
    sa.Column("epoch_start", sa.Float),
    sa.Column("epoch_end", sa.Float),
    sa.Column("iteration_start", sa.Integer),
    sa.Column("iteration_end", sa.Integer),
    sa.Column("line", sa.Integer),
    sa.Column("points", sa.Text, nullable=False, default="[]"),
    sa.UniqueConstraint("run_id", "seq"),
)

fitted_models = sa.Table(
    "models",
    metadata,
    sa.Column("model_id", sa.String(512), primary_key=True),
    sa.Column("network", sa.String(128), nullable=False),
    sa.Column("deployment", sa.String(128), nullable=False),
    sa.Column("phase", sa.String(8), nullable=False),
    sa.Column("stack", sa.String(256), nullable=False),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("fitted_at", sa.Float, nullable=False),
)

# Files an ingest refused and why (migration 0002); content_hash is None for an unreadable file.
rejections = sa.Table(
    "rejections",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("source", sa.Text, nullable=False, index=True),
    sa.Column("content_hash", sa.String(64)),
    sa.Column("line", sa.Integer),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("rejected_at", sa.Float, nullable=False),
)
sa.Index("ix_files_source", files.c.source)

# What a fit leaves besides the phase models (migration 0003): the backtest selector and the
# run summaries, one JSON document per name.
artifacts = sa.Table(
    "artifacts",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("fitted_at", sa.Float, nullable=False),
)

whole_jobs = sa.Table(
    "whole_jobs",
    metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("job_key", sa.Text, nullable=False, index=True),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
    sa.Column("start", sa.Float),
    sa.Column("end", sa.Float),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("ident", sa.Text, nullable=False),
    sa.Column("length_unit", sa.String(16)),
    sa.Column("length_count", sa.BigInteger),
)
