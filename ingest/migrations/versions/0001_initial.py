"""The store as released before versioning (git a059d72): files, runs, segments, models and
``schema_info`` holding version 1.

Revision ID: 0001
Revises: (none)

A frozen copy of that schema, not an import of today's tables: a store created by that code
is stamped 0001 as it is (see ``ingest.migrations.upgrade``) and upgraded from here.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the released schema (module doc)."""
    op.create_table(
        "files",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("size_bytes", sa.Integer, nullable=False),
        sa.Column("ingested_at", sa.Float, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("file_id", sa.Integer, sa.ForeignKey("files.id"), nullable=False),
        sa.Column("run_index", sa.Integer, nullable=False),
        sa.Column("network", sa.String(128), nullable=False),
        sa.Column("deployment", sa.String(128), nullable=False),
        sa.Column("accelerator", sa.String(128)),
        sa.Column("accelerators_per_node", sa.Integer),
        sa.Column("nodes", sa.Integer),
        sa.Column("framework", sa.String(256)),
        sa.Column("batch_size", sa.Integer, nullable=False),
        sa.Column("start_time", sa.Float),
        sa.Column("meta", sa.Text, nullable=False),
        sa.UniqueConstraint("file_id", "run_index"),
    )
    op.create_index("ix_runs_file_id", "runs", ["file_id"])
    op.create_index("ix_runs_network", "runs", ["network"])
    op.create_index("ix_runs_deployment", "runs", ["deployment"])
    op.create_table(
        "segments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
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
        sa.Column("points", sa.Text, nullable=False),
        sa.UniqueConstraint("run_id", "seq"),
    )
    op.create_index("ix_segments_run_id", "segments", ["run_id"])
    op.create_table(
        "models",
        sa.Column("model_id", sa.String(512), primary_key=True),
        sa.Column("network", sa.String(128), nullable=False),
        sa.Column("deployment", sa.String(128), nullable=False),
        sa.Column("phase", sa.String(8), nullable=False),
        sa.Column("stack", sa.String(256), nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("fitted_at", sa.Float, nullable=False),
    )
    schema_info = op.create_table(
        "schema_info", sa.Column("version", sa.Integer, primary_key=True)
    )
    op.bulk_insert(schema_info, [{"version": 1}])


def downgrade() -> None:
    """Drop every table of this revision."""
    for table in ("schema_info", "models", "segments", "runs", "files"):
        op.drop_table(table)
